"""The draft's parameters next to the lab's (pure; issue 46 item 2).

A test runs at one of two time scales (`zcube_lab.core.replay.timescale`): the live lab's
default (a 400 Gb/s NIC at 100 Mb/s, byte scale 4,000) or the replay's finest frame (2 µs on the
slowest host port, 200 Gb/s on the 16-GPU ZCube: byte scale 33.3, k = 120). Bytes become lab
bytes by that scale; a threshold becomes whole frames, or is out of reach at that scale;
counts of hosts (senders, pairs, EP ranks, decode workers) are kept where the fabric has the
hosts and capped where it does not; loads and everything else are the draft's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from zcube_lab.core.bmwg.catalogue import (
    BYTES,
    EP_SIZE,
    FINE,
    LEVEL,
    MAX_QPS,
    PAIRS,
    QPS,
    SENDERS,
    THRESHOLD,
    WORKERS,
    BmwgTest,
    Param,
)
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.replay.timescale import PRESETS_US, TimeScale, derive, own

NIC_GBPS = 400.0
# The slowest host port of the 16-GPU fabrics compared (ZCube's two 200 Gb/s ports).
SLOWEST_PORT_GBPS = 200.0
DEFAULT_NIC_MBPS = 100.0
FINE_PRESET = "finest"


def default_scale(slowest_port_gbps: float = SLOWEST_PORT_GBPS) -> TimeScale:
    """The live lab's scale: a 400 Gb/s NIC at 100 Mb/s, undilated."""
    return own(NIC_GBPS, slowest_port_gbps, DEFAULT_NIC_MBPS, 1500, 1.0)


def fine_scale(slowest_port_gbps: float = SLOWEST_PORT_GBPS) -> TimeScale:
    """The replay's finest preset (2 µs on the slowest host port)."""
    return derive(PRESETS_US[FINE_PRESET], NIC_GBPS, slowest_port_gbps)


def scale_for(test: BmwgTest, slowest_port_gbps: float = SLOWEST_PORT_GBPS) -> TimeScale:
    """The time scale a test runs at: the fine one for FINE tests, else the default."""
    if test.status == FINE:
        return fine_scale(slowest_port_gbps)
    return default_scale(slowest_port_gbps)


def host_limit(kind: str, hosts: int) -> int:
    """The most of a host count the fabric carries: senders into one host (hosts - 1),
    disjoint pairs (hosts / 2), EP ranks (hosts), decode workers beside as many prefill
    GPU hosts (hosts / 2: §9.4's pools)."""
    return {SENDERS: hosts - 1, PAIRS: hosts // 2, EP_SIZE: hosts, WORKERS: hosts // 2}[kind]


def lab_counts(kind: str, values: Iterable[float], hosts: int) -> tuple[int, ...]:
    """The draft's counts the fabric carries, those above its limit capped to it once."""
    limit = host_limit(kind, hosts)
    return tuple(sorted({min(int(v), limit) for v in values}))


def lab_qps(values: Iterable[float]) -> tuple[int, ...]:
    """The draft's QP counts as the lab runs them: parallel transfers of one pair, those above
    MAX_QPS capped to it once."""
    return tuple(sorted({min(int(v), MAX_QPS) for v in values}))


def check_counts(kind: str, name: str, values: Sequence[int], hosts: int) -> None:
    """A ConfigError for counts the fabric cannot carry, naming the allowed range."""
    limit = host_limit(kind, hosts)
    bad = [v for v in values if not 1 <= v <= limit]
    if bad:
        raise ConfigError(name, bad, f"1 to {limit} on a fabric of {hosts} GPU hosts")


def _bytes(real: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if real >= size:
            return f"{real / size:g} {unit}"
    return f"{real:g} B"


def draft_text(p: Param) -> str:
    """The draft's values as the draft writes them."""
    if p.kind in (BYTES, THRESHOLD):
        return ", ".join(_bytes(v) for v in p.draft)
    if p.kind == LEVEL:
        return ", ".join(f"{v:.0%}" for v in p.draft)
    if p.unit == "s":
        return ", ".join(f"{v * 1e6:g} µs" if v < 1e-3 else f"{v * 1e3:g} ms" for v in p.draft)
    unit = f" {p.unit}" if p.unit else ""
    return ", ".join(f"{v:g}" for v in p.draft) + unit


def lab_value(p: Param, ts: TimeScale, hosts: int) -> str:
    """The lab's version of a parameter at time scale `ts` on a fabric of `hosts` GPU hosts."""
    if p.kind == BYTES:
        parts = []
        for v in p.draft:
            lab = ts.lab_bytes(v)
            frames = lab / ts.mtu
            shown = f"{frames:,.0f}" if frames >= 100 else f"{frames:.3g}"
            parts.append(f"{lab:,.0f} B ({shown} frames)")
        return ", ".join(parts)
    if p.kind == THRESHOLD:
        parts = []
        for v in p.draft:
            try:
                parts.append(f"{ts.threshold_frames(v)} frames")
            except ConfigError:
                parts.append("out of reach")
        return ", ".join(parts)
    if p.kind == QPS:
        kept = lab_qps(p.draft)
        capped = [int(v) for v in p.draft if v > MAX_QPS]
        text = ", ".join(str(v) for v in kept) + " parallel transfers of the pair"
        if capped:
            text += f" ({', '.join(map(str, capped))}: capped to {MAX_QPS})"
        return text
    if p.kind in (SENDERS, PAIRS, EP_SIZE, WORKERS):
        kept = lab_counts(p.kind, p.draft, hosts)
        text = ", ".join(str(v) for v in kept)
        capped = [int(v) for v in p.draft if v > host_limit(p.kind, hosts)]
        if capped:
            text += f" ({', '.join(map(str, capped))}: more than {hosts} GPU hosts carry)"
        return text
    return draft_text(p)


def trial_text(test: BmwgTest, ts: TimeScale) -> tuple[str, str]:
    """(the draft's trials, what they cost here in wall time at `ts`); a test whose trials the
    draft does not time (`BmwgTest.repetition`) repeats the same thing here, its cost untold."""
    draft = test.trials_text
    if test.trial_s is None:
        return draft, "the same, counted over a case's trials (each a timed run of them)"
    wall_h = test.trials * ts.clock.wall(test.trial_s) / 3600
    return draft, f"{draft} modelled = {wall_h:,.3g} wall h at k = {ts.dilation:g}"


def parameter_rows(tests: Iterable[BmwgTest], hosts: int = 16) -> list[list[str]]:
    """[section, parameter, draft, lab, scale] for every parameter of `tests` (trials too)."""
    rows = []
    for t in tests:
        ts = scale_for(t)
        scale = f"S = {ts.bandwidth_scale:.4g}, k = {ts.dilation:g}"
        for p in t.params:
            rows.append([t.section, p.name, draft_text(p), lab_value(p, ts, hosts), scale])
        draft, lab = trial_text(t, ts)
        rows.append([t.section, "trials", draft, lab, scale])
    return rows
