"""Scale: how the lab shrinks a full-size fabric's bandwidth to what one machine can carry.

Times stay real and bytes shrink: a full-scale NIC is emulated at `Scale.nic_mbps`, and every
link by the same factor, so the ratios between links (and so the bottlenecks) are kept.

Time dilation (docs/DOMAIN.md §4): with `dilation` k every link is shaped at its rate divided
by k while the payloads keep their size (`bandwidth_scale` does not depend on k), so every
transfer lasts k times longer in wall time. Two rates follow: `link_mbps`, what a link is
shaped at (wall time: the shaping, utilization, ideal transfer times), and `modelled_mbps`,
the rate of the modelled world (k = 1), which sizes what is counted in packets and bytes (the
queue limits and the MTU rule), so those are the same at every k.
"""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.core.clock import Clock, check_fine_dilation
from zcube_lab.core.fabric.description import Fabric


@dataclass(frozen=True)
class Scale:
    """Times stay real, bytes shrink: a full-scale NIC of `fabric.nic_gbps` is emulated at
    `nic_mbps`, and every link by the same factor (docs/DOMAIN.md §4); with `dilation` k, every
    shaped rate is divided by k as well (the bytes are not)."""

    nic_mbps: float = 100.0
    dilation: float = 1.0

    def __post_init__(self) -> None:
        check_fine_dilation(self.dilation)

    @property
    def clock(self) -> Clock:
        """Modelled and wall time at this scale's dilation."""
        return Clock(self.dilation)

    def bandwidth_scale(self, fabric: Fabric) -> float:
        """Real NIC rate over emulated NIC rate (e.g. 400 Gb/s / 100 Mb/s = 4000), whatever
        the dilation: payload bytes are divided by this."""
        return fabric.nic_gbps * 1000.0 / self.nic_mbps

    def modelled_mbps(self, fabric: Fabric, gbps: float) -> float:
        """Rate of a link whose full-scale rate is `gbps`, undilated (the modelled world's)."""
        return gbps * 1000.0 / self.bandwidth_scale(fabric)

    def link_mbps(self, fabric: Fabric, gbps: float) -> float:
        """Emulated (shaped) rate of a link whose full-scale rate is `gbps`: the modelled rate
        divided by the dilation."""
        return self.clock.wall_rate(self.modelled_mbps(fabric, gbps))

    @property
    def shaped_nic_mbps(self) -> float:
        """The rate a whole NIC is shaped at (what the datapath must carry per NIC)."""
        return self.clock.wall_rate(self.nic_mbps)
