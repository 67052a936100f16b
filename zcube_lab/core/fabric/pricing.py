"""Full-scale pricing of one fabric: switches, links, transceivers and CapEx of ROFT, Clos or ZCube.

Pure arithmetic on counts, no topology objects, so it prices clusters far larger than Mininet can
hold. Every fabric is built from the same switch ASIC, `switch_ports` x `port_gbps`:

- ROFT (rail-optimized fat tree) and Clos (leaf-spine, a server's GPUs under one leaf) run the
  ASIC at `port_gbps`; a NIC of `nic_gbps` takes `nic_gbps / port_gbps` switch ports. Both are
  non-blocking (1:1) with 2 tiers, or a 3-tier fat tree where 2 tiers cannot reach the size.
  At 1:1 Clos has exactly ROFT's counts: the two differ only in which leaf a NIC plugs into.
- Multi-plane (`planes` P > 1, as MRC deploys it: an 800G NIC as 8 x 100G into 8 planes): each
  NIC splits into P ports of `nic_gbps / P`, one into each of P identical, disconnected fat
  trees. Where that share is slower than `port_gbps` the same ASIC is broken out at the share
  (51.2T as 512 x 100G instead of 64 x 800G): the radix grows P-fold, so every switch serves P
  times the GPUs, a 2-tier plane reaches P*P times as many, and fewer tiers may do (2 tiers of
  512-port switches reach 512 * 512 / 2 = 131,072 GPUs). Every count is P times one plane's.
- ZCube breaks the same ASIC out at half the NIC rate, b = nic_gbps / 2 (64x400G becomes
  128x200G). Each NIC has two b ports, one to an A switch and one to a B switch; A and B form a
  complete bipartite graph with m parallel links per pair. With n switches per group,
  N = m * n * n GPUs and each switch uses n*m ports down and n*m across.

Role names: ROFT/Clos tiers are `leaf`, `spine` (2 tiers) or `leaf`, `aggregation`, `core`
(3 tiers); ZCube groups are `A` and `B`. Link roles name both ends (`nic-leaf`, `leaf-spine`, ...).

Prices: `switch_price` is per switch (the same ASIC everywhere, so one price fits all fabrics);
`optic_price` is per transceiver end at 400G, and an end of another rate costs in proportion
(a 200G end is half). Every link has two ends, NIC-side ends included.

`cost` puts the fabrics side by side (`compare`, `compare_planes`); this module prices one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from zcube_lab.core.errors import ConfigError

# Transceiver ends are reported as equivalents of this rate (docs/DOMAIN.md §2 uses 400G).
REFERENCE_END_GBPS = 400


@dataclass(frozen=True)
class CostInputs:
    """The cluster to price: GPU count, NIC rate, the switch ASIC and optional unit prices."""

    gpus: int
    nic_gbps: int
    switch_ports: int
    port_gbps: int
    switch_price: float | None = None
    optic_price: float | None = None
    planes: int = 1

    def __post_init__(self) -> None:
        for name in ("gpus", "nic_gbps", "switch_ports", "port_gbps", "planes"):
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
        if self.planes > 1:
            self._check_planes()

    def _check_planes(self) -> None:
        problem = self._planes_problem(self.planes)
        if problem is not None:
            fits = [q for q in range(1, 17) if self._planes_problem(q) is None]
            raise ConfigError("planes", self.planes, f"{problem}; up to 16: one of {fits}")

    def _planes_problem(self, planes: int) -> str | None:
        """Why `planes` cannot split these NICs over this ASIC, or None."""
        if self.nic_gbps % planes:
            return f"a divisor of nic_gbps={self.nic_gbps} (each plane gets an equal share)"
        share = self.nic_gbps // planes
        if share >= self.port_gbps:
            if share % self.port_gbps:
                return (
                    f"a count whose NIC share nic_gbps/planes is a multiple of "
                    f"port_gbps={self.port_gbps} or slower than it (the ASIC broken out at it)"
                )
        elif self.asic_gbps % share or (self.asic_gbps // share) % 2:
            return (
                f"a count whose NIC share nic_gbps/planes breaks the {self.asic_gbps}G ASIC "
                "into an even number of ports"
            )
        return None

    @property
    def plane_gbps(self) -> int:
        """A NIC's bandwidth into each plane (all of it with one plane)."""
        return self.nic_gbps // self.planes

    @property
    def roft_port_gbps(self) -> int:
        """ROFT's and Clos's switch port rate: `port_gbps`, or a plane's NIC share where that
        is slower (the ASIC broken out at the share)."""
        return min(self.port_gbps, self.plane_gbps)

    @property
    def roft_switch_ports(self) -> int:
        """ROFT's and Clos's radix: the ASIC's capacity at `roft_port_gbps`."""
        return self.asic_gbps // self.roft_port_gbps

    @property
    def ports_per_nic(self) -> int:
        """Switch ports one NIC takes in each plane of ROFT and Clos (in the only plane: of
        `port_gbps`)."""
        return self.plane_gbps // self.roft_port_gbps

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
    planes: int = 1

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
        """Plain data for JSON output, derived totals included (`planes` only when > 1)."""
        return {
            "fabric": self.fabric,
            **({"planes": self.planes} if self.planes > 1 else {}),
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


def zcube_port_gbps(inputs: CostInputs) -> int:
    """ZCube's switch port rate: half the NIC rate, as each NIC has two ports."""
    return inputs.nic_gbps // 2


def zcube_ports_per_switch(inputs: CostInputs) -> int:
    """ZCube's radix: the same ASIC capacity broken out at the ZCube port rate."""
    return inputs.asic_gbps // zcube_port_gbps(inputs)


def roft_two_tier_max_gpus(inputs: CostInputs) -> int:
    """Largest non-blocking 2-tier ROFT/Clos: R leaves of R/2 down ports, R*R/2 NIC ports (per
    plane; every plane holds every GPU)."""
    return inputs.roft_switch_ports**2 // 2 // inputs.ports_per_nic


def roft_three_tier_max_gpus(inputs: CostInputs) -> int:
    """Largest non-blocking 3-tier fat tree: R*R*R/4 NIC ports (per plane)."""
    return inputs.roft_switch_ports**3 // 4 // inputs.ports_per_nic


def zcube_max_gpus(inputs: CostInputs) -> int:
    """Largest ZCube for the radix r: n = r/2 switches per group, m = 1, n*n GPUs."""
    return (zcube_ports_per_switch(inputs) // 2) ** 2


def roft_cost(inputs: CostInputs, fabric: str = "roft") -> FabricCost:
    """ROFT (or Clos, same counts at 1:1) with 2 tiers, or 3 where 2 cannot reach the size; with
    `inputs.planes` > 1, that many identical planes of it."""
    p = inputs.roft_switch_ports
    r = inputs.roft_port_gbps
    if inputs.gpus > roft_three_tier_max_gpus(inputs):
        raise ConfigError(
            "gpus",
            inputs.gpus,
            f"at most {roft_three_tier_max_gpus(inputs)} for a 3-tier fat tree of "
            f"{p}x{r}G switches; use more switch ports",
        )
    notes = _roft_notes(inputs, fabric)
    groups, links, tiers, diameter = _roft_tiers(inputs, notes)
    # Every link's switch ends: the NIC link has one, switch-to-switch links two.
    ports_used = links[0].count + 2 * sum(g.count for g in links[1:])
    return FabricCost(
        fabric=fabric,
        tiers=tiers,
        diameter_hops=diameter,
        switch_port_gbps=r,
        ports_per_switch=p,
        switch_groups=groups,
        links=links,
        switch_ports_used=ports_used,
        switch_price=inputs.switch_price,
        optic_price=inputs.optic_price,
        notes=tuple(notes),
        planes=inputs.planes,
    )


def _roft_notes(inputs: CostInputs, fabric: str) -> list[str]:
    """The notes on how ROFT or Clos is built from the ASIC, before any rounding."""
    p, r, planes = inputs.roft_switch_ports, inputs.roft_port_gbps, inputs.planes
    notes: list[str] = []
    if planes > 1:
        chip = f"{inputs.switch_ports}x{inputs.port_gbps}G ASIC"
        notes.append(
            f"each NIC as {planes} x {inputs.plane_gbps}G, one port per plane; {chip}"
            + (f" broken out as {p}x{r}G" if r != inputs.port_gbps else "")
            + f"; counts cover all {planes} planes; links are {r}G lanes (breakout optics carry "
            "several), so compare optics by 400G-equivalent ends"
        )
    if fabric == "clos":
        notes.append(
            "same counts as ROFT at 1:1: a server's GPUs share one leaf instead of one leaf "
            "per rail"
        )
    return notes


def _roft_tiers(
    inputs: CostInputs, notes: list[str]
) -> tuple[tuple[SwitchGroup, ...], tuple[LinkGroup, ...], int, int]:
    """ROFT's switch and link groups, tiers and diameter in hops; appends rounding notes."""
    p, r, planes = inputs.roft_switch_ports, inputs.roft_port_gbps, inputs.planes
    nic_ports = inputs.gpus * inputs.ports_per_nic  # per plane
    each = " per plane" if planes > 1 else ""
    # Non-blocking: each leaf (and aggregation switch) has as many ports up as down.
    half = p // 2
    leaves = math.ceil(nic_ports / half)
    if nic_ports % half:
        notes.append(
            f"{nic_ports} NIC ports{each} do not fill whole leaves of {half} down ports; "
            f"rounded up to {leaves} leaves{each}"
        )
    links = [LinkGroup("nic-leaf", planes * nic_ports, r)]
    if inputs.gpus <= roft_two_tier_max_gpus(inputs):
        spines = math.ceil(nic_ports / p)
        if nic_ports % p:
            notes.append(
                f"{nic_ports} uplinks{each} do not fill whole spines; rounded up to {spines}{each}"
            )
        groups = (SwitchGroup("leaf", planes * leaves), SwitchGroup("spine", planes * spines))
        links.append(LinkGroup("leaf-spine", planes * nic_ports, r))
        return groups, tuple(links), 2, 3
    aggregation = leaves
    core = math.ceil(nic_ports / p)
    if nic_ports % p:
        notes.append(f"{nic_ports} core links do not fill whole core switches; rounded up")
    notes.append(
        f"{inputs.gpus} GPUs exceed the 2-tier maximum of {roft_two_tier_max_gpus(inputs)} "
        f"for {p}-port switches: 3 tiers"
    )
    groups = (
        SwitchGroup("leaf", planes * leaves),
        SwitchGroup("aggregation", planes * aggregation),
        SwitchGroup("core", planes * core),
    )
    links.append(LinkGroup("leaf-aggregation", planes * nic_ports, r))
    links.append(LinkGroup("aggregation-core", planes * nic_ports, r))
    return groups, tuple(links), 3, 5


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
