"""The fabric's sections of `summary.json` (`RunSummary.fabric_stats`, `link_util`): switch
ports' utilization and the hottest ports, every link by direction, and what crossed the fabric
against what the servers say they sent (pure). Written as the runner always wrote them:
`FabricStats.utilization` and `FabricStats.directed` are held nested and written flat (the
utilization keys lead the `fabric_stats` object, the per-direction keys follow, in runs since
both directions were counted). Computed by `zcube_lab.emulator.results.fabric.linkstats`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zcube_lab.emulator.results.run.sections import flat as _flat
from zcube_lab.emulator.results.run.sections import from_flat as _from_flat


@dataclass(frozen=True)
class HotPort:
    """One of the busiest switch ports."""

    switch: str
    port: int
    util: float


@dataclass(frozen=True)
class Utilization:
    """Max and mean transmit utilization over all switch ports and over switch-to-switch
    (trunk) ports, and the hottest ports."""

    link_util_max: float
    link_util_mean: float
    trunk_util_max: float
    trunk_util_mean: float
    hottest_ports: tuple[HotPort, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**_flat(self), "hottest_ports": [_flat(p) for p in self.hottest_ports]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Utilization:
        ports = tuple(HotPort(**p) for p in data.get("hottest_ports") or ())
        return _from_flat(cls, data, hottest_ports=ports)


@dataclass(frozen=True)
class LinkLoad:
    """One direction of one link: mean utilization over the run window and the peak over
    windows of about one second (None when the counter had too few samples)."""

    mean: float
    peak: float | None


@dataclass(frozen=True)
class DirectedUtilization:
    """Every link in both directions, host NIC links included: the busiest (highest mean), the
    one with the highest peak, and the busiest host-to-switch and switch-to-host directions."""

    busiest_link: str | None
    busiest_link_util_mean: float | None
    busiest_link_util_peak: float | None
    peak_link: str | None
    peak_link_util: float | None
    host_uplink_util_max: float | None  # host -> switch, mean
    host_downlink_util_max: float | None  # switch -> host, mean
    directed_links: int
    util_peak_window_s: float | None


@dataclass(frozen=True)
class FabricStats:
    """What crossed the fabric, against what the servers say they sent."""

    utilization: Utilization
    drops: float
    host_ingress_bytes: float
    server_reported_bytes: float
    overhead_ratio: float | None
    switches: int
    switching_capacity_gbps: float
    directed: DirectedUtilization | None = None  # runs since both directions were counted

    @property
    def switching_capacity_tbps(self) -> float:
        """The emulated fabric's switching capacity in Tb/s (the report's unit)."""
        return self.switching_capacity_gbps / 1000

    def to_dict(self) -> dict[str, Any]:
        rest = {k: v for k, v in _flat(self).items() if k not in ("utilization", "directed")}
        out = {**self.utilization.to_dict(), **rest}
        if self.directed is not None:
            out.update(_flat(self.directed))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FabricStats:
        directed = _from_flat(DirectedUtilization, data) if "directed_links" in data else None
        return _from_flat(cls, data, utilization=Utilization.from_dict(data), directed=directed)
