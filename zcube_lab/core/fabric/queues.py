"""Queues and packet size of the shaped links: a stated model of a real switch port's buffer,
the MTU rule, and the `tc` lines that put the queue limit on every shaped interface.

Why packets, not time. The lab keeps times real and shrinks bytes and rates by
`bandwidth_scale` S (docs/DOMAIN.md §4), but a packet does not shrink: a 9,000-byte frame is
9,000 bytes at 400 Gb/s and at 50 Mb/s. A real shallow-buffer switch port holds ~26 µs of its
line rate (assumption below); kept in time, that is 162 bytes at 50 Mb/s: less than one packet,
so every burst of two packets would be dropped. Kept in bytes (or, which is the same with the
same packet size, in packets of the real port), it is 72 jumbo frames: TCP sees the same buffer
in packets as on the real port, but each queued packet drains S times slower, so a full queue
adds ~100 ms per hop where the real one adds 26 µs. Neither is faithful; what TCP's dynamics
depend on is counted in packets (initial window, window vs. bandwidth-delay product, three
duplicate ACKs for a fast retransmit), and what the figures depend on is time. So the model
sizes the queue in packets, as small as TCP needs and never larger than a time budget allows
(rates here are the modelled ones, `Scale.modelled_mbps`: a time-dilated run shapes every link
k times slower and keeps the same packets and MTU, so its queues hold the same modelled time):

    limit = max(FLOOR_PACKETS, min(real_share_packets, delay_cap_packets))

- `real_share_packets`: the packets of the lab's MTU that the real port's buffer share holds
  (`PORT_BUFFER_S` of the link's full-scale rate): the lab never buffers more packets than the
  real port would.
- `delay_cap_packets`: the packets that drain within `QUEUE_DELAY_BUDGET_S` at the emulated
  rate: a full queue never adds more than the budget per hop, when the floor allows.
- `FLOOR_PACKETS` (64): room for the initial windows of the connections that meet at one port
  at once. A KV pull opens streams x addresses connections (2 x 2 on ZCube by default), each
  starting with 10 packets (IW10), so two pulls arriving together put ~80 packets on a shared
  trunk port within a round trip. A real RoCE fabric is lossless (PFC pauses the sender instead
  of dropping, and DCQCN keeps queues short); this kernel has no ECN-marking qdisc (red, codel,
  pie) and no DCTCP, so the lab cannot copy that, and a tail drop costs TCP a retransmission
  timer (>= 200 ms, not scaled) where the real fabric loses nothing. The floor therefore favours
  no loss over a short queue. First tried with 16 packets (one IW10 plus room): the default
  comparison dropped 2-15 packets per run on ZCube's trunk ports at 3% mean load.

At the default scale (400 Gb/s NICs at 100 Mb/s, ZCube ports 50 Mb/s, MTU 9000) the floor
binds: 64 packets, at most 92 ms of queue on a ZCube port and 46 ms on a 100 Mb/s port,
against 1.44 s and 0.72 s with the interface default of 1,000 packets. Drops at a switch port
are the modelled switch's (congestion; reported per port by the health verdict, not judged);
a retransmission timeout they cause is judged, since its 200 ms is the lab's, not the fabric's.

That rule is the `port-floor` buffer model, the default. The `shared`, `bytes` and `time`
models (`QueueModel.limit`; docs/DOMAIN.md §5, "Switch buffer models") give a port a share of
one switch chip's buffer (`CHIPS`, the same chip for every fabric) scaled like every byte, the
chip raised alike until a NIC-rate port holds the floor.

The model sizes switch ports. A host's end of its NIC link is not a switch buffer: a real NIC
does not drop what its host sends, it stops the host's queue, and TCP Small Queues keep each
socket's share of that queue to about 2 packets (or 1 ms of its rate). A drop in the host's own
qdisc is worse than a switch drop: TCP does not count the packet as sent and, with nothing else
in flight, waits for its probe timer (>= 200 ms). So the host end keeps a deep FIFO
(`HOST_QUEUE_PACKETS`, Linux's default txqueuelen, set explicitly), bounded in practice by TSQ.

The MTU. Per-hop store-and-forward serialization is `mtu * 8 / rate`: 1.44 ms at 50 Mb/s and
9000 bytes, 0.18 µs at 400 Gb/s. A transfer pays it once per extra hop (pipelining), so the
cost is (hops - 1) * serialization: 2.9 ms on ZCube's 2-hop path at the default scale, about 6%
of the reference 50 ms KV pull. `mtu_for_rate` keeps per-hop serialization within
`SERIALIZATION_BUDGET_S` (2% of the reference transfer); MTU 9000 stays the lab's default
because every smaller packet costs the userspace datapath more packets per second (its
capacity is per packet, `bench/datapath.py`), and `--mtu auto` applies the rule.

Names: the HTB the lab installs (`linkplan`, as Mininet's `TCIntf` did) is root `5:0` with
class `5:1`; the leaf queue put under it is `10:` (the handle Mininet's netem would use; no netem
on this kernel).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.scale import Scale


@dataclass(frozen=True)
class SwitchChip:
    """A switch chip generation: its switching capacity and its shared packet buffer."""

    name: str
    capacity_gbps: float
    buffer_bytes: float
    source: str


# The chips of the two generations the fabrics are built from (docs/DOMAIN.md §5, "Switch
# buffer models"): the same chip for every fabric, as the cost model assumes. Broadcom's public
# product briefs give no buffer size; both figures are widely reported, not datasheet figures.
CHIPS = {
    "51.2t": SwitchChip(
        "51.2t", 51_200.0, 165e6, "Tomahawk-5 class: ~165 MB (widely reported, not a datasheet)"
    ),
    "25.6t": SwitchChip(
        "25.6t", 25_600.0, 113e6, "Tomahawk-4 class: ~113 MB (widely reported, not a datasheet)"
    ),
}
DEFAULT_CHIP = "51.2t"  # the chip the cost model builds both fabrics from (docs/DOMAIN.md §2)

# A Tomahawk-5-class switch: ~165 MB of shared buffer on 51.2 Tb/s (CHIPS above), i.e. ~26 µs
# of line rate; a port's fair share is 26 µs of its own rate (the `port-floor` model).
SWITCH_BUFFER_BYTES = CHIPS[DEFAULT_CHIP].buffer_bytes
SWITCH_CAPACITY_GBPS = CHIPS[DEFAULT_CHIP].capacity_gbps
PORT_BUFFER_S = SWITCH_BUFFER_BYTES * 8 / (SWITCH_CAPACITY_GBPS * 1e9)

# The buffer models (`--buffer-model`; the arithmetic in `QueueModel.limit` and
# docs/DOMAIN.md §5): `port-floor` is the rule above (today's default), the other three give a
# port a share of the chip's buffer, scaled by the bandwidth scale like every byte.
BUFFER_MODELS = ("port-floor", "shared", "bytes", "time")
DEFAULT_BUFFER_MODEL = "port-floor"
# Dynamic threshold (Choudhury and Hahne, IEEE/ACM ToN 6(2), 1998): a queue may grow to
# alpha x the unused buffer, so k congested ports settle at alpha / (1 + alpha k) of it each.
# alpha = 1 (SONiC's `dynamic_th` 0 = log2 alpha, a common egress lossy setting); k = 1: one
# incast destination per chip, the last-hop incast of the issue. A static qdisc cannot share,
# so `shared` gives every port the limit of that state.
DT_ALPHA = 1.0
DT_CONGESTED_PORTS = 1

FLOOR_PACKETS = 64
HOST_QUEUE_PACKETS = 1000
QUEUE_DELAY_BUDGET_S = 0.010
MIN_QUEUE_PACKETS = 2
MAX_QUEUE_PACKETS = 10_000

# The reference transfer: the default coding-agent KV pull, about 640 KB over a 100 Mb/s NIC
# at the default scale (issue 11); its time does not depend on the scale.
REFERENCE_TRANSFER_S = 0.050
SERIALIZATION_FRACTION = 0.02
SERIALIZATION_BUDGET_S = REFERENCE_TRANSFER_S * SERIALIZATION_FRACTION
MIN_MTU = 1500
MAX_MTU = 9000
MTU_STEP = 500

HTB_CLASS = "5:1"  # as Mininet's TCIntf.bwCmds: `htb default 1` root 5:0, class 5:1 with the rate
LEAF_HANDLE = "10:"


def serialization_s(mtu: int, mbps: float) -> float:
    """Seconds one packet of `mtu` bytes takes on a link of `mbps`."""
    return mtu * 8 / (mbps * 1e6)


def queue_delay_s(packets: int, mtu: int, mbps: float) -> float:
    """Seconds a full queue of `packets` packets of `mtu` bytes adds at `mbps`."""
    return packets * serialization_s(mtu, mbps)


def real_share_packets(full_gbps: float, mtu: int, port_buffer_s: float = PORT_BUFFER_S) -> int:
    """Packets of `mtu` bytes that a real port of `full_gbps` buffers (its share)."""
    return max(1, math.ceil(port_buffer_s * full_gbps * 1e9 / (8 * mtu)))


def delay_cap_packets(mbps: float, mtu: int, budget_s: float = QUEUE_DELAY_BUDGET_S) -> int:
    """Packets of `mtu` bytes that drain within `budget_s` at `mbps`."""
    return math.floor(budget_s * mbps * 1e6 / (8 * mtu))


@dataclass(frozen=True)
class QueueModel:
    """The queue limit of every shaped switch port (`packets` when given, an override, else
    the model of this module's docstring) and of every host's NIC port (`host_packets`)."""

    packets: int | None = None
    host_packets: int = HOST_QUEUE_PACKETS
    floor_packets: int = FLOOR_PACKETS
    delay_budget_s: float = QUEUE_DELAY_BUDGET_S
    port_buffer_s: float = PORT_BUFFER_S
    buffer_model: str = DEFAULT_BUFFER_MODEL
    chip: str = DEFAULT_CHIP
    alpha: float = DT_ALPHA
    congested_ports: int = DT_CONGESTED_PORTS

    def __post_init__(self) -> None:
        allowed = f"a whole number from {MIN_QUEUE_PACKETS} to {MAX_QUEUE_PACKETS}"
        for name in ("packets", "floor_packets", "host_packets"):
            value = getattr(self, name)
            if value is None and name == "packets":
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"queue {name}", value, allowed)
            if not MIN_QUEUE_PACKETS <= value <= MAX_QUEUE_PACKETS:
                raise ConfigError(f"queue {name}", value, allowed)
        if not self.delay_budget_s > 0 or not self.port_buffer_s > 0:
            raise ConfigError(
                "queue budget", (self.delay_budget_s, self.port_buffer_s), "positive seconds"
            )
        if self.buffer_model not in BUFFER_MODELS:
            raise ConfigError("buffer model", self.buffer_model, f"one of {list(BUFFER_MODELS)}")
        if self.chip not in CHIPS:
            raise ConfigError("switch chip", self.chip, f"one of {list(CHIPS)}")
        if not self.alpha > 0:
            raise ConfigError("dynamic threshold alpha", self.alpha, "a positive number")
        if isinstance(self.congested_ports, bool) or not (
            isinstance(self.congested_ports, int) and self.congested_ports >= 1
        ):
            raise ConfigError("congested ports", self.congested_ports, "a whole number >= 1")

    def limit(self, mbps: float, full_gbps: float, mtu: int, nic_gbps: float | None = None) -> int:
        """Queue limit in packets of a port shaped to `mbps` (modelled), `full_gbps` at full
        scale, in a fabric whose NICs are `nic_gbps` at full scale (default: `full_gbps`)."""
        if self.packets is not None:
            return self.packets
        if self.buffer_model == "port-floor":
            modelled = min(
                real_share_packets(full_gbps, mtu, self.port_buffer_s),
                delay_cap_packets(mbps, mtu, self.delay_budget_s),
            )
            return max(self.floor_packets, modelled)
        nic = nic_gbps or full_gbps
        port_bytes = self.port_fraction(full_gbps, nic) * self.lab_chip_bytes(
            mbps, full_gbps, mtu, nic
        )
        packets = math.floor(port_bytes / mtu + 1e-9)  # 1e-9: a raised chip gives F, not F - 1
        return max(MIN_QUEUE_PACKETS, min(MAX_QUEUE_PACKETS, packets))

    def port_fraction(self, full_gbps: float, nic_gbps: float) -> float:
        """The fraction of its chip's buffer a port of `full_gbps` holds under the model (NICs
        of `nic_gbps`): `shared`, the dynamic threshold's alpha / (1 + alpha k) whatever the
        port's rate; `bytes`, the buffer over the chip's ports at the NIC rate (the same bytes
        for every port); `time`, the port's rate over the chip's capacity (the same time)."""
        capacity = CHIPS[self.chip].capacity_gbps
        if self.buffer_model == "shared":
            return self.alpha / (1 + self.alpha * self.congested_ports)
        if self.buffer_model == "bytes":
            return nic_gbps / capacity
        if self.buffer_model == "time":
            return full_gbps / capacity
        raise ConfigError("buffer model", self.buffer_model, "shared, bytes or time here")

    def lab_chip_bytes(self, mbps: float, full_gbps: float, mtu: int, nic_gbps: float) -> float:
        """The chip's buffer in the lab, for a port shaped to `mbps` that is `full_gbps` at full
        scale: the chip's real bytes over the bandwidth scale, raised (for every chip and
        fabric alike) until a port at the NIC rate holds `floor_packets` under the model."""
        bandwidth_scale = full_gbps * 1000.0 / mbps
        scaled = CHIPS[self.chip].buffer_bytes / bandwidth_scale
        floor = self.floor_packets * mtu / self.port_fraction(nic_gbps, nic_gbps)
        return max(scaled, floor)

    def describe(self) -> str:
        """One line for summaries and logs."""
        if self.packets is not None:
            switch = f"fixed {self.packets} packets per switch port (override)"
        elif self.buffer_model == "port-floor":
            switch = (
                f"port-floor: max({self.floor_packets}, min(real share "
                f"{self.port_buffer_s * 1e6:.1f} us of the full-scale rate, "
                f"{self.delay_budget_s * 1e3:g} ms at the emulated rate)) packets per switch port"
            )
        else:
            chip = CHIPS[self.chip]
            share = {
                "shared": f"dynamic threshold alpha {self.alpha:g} with {self.congested_ports} "
                "congested port(s) per chip, every port",
                "bytes": "equal bytes per port (the chip's buffer over its ports at the NIC rate)",
                "time": "equal queueing time per port (the chip's buffer in proportion to rate)",
            }[self.buffer_model]
            switch = (
                f"{self.buffer_model}: {share}, of a {chip.name} chip's "
                f"{chip.buffer_bytes / 1e6:g} MB / bandwidth scale, the chip raised alike until a "
                f"NIC-rate port holds {self.floor_packets} packets"
            )
        return f"{switch}; {self.host_packets} packets per host NIC port"


def mtu_for_rate(mbps: float, budget_s: float = SERIALIZATION_BUDGET_S) -> int:
    """The largest MTU (a multiple of 500, 1500 to 9000) whose per-hop serialization at
    `mbps` stays within `budget_s`."""
    if not mbps > 0:
        raise ConfigError("mbps", mbps, "a positive rate")
    fits = int(budget_s * mbps * 1e6 / 8) // MTU_STEP * MTU_STEP
    return max(MIN_MTU, min(MAX_MTU, fits))


def leaf_queue_lines(limits: Iterable[tuple[str, int]]) -> list[str]:
    """`tc -batch` lines that replace the HTB leaf queue of each (interface, packets) with a
    tail-drop FIFO of that many packets."""
    lines = []
    for interface, packets in limits:
        if not MIN_QUEUE_PACKETS <= packets <= MAX_QUEUE_PACKETS:
            raise ConfigError(f"queue limit of {interface}", packets, "2 to 10000 packets")
        lines.append(
            f"qdisc replace dev {interface} parent {HTB_CLASS} handle {LEAF_HANDLE} "
            f"pfifo limit {packets}"
        )
    return lines


def port_queue_limits(fabric: Fabric, scale: Scale, mtu: int, model: QueueModel) -> dict[str, int]:
    """Queue limit in packets of every shaped interface, both ends of every link
    (`<node>-eth<port>`, the names Mininet gives them): the model's on switch ports,
    `host_packets` on host ports."""
    limits: dict[str, int] = {}
    for lk in fabric.links:
        packets = model.limit(scale.modelled_mbps(fabric, lk.gbps), lk.gbps, mtu, fabric.nic_gbps)
        for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2)):
            limits[f"{node}-eth{port}"] = packets if fabric.is_switch(node) else model.host_packets
    return limits


def queue_summary(fabric: Fabric, scale: Scale, mtu: int, model: QueueModel) -> list[dict]:
    """Per emulated link rate: the switch ports' queue limit, the most a full queue adds, the
    per-hop serialization and how many links have it (what a run records)."""
    groups: dict[tuple[float, int], int] = {}
    for lk in fabric.links:
        mbps = scale.modelled_mbps(fabric, lk.gbps)
        key = (round(mbps, 3), model.limit(mbps, lk.gbps, mtu, fabric.nic_gbps))
        groups[key] = groups.get(key, 0) + 1
    return [
        {
            "mbps": mbps,
            "queue_packets": packets,
            "max_queue_ms": round(queue_delay_s(packets, mtu, mbps) * 1e3, 3),
            "serialization_ms": round(serialization_s(mtu, mbps) * 1e3, 3),
            "links": count,
        }
        for (mbps, packets), count in sorted(groups.items())
    ]


def fabric_mtu(fabric: Fabric, scale: Scale, budget_s: float = SERIALIZATION_BUDGET_S) -> int:
    """The MTU rule for a whole fabric: `mtu_for_rate` of its slowest emulated link."""
    rates = (scale.modelled_mbps(fabric, lk.gbps) for lk in fabric.links)
    return mtu_for_rate(min(rates), budget_s)
