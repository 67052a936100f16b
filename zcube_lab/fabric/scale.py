"""Scale: how the lab shrinks a full-size fabric's bandwidth to what one machine can carry.

Times stay real and bytes shrink: a full-scale NIC is emulated at `Scale.nic_mbps`, and every
link by the same factor, so the ratios between links (and so the bottlenecks) are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.fabric.description import Fabric


@dataclass(frozen=True)
class Scale:
    """Times stay real, bytes shrink: a full-scale NIC of `fabric.nic_gbps` is emulated at
    `nic_mbps`, and every link by the same factor (docs/DOMAIN.md §4)."""

    nic_mbps: float = 100.0

    def bandwidth_scale(self, fabric: Fabric) -> float:
        """Real NIC rate over emulated NIC rate (e.g. 400 Gb/s / 100 Mb/s = 4000)."""
        return fabric.nic_gbps * 1000.0 / self.nic_mbps

    def link_mbps(self, fabric: Fabric, gbps: float) -> float:
        """Emulated rate of a link whose full-scale rate is `gbps`."""
        return gbps * 1000.0 / self.bandwidth_scale(fabric)
