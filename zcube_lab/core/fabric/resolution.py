"""The lab's time resolution: the smallest queue it can hold in modelled time (issue 33 item 6).

A shaped port cannot queue less than one frame, and the default switch queue is
`FLOOR_PACKETS` frames. In modelled time a frame takes `mtu * 8 / mbps` seconds at the
modelled (undilated) port rate, whatever the time dilation k: with k every link is shaped at
its rate / k and every reported time is divided by k, so the modelled figure is the same at
every k and only the wall time it takes grows k-fold. A real chip's port drains its share of
the shared buffer (`queues.PORT_BUFFER_S`, or any chip's bytes over its capacity) in tens of
µs of line rate. Pure arithmetic: nothing here touches a lab.
"""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.core.clock import Clock
from zcube_lab.core.fabric.queues import CHIPS, FLOOR_PACKETS, serialization_s

# The port rates of the lab's default scale: a 100 Mb/s NIC stands for 400 Gb/s; a ZCube NIC
# is two half-rate ports of 50 Mb/s.
NIC_MBPS = 100.0
ZCUBE_PORT_MBPS = 50.0
PORT_RATES_MBPS = (NIC_MBPS, ZCUBE_PORT_MBPS)
MTUS = (1500, 9000)
DILATIONS = (1.0, 2.0, 4.0, 8.0, 16.0)

# Tomahawk 2 (docs/DOMAIN.md §6, "Switch buffers"): 42 MB shared by 6.4 Tb/s.
TOMAHAWK2_BUFFER_BYTES = 42e6
TOMAHAWK2_CAPACITY_GBPS = 6_400.0


def chip_share_s(buffer_bytes: float, capacity_gbps: float) -> float:
    """Seconds of line rate a port's fair share of a shared buffer holds: the buffer over the
    chip's whole capacity (the same for every port speed)."""
    if buffer_bytes <= 0 or capacity_gbps <= 0:
        raise ValueError("buffer and capacity must be positive")
    return buffer_bytes * 8 / (capacity_gbps * 1e9)


def real_shares_s() -> dict[str, float]:
    """Per-port buffer share in seconds for the Tomahawk-class chips the project cites."""
    out = {"Tomahawk 2 (42 MB, 6.4 Tb/s)": chip_share_s(42e6, TOMAHAWK2_CAPACITY_GBPS)}
    for chip in CHIPS.values():
        label = f"{chip.name} ({chip.buffer_bytes / 1e6:.0f} MB, {chip.capacity_gbps / 1e3:g} Tb/s)"
        out[label] = chip_share_s(chip.buffer_bytes, chip.capacity_gbps)
    return out


@dataclass(frozen=True)
class Resolution:
    """The smallest queues at one port rate, MTU and dilation, in modelled and wall seconds."""

    mbps: float
    mtu: int
    dilation: float
    frame_s: float  # one frame's serialization, modelled time
    queue_s: float  # the default switch queue (FLOOR_PACKETS frames), modelled time
    frame_wall_s: float
    queue_wall_s: float

    def times_real(self, share_s: float) -> float:
        """How many real per-port shares one frame of the lab spans."""
        return self.frame_s / share_s


def resolution(mbps: float, mtu: int, dilation: float = 1.0,
               packets: int = FLOOR_PACKETS) -> Resolution:  # fmt: skip
    """One frame's and a `packets`-frame queue's drain time at modelled rate `mbps`."""
    if mbps <= 0 or mtu <= 0 or packets <= 0 or dilation < 1:
        raise ValueError("rate, MTU and packets must be positive, dilation at least 1")
    frame = serialization_s(mtu, mbps)
    clock = Clock(dilation)
    return Resolution(
        mbps=mbps,
        mtu=mtu,
        dilation=dilation,
        frame_s=frame,
        queue_s=packets * frame,
        frame_wall_s=clock.wall(frame),
        queue_wall_s=clock.wall(packets * frame),
    )


def table(
    rates: tuple[float, ...] = PORT_RATES_MBPS,
    mtus: tuple[int, ...] = MTUS,
    dilations: tuple[float, ...] = DILATIONS,
) -> list[Resolution]:
    """Every combination, rate-major."""
    return [resolution(r, m, k) for r in rates for m in mtus for k in dilations]
