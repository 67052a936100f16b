"""The Mininet side of a lab: the fabric as a Mininet topology, the Open vSwitch bridge class
and the controller node it is built with, and the ping sweep through its hosts' shells.

`topology` is the fabric description as a `Topo` (names, dpids and port numbers; nothing else:
rates, addresses and routes are the lab's scripts', `zcube_lab.emulator.lab.links`). `switch_class`
makes the bridge class on a base Mininet gives (`OVSSwitch`, or a cluster lab's remote one): the
lab's MTU on every port, the owner mark (`state.OWNER_KEY`) on every bridge, and a bridge in a
private Open vSwitch instance addressed to that instance (its shell's ovs-* tools and the
batched `ovs-vsctl` transactions, once per instance). `controller_class` is Mininet's remote
controller without its listening probe. `unreachable` pings every host from every other
through their Mininet shells. Mininet is imported when a class is made, not at import. Names:
Mininet's own camelCase methods (`batchStartup`, `intfOpts`, ...) are overridden under their
names; the helpers are `_<what>` and take plain switch objects.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.emulator.lab import ovs
from zcube_lab.emulator.lab.state import OWNER_KEY


def _by_instance(switches: object) -> list[tuple[ovs.Instance | None, list[object]]]:
    """Mininet switches grouped by the Open vSwitch instance holding them, in first-seen order."""
    groups: dict[ovs.Instance | None, list[object]] = {}
    for sw in switches:  # type: ignore[attr-defined]
        groups.setdefault(getattr(sw, "instance", None), []).append(sw)
    return list(groups.items())


def _per_instance(
    base: Callable[..., object], switches: list[object], kwargs: dict[str, object]
) -> list[object]:
    """Mininet's batch start-up or shutdown (`base`, the class method of OVSSwitch) once per
    Open vSwitch instance, its `ovs-vsctl` addressed to that instance; the system instance's
    switches go exactly as before (the base class's runner)."""
    for inst, group in _by_instance(switches):
        extra = dict(kwargs)
        if inst is not None:
            extra["run"] = _vsctl_run(inst, kwargs.get("run"))  # type: ignore[arg-type]
        base(group, **extra)
    return switches


def _vsctl_run(
    inst: ovs.Instance | None, run: Callable[..., object] | None
) -> Callable[..., object]:
    """Mininet's command runner (`errRun` by default) with `ovs-vsctl` commands addressed to
    `inst`'s database (None: unchanged, the system instance)."""
    from mininet.util import errRun

    base = run or errRun
    if inst is None:
        return base
    prefix = " ".join(ovs.vsctl_argv(inst))

    def wrapped(cmd: str, *args: object, **kwargs: object) -> object:
        if isinstance(cmd, str) and (cmd == ovs.VSCTL or cmd.startswith(f"{ovs.VSCTL} ")):
            cmd = prefix + cmd[len(ovs.VSCTL) :]
        return base(cmd, *args, **kwargs)

    return wrapped


def switch_class(base: type, mtu: int, owner: int, where: dict[str, ovs.Instance]) -> type:
    """The lab's bridge class on Mininet's `base`: MTU `mtu` on every port, owner mark `owner`,
    and each bridge in the private instance `where` names for it (none: the system one)."""

    class LabSwitch(base):  # type: ignore[misc]
        """OVS bridge with the lab's MTU on every port and our owner mark; in a private
        Open vSwitch instance when the lab runs some (its shell's ovs-* tools and the
        batched ovs-vsctl transactions address that instance)."""

        def __init__(self, name, **params):
            super().__init__(name, **params)
            self.instance = where.get(name)
            if self.instance is not None:
                self.cmd(f"export OVS_RUNDIR={self.instance.rundir}")

        def intfOpts(self, intf):
            return super().intfOpts(intf) + f" mtu_request={mtu}"

        def bridgeOpts(self):
            opts = super().bridgeOpts() + f" external_ids:{OWNER_KEY}={owner}"
            if self.instance is not None:
                opts = opts.replace(
                    " datapath_type=netdev", f" datapath_type={ovs.PRIVATE_DATAPATH_TYPE}"
                )
            return opts

        @classmethod
        def batchStartup(cls, switches, **kwargs):
            return _per_instance(super().batchStartup, switches, kwargs)

        @classmethod
        def batchShutdown(cls, switches, **kwargs):
            return _per_instance(super().batchShutdown, switches, kwargs)

    return LabSwitch


def controller_class() -> type:
    """Mininet's remote controller without its listening probe (the lab waits for ours)."""
    from mininet.node import RemoteController

    class OurController(RemoteController):
        def checkListening(self) -> None:
            # Mininet's probe pipes `telnet` to our port and decodes what it reads as UTF-8:
            # our controller answers with a binary OpenFlow HELLO whose random xid can be
            # invalid UTF-8, failing bring-up at random. We already waited for the
            # controller's listening line, so there is nothing to check.
            return None

    return OurController


def topology(fabric: Fabric, node_params: Callable[[str], dict[str, object]]) -> object:
    """The fabric as a Mininet `Topo`: its hosts (no address: the lab's scripts set them), its
    switches with their dpids, its links with their port numbers; `node_params` adds each node's
    own (a cluster lab's machine)."""
    from mininet.topo import Topo

    topo = Topo()
    for h in fabric.hosts:
        topo.addHost(h.name, ip=None, **node_params(h.name))
    for s in fabric.switches:
        topo.addSwitch(s.name, dpid=f"{s.dpid:016x}", **node_params(s.name))
    for lk in fabric.links:
        # Rates, queues, MTU and offloads come from linkplan, not Mininet
        # (zcube_lab.emulator.lab.links).
        topo.addLink(lk.node1, lk.node2, port1=lk.port1, port2=lk.port2)
    return topo


def unreachable(
    net: object, fabric: Fabric, timeout_ms: int, retries: int, passes: int = 2
) -> dict[str, list[str]]:
    """From every host's shell in Mininet's `net`, `fping` every address of every other host,
    all hosts at once; host -> the addresses it could not reach. What did not answer is asked
    again, up to `passes` sweeps in all, each waiting twice as long: 64 hosts pinging 126
    addresses each at once on a busy machine lose replies that a second, smaller sweep gets
    (1,486 of 8,064 on the first sweep of a 64-GPU lossless lab at k = 8 beside other work;
    the same lab then served), while an address that is really cut off fails every sweep."""
    todo = {
        h.name: [i.ip for o in fabric.hosts if o.name != h.name for i in o.interfaces]
        for h in fabric.hosts
    }
    for sweep in range(max(1, passes)):
        pending = []
        for name, targets in todo.items():
            if not targets:
                continue
            node = net.get(name)  # type: ignore[attr-defined]
            # -a prints the addresses that answered; the rest are unreachable.
            wait = str(timeout_ms * 2**sweep)
            node.sendCmd("fping", "-a", "-t", wait, "-r", str(retries), *targets)
            pending.append((name, node, targets))
        for name, node, targets in pending:
            alive = {line.strip() for line in node.waitOutput().splitlines()}
            todo[name] = [t for t in targets if t not in alive]
        if not any(todo.values()):
            break
    return todo


def unreachable_text(bad: dict[str, list[str]], where: Path) -> str:
    """A failed all-pairs check in a few lines: how many address pairs from how many hosts,
    the first few, and the file that lists them all."""
    pairs = [(h, a) for h, addrs in bad.items() for a in addrs]
    shown = ", ".join(f"{h} -> {a}" for h, a in pairs[:4])
    more = f" and {len(pairs) - 4} more" if len(pairs) > 4 else ""
    return (
        f"fabric not fully reachable after a second check: {len(pairs)} address pairs from "
        f"{len(bad)} hosts did not answer ({shown}{more}; all of them in {where})"
    )
