"""Doctor for a lab on several machines: each machine, and the tunnels between them.

The same two layers as `zcube_lab.emulator.lab.doctor`: `gather` runs the probes (over ssh for the
other machines, with `zcube_lab.emulator.cluster.remote`) and returns plain `Probe` data; the
`judge_*` functions turn it into `Check`s and are pure, so tests feed them literal probe outputs.

What is checked, for `--machines 198.19.254.1,198.19.254.2,...`:
- machine 0 (this one): the one-machine doctor's checks, and sudo;
- every other machine: root over ssh without a password; the same checkout and venv at the same
  path, where the one-machine doctor then runs (its checks are shown under the machine's name);
  sudo (Mininet's cluster edition runs `sudo -E` on both sides); sshd allowing the sessions the
  cluster edition opens (one per emulated node, all at once);
- between machine 0 and every other machine: the wire's MTU on both sides (the lab's frames
  plus the VXLAN header), and a throwaway tunnel's capacity and round-trip time
  (`zcube_lab.emulator.cluster.tunnel.measure_tunnel`, about 8 s each; skipped on request).

Each check's name starts with the label of the machine it ran on: `machine 1 (198.19.254.2): ssh`,
`machine 1 (198.19.254.2): ovs`, `machine 0 (198.19.254.1): tunnel to machine 1`.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zcube_lab.core.fabric.clusterplan import VXLAN_OVERHEAD, VXLAN_PORT
from zcube_lab.core.fabric.queues import MAX_MTU
from zcube_lab.emulator.cluster.remote import Machine, run_on
from zcube_lab.emulator.cluster.tunnel import TunnelMeasure, measure_tunnel
from zcube_lab.emulator.lab.doctor import Check, Probe, run_checks
from zcube_lab.emulator.lab.system import LabError

REPO = str(Path(__file__).resolve().parents[3])
MIN_SSH_SESSIONS = 100
SSHD_CONF = "/etc/ssh/sshd_config.d/zcube-lab.conf"
SSHD_FIX = (
    f"put the lines `MaxStartups 200:30:400` and `MaxSessions 400` in {SSHD_CONF} there, then "
    "restart sshd (scripts/peer.sh writes both for its peer)"
)
SUDO_FIX = "apt-get install sudo"
TUNNEL_FIX = (
    f"both machines must exchange VXLAN frames (UDP {VXLAN_PORT}) on the wire: the vxlan kernel "
    f"module on both (modprobe vxlan), UDP {VXLAN_PORT} open in any firewall between them, "
    "iperf3 and ping on both"
)
NOT_TRIED = Probe(None, "not tried")

# Exit codes of the remote doctor's shell wrapper when a path is missing.
NO_CHECKOUT = 3
NO_VENV = 4

# Run with the venv's interpreter on another machine: its one-machine doctor, as JSON, with the
# checkout its venv imports the lab from.
REMOTE_DOCTOR_CODE = """\
import dataclasses, json
from pathlib import Path
from typing import Any
import zcube_lab.emulator
from zcube_lab.emulator.lab.doctor import run_checks
checks = [dataclasses.asdict(c) for c in run_checks()]
repo = str(Path(zcube_lab.emulator.__file__).resolve().parents[2])
print(json.dumps({"repo": repo, "checks": checks}))
"""


@dataclass(frozen=True)
class WireProbe:
    """How a machine reaches another: `ip route get <address>`, then `ip -o link show dev <dev>`
    for the device the route names (None when the route named none)."""

    route: Probe
    link: Probe | None = None


@dataclass(frozen=True)
class RemoteFindings:
    """What the probes found about one other machine and the way to it. When ssh fails nothing
    else is tried there (the fields keep `NOT_TRIED`); `wire_here` is machine 0's own route."""

    machine: Machine
    ssh: Probe
    wire_here: WireProbe
    doctor: Probe = NOT_TRIED
    sudo: Probe = NOT_TRIED
    sshd: Probe = NOT_TRIED
    wire_there: WireProbe = field(default_factory=lambda: WireProbe(NOT_TRIED))
    tunnel: TunnelMeasure | str | None = None  # the measure, its error, or None: not measured


@dataclass(frozen=True)
class ClusterFindings:
    """Everything `gather` found, as plain data for `judge_cluster`."""

    here: Machine
    local_checks: tuple[Check, ...]
    local_sudo: Probe
    remotes: tuple[RemoteFindings, ...]
    repo: str = REPO
    python: str = sys.executable
    lab_mtu: int = MAX_MTU


# ---- judgement: pure ------------------------------------------------------------------------


def on(machine: Machine, check: Check) -> Check:
    """`check`, named as found on `machine`."""
    return replace(check, name=f"{machine.label}: {check.name}")


def judge_ssh(machine: Machine, probe: Probe) -> Check:
    """Root over ssh with this machine's key, no password (ssh runs with BatchMode)."""
    name = f"{machine.label}: ssh"
    if probe.ok:
        return Check(name, "pass", "root over ssh without a password")
    address = machine.address
    error = probe.first_line or f"exit {probe.returncode}"
    if "Host key verification failed" in probe.output:
        return Check(
            name,
            "fail",
            f"ssh does not know {address}'s host key: {error}",
            f"check the host key, then as root here: ssh-keyscan {address} >> "
            "/root/.ssh/known_hosts",
        )
    if probe.returncode is None and "No such file" in probe.output:
        return Check(name, "fail", f"no ssh here: {error}", "apt-get install openssh-client")
    unreachable = ("Connection refused", "timed out", "No route to host", "unreachable")
    if probe.returncode is None or any(word in probe.output for word in unreachable):
        return Check(
            name,
            "fail",
            f"sshd does not answer at {address}: {error}",
            f"start sshd on {address} and check the address is its wire address "
            "(for the peer on this machine: sudo scripts/peer.sh start)",
        )
    return Check(
        name,
        "fail",
        f"ssh as root to {address} fails: {error}",
        f"as root here: ssh-copy-id root@{address} (or append /root/.ssh/id_ed25519.pub to "
        f"/root/.ssh/authorized_keys on {address}; ssh-keygen -t ed25519 makes the key)",
    )


def _last_json(output: str) -> dict[str, Any]:
    """The last line of `output` that is a JSON object: the answer comes on stdout, and
    `run_on` puts stderr (warnings, say) after it."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if isinstance(answer, dict):
                return answer
    raise ValueError("no JSON object")


def judge_remote_doctor(machine: Machine, probe: Probe, repo: str, python: str) -> list[Check]:
    """The same checkout and venv at the same path on `machine`, then its one-machine checks."""
    name = f"{machine.label}: checkout"
    fix = (
        f"the same checkout at {repo} on {machine.address}, then scripts/setup.sh there "
        f"(it makes the venv {python})"
    )
    if probe.returncode == NO_CHECKOUT:
        return [Check(name, "fail", f"no checkout at {repo}", fix)]
    if probe.returncode == NO_VENV:
        return [Check(name, "fail", f"no venv at {python} (the checkout {repo} is there)", fix)]
    if not probe.ok:
        tail = probe.output.splitlines()[-1] if probe.output else f"exit {probe.returncode}"
        return [Check(name, "fail", f"the doctor did not run there: {tail}", fix)]
    try:
        answer = _last_json(probe.output)
        theirs = str(answer["repo"])
        checks = [on(machine, Check(**c)) for c in answer["checks"]]
    except (KeyError, TypeError, ValueError):
        detail = f"the doctor there printed no answer: {probe.output[-300:]}"
        return [Check(name, "fail", detail, fix)]
    if theirs != repo:
        detail = f"the venv {python} there runs the lab from {theirs}, not {repo}"
        return [Check(name, "fail", detail, fix), *checks]
    return [Check(name, "pass", f"{repo} with the venv {python}"), *checks]


def judge_sudo(machine: Machine, probe: Probe) -> Check:
    """sudo on PATH (`command -v sudo`): the cluster edition runs `sudo -E` on every machine."""
    name = f"{machine.label}: sudo"
    if probe.ok and probe.first_line:
        return Check(name, "pass", probe.first_line)
    if probe.returncode is None:
        return Check(name, "fail", f"could not look for sudo: {probe.first_line}", SUDO_FIX)
    return Check(
        name,
        "fail",
        "sudo is not installed: Mininet's cluster edition runs its node shells with sudo -E "
        "on every machine",
        SUDO_FIX,
    )


def parse_sshd(output: str) -> dict[str, str]:
    """`sshd -T` output (`keyword value` lines, keywords in lower case) as a dict."""
    settings = {}
    for line in output.splitlines():
        key, _, value = line.strip().partition(" ")
        if key and value:
            settings[key.lower()] = value.strip()
    return settings


def judge_sshd(machine: Machine, probe: Probe, need: int = MIN_SSH_SESSIONS) -> Check:
    """sshd lets the cluster edition open one session per emulated node, all at once:
    MaxSessions (sessions on its one shared connection) and MaxStartups' start value
    (connections being set up at once) at least `need`."""
    name = f"{machine.label}: sshd sessions"
    if not probe.ok:
        detail = f"sshd -T failed: {probe.first_line or f'exit {probe.returncode}'}"
        return Check(name, "fail", detail, SSHD_FIX)
    settings = parse_sshd(probe.output)
    try:
        sessions = int(settings["maxsessions"])
        startups = settings["maxstartups"]
        start = int(startups.split(":")[0])
    except (KeyError, ValueError):
        detail = f"sshd -T printed no MaxSessions and MaxStartups: {probe.output[-200:]}"
        return Check(name, "fail", detail, SSHD_FIX)
    found = f"MaxSessions {sessions}, MaxStartups {startups}"
    low = [
        what
        for what, value in (("MaxSessions", sessions), ("MaxStartups' start", start))
        if value < need
    ]
    if low:
        return Check(
            name,
            "fail",
            f"{found}: {' and '.join(low)} below {need}; the cluster edition opens one ssh "
            "session per emulated node of the machine, all at once, and sshd refuses the rest",
            SSHD_FIX,
        )
    return Check(name, "pass", found)


def parse_route(output: str) -> tuple[str | None, int | None]:
    """(device, path MTU or None) from `ip route get <address>`."""
    dev = re.search(r"\bdev (\S+)", output)
    mtu = re.search(r"\bmtu (\d+)", output)
    return (dev.group(1) if dev else None), (int(mtu.group(1)) if mtu else None)


def parse_link_mtu(output: str) -> int | None:
    """The MTU from `ip -o link show dev <dev>`."""
    match = re.search(r"\bmtu (\d+)", output)
    return int(match.group(1)) if match else None


def judge_wire_mtu(machine: Machine, peer: Machine, wire: WireProbe, lab_mtu: int) -> Check:
    """The wire from `machine` to `peer` carries the lab's frames plus the VXLAN header."""
    name = f"{machine.label}: wire MTU to machine {peer.index}"
    need = lab_mtu + VXLAN_OVERHEAD
    if not wire.route.ok:
        detail = f"no route to {peer.address}: {wire.route.first_line}"
        fix = f"check {peer.address} is its wire address (ip route get {peer.address})"
        return Check(name, "fail", detail, fix)
    dev, path_mtu = parse_route(wire.route.output)
    link_mtu = parse_link_mtu(wire.link.output) if wire.link and wire.link.ok else None
    if dev is None or link_mtu is None:
        why = wire.link.first_line if wire.link else wire.route.first_line
        detail = f"could not read the MTU of the device to {peer.address}: {why}"
        return Check(name, "fail", detail, f"check ip route get {peer.address} there")
    mtu = min(link_mtu, path_mtu) if path_mtu else link_mtu
    carries = f"{dev} to {peer.address} carries {mtu}-byte frames"
    if mtu >= need:
        detail = f"{carries}: the lab's {lab_mtu} plus VXLAN's {VXLAN_OVERHEAD} fit"
        return Check(name, "pass", detail)
    return Check(
        name,
        "fail",
        f"{carries}; the lab's {lab_mtu}-byte frames need {need} in VXLAN",
        f"raise the wire's MTU to {need} on both machines (ip link set {dev} mtu {need}), or "
        f"run the lab with --mtu {mtu - VXLAN_OVERHEAD} or lower",
    )


def judge_tunnel(here: Machine, peer: Machine, found: TunnelMeasure | str) -> Check:
    """A throwaway tunnel between the two machines: its capacity both ways and round-trip time,
    or why it could not be built or measured."""
    name = f"{here.label}: tunnel to machine {peer.index}"
    if isinstance(found, str):
        return Check(name, "fail", f"could not measure a VXLAN tunnel: {found}", TUNNEL_FIX)
    return Check(
        name,
        "pass",
        f"{found.capacity_mbps:.0f} Mb/s both ways ({found.mbps_ab:.0f} Mb/s {found.a}->"
        f"{found.b}, {found.mbps_ba:.0f} Mb/s {found.b}->{found.a}), rtt {found.rtt_ms:.3f} ms "
        f"at MTU {found.mtu}",
    )


def judge_remote(
    findings: RemoteFindings, here: Machine, repo: str, python: str, lab_mtu: int
) -> list[Check]:
    """Checks of one other machine and the way to it, in report order; after a failed ssh,
    only machine 0's side of the wire."""
    m = findings.machine
    ssh = judge_ssh(m, findings.ssh)
    wire_here = judge_wire_mtu(here, m, findings.wire_here, lab_mtu)
    if not findings.ssh.ok:
        return [ssh, wire_here]
    checks = [
        ssh,
        *judge_remote_doctor(m, findings.doctor, repo, python),
        judge_sudo(m, findings.sudo),
        judge_sshd(m, findings.sshd),
        wire_here,
        judge_wire_mtu(m, here, findings.wire_there, lab_mtu),
    ]
    if findings.tunnel is not None:
        checks.append(judge_tunnel(here, m, findings.tunnel))
    return checks


def judge_cluster(findings: ClusterFindings) -> list[Check]:
    """All checks, in report order: this machine's, then each other machine's."""
    here = findings.here
    checks = [on(here, c) for c in findings.local_checks]
    checks.append(judge_sudo(here, findings.local_sudo))
    for remote in findings.remotes:
        checks += judge_remote(remote, here, findings.repo, findings.python, findings.lab_mtu)
    return checks


# ---- probes ---------------------------------------------------------------------------------


def doctor_argv(repo: str = REPO, python: str = sys.executable) -> list[str]:
    """The remote doctor: exit `NO_CHECKOUT` or `NO_VENV` when a path is missing, else the
    venv's interpreter runs `REMOTE_DOCTOR_CODE`."""
    r, p = shlex.quote(repo), shlex.quote(python)
    script = (
        f"test -d {r} || {{ echo {shlex.quote('no directory ' + repo)}; exit {NO_CHECKOUT}; }}; "
        f"test -x {p} || {{ echo {shlex.quote('no program ' + python)}; exit {NO_VENV}; }}; "
        f'exec {p} -c "$1"'
    )
    return ["sh", "-c", script, "doctor", REMOTE_DOCTOR_CODE]


def probe_sudo(machine: Machine) -> Probe:
    """`command -v sudo` on `machine`."""
    return Probe(*run_on(machine, ["sh", "-c", "command -v sudo"], timeout=20))


def probe_sshd(machine: Machine) -> Probe:
    """`sshd -T` on `machine` (its effective settings; needs root)."""
    script = 'PATH="$PATH:/usr/sbin:/sbin" exec sshd -T'
    return Probe(*run_on(machine, ["sh", "-c", script], timeout=20))


def probe_wire(machine: Machine, address: str) -> WireProbe:
    """The route from `machine` to `address`, and the MTU of the device it leaves by."""
    route = Probe(*run_on(machine, ["ip", "route", "get", address], timeout=20))
    dev, _mtu = parse_route(route.output) if route.ok else (None, None)
    if dev is None:
        return WireProbe(route)
    return WireProbe(route, Probe(*run_on(machine, ["ip", "-o", "link", "show", "dev", dev])))


def probe_tunnel(here: Machine, peer: Machine, lab_mtu: int) -> TunnelMeasure | str:
    """A throwaway tunnel's measure, or why it failed."""
    try:
        return measure_tunnel(here, peer, lab_mtu)
    except (LabError, ValueError, KeyError, OSError) as exc:
        return str(exc)


def gather_remote(
    here: Machine,
    machine: Machine,
    measure: bool,
    lab_mtu: int,
    progress: Callable[[str], None],
) -> RemoteFindings:
    """Every probe of one other machine; nothing after a failed ssh but machine 0's route."""
    progress(f"checking {machine.label} over ssh")
    wire_here = probe_wire(here, machine.address)
    ssh = Probe(*run_on(machine, ["true"], timeout=20))
    if not ssh.ok:
        return RemoteFindings(machine, ssh, wire_here)
    doctor = Probe(*run_on(machine, doctor_argv(), timeout=180))
    tunnel = None
    if measure:
        progress(f"measuring the tunnel between machines {here.index} and {machine.index} (~8 s)")
        tunnel = probe_tunnel(here, machine, lab_mtu)
    return RemoteFindings(
        machine,
        ssh,
        wire_here,
        doctor=doctor,
        sudo=probe_sudo(machine),
        sshd=probe_sshd(machine),
        wire_there=probe_wire(machine, here.address),
        tunnel=tunnel,
    )


def gather(
    machines: Sequence[Machine],
    measure: bool = True,
    lab_mtu: int = MAX_MTU,
    progress: Callable[[str], None] = lambda _msg: None,
) -> ClusterFindings:
    """Run every probe: this machine's doctor, then each other machine's probes in turn."""
    here = machines[0]
    progress(f"checking {here.label}")
    return ClusterFindings(
        here=here,
        local_checks=tuple(run_checks()),
        local_sudo=probe_sudo(here),
        remotes=tuple(gather_remote(here, m, measure, lab_mtu, progress) for m in machines[1:]),
        lab_mtu=lab_mtu,
    )


def run_cluster_checks(
    machines: Sequence[Machine],
    measure: bool = True,
    progress: Callable[[str], None] = lambda _msg: None,
) -> list[Check]:
    """Probe every machine and the tunnels between them, and judge the results."""
    return judge_cluster(gather(machines, measure, progress=progress))
