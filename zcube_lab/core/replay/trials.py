"""A replay repeated N times: each figure's median and range over the trials (pure; issue 45).

`headline(result)` takes one replay's result (as `zcube_lab.emulator.replay.driver.replay` returns
it) to its figures by name: per class the completion time's p50, p99 and max and the transfers
left incomplete, the EP exchange's p50 and p99, the pauses, the pause reaction, the datagrams
lost and where, whether the replay was trusted. `spread(values)` is their median, min and max
over the trials (a figure missing from a trial, None, is left out and counted in `missing`);
`aggregate` does it for every figure of a list of trials, `contention_spread` for the per-trial
contended/isolated ratios. Trials are never pooled: the median of a p99 is the median of each
trial's own p99. `text` prints a spread as `median [min-max]`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zcube_lab.core.replay.losses import LOCATIONS


def spread(values: Iterable[float | None]) -> dict[str, Any]:
    """Median, min and max of the values given (None left out, counted in `missing`)."""
    given = list(values)
    vs = [float(v) for v in given if v is not None]
    missing = len(given) - len(vs)
    if not vs:
        return {"n": 0, "median": None, "min": None, "max": None, "missing": missing}
    return {
        "n": len(vs),
        "median": statistics.median(vs),
        "min": min(vs),
        "max": max(vs),
        "missing": missing,
    }


def headline(result: Mapping[str, Any]) -> dict[str, float | None]:
    """One replay's figures by name (times in modelled seconds)."""
    out: dict[str, float | None] = {}
    for cls, row in (result.get("classes") or {}).items():
        fct = row.get("fct_s") or {}
        for q in ("p50", "p99", "max"):
            out[f"{cls}.fct_{q}_s"] = fct.get(q)
        out[f"{cls}.incomplete"] = row.get("incomplete")
        if "exchange_s" in row:
            for q in ("p50", "p99"):
                out[f"{cls}.exchange_{q}_s"] = (row.get("exchange_s") or {}).get(q)
    pauses = result.get("pauses") or {}
    out["pauses"] = pauses.get("pause_frames")
    out["paused_us"] = pauses.get("pause_total_us")
    out["reaction_p99_us"] = result.get("pause_reaction_p99_us")
    losses = result.get("losses")
    if losses is not None:
        out["lost_datagrams"] = losses.get("lost_datagrams")
        for where in LOCATIONS:
            out[f"lost_at.{where}"] = losses["datagrams"].get(where)
        out["lost_at.unlocated"] = losses.get("unlocated")
    cpu = result.get("cpu") or {}
    for k in ("busy", "steal"):
        if k in cpu:
            out[f"cpu.{k}"] = cpu[k]
    if "verdict" in result:
        out["trusted"] = 1.0 if result["verdict"]["trusted"] else 0.0
    return out


def aggregate(results: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every headline figure's spread over the trials (a figure some trials lack counts them
    as missing)."""
    heads = [headline(r) for r in results]
    names: list[str] = []
    for h in heads:
        names += [k for k in h if k not in names]
    return {k: spread([h.get(k) for h in heads]) for k in names}


def contention_spread(per_trial: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per class and ratio (`figures.contention`'s keys), its spread over the trials."""
    out: dict[str, dict[str, Any]] = {}
    for cls in sorted({c for t in per_trial for c in t}):
        keys = sorted({k for t in per_trial for k in (t.get(cls) or {})})
        out[cls] = {k: spread([(t.get(cls) or {}).get(k) for t in per_trial]) for k in keys}
    return out


def text(s: Mapping[str, Any] | None, fmt: str = ",.0f", scale: float = 1.0) -> str:
    """`median [min-max]` (the median alone when the trials agree in `fmt`, or there is one);
    `-` for none. `scale` multiplies (1e6: seconds as µs)."""
    if not s or s.get("median") is None:
        return "-"
    med = format(s["median"] * scale, fmt)
    lo, hi = format(s["min"] * scale, fmt), format(s["max"] * scale, fmt)
    if s["n"] == 1 or lo == hi:
        return med
    return f"{med} [{lo}-{hi}]"
