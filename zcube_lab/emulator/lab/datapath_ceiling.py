"""The userspace datapath's ceiling on this machine: the most it carries in total, in Mb/s, the
one home of the figure that the rate guard (`LabOptions`), `doctor` and the docs use.

Named a *ceiling*, not a capacity: in this project "capacity" is only a fabric's capacity at an
SLO (`zcube_lab.emulator.results.sweep.capacity`, requests/s); this is an upper bound on link rates
(Mb/s) that the lab refuses to exceed. `doctor` still calls its check `datapath-capacity` (a stable
name that tests and `--json` consumers look up).

`bench/datapath.py` measures it (iperf3 through one Open vSwitch bridge, unshaped, for a few
MTUs and flow counts) and writes `DatapathResults` to this machine's state folder, `RESULTS_PATH`
(`/var/lib/zcube-lab/datapath.json`; the folder is `$ZCUBE_LAB_MEASUREMENTS` when set): a
measurement of a machine belongs to the machine, not to a source tree, so an installed copy
finds it too. When that file exists and was measured on this machine, the guard uses the
measured total at the lab's MTU; otherwise a conservative default (`DEFAULT_CEILING_MBPS`),
and says so: `datapath_ceiling` warns (`UnmeasuredCeiling`) and `doctor` shows it. Whatever the
datapath carries, Mininet shapes links only up to `MININET_MAX_MBPS` (`TCIntf.bwParamMax`: above
it the link is left unshaped).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from zcube_lab.core.errors import ConfigError

# This machine's measurements (root writes them: `bench/datapath.py` runs as root).
MEASUREMENTS_DIR = Path(os.environ.get("ZCUBE_LAB_MEASUREMENTS", "/var/lib/zcube-lab"))
RESULTS_PATH = MEASUREMENTS_DIR / "datapath.json"
MEASURE = "sudo .venv/bin/python -m bench.datapath"
# The lowest of the figures seen by hand on these machines (docs/DOMAIN.md §5: ~0.5 Gb/s for
# one flow at MTU 1500; ~0.9 Gb/s for 4 flows across 8 switches at MTU 9000).
DEFAULT_CEILING_MBPS = 500.0
MININET_MAX_MBPS = 1000.0
MACHINE_ID_PATH = Path("/etc/machine-id")


@dataclass(frozen=True)
class Measurement:
    """One point: `flows` parallel TCP flows through the datapath at `mtu`."""

    mtu: int
    flows: int
    gbps: float
    pps: float  # full-size packets per second (payload bytes / (mtu - 52))


@dataclass(frozen=True)
class DatapathResults:
    """What `bench/datapath.py` measured on one machine."""

    machine_id: str
    cores: int
    measured_at: str  # ISO 8601, UTC
    seconds: float  # how long the benchmark took
    bridges: int  # Open vSwitch bridges each packet crossed
    points: tuple[Measurement, ...]
    datapath: str = "user"  # the Open vSwitch datapath measured (user or kernel)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> DatapathResults:
        points = tuple(Measurement(**p) for p in data["points"])  # type: ignore[union-attr]
        fields = {k: v for k, v in data.items() if k != "points"}
        return cls(**fields, points=points)  # type: ignore[arg-type]

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    def total_mbps(self, mtu: int) -> float:
        """The most the datapath carried (any flow count) at the largest measured MTU not
        above `mtu` (the smallest measured MTU when all are above it)."""
        mtus = sorted({p.mtu for p in self.points})
        below = [m for m in mtus if m <= mtu]
        chosen = below[-1] if below else mtus[0]
        return max(p.gbps for p in self.points if p.mtu == chosen) * 1000.0

    def total_pps(self, mtu: int) -> float:
        """The most packets per second the datapath carried through one bridge (any flow
        count), at the MTU `total_mbps` chooses."""
        mtus = sorted({p.mtu for p in self.points})
        below = [m for m in mtus if m <= mtu]
        chosen = below[-1] if below else mtus[0]
        return max(p.pps for p in self.points if p.mtu == chosen)


@dataclass(frozen=True)
class DatapathCeiling:
    """The datapath ceiling the guard uses, and where it comes from."""

    mbps: float
    source: str
    measured: bool = False  # False: the default, for want of a measurement of this machine
    pps: float | None = None  # packets per second through one bridge, when measured

    def packets_per_s(self, mtu: int) -> float:
        """Packets per second through one bridge: measured, else the Mb/s in `mtu` frames."""
        return self.pps if self.pps is not None else self.mbps * 1e6 / (mtu * 8)


class UnmeasuredCeiling(UserWarning):
    """The rate guard uses the default ceiling: nothing measured on this machine."""


def machine_id() -> str:
    """This machine's id (`/etc/machine-id`), or "" when it has none."""
    try:
        return MACHINE_ID_PATH.read_text().strip()
    except OSError:
        return ""


def load_results(path: Path | None = None) -> DatapathResults | None:
    """The benchmark's results (`RESULTS_PATH` by default), or None when there are none (or
    they cannot be read)."""
    try:
        return DatapathResults.from_dict(json.loads((path or RESULTS_PATH).read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def ceiling_from(
    results: DatapathResults | None, mtu: int, this_machine: str, path: Path | None = None
) -> DatapathCeiling:
    """The ceiling at `mtu`: measured when `results` (read from `path`, `RESULTS_PATH` by
    default) come from this machine, else the conservative default, with a source that says
    which and how to measure."""
    where = path or RESULTS_PATH
    if results is None or not results.points:
        return DatapathCeiling(
            DEFAULT_CEILING_MBPS, f"default, not measured: no {where}; run {MEASURE}"
        )
    if results.machine_id != this_machine:
        return DatapathCeiling(
            DEFAULT_CEILING_MBPS,
            f"default: {where} was measured on another machine; run {MEASURE}",
        )
    return DatapathCeiling(
        results.total_mbps(mtu),
        f"measured {results.measured_at} by bench/datapath.py ({where})",
        measured=True,
        pps=results.total_pps(mtu),
    )


def datapath_ceiling(mtu: int, path: Path | None = None) -> DatapathCeiling:
    """The datapath ceiling on this machine at `mtu` (from `RESULTS_PATH` by default); warns
    (`UnmeasuredCeiling`) when it is the default."""
    where = path or RESULTS_PATH
    ceiling = ceiling_from(load_results(where), mtu, machine_id(), where)
    if not ceiling.measured:
        warnings.warn(
            f"the rate guard uses a datapath ceiling of {ceiling.mbps:g} Mb/s: {ceiling.source}",
            UnmeasuredCeiling,
            stacklevel=2,
        )
    return ceiling


def check_nic_rate(nic_mbps: float, ceiling: DatapathCeiling) -> None:
    """Refuse an emulated NIC rate above what one datapath (or Mininet's shaping) carries."""
    limit = min(ceiling.mbps, MININET_MAX_MBPS)
    if not 0 < nic_mbps <= limit:
        raise ConfigError(
            "nic_mbps",
            nic_mbps,
            f"between 0 and {limit:g} Mb/s: the userspace datapath carries "
            f"{ceiling.mbps:g} Mb/s in total ({ceiling.source}); Mininet shapes at most "
            f"{MININET_MAX_MBPS:g} Mb/s",
        )


def cores() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0))
