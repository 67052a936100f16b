"""The scale-down rule: which small fabric stands for the full size (pure), the one place that
decides the default GPUs per server and servers per leaf of `compare`, `sweep` and `main.sh`.

A small fabric keeps the full size's structure (docs/DOMAIN.md, Scale-downs that keep
structure) when its traffic pairs meet where they would at full size (1,024 GPUs, 8 per
server, `zcube_lab.core.fabric.fullsize`):
- **ZCube**: several servers under each A switch, as at full size (n=32, 8 GPUs per server: 4
  servers per A segment); with one server per A, B[r] is rank r of every server and ZCube
  becomes ROFT's rails at half rate. GPUs per server: the smallest divisor d >= 2 of n that
  leaves at most the full size's servers per A segment (n / d <= 4) and at least 2 of them
  (n=4: 2 GPUs per server; n=6: 2; n=8: 2; n=16: 4). A prime n has none.
- **ROFT**: the same servers as ZCube (every compared fabric holds the same GPU hosts, gid ->
  server and rank alike), and several servers per rail leaf with several leaves per rail. Servers
  per leaf: the largest divisor s >= 2 of the servers that leaves at least 2 leaves per rail and
  keeps the share of a GPU's partners under its own leaf ((s - 1) / (GPUs - 1)) within
  `SHARE_GOAL_POINTS` of the full size's (31 / 1,023 = 3.0%): 8 servers of 2 GPUs, 2 per leaf;
  32 of 2, 4 per leaf.
- **Clos**: the same servers, 2 per leaf (1 when the servers are odd), as before: an EP
  instance of 2 servers then shares a leaf as at full size (4 servers per leaf), though at 16
  GPUs a GPU meets 3 of its 15 partners on its leaf (full size: 3.0%).

Sizes given on the command line win over the rule: `--gpus-per-server 4 --servers-per-leaf 4`
at 16 GPUs is the lab's old scale-down (one server per A switch, one leaf per rail), reachable
as any other size; the structure table in every report says what it keeps. A GPU count with no
structure-keeping size, or a size option that does not fit the GPU count, is refused by name
with the values that fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.fullsize import FULL_GPUS, FULL_GPUS_PER_SERVER, FULL_SWITCH_PORTS
from zcube_lab.core.fabric.structure import SHARE_GOAL_POINTS

if TYPE_CHECKING:
    from zcube_lab.core.fabric.description import Fabric

# Full size: servers under one ZCube A switch, and under one ROFT rail leaf.
FULL_SERVERS_PER_SEGMENT = math.isqrt(FULL_GPUS) // FULL_GPUS_PER_SERVER
FULL_SERVERS_PER_LEAF = FULL_SWITCH_PORTS // 2
# The share of a ROFT GPU's partners under its own leaf at full size, in %.
FULL_SAME_LEAF_SHARE = 100 * (FULL_SERVERS_PER_LEAF - 1) / (FULL_GPUS - 1)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def structure_gpus_per_server(n: int) -> int | None:
    """ZCube n: the GPUs per server that keep several servers per A switch (None: none do)."""
    for d in _divisors(n):
        if d >= 2 and 2 <= n // d <= FULL_SERVERS_PER_SEGMENT:
            return d
    return None


def structure_servers_per_leaf(
    servers: int, gpus: int, spines: int = 1, oversubscription: float = 1
) -> int | None:
    """ROFT: the servers per rail leaf that keep several per leaf, several leaves per rail and
    the full size's same-leaf share (None: no divisor of `servers` does); of those, one whose
    leaf has whole uplinks (at `oversubscription`) for every one of `spines` if one does, else
    the builder names what does not fit."""
    fits = [
        s
        for s in _divisors(servers)
        if s >= 2
        and servers // s >= 2
        and abs(100 * (s - 1) / (gpus - 1) - FULL_SAME_LEAF_SHARE) <= SHARE_GOAL_POINTS
    ]
    wired = [
        s
        for s in fits
        if (s / oversubscription).is_integer() and s / oversubscription % spines == 0
    ]
    return max(wired or fits) if fits else None


def structure_gpus(limit: int = 144) -> list[int]:
    """The square GPU counts up to `limit` whose fabrics keep the structure (for messages)."""
    out = []
    for side in range(2, math.isqrt(limit) + 1):
        gps = structure_gpus_per_server(side)
        if gps and structure_servers_per_leaf(side * side // gps, side * side):
            out.append(side * side)
    return out


def scaled_fabric(kind: str, gpus: int) -> Fabric:
    """A `kind` fabric of `gpus` GPU hosts at the structure-keeping sizes (`scaled_sizes`)."""
    from zcube_lab.core.fabric.builders import build_fabric
    from zcube_lab.core.fabric.description import FabricSpec

    return build_fabric(FabricSpec.of(kind, **scaled_sizes(kind, gpus)))


def scaled_sizes(
    kind: str,
    gpus: int,
    given: Mapping[str, object] | None = None,
    spines: int = 1,
    oversubscription: float = 1,
) -> dict[str, object]:
    """The builder parameters of a `kind` fabric of `gpus` GPU hosts (a square): the size
    options `given` (builder parameter -> value) as given, the rest by the rule (ROFT's leaves
    with whole uplinks to `spines` spines at `oversubscription` where the rule allows)."""
    given = dict(given or {})
    side = math.isqrt(gpus)
    if side * side != gpus or side < 2:
        raise ConfigError("gpus", gpus, "a square of at least 4 (16, 36, 64)")
    n = int(given.get("n", side))  # type: ignore[call-overload]
    gps = given.get("gpus_per_server")
    if gps is None:
        gps = structure_gpus_per_server(side)
        if gps is None:
            raise ConfigError(
                "gpus",
                gpus,
                f"a GPU count whose fabrics keep the full size's structure (several servers per "
                f"ZCube A switch and per ROFT rail leaf): one of {structure_gpus()}; or give "
                f"--gpus-per-server (a divisor of {side}: {_divisors(side)}) for a size of "
                "your own",
            )
    if not isinstance(gps, int) or isinstance(gps, bool) or gps < 1 or gpus % gps:
        raise ConfigError(
            "gpus_per_server", gps, f"a divisor of the {gpus} GPUs: one of {_divisors(gpus)}"
        )
    if kind == "zcube":
        return {"n": n, "gpus_per_server": gps}
    servers = int(given.get("servers", gpus // gps))  # type: ignore[call-overload]
    if kind == "roft":
        spl = given.get("servers_per_leaf")
        if spl is None:
            spl = structure_servers_per_leaf(servers, servers * gps, spines, oversubscription)
        if spl is None:
            named = "servers" if "servers" in given else "gpus_per_server"
            raise ConfigError(
                named,
                given.get(named, gps),
                f"a size whose ROFT keeps several servers per leaf and several leaves per rail at "
                f"{gpus} GPUs: one of {_roft_fits(gpus)}; or give --servers-per-leaf "
                f"(a divisor of {servers} servers: {_divisors(servers)})",
            )
        return {"servers": servers, "gpus_per_server": gps, "servers_per_leaf": spl}
    spl = given.get("servers_per_leaf", 2 if servers % 2 == 0 else 1)
    return {"servers": servers, "gpus_per_server": gps, "servers_per_leaf": spl}


def _roft_fits(gpus: int) -> list[int]:
    """The GPUs per server at which a ROFT of `gpus` GPUs keeps its structure."""
    return [d for d in _divisors(gpus) if structure_servers_per_leaf(gpus // d, gpus)]
