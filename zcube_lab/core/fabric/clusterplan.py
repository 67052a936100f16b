"""A fabric split over several lab machines, as batch text: one root script per machine.

`split.py` decides which machine emulates each node. Here each machine gets what its root
namespace runs (the adapter is `zcube_lab.emulator.cluster.lab`):
- links with both ends on the machine: veth pairs, as on one machine (`linkplan.veth_lines`);
- a link cut by the split: one VXLAN device at each end, named as the veth end would be
  (`<node>-eth<port>`), with the MAC Mininet chose, VNI `VNI_BASE + link index`, between the two
  machines' wire addresses. A host's end moves into the host's namespace (the device's UDP
  socket stays in the root namespace, on the wire); a switch's end stays in the root namespace,
  where Open vSwitch's system ports live. The host's script and the switch port script then
  shape a VXLAN end exactly as a veth end (same HTB class, same leaf FIFO, same offloads);
- the management network: each machine's bridge holds its own hosts' management links, and one
  VXLAN device per other machine joins the bridges into one layer-2 network (a star around
  machine 0, which holds the controller, Prometheus and the Locust master). Machine k > 0
  addresses its bridge `mgmt_root_address(k)`, so its Locust worker reaches the gateway.

Why VXLAN: the cluster edition's `RemoteGRELink` makes `gretap` devices, which this machine's
kernel lacks; VXLAN is in every stock Debian kernel and is a plain Linux device, so both Open
vSwitch datapaths (kernel and userspace) take it as an ordinary port and `tc` shapes it like a
veth. Its header costs `VXLAN_OVERHEAD` bytes, so the lab's MTU must fit the wire's MTU minus
that (`tunnel_mtu`). Open vSwitch's own tunnel ports would need flow rules that know about
tunnels; a VXLAN device keeps the controller's rules identical on one machine or several.

Pure: text out, nothing run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.addressing import MGMT_PREFIX_LEN, mgmt_root_address
from zcube_lab.core.fabric.description import Fabric, Link
from zcube_lab.core.fabric.hostplan import MGMT_BRIDGE, management_interface, management_peer
from zcube_lab.core.fabric.linkplan import (
    Batch,
    LinkSettings,
    Setup,
    Step,
    ends,
    offload_step,
    setup_script,
    shaping_lines,
    up_lines,
    veth_lines,
)
from zcube_lab.core.fabric.split import Split

VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8
VNI_BASE = 1000  # fabric link i: VNI_BASE + i
MGMT_VNI_BASE = 900  # management tunnel between machine 0 and machine k: MGMT_VNI_BASE + k


def tunnel_mtu(lab_mtu: int, wire_mtu: int) -> int:
    """The largest frame a tunnel carries on a wire of `wire_mtu`; the lab's MTU must fit."""
    inner = wire_mtu - VXLAN_OVERHEAD
    if lab_mtu > inner:
        raise ConfigError(
            "mtu",
            lab_mtu,
            f"at most {inner} on a cluster whose wire carries {wire_mtu}-byte frames "
            f"(VXLAN adds {VXLAN_OVERHEAD})",
        )
    return lab_mtu


def check_machine_list(addresses: Sequence[str]) -> None:
    """At least two distinct IPv4 wire addresses, none loopback (ConfigError `machines`)."""
    import ipaddress

    allowed = "at least 2 distinct IPv4 wire addresses (not loopback), this machine's first"
    if len(addresses) < 2 or len(set(addresses)) != len(addresses):
        raise ConfigError("machines", ",".join(addresses), allowed)
    for a in addresses:
        try:
            ok = not ipaddress.IPv4Address(a).is_loopback
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError("machines", a, allowed)


def mgmt_tunnel_name(machine: int, other: int) -> str:
    """The management tunnel on `machine` towards `other`."""
    return f"zmv-{machine}-{other}"


def link_vni(fabric: Fabric, link: Link) -> int:
    """The VXLAN network identifier of a fabric link (unique per link)."""
    return VNI_BASE + fabric.links.index(link)


def machine_links(split: Split, machine: int) -> tuple[list[Link], list[Link]]:
    """(links wholly on `machine`, cut links with one end on it)."""
    inside, cut = [], []
    for lk in split.fabric.links:
        at = {split.machine_of(lk.node1), split.machine_of(lk.node2)}
        if at == {machine}:
            inside.append(lk)
        elif machine in at:
            cut.append(lk)
    return inside, cut


def vxlan_lines(
    split: Split,
    machine: int,
    addresses: Sequence[str],
    pids: Mapping[str, int],
    macs: Mapping[str, str],
) -> list[str]:
    """`ip -batch` lines creating this machine's end of every cut link, host ends moved into
    their host's namespace."""
    fabric = split.fabric
    lines = []
    for lk in machine_links(split, machine)[1]:
        for node, name in ends(lk):
            if split.machine_of(node) != machine:
                continue
            other = next(n for n, _ in ends(lk) if n != node)
            far = split.machine_of(other)
            lines.append(
                f"link add name {name} address {macs[name]} type vxlan id {link_vni(fabric, lk)} "
                f"local {addresses[machine]} remote {addresses[far]} dstport {VXLAN_PORT} ttl 64"
            )
            if not fabric.is_switch(node):
                lines.append(f"link set dev {name} netns {pids[node]}")
    return lines


def management_lines(
    split: Split, machine: int, addresses: Sequence[str], pids: Mapping[str, int]
) -> list[str]:
    """`ip -batch` lines for this machine's part of the management network."""
    lines = [
        f"link add {MGMT_BRIDGE} type bridge",
        f"addr add {mgmt_root_address(machine)}/{MGMT_PREFIX_LEN} dev {MGMT_BRIDGE}",
        f"link set {MGMT_BRIDGE} up",
    ]
    for h in split.fabric.hosts:
        if split.host_machine[h.name] != machine:
            continue
        inner, outer = management_interface(h), management_peer(h)
        lines.append(f"link add {outer} type veth peer name {inner}")
        lines.append(f"link set {inner} netns {pids[h.name]}")
        lines.append(f"link set {outer} master {MGMT_BRIDGE} up")
    others = range(1, split.machines) if machine == 0 else (0,)
    for other in others:
        k = other if machine == 0 else machine
        name = mgmt_tunnel_name(machine, other)
        lines.append(
            f"link add {name} type vxlan id {MGMT_VNI_BASE + k} local {addresses[machine]} "
            f"remote {addresses[other]} dstport {VXLAN_PORT} ttl 64"
        )
        lines.append(f"link set {name} master {MGMT_BRIDGE} up")
    return lines


def switch_ends(split: Split, machine: int) -> tuple[str, ...]:
    """Root-namespace names of the switch ends on `machine` (veth or VXLAN), sorted."""
    fabric = split.fabric
    inside, cut = machine_links(split, machine)
    return tuple(
        n
        for n in fabric.switch_interfaces([*inside, *cut])
        if split.switch_machine.get(n.rsplit("-eth", 1)[0]) == machine
    )


def root_interfaces(split: Split, machine: int, management: bool) -> tuple[str, ...]:
    """Every interface the lab makes in `machine`'s root namespace (for teardown and leftovers)."""
    names = list(switch_ends(split, machine))
    if management:
        names.append(MGMT_BRIDGE)
        names += [
            management_peer(h) for h in split.fabric.hosts if split.host_machine[h.name] == machine
        ]
        others = range(1, split.machines) if machine == 0 else (0,)
        names += [mgmt_tunnel_name(machine, o) for o in others]
    return tuple(names)


def machine_link_setup(
    split: Split,
    machine: int,
    addresses: Sequence[str],
    pids: Mapping[str, int],
    macs: Mapping[str, str],
    settings: LinkSettings,
    folder: str,
) -> Setup:
    """Root namespace of `machine`, once Mininet has its nodes: its veth pairs, its tunnel ends
    (and its part of the management network), IPv6 off on its switch ends, switch ends up."""
    if len(addresses) != split.machines:
        raise ConfigError("machines", len(addresses), f"{split.machines} addresses")
    if not 0 <= machine < split.machines:
        raise ConfigError("machine", machine, f"between 0 and {split.machines - 1}")
    inside, _cut = machine_links(split, machine)
    create = veth_lines(split.fabric, pids, macs, inside)
    create += vxlan_lines(split, machine, addresses, pids, macs)
    if settings.management:
        create += management_lines(split, machine, addresses, pids)
    ends_here = switch_ends(split, machine)
    ipv6_off = [f"net.ipv6.conf.{name}.disable_ipv6=1" for name in ends_here]
    steps: list[Step | Batch] = [Batch("ip", f"links-{machine}.ip", tuple(create))]
    if ipv6_off:
        steps.append(Step(("sysctl", "-q", "-w", *ipv6_off), checked=False))
        steps.append(Batch("ip", f"links-up-{machine}.ip", tuple(up_lines(ends_here))))
    return setup_script(folder, f"links-{machine}", steps)


def machine_port_setup(split: Split, machine: int, settings: LinkSettings, folder: str) -> Setup:
    """Root namespace of `machine`, once its switches have started: its switch ports' shaping
    and offloads (tunnel ends exactly as veth ends)."""
    ends_here = switch_ends(split, machine)
    shaped = [(name, settings.shapes[name]) for name in ends_here if name in settings.shapes]
    steps: list[Step | Batch] = []
    if shaped:
        steps.append(Batch("tc", f"ports-{machine}.tc", tuple(shaping_lines(shaped))))
    steps += [offload_step(name, settings.userspace) for name in ends_here]
    return setup_script(folder, f"ports-{machine}", steps)
