"""Full-scale cost model: switches, links, transceivers and CapEx of ROFT, Clos and ZCube.

Pure arithmetic on counts, no topology objects, so it prices clusters far larger than Mininet can
hold. Every fabric is built from the same switch ASIC, `switch_ports` x `port_gbps`:

- ROFT (rail-optimized fat tree) and Clos (leaf-spine, a server's GPUs under one leaf) run the
  ASIC at `port_gbps`; a NIC of `nic_gbps` takes `nic_gbps / port_gbps` switch ports. Both are
  non-blocking (1:1) with 2 tiers, or a 3-tier fat tree where 2 tiers cannot reach the size.
  At 1:1 Clos has exactly ROFT's counts: the two differ only in which leaf a NIC plugs into.
- ZCube breaks the same ASIC out at half the NIC rate, b = nic_gbps / 2 (64x400G becomes
  128x200G). Each NIC has two b ports, one to an A switch and one to a B switch; A and B form a
  complete bipartite graph with m parallel links per pair. With n switches per group,
  N = m * n * n GPUs and each switch uses n*m ports down and n*m across.

Role names: ROFT/Clos tiers are `leaf`, `spine` (2 tiers) or `leaf`, `aggregation`, `core`
(3 tiers); ZCube groups are `A` and `B`. Link roles name both ends (`nic-leaf`, `leaf-spine`, ...).

Prices: `switch_price` is per switch (the same ASIC everywhere, so one price fits all fabrics);
`optic_price` is per transceiver end at 400G, and an end of another rate costs in proportion
(a 200G end is half). Every link has two ends, NIC-side ends included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from zcube_lab.errors import ConfigError

# Transceiver ends are reported as equivalents of this rate (the DOMAIN.md figures use 400G).
REFERENCE_END_GBPS = 400

FABRICS = ("roft", "clos", "zcube")


@dataclass(frozen=True)
class CostInputs:
    """The cluster to price: GPU count, NIC rate, the switch ASIC and optional unit prices."""

    gpus: int
    nic_gbps: int
    switch_ports: int
    port_gbps: int
    switch_price: float | None = None
    optic_price: float | None = None

    def __post_init__(self) -> None:
        for name in ("gpus", "nic_gbps", "switch_ports", "port_gbps"):
            value = getattr(self, name)
            # bool is an int subclass; True GPUs is a bug, not a size.
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(name, value, "a positive whole number")
        if self.switch_ports < 2 or self.switch_ports % 2:
            raise ConfigError(
                "switch_ports",
                self.switch_ports,
                "an even number >= 2 (a non-blocking leaf uses half its ports down, half up)",
            )
        if self.nic_gbps % self.port_gbps:
            lower = max(self.nic_gbps // self.port_gbps, 1) * self.port_gbps
            raise ConfigError(
                "nic_gbps",
                self.nic_gbps,
                f"a multiple of port_gbps={self.port_gbps} (e.g. {lower}): a NIC takes whole "
                "switch ports; a NIC slower than one switch port is not modeled",
            )
        ports_per_nic = self.nic_gbps // self.port_gbps
        if self.switch_ports % ports_per_nic:
            raise ConfigError(
                "nic_gbps",
                self.nic_gbps,
                f"a rate whose {ports_per_nic} ports per NIC divide switch_ports="
                f"{self.switch_ports}, so ZCube can break the ASIC into an even number of "
                f"{self.nic_gbps // 2}G ports",
            )
        if self.nic_gbps % 2:
            raise ConfigError(
                "nic_gbps", self.nic_gbps, "an even rate (ZCube splits it into two equal ports)"
            )
        for name in ("switch_price", "optic_price"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(name, value, "a number >= 0, or None for no price")
            if not math.isfinite(value) or value < 0:
                raise ConfigError(name, value, "a finite number >= 0, or None for no price")

    @property
    def ports_per_nic(self) -> int:
        """Switch ports of `port_gbps` one NIC takes in ROFT and Clos."""
        return self.nic_gbps // self.port_gbps

    @property
    def asic_gbps(self) -> int:
        """Capacity of one switch chip: ports x rate."""
        return self.switch_ports * self.port_gbps


@dataclass(frozen=True)
class SwitchGroup:
    """Switches of one role (a tier or a ZCube group)."""

    role: str
    count: int


@dataclass(frozen=True)
class LinkGroup:
    """Links of one role, all at the same rate."""

    role: str
    count: int
    gbps: int


@dataclass(frozen=True)
class FabricCost:
    """The bill of materials of one fabric at full size, with derived totals."""

    fabric: str
    tiers: int
    diameter_hops: int
    switch_port_gbps: int
    ports_per_switch: int
    switch_groups: tuple[SwitchGroup, ...]
    links: tuple[LinkGroup, ...]
    switch_ports_used: int
    switch_price: float | None = None
    optic_price: float | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def switches(self) -> int:
        """Total switches."""
        return sum(g.count for g in self.switch_groups)

    @property
    def switch_ports_installed(self) -> int:
        """Ports on all switches bought, used or idle."""
        return self.switches * self.ports_per_switch

    @property
    def link_count(self) -> int:
        """Total cables, NIC links included."""
        return sum(g.count for g in self.links)

    @property
    def switching_gbps(self) -> int:
        """Installed switching capacity: every switch's ports times their rate."""
        return self.switch_ports_installed * self.switch_port_gbps

    @property
    def switching_tbps(self) -> float:
        """Installed switching capacity in Tb/s."""
        return self.switching_gbps / 1000

    @property
    def transceiver_ends(self) -> int:
        """Transceiver ends: two per link, whatever the rate."""
        return 2 * self.link_count

    @property
    def transceiver_ends_400g(self) -> float:
        """Transceiver ends weighted by rate, as 400G-equivalents."""
        return sum(2 * g.count * g.gbps for g in self.links) / REFERENCE_END_GBPS

    @property
    def capex_switches(self) -> float | None:
        """Switch CapEx, or None without a switch price."""
        return None if self.switch_price is None else self.switches * self.switch_price

    @property
    def capex_optics(self) -> float | None:
        """Transceiver CapEx, or None without an optic price."""
        if self.optic_price is None:
            return None
        return self.transceiver_ends_400g * self.optic_price

    @property
    def capex_total(self) -> float | None:
        """Switches plus optics over the prices given, or None when no price is given."""
        parts = [p for p in (self.capex_switches, self.capex_optics) if p is not None]
        return sum(parts) if parts else None

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON output, derived totals included."""
        return {
            "fabric": self.fabric,
            "tiers": self.tiers,
            "diameter_hops": self.diameter_hops,
            "switch_port_gbps": self.switch_port_gbps,
            "ports_per_switch": self.ports_per_switch,
            "switches": self.switches,
            "switches_by_role": {g.role: g.count for g in self.switch_groups},
            "links": self.link_count,
            "links_by_role": {g.role: {"count": g.count, "gbps": g.gbps} for g in self.links},
            "switch_ports_used": self.switch_ports_used,
            "switch_ports_installed": self.switch_ports_installed,
            "switching_tbps": self.switching_tbps,
            "transceiver_ends": self.transceiver_ends,
            "transceiver_ends_400g": self.transceiver_ends_400g,
            "capex_switches": self.capex_switches,
            "capex_optics": self.capex_optics,
            "capex_total": self.capex_total,
            "notes": list(self.notes),
        }


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
            "inputs": {
                "gpus": i.gpus,
                "nic_gbps": i.nic_gbps,
                "switch_ports": i.switch_ports,
                "port_gbps": i.port_gbps,
                "switch_price": i.switch_price,
                "optic_price": i.optic_price,
                "optic_price_unit": f"per transceiver end at {REFERENCE_END_GBPS}G, "
                "other rates in proportion",
            },
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


def zcube_port_gbps(inputs: CostInputs) -> int:
    """ZCube's switch port rate: half the NIC rate, as each NIC has two ports."""
    return inputs.nic_gbps // 2


def zcube_ports_per_switch(inputs: CostInputs) -> int:
    """ZCube's radix: the same ASIC capacity broken out at the ZCube port rate."""
    return inputs.asic_gbps // zcube_port_gbps(inputs)


def roft_two_tier_max_gpus(inputs: CostInputs) -> int:
    """Largest non-blocking 2-tier ROFT/Clos: P leaves of P/2 down ports, P*P/2 NIC ports."""
    return inputs.switch_ports**2 // 2 // inputs.ports_per_nic


def roft_three_tier_max_gpus(inputs: CostInputs) -> int:
    """Largest non-blocking 3-tier fat tree: P*P*P/4 NIC ports."""
    return inputs.switch_ports**3 // 4 // inputs.ports_per_nic


def zcube_max_gpus(inputs: CostInputs) -> int:
    """Largest ZCube for the radix r: n = r/2 switches per group, m = 1, n*n GPUs."""
    return (zcube_ports_per_switch(inputs) // 2) ** 2


def roft_cost(inputs: CostInputs, fabric: str = "roft") -> FabricCost:
    """ROFT (or Clos, same counts at 1:1) with 2 tiers, or 3 where 2 cannot reach the size."""
    p = inputs.switch_ports
    r = inputs.port_gbps
    nic_ports = inputs.gpus * inputs.ports_per_nic
    if inputs.gpus > roft_three_tier_max_gpus(inputs):
        raise ConfigError(
            "gpus",
            inputs.gpus,
            f"at most {roft_three_tier_max_gpus(inputs)} for a 3-tier fat tree of "
            f"{p}x{r}G switches; use more switch ports",
        )
    notes: list[str] = []
    if fabric == "clos":
        notes.append(
            "same counts as ROFT at 1:1: a server's GPUs share one leaf instead of one leaf "
            "per rail"
        )
    # Non-blocking: each leaf (and aggregation switch) has as many ports up as down.
    half = p // 2
    leaves = math.ceil(nic_ports / half)
    if nic_ports % half:
        notes.append(
            f"{nic_ports} NIC ports do not fill whole leaves of {half} down ports; "
            f"rounded up to {leaves} leaves"
        )
    links = [LinkGroup("nic-leaf", nic_ports, r)]
    if inputs.gpus <= roft_two_tier_max_gpus(inputs):
        spines = math.ceil(nic_ports / p)
        if nic_ports % p:
            notes.append(f"{nic_ports} uplinks do not fill whole spines; rounded up to {spines}")
        groups = (SwitchGroup("leaf", leaves), SwitchGroup("spine", spines))
        links.append(LinkGroup("leaf-spine", nic_ports, r))
        tiers, diameter = 2, 3
    else:
        aggregation = leaves
        core = math.ceil(nic_ports / p)
        if nic_ports % p:
            notes.append(f"{nic_ports} core links do not fill whole core switches; rounded up")
        notes.append(
            f"{inputs.gpus} GPUs exceed the 2-tier maximum of {roft_two_tier_max_gpus(inputs)} "
            f"for {p}-port switches: 3 tiers"
        )
        groups = (
            SwitchGroup("leaf", leaves),
            SwitchGroup("aggregation", aggregation),
            SwitchGroup("core", core),
        )
        links.append(LinkGroup("leaf-aggregation", nic_ports, r))
        links.append(LinkGroup("aggregation-core", nic_ports, r))
        tiers, diameter = 3, 5
    # Every link's switch ends: the NIC link has one, switch-to-switch links two.
    ports_used = links[0].count + 2 * sum(g.count for g in links[1:])
    return FabricCost(
        fabric=fabric,
        tiers=tiers,
        diameter_hops=diameter,
        switch_port_gbps=r,
        ports_per_switch=p,
        switch_groups=groups,
        links=tuple(links),
        switch_ports_used=ports_used,
        switch_price=inputs.switch_price,
        optic_price=inputs.optic_price,
        notes=tuple(notes),
    )


def zcube_shape(gpus: int, radix: int) -> tuple[int, int]:
    """Smallest (n, m) with m*n*n >= gpus and 2*n*m <= radix: switches per group, links per pair.

    Raises ConfigError when no such shape exists (gpus beyond (radix/2)**2).
    """
    max_gpus = (radix // 2) ** 2
    if gpus > max_gpus:
        raise ConfigError(
            "gpus",
            gpus,
            f"at most {max_gpus} for ZCube on {radix}-port switches (n = {radix // 2} per "
            "group, no third tier); use more switch ports",
        )
    # Each switch uses n*m ports down and n*m across, so n starts at ceil(2N / radix).
    n = max(1, math.ceil(2 * gpus / radix))
    while True:
        m = math.ceil(gpus / (n * n))
        if 2 * n * m <= radix:
            return n, m
        n += 1


def zcube_cost(inputs: CostInputs) -> FabricCost:
    """ZCube: two groups of n switches, N NICs with two ports, K(n,n) with m links per pair."""
    b = zcube_port_gbps(inputs)
    radix = zcube_ports_per_switch(inputs)
    n, m = zcube_shape(inputs.gpus, radix)
    ideal_switches = 4 * inputs.gpus / radix
    notes: list[str] = [
        f"ASIC {inputs.switch_ports}x{inputs.port_gbps}G broken out as {radix}x{b}G; "
        f"n={n} switches per group, m={m} links per A-B pair"
    ]
    slots = m * n * n
    if slots != inputs.gpus or 2 * n != ideal_switches:
        notes.append(
            f"{inputs.gpus} GPUs do not split as m*n*n with every port used: rounded up to "
            f"{2 * n} switches (ideal {ideal_switches:g}), {slots} NIC slots"
        )
    cross = m * n * n
    links = (
        LinkGroup("nic-A", inputs.gpus, b),
        LinkGroup("nic-B", inputs.gpus, b),
        LinkGroup("A-B", cross, b),
    )
    return FabricCost(
        fabric="zcube",
        tiers=1,
        diameter_hops=2,
        switch_port_gbps=b,
        ports_per_switch=radix,
        switch_groups=(SwitchGroup("A", n), SwitchGroup("B", n)),
        links=links,
        switch_ports_used=2 * inputs.gpus + 2 * cross,
        switch_price=inputs.switch_price,
        optic_price=inputs.optic_price,
        notes=tuple(notes),
    )


def compare(inputs: CostInputs) -> CostComparison:
    """Price ROFT, Clos and ZCube for the same cluster."""
    return CostComparison(
        inputs=inputs,
        roft=roft_cost(inputs, "roft"),
        clos=roft_cost(inputs, "clos"),
        zcube=zcube_cost(inputs),
    )
