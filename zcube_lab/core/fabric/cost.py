"""The full-scale cost table: ROFT, Clos and ZCube (or ROFT in planes against one plane) priced
for the same cluster, side by side, with each metric's difference in %.

`compare` and `compare_planes` price every fabric with `zcube_lab.core.fabric.pricing` (the model
and its assumptions are described there) and return plain data the CLI prints as a table or JSON.
The metrics compared are `COMPARED_METRICS`, as `FabricCost` attribute names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.pricing import (
    REFERENCE_END_GBPS,
    CostInputs,
    FabricCost,
    roft_cost,
    roft_three_tier_max_gpus,
    roft_two_tier_max_gpus,
    zcube_cost,
    zcube_max_gpus,
)

# The metrics compared in % against ROFT, as (key, label); keys are FabricCost attributes.
COMPARED_METRICS: tuple[tuple[str, str], ...] = (
    ("switches", "switches"),
    ("link_count", "links"),
    ("switch_ports_used", "switch ports used"),
    ("switching_tbps", "switching capacity (Tb/s)"),
    ("transceiver_ends", "transceiver ends"),
    ("transceiver_ends_400g", "transceiver ends (400G-eq)"),
    ("capex_switches", "CapEx switches"),
    ("capex_optics", "CapEx optics"),
    ("capex_total", "CapEx total"),
)


@dataclass(frozen=True)
class CostComparison:
    """ROFT, Clos and ZCube priced for the same inputs, with size limits of the radix."""

    inputs: CostInputs
    roft: FabricCost
    clos: FabricCost
    zcube: FabricCost

    @property
    def fabrics(self) -> tuple[FabricCost, ...]:
        """The three fabrics, ROFT first."""
        return (self.roft, self.clos, self.zcube)

    def diff_pct(self, fabric: FabricCost, metric: str) -> float | None:
        """`fabric`'s `metric` relative to ROFT's, in %; None when either is missing or zero."""
        base = getattr(self.roft, metric)
        value = getattr(fabric, metric)
        if base is None or value is None or base == 0:
            return None
        return (value - base) / base * 100

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON output."""
        i = self.inputs
        return {
            "inputs": _inputs_dict(i),
            "limits": {
                "roft_two_tier_max_gpus": roft_two_tier_max_gpus(i),
                "roft_three_tier_max_gpus": roft_three_tier_max_gpus(i),
                "zcube_max_gpus": zcube_max_gpus(i),
            },
            "fabrics": {f.fabric: f.to_dict() for f in self.fabrics},
            "diff_vs_roft_pct": {
                f.fabric: {key: self.diff_pct(f, key) for key, _ in COMPARED_METRICS}
                for f in (self.clos, self.zcube)
            },
        }


@dataclass(frozen=True)
class PlaneComparison:
    """ROFT in `inputs.planes` planes against ROFT in one, for the same GPUs, NICs and ASIC.
    `one_plane` is None when one plane cannot reach the size; `one_plane_error` says why."""

    inputs: CostInputs
    planes: FabricCost
    one_plane: FabricCost | None
    one_plane_error: str | None = None

    @property
    def fabrics(self) -> tuple[FabricCost | None, FabricCost]:
        """One plane first, then the planes."""
        return (self.one_plane, self.planes)

    def diff_pct(self, metric: str) -> float | None:
        """The planes' `metric` relative to one plane's, in %; None when either is missing or
        zero."""
        if self.one_plane is None:
            return None
        base = getattr(self.one_plane, metric)
        value = getattr(self.planes, metric)
        if base is None or value is None or base == 0:
            return None
        return (value - base) / base * 100

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON output."""
        one = replace(self.inputs, planes=1)
        return {
            "inputs": _inputs_dict(self.inputs),
            "limits": {
                "one_plane_two_tier_max_gpus": roft_two_tier_max_gpus(one),
                "one_plane_three_tier_max_gpus": roft_three_tier_max_gpus(one),
                "planes_two_tier_max_gpus": roft_two_tier_max_gpus(self.inputs),
                "planes_three_tier_max_gpus": roft_three_tier_max_gpus(self.inputs),
            },
            "fabrics": {
                "roft": None if self.one_plane is None else self.one_plane.to_dict(),
                "roft_planes": self.planes.to_dict(),
            },
            "one_plane_error": self.one_plane_error,
            "diff_vs_one_plane_pct": {key: self.diff_pct(key) for key, _ in COMPARED_METRICS},
        }


def _inputs_dict(i: CostInputs) -> dict[str, object]:
    return {
        "gpus": i.gpus,
        "nic_gbps": i.nic_gbps,
        "switch_ports": i.switch_ports,
        "port_gbps": i.port_gbps,
        **({"planes": i.planes} if i.planes > 1 else {}),
        "switch_price": i.switch_price,
        "optic_price": i.optic_price,
        "optic_price_unit": f"per transceiver end at {REFERENCE_END_GBPS}G, "
        "other rates in proportion",
    }


def compare(inputs: CostInputs) -> CostComparison:
    """Price ROFT, Clos and ZCube for the same cluster (ROFT and Clos in `inputs.planes`
    planes; ZCube's two ports are its own split)."""
    return CostComparison(
        inputs=inputs,
        roft=roft_cost(inputs, "roft"),
        clos=roft_cost(inputs, "clos"),
        zcube=zcube_cost(inputs),
    )


def compare_planes(inputs: CostInputs) -> PlaneComparison:
    """Price ROFT in `inputs.planes` planes and in one plane for the same cluster; one plane may
    be out of reach (more than 3 tiers), the planes may not."""
    planes = roft_cost(inputs)
    try:
        one = roft_cost(replace(inputs, planes=1))
    except ConfigError as exc:
        return PlaneComparison(inputs, planes, None, str(exc))
    return PlaneComparison(inputs, planes, one)
