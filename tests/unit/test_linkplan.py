"""The batch scripts that configure every interface, against the commands they replace: the ones
Mininet's `TCLink` ran per interface and the lab's own per-interface `ethtool` and `tc` calls.
The reference functions below are those commands as they were; each test checks that the
batches leave every interface in the same state."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.fabric.hostplan import ip_batch, management_host_batch, sysctls
from zcube_lab.core.fabric.linkplan import (
    LinkSettings,
    PortShape,
    Setup,
    Step,
    ends,
    host_setup,
    port_rates,
    port_shapes,
    script,
    shaping_lines,
    switch_port_setup,
    veth_setup,
)
from zcube_lab.core.fabric.queues import QueueModel, port_queue_limits
from zcube_lab.core.fabric.scale import Scale

SPECS = [
    FabricSpec.of("zcube", n=4),
    FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2),
    FabricSpec.of("roft", planes=2),
    FabricSpec.of("clos"),
]
FOLDER = "/run/lab"
MTU = 9000


# -- the commands as they were (one per interface), the reference --------------------------


def mininet_link_commands(name: str, mbps: float | None, txo: bool) -> list[str]:
    """What Mininet's TCIntf.config ran in the node's shell for a fresh veth end (its qdisc is
    `noqueue`, so no `tc qdisc del`), with TCLink(bw=mbps, txo=txo, gro=False)."""
    cmds = [
        f"ifconfig {name} up",
        f"ethtool -K {name} gro off tx {'on' if txo else 'off'} rx on",
    ]
    if mbps is not None:
        cmds += [
            f"tc qdisc show dev {name}",
            f"tc qdisc add dev {name} root handle 5:0 htb default 1",
            f"tc class add dev {name} parent 5:0 classid 5:1 htb rate {mbps:f}Mbit burst 15k",
        ]
    return cmds


def old_lab_commands(name: str, packets: int | None, userspace: bool) -> list[str]:
    """What the lab ran after Mininet, per interface: offloads off, the leaf FIFO."""
    cmds = []
    if userspace:
        cmds.append(f"ethtool -K {name} tx off tso off gso off gro off")
    if packets is not None:
        cmds.append(f"tc qdisc replace dev {name} parent 5:1 handle 10: pfifo limit {packets}")
    return cmds


def mininet_veth_command(name1: str, mac1: str, name2: str, mac2: str, pid2: int) -> str:
    """Mininet's makeIntfPair, run in node 1's namespace."""
    return (
        f"ip link add name {name1} address {mac1} type veth peer name {name2} address {mac2} "
        f"netns {pid2}"
    )


def old_commands(fabric: Fabric, shaped: bool, userspace: bool) -> dict[str, list[str]]:
    """Every interface's old commands, in the order they ran."""
    rates = port_rates(fabric, Scale())
    limits = port_queue_limits(fabric, Scale(), MTU, QueueModel())
    return {
        name: mininet_link_commands(name, rates[name] if shaped else None, not userspace)
        + old_lab_commands(name, limits[name] if shaped else None, userspace)
        for name in rates
    }


# -- reading the new batches ----------------------------------------------------------------


def settings(fabric: Fabric, shaped: bool = True, userspace: bool = True, **kw) -> LinkSettings:
    shapes = port_shapes(fabric, Scale(), MTU, QueueModel()) if shaped else {}
    return LinkSettings(mtu=MTU, shapes=shapes, userspace=userspace, **kw)


def commands(setup: Setup) -> list[str]:
    """Every command a setup runs, in order: batch files expanded to `ip ...` / `tc ...`."""
    files = dict(setup.files)
    assert setup.argv[0] == "sh"
    lines = files[setup.argv[1]].splitlines()
    assert lines[0] == "set -e"
    out = []
    for line in lines[1:]:
        argv = shlex.split(line.removesuffix(" >/dev/null 2>&1 || true"))
        if argv[1:2] == ["-batch"]:
            out += [f"{argv[0]} {batch}" for batch in files[argv[2]].splitlines()]
        else:
            out.append(shlex.join(argv))
    return out


def node_pids(fabric: Fabric) -> dict[str, int]:
    """A made-up shell pid per node, as Mininet would have them."""
    nodes = [*(h.name for h in fabric.hosts), *(s.name for s in fabric.switches)]
    return {n: 100 + i for i, n in enumerate(nodes)}


def interface_macs(fabric: Fabric) -> dict[str, str]:
    """A made-up MAC per interface, as Mininet's addLink would pick them."""
    names = port_rates(fabric, Scale())
    return {name: f"02:00:00:00:{i // 256:02x}:{i % 256:02x}" for i, name in enumerate(names)}


def all_setups(fabric: Fabric, s: LinkSettings) -> list[Setup]:
    return [
        veth_setup(fabric, node_pids(fabric), interface_macs(fabric), s, FOLDER),
        *(host_setup(fabric, h, s, FOLDER) for h in fabric.hosts),
        switch_port_setup(fabric, s, FOLDER),
    ]


def tc_state(cmds: list[str], dev: str) -> list[str]:
    """The tc objects a device ends with: on a fresh veth `add` and `replace` both create."""
    out = []
    for c in cmds:
        parts = c.split()
        if parts[0] != "tc" or (parts[1] == "qdisc" and parts[2] == "show") or parts[4] != dev:
            continue
        assert parts[2] in ("add", "replace")
        out.append(" ".join([parts[1], *parts[3:]]))
    return out


def offloads(cmds: list[str], dev: str) -> tuple[int, dict[str, str]]:
    """(ethtool calls, feature -> state after them in order) for one device."""
    calls = [c.split() for c in cmds if c.startswith(f"ethtool -K {dev} ")]
    state: dict[str, str] = {}
    for argv in calls:
        state.update(zip(argv[3::2], argv[4::2], strict=True))
    return len(calls), state


# -- the tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize(("shaped", "userspace"), [(True, True), (True, False), (False, True)])
def test_every_interface_ends_with_the_same_qdiscs_and_offloads(
    spec: FabricSpec, shaped: bool, userspace: bool
) -> None:
    fabric = build_fabric(spec)
    old = old_commands(fabric, shaped, userspace)
    new = [c for s in all_setups(fabric, settings(fabric, shaped, userspace)) for c in commands(s)]
    for dev, before in old.items():
        assert tc_state(new, dev) == tc_state(before, dev), dev
        calls, state = offloads(new, dev)
        assert calls == 1, dev  # one process per interface, not two
        assert state == offloads(before, dev)[1], dev


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_the_same_veth_pairs_in_the_same_namespaces_with_mininets_macs(spec: FabricSpec) -> None:
    fabric = build_fabric(spec)
    pids, macs = node_pids(fabric), interface_macs(fabric)
    old = set()
    for lk in fabric.links:
        (n1, a), (n2, b) = ends(lk)
        old.add((pids[n1], mininet_veth_command(a, macs[a], b, macs[b], pids[n2])))
    new = set()
    for c in commands(veth_setup(fabric, pids, macs, settings(fabric), FOLDER)):
        if c.startswith("ip link add"):
            # Mininet ran it in node 1's namespace; the batch names that namespace instead.
            words = c.split()
            at = words.index("netns")
            pid = int(words[at + 1])
            new.add((pid, " ".join(words[:at] + words[at + 2 :])))
    assert new == old


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_every_interface_is_brought_up_host_ends_with_mtu(spec: FabricSpec) -> None:
    fabric = build_fabric(spec)
    new = [c for s in all_setups(fabric, settings(fabric)) for c in commands(s)]
    up = {c.split()[4] for c in new if c.startswith("ip link set dev ") and c.endswith(" up")}
    assert up == set(old_commands(fabric, True, True))  # Mininet's `ifconfig up`, every end
    for h in fabric.hosts:
        for i in h.interfaces:
            assert f"ip link set dev {i.name} address {i.mac} mtu {MTU} up" in new


def test_root_ipv6_off_on_every_switch_port_before_they_come_up() -> None:
    fabric = build_fabric(FabricSpec.of("zcube", n=4))
    cmds = commands(all_setups(fabric, settings(fabric))[0])
    [sysctl] = [c for c in cmds if c.startswith("sysctl")]
    keys = {kv.split(".")[3] for kv in sysctl.split()[3:]}
    assert keys == set(fabric.switch_interfaces())
    first_up = next(i for i, c in enumerate(cmds) if c.startswith("ip link set"))
    last_add = max(i for i, c in enumerate(cmds) if c.startswith("ip link add"))
    assert last_add < cmds.index(sysctl) < first_up


def test_host_script_runs_the_host_plan_unchanged() -> None:
    fabric = build_fabric(FabricSpec.of("zcube", n=4))
    h = fabric.host("h5")
    s = settings(fabric, management=True)
    cmds = commands(host_setup(fabric, h, s, FOLDER))
    assert cmds[0] == shlex.join(["sysctl", "-q", "-w", *sysctls(h)])
    ip = [c.removeprefix("ip ") for c in cmds if c.startswith("ip ")]
    assert ip == ip_batch(fabric, h, MTU) + management_host_batch(h)
    # Only its own ports are shaped and set, after its addresses.
    touched = {c.split()[4] for c in cmds if c.startswith("tc ")}
    touched |= {c.split()[2] for c in cmds if c.startswith("ethtool")}
    assert touched == {i.name for i in h.interfaces}
    assert max(cmds.index(f"ip {line}") for line in ip) < min(
        i for i, c in enumerate(cmds) if c.startswith("tc ")
    )


def test_files_live_in_the_folder_and_unshaped_has_no_tc_batch() -> None:
    fabric = build_fabric(FabricSpec.of("roft"))
    shaped = host_setup(fabric, fabric.hosts[0], settings(fabric), FOLDER)
    assert [p for p, _ in shaped.files] == [f"{FOLDER}/h0.ip", f"{FOLDER}/h0.tc", f"{FOLDER}/h0.sh"]
    assert shaped.argv == ("sh", f"{FOLDER}/h0.sh")
    unshaped = switch_port_setup(fabric, settings(fabric, shaped=False), FOLDER)
    assert [p for p, _ in unshaped.files] == [f"{FOLDER}/ports.sh"]
    assert not any(c.startswith("tc ") for c in commands(unshaped))


def test_shaping_keeps_mininets_rate_format_and_refuses_no_rate() -> None:
    assert shaping_lines([("a0-eth1", PortShape(12.5, 64))]) == [
        "qdisc replace dev a0-eth1 root handle 5:0 htb default 1",
        "class replace dev a0-eth1 parent 5:0 classid 5:1 htb rate 12.500000Mbit burst 15k",
        "qdisc replace dev a0-eth1 parent 5:1 handle 10: pfifo limit 64",
    ]
    with pytest.raises(ConfigError, match="a0-eth1"):
        shaping_lines([("a0-eth1", PortShape(0.0, 64))])


def _stub(bin_dir: Path, name: str, code: int) -> None:
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\necho "{name} $*" >> "$LOG"\necho noise\nexit {code}\n')
    path.chmod(0o755)


def _run(text: str, tmp_path: Path, failing: set[str]) -> tuple[int, list[str], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("ip", "tc", "ethtool", "sysctl"):
        _stub(bin_dir, tool, 1 if tool in failing else 0)
    (tmp_path / "run.sh").write_text(text)
    log = tmp_path / "log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log)}
    done = subprocess.run(
        ["sh", str(tmp_path / "run.sh")], env=env, capture_output=True, text=True, check=False
    )
    ran = log.read_text().splitlines() if log.exists() else []
    return done.returncode, ran, done.stdout


def test_script_stops_at_a_failed_checked_step_and_ignores_unchecked_ones(tmp_path: Path) -> None:
    text = script(
        [
            Step(("ethtool", "-K", "x", "tx", "off"), checked=False),
            Step(("ip", "-batch", "/a dir/x.ip")),
            Step(("tc", "-batch", "y.tc")),
        ]
    )
    assert "ip -batch '/a dir/x.ip'" in text.splitlines()
    code, ran, out = _run(text, tmp_path, failing={"ethtool"})
    assert (code, ran) == (0, ["ethtool -K x tx off", "ip -batch /a dir/x.ip", "tc -batch y.tc"])
    assert out.split() == ["noise", "noise"]  # ethtool's output is dropped
    code, ran, _ = _run(text, tmp_path, failing={"ip"})
    assert code != 0
    assert ran == ["ethtool -K x tx off", "ip -batch /a dir/x.ip"]  # tc never ran
