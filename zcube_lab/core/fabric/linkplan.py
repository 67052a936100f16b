"""Every fabric interface's link layer as batch text: one script per network namespace.

Mininet's `TCLink` configured each interface with its own shell commands (create the veth pair,
bring each end up, `ethtool`, `tc qdisc show`, two `tc` lines for HTB), each a round trip
through the node's shell, and configured every switch port twice more after the switches
started. Here the same settings come as one `ip -batch` and one `tc -batch` text per namespace:
a GPU host's namespace for its NIC ports, the root namespace for every switch port (Open
vSwitch's system ports live there on both datapaths). `ethtool` has no batch mode, so a
namespace's `ethtool` calls are lines of its shell script: still a process per interface, but
no round trip through Python or a Mininet shell.

The settings, per interface `<node>-eth<port>` (both ends of every link):
- veth pair: each end created in its node's namespace (given as the pid of the node's shell,
  as Mininet's `makeIntfPair` does), with the MAC addresses Mininet chose; brought up (Mininet's
  `ifconfig up`): switch ends by the root batch (IPv6 off first, as the lab did after), host
  ends by the host's `hostplan.ip_batch`.
- shaping, when shaped: HTB root `5:0` with `default 1`, class `5:1` at the link's emulated rate
  with `burst 15k` (Mininet's `TCIntf.bwCmds`, number format kept), and the queue model's FIFO
  `10:` under the class (`queues.leaf_queue_lines`; under the lossless mode a pausable TBF,
  `lossless.holding_leaf_line`). Root qdisc and class are `replace`d: on a
  fresh veth that is Mininet's `add`, and a qdisc already there ends as Mininet's delete-then-add
  left it.
- offloads: Mininet's `gro off tx <on|off> rx on` (tx off on the userspace datapath) and, on the
  userspace datapath, the lab's `tx tso gso gro off`, merged into one `ethtool -K` per
  interface: the same features end in the same state as the two calls run in order.

Order (the adapter, `zcube_lab.emulator.lab.links`): veth pairs and switch ends up right after
Mininet builds its nodes; each host's script before the switches start, so both ends of every link
are up when a switch first reports its ports; the switch ports' shaping and offloads after the
switches start, where Mininet reapplied its own, because Open vSwitch may reset the qdisc of a
port it adds (its QoS code deletes a qdisc it takes for its own).

Pure: text out, nothing run.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from zcube_lab.core.clock import Clock, tcp_route_options
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric, Host, Link
from zcube_lab.core.fabric.hostplan import (
    ip_batch,
    management_host_batch,
    management_root_batch,
    sysctls,
)
from zcube_lab.core.fabric.lossless import fifo_bytes, holding_leaf_line
from zcube_lab.core.fabric.queues import HTB_CLASS, QueueModel, leaf_queue_lines, port_queue_limits
from zcube_lab.core.fabric.scale import Scale

HTB_ROOT = "5:0"
HTB_BURST = "15k"
# On the userspace datapath TCP stalls unless these are off (docs/DOMAIN.md §5).
USERSPACE_OFFLOADS = (("tx", "off"), ("tso", "off"), ("gso", "off"), ("gro", "off"))


@dataclass(frozen=True)
class PortShape:
    """How one interface is shaped: its HTB rate and the packets its leaf FIFO holds; under the
    lossless mode (`fifo_bytes` set) the leaf is a pausable byte FIFO of that many bytes
    (`zcube_lab.core.fabric.lossless`) and `packets` is its XOFF in frames."""

    mbps: float
    packets: int
    fifo_bytes: int | None = None
    burst_bytes: int | None = None  # the HTB class's burst; None: HTB_BURST (Mininet's 15k)


@dataclass(frozen=True)
class LinkSettings:
    """What every interface gets: MTU (host ends; Open vSwitch sets the switch ends'),
    `shapes` by interface name (empty: unshaped), offloads for the userspace datapath or not,
    and whether hosts have a management interface."""

    mtu: int
    shapes: Mapping[str, PortShape] = field(default_factory=dict)
    userspace: bool = True
    management: bool = False
    congestion_control: str | None = None  # every host namespace's TCP (hostplan.sysctls)
    clock: Clock = field(default_factory=Clock)  # dilation: TCP's per-route timers


@dataclass(frozen=True)
class Step:
    """One command of a namespace's script. A `checked` step's failure stops the script with
    a non-zero exit; an unchecked one's output and failure are ignored (`ethtool -K` prints the
    features it changed besides those asked for)."""

    argv: tuple[str, ...]
    checked: bool = True


@dataclass(frozen=True)
class Batch:
    """Lines for `ip -batch` or `tc -batch` (`tool`), written to `file`; a checked step: the
    tool stops at the first failing line."""

    tool: str
    file: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Setup:
    """One namespace's configuration: files to write (path, text), the script among them,
    then `argv` to run."""

    files: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]


def ends(link: Link) -> tuple[tuple[str, str], tuple[str, str]]:
    """(node, interface name) of both ends of a link, in Mininet's naming `<node>-eth<port>`."""
    return (
        (link.node1, f"{link.node1}-eth{link.port1}"),
        (link.node2, f"{link.node2}-eth{link.port2}"),
    )


def port_rates(fabric: Fabric, scale: Scale) -> dict[str, float]:
    """Emulated rate in Mb/s of every interface, both ends of every link."""
    return {
        name: scale.link_mbps(fabric, lk.gbps) for lk in fabric.links for _node, name in ends(lk)
    }


def port_shapes(
    fabric: Fabric,
    scale: Scale,
    mtu: int,
    model: QueueModel,
    lossless: bool = False,
    burst_bytes: int | None = None,
) -> dict[str, PortShape]:
    """Rate and queue limit of every interface, both ends of every link (`lossless`: with the
    lossless mode's FIFO bytes; `burst_bytes`: every HTB class's burst, else Mininet's 15k)."""
    limits = port_queue_limits(fabric, scale, mtu, model)
    rates = port_rates(fabric, scale)
    fifo = fifo_bytes(fabric, limits, rates, mtu) if lossless else {}
    return {
        name: PortShape(mbps, limits[name], fifo.get(name), burst_bytes)
        for name, mbps in rates.items()
    }


def shaping_lines(shapes: Iterable[tuple[str, PortShape]]) -> list[str]:
    """`tc -batch` lines giving each (interface, shape) its HTB root, rate class and leaf FIFO."""
    lines = []
    for interface, shape in shapes:
        if not shape.mbps > 0:
            raise ConfigError(f"rate of {interface}", shape.mbps, "a positive rate in Mb/s")
        lines.append(f"qdisc replace dev {interface} root handle {HTB_ROOT} htb default 1")
        lines.append(
            f"class replace dev {interface} parent {HTB_ROOT} classid {HTB_CLASS} "
            f"htb rate {shape.mbps:f}Mbit burst "
            f"{HTB_BURST if shape.burst_bytes is None else shape.burst_bytes}"
        )
        if shape.fifo_bytes is not None:
            lines.append(holding_leaf_line(interface, shape.fifo_bytes))
        else:
            lines += leaf_queue_lines([(interface, shape.packets)])
    return lines


def offload_settings(userspace: bool) -> tuple[tuple[str, str], ...]:
    """Offload features and their state: Mininet's, then the userspace datapath's on top."""
    settings = {"gro": "off", "tx": "off" if userspace else "on", "rx": "on"}
    if userspace:
        settings.update(USERSPACE_OFFLOADS)
    return tuple(settings.items())


def offload_step(interface: str, userspace: bool) -> Step:
    """The one `ethtool -K` call that sets an interface's offloads (output ignored)."""
    features = itertools.chain.from_iterable(offload_settings(userspace))
    return Step(("ethtool", "-K", interface, *features), checked=False)


def veth_lines(
    fabric: Fabric,
    pids: Mapping[str, int],
    macs: Mapping[str, str],
    links: Iterable[Link] | None = None,
) -> list[str]:
    """`ip -batch` lines, run in the root namespace, creating every link's veth pair (or only
    those of `links`) with each end in the namespace of its node's shell (`pids` by node name)
    and the MAC in `macs`."""
    lines = []
    for lk in fabric.links if links is None else links:
        (node1, name1), (node2, name2) = ends(lk)
        lines.append(
            f"link add name {name1} address {macs[name1]} netns {pids[node1]} "
            f"type veth peer name {name2} address {macs[name2]} netns {pids[node2]}"
        )
    return lines


def up_lines(interfaces: Iterable[str]) -> list[str]:
    """`ip -batch` lines that bring interfaces up."""
    return [f"link set dev {name} up" for name in interfaces]


def script(steps: Iterable[Step]) -> str:
    """A `sh` script running `steps` in order; it stops at the first checked step that fails."""
    lines = ["set -e"]
    for step in steps:
        line = shlex.join(step.argv)
        lines.append(line if step.checked else f"{line} >/dev/null 2>&1 || true")
    return "\n".join(lines) + "\n"


def setup_script(folder: str, name: str, steps: Iterable[Step | Batch]) -> Setup:
    """Each batch written to its file in `folder` and run with `<tool> -batch <file>`, the other
    steps as they are, all in the script `<folder>/<name>.sh`."""
    base = PurePosixPath(folder)
    files = []
    commands = []
    for step in steps:
        if isinstance(step, Batch):
            path = str(base / step.file)
            files.append((path, "\n".join(step.lines) + "\n"))
            commands.append(Step((step.tool, "-batch", path)))
        else:
            commands.append(step)
    path = str(base / f"{name}.sh")
    return Setup((*files, (path, script(commands))), ("sh", path))


def veth_setup(
    fabric: Fabric,
    pids: Mapping[str, int],
    macs: Mapping[str, str],
    settings: LinkSettings,
    folder: str,
) -> Setup:
    """Root namespace, once Mininet has its nodes: every veth pair (and the management network),
    IPv6 off on the switch ends (its router and multicast chatter would muddy the port counters
    the experiments compare), then the switch ends up."""
    create = veth_lines(fabric, pids, macs)
    if settings.management:
        create += management_root_batch(fabric, dict(pids))
    switch_ends = fabric.switch_interfaces()
    ipv6_off = [f"net.ipv6.conf.{name}.disable_ipv6=1" for name in switch_ends]
    steps = [
        Batch("ip", "links.ip", tuple(create)),
        Step(("sysctl", "-q", "-w", *ipv6_off), checked=False),
        Batch("ip", "links-up.ip", tuple(up_lines(switch_ends))),
    ]
    return setup_script(folder, "links", steps)


def host_setup(fabric: Fabric, host: Host, settings: LinkSettings, folder: str) -> Setup:
    """A host's namespace: sysctls, then addresses, MTU, up, routes and static ARP
    (`hostplan.ip_batch`), its ports' shaping, their offloads."""
    ip_lines = ip_batch(fabric, host, settings.mtu, tcp_route_options(settings.clock))
    if settings.management:
        ip_lines += management_host_batch(host)
    shaped = [
        (i.name, settings.shapes[i.name]) for i in host.interfaces if i.name in settings.shapes
    ]
    steps: list[Step | Batch] = [
        Step(("sysctl", "-q", "-w", *sysctls(host, settings.congestion_control))),
        Batch("ip", f"{host.name}.ip", tuple(ip_lines)),
    ]
    if shaped:
        steps.append(Batch("tc", f"{host.name}.tc", tuple(shaping_lines(shaped))))
    steps += [offload_step(i.name, settings.userspace) for i in host.interfaces]
    return setup_script(folder, host.name, steps)


def switch_port_setup(fabric: Fabric, settings: LinkSettings, folder: str) -> Setup:
    """Root namespace, once the switches have started: every switch port's shaping and
    offloads (up already; Open vSwitch sets their MTU)."""
    switch_ends = fabric.switch_interfaces()
    shaped = [(name, settings.shapes[name]) for name in switch_ends if name in settings.shapes]
    steps: list[Step | Batch] = []
    if shaped:
        steps.append(Batch("tc", "ports.tc", tuple(shaping_lines(shaped))))
    steps += [offload_step(name, settings.userspace) for name in switch_ends]
    return setup_script(folder, "ports", steps)
