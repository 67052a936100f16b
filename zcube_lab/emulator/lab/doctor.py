"""Doctor: can this machine run the lab? Each check is pass, warn or fail, with the fix.

Two layers, as everywhere in the lab: thin probes (`probe_*`, `run_command`, and
`zcube_lab.emulator.lab.ovs` for Open vSwitch) touch the machine (subprocess argument lists, file
reads, imports) and return plain `Probe` data; the `judge_*`
functions turn probe results into `Check`s and are pure, so tests feed them fake probes.
`run_checks()` wires the two together.

Check names are short and stable (`root`, `python`, `ovs`, `datapath`, `mnexec`, `mininet`,
`htb`, `tbf`, `netem`, `os-ken`, `addresses`, `prometheus`, `promtool`, `iperf3`, `ethtool`,
`ping`, `datapath-capacity`, `steal`): tests and `--json` consumers look them up by name.

`steal` reads /proc/stat twice, `STEAL_WINDOW_S` apart (`probe_cpu`), and says what the CPU
steal and the other processes' load over that window mean for a run (`judge_steal`): the
verdict rejects a run whose steal averaged above its limit (5%), and `compare` and `sweep` run
such a run again (`--retries`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from zcube_lab.adapters.procs import pid_alive
from zcube_lab.core.fabric.addressing import plan_networks
from zcube_lab.emulator.lab import ovs
from zcube_lab.emulator.lab.datapath_ceiling import (
    DEFAULT_CEILING_MBPS,
    DatapathResults,
    load_results,
    machine_id,
)
from zcube_lab.emulator.lab.hostnet import HostEntry, conflicts, leftovers, read_host_network
from zcube_lab.emulator.lab.system import LabError, attempt
from zcube_lab.emulator.verdict.cpustats import cpu_share, parse_proc_stat
from zcube_lab.emulator.verdict.limits import Limits

STATUSES = ("pass", "warn", "fail")
MIN_PYTHON = (3, 11)

SETUP_FIX = "sudo scripts/setup.sh"
OVS_START_FIX = "/usr/share/openvswitch/scripts/ovs-ctl start"
NETEM_DISABLES = (
    "link delay, loss and jitter emulation; the lab then models delay only as switch hops "
    "and queueing"
)
USERSPACE_DATAPATH = (
    "userspace datapath (datapath_type=netdev): TCP needs offloads off; its capacity is the "
    "datapath-capacity check"
)
BENCH_FIX = "sudo .venv/bin/python bench/datapath.py (about 1-2 minutes)"

# The qdiscs tried in the throwaway namespace, as `tc qdisc replace ... root` arguments.
QDISC_ARGS: dict[str, tuple[str, ...]] = {
    "htb": ("htb",),
    "tbf": ("tbf", "rate", "100mbit", "burst", "32kbit", "latency", "50ms"),
    "netem": ("netem", "delay", "1ms"),
}


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} is not one of {STATUSES}")


@dataclass(frozen=True)
class Probe:
    """What running one command (or import) found.

    `returncode` is None when the program is missing or timed out; `output` holds stdout and
    stderr, stripped, for the detail column.
    """

    returncode: int | None
    output: str = ""

    @property
    def ok(self) -> bool:
        """The command ran and exited 0."""
        return self.returncode == 0

    @property
    def first_line(self) -> str:
        """First non-empty output line: versions and error messages live there."""
        for line in self.output.splitlines():
            if line.strip():
                return line.strip()
        return ""


# ---- probes: the only code here that touches the machine ----------------------------------


def run_command(argv: Sequence[str], timeout: float = 10.0) -> Probe:
    """Run an argument list (never a shell string) and capture its result."""
    return Probe(*attempt(argv, timeout))


def probe_import(module: str, distribution: str | None = None) -> Probe:
    """Import a module; output is its distribution's version when known."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # an import can fail in many ways; all mean "not usable"
        return Probe(1, f"{type(exc).__name__}: {exc}")
    version = ""
    if distribution:
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            version = ""  # importable but not pip-installed (e.g. a Debian package)
    return Probe(0, version)


def probe_binary(name: str, version_args: Sequence[str]) -> Probe:
    """Find a program on PATH and ask for its version."""
    path = shutil.which(name)
    if path is None:
        return Probe(None, f"{name}: not on PATH")
    return run_command([path, *version_args])


def probe_kernel_module(module: str) -> tuple[bool, Probe]:
    """Whether a kernel module is loaded (/sys/module), and what `modprobe -n` says."""
    loaded = Path("/sys/module", module).exists()
    return loaded, run_command(["modprobe", "-n", module])


def probe_qdiscs(namespace: str) -> dict[str, Probe]:
    """Try each qdisc on a veth inside a throwaway namespace; the namespace is always deleted.

    Returns probes keyed by qdisc name, plus "setup" for creating the namespace and device.
    """
    results: dict[str, Probe] = {}
    created = run_command(["ip", "netns", "add", namespace])
    try:
        if not created.ok:
            results["setup"] = created
            return results
        # veth rather than dummy: Mininet needs veth anyway, and some kernels lack dummy.
        in_ns = ["ip", "netns", "exec", namespace]
        device = run_command(
            [*in_ns, "ip", "link", "add", "zcl0", "type", "veth", "peer", "name", "zcl1"]
        )
        results["setup"] = device
        if not device.ok:
            return results
        for name, args in QDISC_ARGS.items():
            results[name] = run_command(
                [*in_ns, "tc", "qdisc", "replace", "dev", "zcl0", "root", *args]
            )
        return results
    finally:
        if created.ok:
            # Deleting the namespace also deletes the veth pair inside it.
            run_command(["ip", "netns", "del", namespace])


# ---- judgement: pure ------------------------------------------------------------------------


def judge_root(euid: int) -> Check:
    """Mininet, Open vSwitch and tc all need root."""
    if euid == 0:
        return Check("root", "pass", "running as root")
    return Check(
        "root",
        "fail",
        f"running as uid {euid}: Mininet, Open vSwitch and tc need root "
        "(`cost` and `fabric` do not)",
        "sudo zcube-lab doctor",
    )


def judge_python(version: Sequence[int]) -> Check:
    """The lab needs Python 3.11 or newer."""
    text = ".".join(str(v) for v in version[:3])
    if tuple(version[:2]) >= MIN_PYTHON:
        return Check("python", "pass", f"Python {text}")
    need = ".".join(str(v) for v in MIN_PYTHON)
    return Check("python", "fail", f"Python {text}, need >= {need}", SETUP_FIX)


def judge_ovs(show: Probe, vswitchd: Probe) -> Check:
    """Open vSwitch is up when ovsdb (`ovs-vsctl show`) and ovs-vswitchd (`ovs-appctl`) answer."""
    if show.returncode is None and "not found" in show.output:
        return Check("ovs", "fail", "ovs-vsctl not installed", SETUP_FIX)
    if "Permission denied" in show.output or "Permission denied" in vswitchd.output:
        # The sockets are root's: a non-root doctor cannot tell whether OVS is up.
        probe = show if not show.ok else vswitchd
        return Check(
            "ovs", "fail", f"cannot reach Open vSwitch: {probe.first_line}", "sudo zcube-lab doctor"
        )
    if not show.ok:
        return Check("ovs", "fail", f"ovsdb-server not answering: {show.first_line}", OVS_START_FIX)
    if not vswitchd.ok:
        # ovsdb alone accepts bridges that then forward nothing: as broken as no OVS at all.
        return Check(
            "ovs",
            "fail",
            f"ovsdb-server answers but ovs-vswitchd does not: {vswitchd.first_line}",
            OVS_START_FIX,
        )
    version = next(
        (
            ln.split(":", 1)[1].strip().strip('"')
            for ln in show.output.splitlines()
            if "ovs_version" in ln
        ),
        "",
    )
    return Check("ovs", "pass", f"Open vSwitch running {version}".strip())


def judge_datapath(module_loaded: bool, modprobe: Probe) -> Check:
    """Kernel datapath when the openvswitch module is there, otherwise the userspace one."""
    if module_loaded:
        return Check("datapath", "pass", "kernel datapath (openvswitch module loaded)")
    if modprobe.ok:
        return Check("datapath", "pass", "kernel datapath (openvswitch module available)")
    return Check(
        "datapath",
        "warn",
        USERSPACE_DATAPATH,
        "none needed: `up` picks the userspace datapath and turns offloads off; "
        "for the kernel one use a kernel with the openvswitch module",
    )


def judge_ovs_instances(instances: Sequence[tuple[str, bool, bool]]) -> Check:
    """Private ovs-vswitchd instances on this machine, each (folder, answers, its lab alive):
    a running lab's, or a dead lab's (the next lab's start removes those)."""
    if not instances:
        return Check("ovs-instances", "pass", "no private ovs-vswitchd instance")
    dead = [name for name, _ok, alive in instances if not alive]
    if dead:
        return Check(
            "ovs-instances",
            "warn",
            f"left by a lab that is gone: {', '.join(dead)}",
            "the next lab start removes them",
        )
    mute = [name for name, ok, _alive in instances if not ok]
    if mute:
        return Check("ovs-instances", "warn", f"a running lab's, not answering: {', '.join(mute)}")
    names = ", ".join(name for name, _ok, _alive in instances)
    return Check("ovs-instances", "pass", f"in use by a running lab: {names}")


def judge_mnexec(path: str | None) -> Check:
    """Mininet's `mnexec` starts hosts in their namespaces."""
    if path:
        return Check("mnexec", "pass", path)
    return Check("mnexec", "fail", "mnexec not on PATH (Debian package mininet)", SETUP_FIX)


def judge_import(name: str, probe: Probe, fix: str = SETUP_FIX) -> Check:
    """A Python package the lab imports."""
    if probe.ok:
        return Check(name, "pass", f"importable {probe.output}".strip())
    return Check(name, "fail", f"cannot import: {probe.first_line}", fix)


def judge_qdiscs(is_root: bool, results: Mapping[str, Probe]) -> list[Check]:
    """HTB (link rates) must work; TBF and netem are optional, netem's absence is explained."""
    names = tuple(QDISC_ARGS)
    if not is_root:
        return [Check(n, "warn", "needs root to test", "sudo zcube-lab doctor") for n in names]
    setup = results.get("setup")
    if setup is None or not setup.ok:
        why = setup.first_line if setup else "no result"
        return [
            Check(n, "fail", f"could not make a test namespace with a veth: {why}", SETUP_FIX)
            for n in names
        ]
    checks = []
    for name in names:
        probe = results.get(name, Probe(None, "not tried"))
        checks.append(_judge_qdisc(name, probe))
    return checks


def _judge_qdisc(name: str, probe: Probe) -> Check:
    if probe.ok:
        return Check(name, "pass", f"tc qdisc {name} works")
    error = probe.first_line or f"exit {probe.returncode}"
    if name == "htb":
        return Check(
            "htb",
            "fail",
            f"tc qdisc htb failed ({error}): link rates cannot be emulated",
            "use a kernel with sch_htb (CONFIG_NET_SCH_HTB)",
        )
    if name == "netem":
        return Check(
            "netem",
            "warn",
            f"no netem ({error}): disables {NETEM_DISABLES}",
            "optional: use a kernel with sch_netem (CONFIG_NET_SCH_NETEM)",
        )
    return Check(
        name,
        "warn",
        f"tc qdisc {name} failed ({error}): HTB shapes link rates instead",
        f"optional: use a kernel with sch_{name}",
    )


def judge_datapath_ceiling(results: DatapathResults | None, this_machine: str) -> Check:
    """The datapath ceiling the rate guard uses (check `datapath-capacity`): measured here, or
    the stated default."""
    default = f"the rate guard uses the default {DEFAULT_CEILING_MBPS:g} Mb/s"
    if results is None or not results.points:
        return Check("datapath-capacity", "warn", f"not measured: {default}", BENCH_FIX)
    if results.machine_id != this_machine:
        return Check(
            "datapath-capacity",
            "warn",
            f"measured on another machine ({results.measured_at}): {default}",
            BENCH_FIX,
        )
    mtus = sorted({p.mtu for p in results.points})
    figures = ", ".join(
        f"MTU {m}: {results.total_mbps(m) / 1000:.2f} Gb/s "
        f"({max(p.pps for p in results.points if p.mtu == m) / 1000:.0f} kpps)"
        for m in mtus
    )
    return Check(
        "datapath-capacity",
        "pass",
        f"{figures}; measured {results.measured_at} on {results.cores} cores through "
        f"{results.bridges} bridge(s)",
    )


def judge_addresses(host: Sequence[HostEntry], error: str = "") -> Check:
    """The lab's address ranges are clear of this machine's routes, addresses and resolvers
    (a collision fails, naming both); a killed run's management bridge is a warning."""
    plan = plan_networks()
    ranges = ", ".join(f"{net} ({label})" for label, net in plan)
    if error:
        return Check("addresses", "warn", f"could not read this machine's network: {error}")
    found = conflicts(plan, host)
    if found:
        return Check(
            "addresses",
            "fail",
            "; ".join(str(c) for c in found),
            "move the host's route, address or resolver out of the lab's ranges "
            "(fixed: zcube_lab.core.fabric.addressing), or run the lab in a VM",
        )
    left = leftovers(host)
    if left:
        return Check(
            "addresses",
            "warn",
            f"a killed run left {'; '.join(e.text for e in left)}",
            "`sudo zcube-lab clean` removes it (so does the next `zcube-lab up` or `run`)",
        )
    kinds = {k: sum(e.kind == k for e in host) for k in ("route", "address", "resolver")}
    return Check(
        "addresses",
        "pass",
        f"the lab's {ranges} clear of this machine's routes ({kinds['route']}), "
        f"addresses ({kinds['address']}) and resolvers ({kinds['resolver']})",
    )


def judge_tool(name: str, probe: Probe, missing_status: str, why: str) -> Check:
    """A program on PATH; `missing_status` says how much its absence matters."""
    if probe.ok:
        return Check(name, "pass", probe.first_line)
    if probe.returncode is None:
        return Check(name, missing_status, f"not installed: {why}", SETUP_FIX)
    return Check(name, missing_status, f"does not run: {probe.first_line}", SETUP_FIX)


@dataclass(frozen=True)
class Findings:
    """Everything the probes found, as plain data for the pure judgement."""

    euid: int
    python: tuple[int, ...]
    ovs: Probe
    ovs_vswitchd: Probe
    module_loaded: bool
    modprobe: Probe
    mnexec: str | None
    mininet: Probe
    os_ken: Probe
    qdiscs: Mapping[str, Probe]
    tools: Mapping[str, Probe]
    datapath_results: DatapathResults | None = None
    machine_id: str = ""
    host_network: tuple[HostEntry, ...] = ()  # routes, addresses, resolvers (hostnet)
    host_network_error: str = ""  # why they could not be read
    # Private Open vSwitch instances (`LabOptions.ovs_instances`): (folder, answers, lab alive).
    ovs_instances: tuple[tuple[str, bool, bool], ...] = ()
    # /proc/stat at the start and the end of STEAL_WINDOW_S (empty: not read)
    proc_stat: tuple[str, str] = ("", "")


# Programs checked on PATH: (name, version arguments, status when missing, what needs it).
TOOLS: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    ("prometheus", ("--version",), "warn", "metrics collection and dashboard checks need it"),
    ("promtool", ("--version",), "warn", "checking Prometheus rules and queries needs it"),
    ("iperf3", ("--version",), "fail", "link-rate and fabric measurements use it"),
    ("ethtool", ("--version",), "fail", "turning offloads off for the userspace datapath needs it"),
    ("ping", ("-V",), "fail", "reachability checks use it"),
)


def judge(findings: Findings) -> list[Check]:
    """All checks from what the probes found, in report order."""
    checks = [
        judge_root(findings.euid),
        judge_python(findings.python),
        judge_ovs(findings.ovs, findings.ovs_vswitchd),
        judge_ovs_instances(findings.ovs_instances),
        judge_datapath(findings.module_loaded, findings.modprobe),
        judge_mnexec(findings.mnexec),
        judge_import("mininet", findings.mininet),
        *judge_qdiscs(findings.euid == 0, findings.qdiscs),
        judge_import("os-ken", findings.os_ken),
        judge_addresses(findings.host_network, findings.host_network_error),
    ]
    for name, _args, missing_status, why in TOOLS:
        probe = findings.tools.get(name, Probe(None, f"{name}: not probed"))
        checks.append(judge_tool(name, probe, missing_status, why))
    checks.append(judge_steal(*findings.proc_stat))
    checks.append(judge_datapath_ceiling(findings.datapath_results, findings.machine_id))
    return checks


STEAL_WINDOW_S = 3.0  # seconds between the two reads of /proc/stat


def probe_cpu(
    read: Callable[[], str] = lambda: Path("/proc/stat").read_text(),
    sleep: Callable[[float], None] = time.sleep,
    seconds: float = STEAL_WINDOW_S,
) -> tuple[str, str]:
    """/proc/stat now and `seconds` later (empty texts when it cannot be read)."""
    try:
        first = read()
        sleep(seconds)
        return first, read()
    except OSError:
        return "", ""


def judge_steal(before: str, after: str, limits: Limits | None = None) -> Check:
    """CPU steal and busy share between two /proc/stat texts, and what they mean for a run:
    steal above the verdict's limit rejects a run; steal measured on an idle machine is a
    floor (a hypervisor steals only time a CPU wanted), and a busy machine leaves the lab less
    than it needs."""
    limit = (limits or Limits()).steal_mean
    try:
        share = cpu_share(parse_proc_stat(before)["cpu"], parse_proc_stat(after)["cpu"])
    except (ValueError, KeyError, TypeError):
        return Check("steal", "warn", "could not read /proc/stat: CPU steal unknown")
    steal, busy = share.steal, share.busy - share.steal
    said = (
        f"CPU steal {steal:.1%} and {busy:.0%} of the CPUs busy over {STEAL_WINDOW_S:g} s "
        f"(the verdict allows {limit:.0%} steal in a run)"
    )
    fix = (
        "run later, when the host is quieter; or give the run --dilation 2 (or more, within "
        "the validated ladder): the lab then needs less CPU per second and meets less steal; "
        "compare and sweep retry runs the machine spoiled (--retries)"
    )
    if steal > limit:
        return Check(
            "steal",
            "warn",
            f"{said}: runs now will be rejected as not trustworthy (steal on an idle machine is "
            "a floor; under load a run meets more)",
            fix,
        )
    if steal > limit / 2:
        return Check(
            "steal", "warn", f"{said}: close to the limit; a run may be rejected for it", fix
        )
    if busy > 0.5:
        return Check(
            "steal",
            "warn",
            f"{said}: other processes hold the CPUs; a run beside them may be rejected for the "
            "machine (its CPU, late wake-ups)",
            "run when they are done (`top` names them); compare and sweep retry runs the "
            "machine spoiled (--retries)",
        )
    return Check("steal", "pass", f"{said}: quiet enough for a run now")


def gather(pid: int | None = None) -> Findings:
    """Run every probe on this machine (the tc tests only as root)."""
    euid = os.geteuid()
    module_loaded, modprobe = probe_kernel_module("openvswitch")
    namespace = f"zcl-doctor-{pid if pid is not None else os.getpid()}"
    try:
        host_network, host_network_error = tuple(read_host_network()), ""
    except (LabError, OSError, ValueError) as exc:
        host_network, host_network_error = (), str(exc)
    return Findings(
        euid=euid,
        python=tuple(sys.version_info[:3]),
        ovs=Probe(*ovs.db_status(timeout_s=3)),
        ovs_vswitchd=Probe(*ovs.vswitchd_status(timeout_s=3)),
        module_loaded=module_loaded,
        modprobe=modprobe,
        mnexec=shutil.which("mnexec"),
        mininet=probe_import("mininet", "mininet"),
        os_ken=probe_import("os_ken", "os-ken"),
        qdiscs=probe_qdiscs(namespace) if euid == 0 else {},
        tools={name: probe_binary(name, args) for name, args, _s, _w in TOOLS},
        datapath_results=load_results(),
        machine_id=machine_id(),
        host_network=host_network,
        host_network_error=host_network_error,
        ovs_instances=tuple(
            (
                inst.rundir.name,
                ovs.instance_status(inst)[0] == 0,
                inst.owner is not None and pid_alive(inst.owner),
            )
            for inst in ovs.running_instances()
        ),
        proc_stat=probe_cpu(),
    )


def run_checks(gather_fn: Callable[[], Findings] = gather) -> list[Check]:
    """Probe this machine and judge the results."""
    return judge(gather_fn())


def exit_code(checks: Sequence[Check]) -> int:
    """0 when nothing failed, 1 otherwise (warnings do not fail)."""
    return 1 if any(c.status == "fail" for c in checks) else 0
