"""The fabric's links in Mininet, configured in batches (`zcube_lab.core.fabric.linkplan`).

Mininet keeps its link and interface objects (they give the switches their ports and tear the
links down) but runs no command for them: `link_class()` is a link whose veth pair Mininet does
not create and whose interfaces configure nothing. The lab then runs one script per namespace:
`create_links` (root namespace, once Mininet has its nodes: every veth pair, switch ends up),
`configure_hosts` (every host's namespace, all hosts at once, before the switches start) and
`configure_switch_ports` (root namespace, once the switches have started). The scripts and their
batch files stay in the run's folder (`<host>.sh`, `<host>.ip`, `<host>.tc`, `links.*`,
`ports.*`), so a failed bring-up can be read and replayed. Needs root.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.linkplan import (
    LinkSettings,
    Setup,
    ends,
    host_setup,
    switch_port_setup,
    veth_setup,
)
from zcube_lab.emulator.lab.system import LabError, attempt

SCRIPT_TIMEOUT_S = 120.0
# tc's warning for every HTB class faster than ~16 Mb/s at the default r2q: harmless, and noise
# in an error message.
HTB_QUANTUM_WARNING = "Consider r2q change"


def link_class() -> type:
    """Mininet's link class for the lab: no veth pair made, no interface configured."""
    from mininet.link import Intf, Link

    class BatchIntf(Intf):
        """An interface Mininet records (name, node, port) without running anything."""

        def config(self, **_params: Any) -> dict:
            return {}

    class BatchLink(Link):
        """A link whose veth pair `create_links` makes, with the MACs Mininet chose."""

        def __init__(self, node1: Any, node2: Any, **params: Any) -> None:
            params.setdefault("cls1", BatchIntf)
            params.setdefault("cls2", BatchIntf)
            super().__init__(node1, node2, **params)

        def makeIntfPair(self, *_args: Any, **_kwargs: Any) -> None:
            return None

    return BatchLink


def write_setup(setup: Setup) -> None:
    """Write a setup's script and batch files."""
    for path, text in setup.files:
        Path(path).write_text(text)


def failure_text(output: str, lines: int = 20) -> str:
    """The end of a failed script's output, without tc's HTB quantum warnings."""
    kept = [line for line in output.splitlines() if HTB_QUANTUM_WARNING not in line]
    return "\n".join(kept[-lines:]).strip() or "no output"


def _run_root(setup: Setup, what: str) -> None:
    write_setup(setup)
    code, output = attempt(setup.argv, timeout=SCRIPT_TIMEOUT_S)
    if code != 0:
        raise LabError(f"{what} ({' '.join(setup.argv)}): {failure_text(output)}")


def create_links(net: Any, fabric: Fabric, settings: LinkSettings, folder: Path) -> None:
    """Every link's veth pair (and the management network), from the root namespace."""
    pids = {node.name: node.pid for node in (*net.hosts, *net.switches)}
    macs = {i.name: i.mac for link in net.links for i in (link.intf1, link.intf2)}
    expected = {name for lk in fabric.links for _node, name in ends(lk)}
    if set(macs) != expected:
        raise LabError(
            f"Mininet's interfaces differ from the fabric's: {sorted(set(macs) ^ expected)[:8]}"
        )
    _run_root(veth_setup(fabric, pids, macs, settings, str(folder)), "creating the links")


def configure_hosts(net: Any, fabric: Fabric, settings: LinkSettings, folder: Path) -> None:
    """Every host's sysctls, addresses, routes, static ARP, shaping and offloads: one script in
    each host's namespace, all running at once."""
    run_host_setups(net, write_host_setups(fabric, settings, folder), folder)


def write_host_setups(fabric: Fabric, settings: LinkSettings, folder: Path) -> dict[str, Setup]:
    """Every host's script and batch files, written to `folder`; by host name."""
    setups = {h.name: host_setup(fabric, h, settings, str(folder)) for h in fabric.hosts}
    for setup in setups.values():
        write_setup(setup)
    return setups


def run_host_setups(net: Any, setups: dict[str, Setup], folder: Path) -> None:
    """Run written host scripts, each in its host (`node.popen`: on a cluster, on the host's
    machine, where the files must be too), all at once; raise on any failure."""
    running = {
        name: net.get(name).popen(
            list(setup.argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for name, setup in setups.items()
    }
    failures = {}
    for name, proc in running.items():  # wait for all, so no script outlives a failure
        try:
            out, _ = proc.communicate(timeout=SCRIPT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            failures[name] = f"timed out after {SCRIPT_TIMEOUT_S:g}s"
            continue
        if proc.returncode != 0:
            failures[name] = failure_text(out.decode(errors="replace"))
    if failures:
        name, text = next(iter(failures.items()))
        raise LabError(
            f"configuring {len(failures)} host(s) failed; {name} (see {folder}/{name}.sh): {text}"
        )


def configure_switch_ports(fabric: Fabric, settings: LinkSettings, folder: Path) -> None:
    """Every switch port's shaping and offloads, from the root namespace."""
    _run_root(switch_port_setup(fabric, settings, str(folder)), "configuring the switch ports")
