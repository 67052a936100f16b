"""The load sweep's report: console table rows, the max-rate table and `sweep.png` (matplotlib,
Agg backend), from a `SweepResult` (`emulator.experiment.sweep`).

A cell over repeats reads `median [min-max]` (just the median when the repeats agree or there
is one); `-` is a figure no repeat has. Every row and every plotted point carries its verdict:
untrustworthy points are hollow in the plot and marked `no` with the first reason in the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from emulator.experiment.sweep import MaxRate, Point, Spread, SweepResult, rate_tag

POINT_COLUMNS = (
    "rate",
    "fabric",
    "achieved req/s",
    "TTFT p99 (s)",
    "goodput req/s",
    "SLO met",
    "link peak",
    "trustworthy",
)
MAX_RATE_COLUMNS = ("fabric", "max rate meeting SLO", "per repeat", "vs baseline", "notes")


def fmt(v: float | None) -> str:
    """A figure in at most 4 significant characters: `0.123`, `1.23`, `12.3`, `1,234`."""
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def cell(s: Spread, scale: float = 1.0, suffix: str = "") -> str:
    """`median [min-max]` of a spread, each scaled (100 for percent) and suffixed."""
    if s.median is None or s.low is None or s.high is None:
        return "-"
    med = fmt(s.median * scale) + suffix
    if s.low == s.high:
        return med
    return f"{med} [{fmt(s.low * scale)}-{fmt(s.high * scale)}]"


def _pct(s: Spread) -> str:
    if s.median is None or s.low is None or s.high is None:
        return "-"
    if round(100 * s.low) == round(100 * s.high):
        return f"{100 * s.median:.0f}%"
    return f"{100 * s.median:.0f}% [{100 * s.low:.0f}-{100 * s.high:.0f}]"


def met_cell(p: Point) -> str:
    """`yes`, `no`, or `k/n` when only some repeats met the SLO."""
    k = sum(r.slo_met for r in p.runs)
    if k == len(p.runs):
        return "yes"
    return "no" if k == 0 else f"{k}/{len(p.runs)}"


def trust_cell(p: Point) -> str:
    """`yes`, or `no (k of n): <first reason>`."""
    bad = [r for r in p.runs if not r.trustworthy]
    if not bad:
        return "yes"
    return f"no ({len(bad)} of {len(p.runs)}): {p.reason}"


def point_rows(result: SweepResult) -> list[list[str]]:
    """One row per point, rate-major (all fabrics at a rate, then the next), `POINT_COLUMNS`."""
    order = {v: i for i, v in enumerate(result.variants)}
    pts = sorted(result.points(), key=lambda p: (p.rate, order.get(p.variant, len(order))))
    return [
        [
            rate_tag(p.rate),
            p.variant,
            cell(p.figure("achieved_per_s")),
            cell(p.figure("ttft_p99_s")),
            cell(p.figure("goodput_per_s")),
            met_cell(p),
            _pct(p.figure("link_peak")),
            trust_cell(p),
        ]
        for p in pts
    ]


def max_rate_rows(result: SweepResult) -> list[list[str]]:
    """One row per variant, `MAX_RATE_COLUMNS`: its maximum rate meeting the SLO, the maximum
    of each repeat, the ratio to the baseline, and what was excluded or skipped."""
    return [_max_rate_row(m, result.baseline) for m in result.max_rates()]


def _max_rate_row(m: MaxRate, baseline: str) -> list[str]:
    per = ", ".join(
        f"r{k} {rate_tag(v) if v is not None else '-'}" for k, v in sorted(m.per_repeat.items())
    )
    notes = []
    if m.excluded:
        rates = ", ".join(rate_tag(r) for r in m.excluded)
        notes.append(f"met but NOT trustworthy at {rates} (not used)")
    if m.stopped_after is not None:
        notes.append(f"past saturation at {rate_tag(m.stopped_after)}")
    if m.variant == baseline:
        ratio = "baseline"
    else:
        ratio = f"{m.ratio:.2f}x" if m.ratio is not None else "-"
    rate = f"{rate_tag(m.rate)} req/s" if m.rate is not None else "none"
    return [m.variant, rate, per or "-", ratio, "; ".join(notes) or "-"]


def plot_sweep(result: SweepResult, out: Path) -> Path:
    """Two panels: TTFT p99 against achieved throughput per fabric with the SLO's TTFT threshold
    drawn; goodput against the offered rate. Medians with [min-max] bars; untrustworthy points
    hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    by_variant: dict[str, list[Point]] = {}
    for p in result.points():
        by_variant.setdefault(p.variant, []).append(p)
    for i, (variant, pts) in enumerate(by_variant.items()):
        color = f"C{i}"
        _series(left, pts, "achieved_per_s", "ttft_p99_s", color, variant)
        _series(right, pts, None, "goodput_per_s", color, variant)
    ttft = result.slo.target("ttft")
    if ttft is not None:
        left.axhline(ttft.threshold_s, color="red", ls="--", lw=1, label=f"SLO {ttft.text}")
    left.set_title("TTFT p99 vs achieved throughput" + ("" if ttft else " (no TTFT target)"))
    left.set_xlabel("achieved requests/s")
    left.set_ylabel("client TTFT p99 (s)")
    top = max(result.rates, default=1.0)
    right.plot([0, top], [0, top], color="grey", ls=":", lw=1, label="offered")
    right.set_title(f"goodput under SLO {result.slo.text}")
    right.set_xlabel("offered requests/s")
    right.set_ylabel("requests/s meeting the SLO")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.plot([], [], "o", mfc="none", color="black", label="not trustworthy (hollow)")
        ax.legend(fontsize=7)
    fig.suptitle(f"{result.workload}: load sweep, medians of {result.repeat} [min-max]")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _series(
    ax: object, pts: Sequence[Point], x_name: str | None, y_name: str, color: str, label: str
) -> None:
    """One variant's line through its points' medians, filled where trustworthy."""
    rows = []
    for p in pts:
        x = p.figure(x_name) if x_name else Spread(p.rate, p.rate, p.rate)
        y = p.figure(y_name)
        if x.median is not None and y.median is not None:
            rows.append((p, x, y))
    if not rows:
        return
    xs = [x.median for _, x, _ in rows]
    ys = [y.median for _, _, y in rows]
    ax.plot(xs, ys, color=color, lw=1.2, label=label)  # type: ignore[attr-defined]
    for p, x, y in rows:
        yerr = [[y.median - y.low], [y.high - y.median]]  # type: ignore[operator]
        xerr = [[x.median - x.low], [x.high - x.median]]  # type: ignore[operator]
        ax.errorbar(  # type: ignore[attr-defined]
            [x.median], [y.median], xerr=xerr, yerr=yerr, fmt="o", color=color,
            mfc=color if p.trustworthy else "none", ms=6, capsize=2,
        )  # fmt: skip
