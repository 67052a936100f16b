"""The fine time scale: a resolution chosen as the modelled duration of one frame, and what
follows from it (pure arithmetic; issue 45 item 1).

The lab shrinks bytes by the bandwidth scale S and stretches time by the dilation k
(docs/DOMAIN.md §4). One frame of `mtu` bytes on a port of full-scale rate R lasts, in modelled
time, `f = mtu * 8 * S / R`: S alone sets the resolution, k only how long the wall clock takes.
So a resolution asked for as a frame time f on the slowest host port of the fabrics compared
fixes S = R_slowest * f / (mtu * 8); the modelled NIC rate follows (`nic_gbps / S`), and k is
the smallest whole factor that brings the shaped NIC rate (modelled / k) within the wall budget
(`wall_nic_mbps`, at most the datapath's measured ceiling). A busy port then carries
`1 / (f * k)` frames per wall second whatever the MTU: the datapath's per-packet cost, not its
bytes, is what k buys room for.

Thresholds and queues are given in *real* bytes (a chip's per-port buffer share, or the IETF
draft's PFC thresholds of 10 KB to 1 MB, draft-calabria-bmwg-ai-fabric-inference-bench-05
§8.2) and become lab bytes by S. A lab queue is whole frames, at least `MIN_FRAMES` (the shaped
port's queue cannot hold less), so a threshold below that at the chosen scale is refused with the
scale that would represent it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from zcube_lab.core.clock import MAX_FINE_DILATION, Clock, check_fine_dilation
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.queues import CHIPS

DEFAULT_MTU = 1500
# The shaped rate of a whole NIC on the wall clock: the default lab's 100 Mb/s, which every
# fabric's datapath carries on this machine (docs/BENCHMARKS.md, datapath).
DEFAULT_WALL_NIC_MBPS = 100.0
# The rungs of the convergence ladder (issue 45 item 4b), frame times in modelled µs.
LADDER_US = (720.0, 70.0, 7.0, 2.0)
PRESETS_US = {"coarse": 720.0, "medium": 70.0, "fine": 7.0, "finest": 2.0}
# A shaped port's queue holds whole frames, and the queue model at least two
# (`queues.MIN_QUEUE_PACKETS`): the smallest threshold the lab represents.
MIN_FRAMES = 2
# Thresholds the draft's §8.2 sweeps (real bytes).
DRAFT_THRESHOLDS_BYTES = (10_000, 100_000, 1_000_000)


@dataclass(frozen=True)
class TimeScale:
    """One resolution: the frame it gives and the byte scale, NIC rate, MTU and k it takes."""

    frame_s: float  # one MTU frame on the slowest host port, modelled seconds
    mtu: int
    bandwidth_scale: float  # real bytes per lab byte (S)
    nic_gbps: float  # the full-scale NIC rate
    slowest_port_gbps: float  # the slowest host port's full-scale rate
    nic_mbps: float  # the modelled (undilated) NIC rate in the lab
    dilation: float  # k: modelled seconds last k wall seconds

    @property
    def clock(self) -> Clock:
        return Clock(self.dilation)

    @property
    def wall_nic_mbps(self) -> float:
        """The rate a whole NIC is shaped at on the wall clock."""
        return self.clock.wall_rate(self.nic_mbps)

    def at_dilation(self, dilation: float) -> TimeScale:
        """The same resolution at another k (the bytes, rates and frame unchanged; only the
        wall pace): refused below this scale's own k, which keeps every port within its wall
        budget, or outside the fine clock's range."""
        check_fine_dilation(dilation)
        if dilation < self.dilation:
            raise ConfigError(
                "dilation",
                dilation,
                f"at least {self.dilation:g}, the k that keeps a NIC within its wall budget "
                f"({self.wall_nic_mbps:g} Mb/s) at this resolution",
            )
        return replace(self, dilation=float(dilation))

    def frame_us_at(self, port_gbps: float) -> float:
        """Modelled µs of one frame on a port of full-scale rate `port_gbps`."""
        return self.mtu * 8 * self.bandwidth_scale / (port_gbps * 1e9) * 1e6

    def wall_frames_per_s(self) -> float:
        """Frames per wall second a busy slowest port carries: 1 / (f k)."""
        return 1.0 / self.clock.wall(self.frame_s)

    def lab_bytes(self, real_bytes: float) -> float:
        """Lab bytes standing for `real_bytes`."""
        return real_bytes / self.bandwidth_scale

    def threshold_frames(self, real_bytes: float, what: str = "threshold") -> int:
        """Whole frames of the lab's MTU that hold `real_bytes` (rounded down, as a queue
        limit: the lab never holds more than the real port). Refused (ConfigError) when fewer
        than `MIN_FRAMES`, naming the scale that would represent it."""
        if real_bytes <= 0:
            raise ConfigError(what, real_bytes, "a positive number of bytes")
        frames = math.floor(self.lab_bytes(real_bytes) / self.mtu + 1e-9)
        if frames < MIN_FRAMES:
            need = real_bytes / (MIN_FRAMES * self.mtu)
            raise ConfigError(
                what,
                f"{real_bytes:g} B",
                f"at least {MIN_FRAMES} frames of {self.mtu} B at this scale "
                f"({MIN_FRAMES * self.mtu * self.bandwidth_scale:,.0f} real bytes at S = "
                f"{self.bandwidth_scale:.4g}); a byte scale of at most {need:.4g} (a frame of "
                f"{frame_s_for_scale(need, self.mtu, self.slowest_port_gbps) * 1e6:.3g} µs) "
                f"represents it",
            )
        return frames

    def describe(self) -> dict[str, float | int]:
        """What every result records of the resolution it ran at."""
        return {
            "frame_us": round(self.frame_s * 1e6, 4),
            "mtu": self.mtu,
            "bandwidth_scale": round(self.bandwidth_scale, 4),
            "nic_mbps": round(self.nic_mbps, 3),
            "dilation": self.dilation,
            "wall_nic_mbps": round(self.wall_nic_mbps, 3),
            "slowest_port_gbps": self.slowest_port_gbps,
        }


def frame_s_for_scale(scale: float, mtu: int, port_gbps: float) -> float:
    """Modelled seconds of one `mtu` frame on a port of `port_gbps` at byte scale `scale`."""
    return mtu * 8 * scale / (port_gbps * 1e9)


def parse_frame_us(text: str) -> float:
    """A resolution as the user gives it: a preset name or a frame time ("7us", "70", "0.5ms")."""
    t = text.strip().lower()
    if t in PRESETS_US:
        return PRESETS_US[t]
    factor = 1.0
    for suffix, f in (("us", 1.0), ("µs", 1.0), ("ms", 1000.0)):
        if t.endswith(suffix):
            t, factor = t[: -len(suffix)], f
            break
    try:
        value = float(t) * factor
    except ValueError:
        raise ConfigError(
            "resolution", text, f"a frame time such as 7us or one of {list(PRESETS_US)}"
        ) from None
    if not value > 0:
        raise ConfigError("resolution", text, "a positive frame time")
    return value


def derive(
    frame_us: float,
    nic_gbps: float,
    slowest_port_gbps: float,
    mtu: int = DEFAULT_MTU,
    wall_nic_mbps: float = DEFAULT_WALL_NIC_MBPS,
    ceiling_mbps: float | None = None,
    max_dilation: float = MAX_FINE_DILATION,
) -> TimeScale:
    """The time scale whose frame on the slowest host port lasts `frame_us` modelled µs.

    k is the smallest whole number bringing the shaped NIC rate within `wall_nic_mbps` (and the
    datapath's `ceiling_mbps` when given). Refused when that k exceeds `max_dilation`, naming the
    finest frame this machine can carry, or when the frame is shorter than the real port's own."""
    if not frame_us > 0:
        raise ConfigError("resolution", frame_us, "a positive frame time in µs")
    if not (nic_gbps > 0 and slowest_port_gbps > 0 and mtu > 0 and wall_nic_mbps > 0):
        raise ConfigError("resolution", (nic_gbps, slowest_port_gbps, mtu), "positive rates")
    budget = wall_nic_mbps if ceiling_mbps is None else min(wall_nic_mbps, ceiling_mbps)
    frame_s = frame_us * 1e-6
    scale = slowest_port_gbps * 1e9 * frame_s / (mtu * 8)
    real_frame_us = mtu * 8 / (slowest_port_gbps * 1e9) * 1e6
    if scale < 1.0:
        raise ConfigError(
            "resolution",
            f"{frame_us:g} µs",
            f"at least the real port's own frame, {real_frame_us:.3g} µs ({mtu} B at "
            f"{slowest_port_gbps:g} Gb/s): the lab cannot be finer than the fabric",
        )
    nic_mbps = nic_gbps * 1e3 / scale
    k = max(1.0, float(math.ceil(nic_mbps / budget - 1e-9)))
    if k > max_dilation:
        finest_scale = nic_gbps * 1e3 / (max_dilation * budget)
        finest = frame_s_for_scale(max(finest_scale, 1.0), mtu, slowest_port_gbps)
        raise ConfigError(
            "resolution",
            f"{frame_us:g} µs",
            f"at least {finest * 1e6:.3g} µs on this machine: a {frame_us:g} µs frame needs a "
            f"dilation of {k:g} to keep a NIC within {budget:g} Mb/s of wall rate, and "
            f"{max_dilation:g} is the most the lab stretches time",
        )
    return TimeScale(
        frame_s=frame_s,
        mtu=mtu,
        bandwidth_scale=scale,
        nic_gbps=nic_gbps,
        slowest_port_gbps=slowest_port_gbps,
        nic_mbps=nic_mbps,
        dilation=k,
    )


def chip_port_share_bytes(chip: str, port_gbps: float) -> float:
    """Real bytes of a chip's shared buffer that a port of `port_gbps` holds as its fair share:
    the buffer in proportion to the port's part of the chip's capacity."""
    if chip not in CHIPS:
        raise ConfigError("chip", chip, f"one of {list(CHIPS)}")
    c = CHIPS[chip]
    return c.buffer_bytes * port_gbps / c.capacity_gbps


def drain_us(real_bytes: float, port_gbps: float) -> float:
    """Modelled µs a port of `port_gbps` takes to drain `real_bytes`."""
    return real_bytes * 8 / (port_gbps * 1e9) * 1e6


def own(
    nic_gbps: float, slowest_port_gbps: float, nic_mbps: float, mtu: int, dilation: float
) -> TimeScale:
    """The time scale a live run ran at (its NIC rate, MTU and dilation), for a replay at the
    run's own resolution."""
    scale = nic_gbps * 1e3 / nic_mbps
    return TimeScale(
        frame_s=frame_s_for_scale(scale, mtu, slowest_port_gbps),
        mtu=mtu,
        bandwidth_scale=scale,
        nic_gbps=nic_gbps,
        slowest_port_gbps=slowest_port_gbps,
        nic_mbps=nic_mbps,
        dilation=dilation,
    )
