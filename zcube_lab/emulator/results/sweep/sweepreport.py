"""The load sweep's report: console table rows, the max-rate table and `sweep.png` (matplotlib,
Agg backend), from a `SweepResult` (`zcube_lab.emulator.results.sweep.sweeppoints`).

A cell over repeats reads `median [min-max]` (just the median when the repeats agree or there
is one); `-` is a figure no repeat has. Every row and every plotted point carries its verdict:
untrustworthy points are hollow in the plot and marked `no` with the first reason in the table.
A rate whose runs sent more than `SENT_TOLERANCE` off it shows the rate sent beside it. Each
fabric's capacity (`zcube_lab.emulator.results.sweep.capacity`) is a row of the capacity table and a
vertical line in the goodput panel, dotted and written `>=` when censored.

A point with few samples (a repeat below 1,000 requests) shows its TTFT p99's 95%
order-statistic interval marked `few`, `[low, high] few (n)` with n the fewest requests of a
repeat, an end the samples cannot bound written `unbounded` (`[1.62, unbounded) few (96)`: below
368 requests a p99 has no upper end); `-` otherwise.
The tokens table gives, beside each capacity, the decode and prefill tokens per GPU-second its
runs delivered there (`zcube_lab.emulator.results.sweep.gputhroughput`: production's GPU-throughput
figure). `vLLM goodput` is vLLM's "Request goodput (req/s)" (`goodput.vllm_goodput`); `goodput` is
ours, over the load window.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcube_lab.emulator.results.structure.structuresection import (
    STRUCTURE_FILE,
    structure_text_section,
)
from zcube_lab.emulator.results.sweep.gputhroughput import TokensPerGpu
from zcube_lab.emulator.results.sweep.sweeppoints import (
    MaxRate,
    Point,
    Spread,
    SweepResult,
    interval_text,
    rate_tag,
    spread,
)

POINT_COLUMNS = (  # short enough for a 100-column terminal
    "rate",
    "fabric",
    "achieved",
    "TTFT p99 s",
    "TTFT p99 95% CI",
    "goodput",
    "vLLM goodput",
    "SLO met",
    "hottest link",
    "trustworthy",
)
MAX_RATE_COLUMNS = ("fabric", "capacity req/s", "per repeat", "vs baseline", "notes")
TOKENS_COLUMNS = ("fabric", "capacity req/s", "decode tok/s/GPU", "prefill tok/s/GPU", "repeats")
SENT_TOLERANCE = 0.02  # a rate's runs sent within 2% of it: the rate says what was sent


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


def interval_cell(p: Point, name: str = "ttft_p99_s") -> str:
    """`[low, high] few (n)` for a point with few samples (n: its repeats' fewest requests; an
    unbounded end `unbounded`), `few (n)` when no repeat had a value, `-` with enough samples."""
    if not p.few_samples:
        return "-"
    n = min(r.requests for r in p.runs)
    ci = p.interval(name)
    if ci is None:
        return f"few ({n})"
    return f"{interval_text(ci, fmt)} few ({n})"


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
            _rate_cell(p),
            p.variant,
            cell(p.figure("achieved_per_s")),
            cell(p.figure("ttft_p99_s")),
            interval_cell(p),
            cell(p.figure("goodput_per_s")),
            cell(p.figure("vllm_goodput_per_s")),
            met_cell(p),
            _pct(p.figure("link_peak")),
            trust_cell(p),
        ]
        for p in pts
    ]


def _rate_cell(p: Point) -> str:
    """The nominal rate, and the median rate sent beside it when that is more than
    `SENT_TOLERANCE` off: `8`, `8 (9.75 sent)`."""
    sent = p.figure("sent_per_s").median
    if sent is None or abs(sent - p.rate) <= SENT_TOLERANCE * p.rate:
        return rate_tag(p.rate)
    return f"{rate_tag(p.rate)} ({fmt(sent)} sent)"


def max_rate_rows(result: SweepResult) -> list[list[str]]:
    """One row per variant, `MAX_RATE_COLUMNS`: its maximum rate meeting the SLO, the maximum
    of each repeat, the ratio to the baseline, and what was excluded or skipped."""
    return [_max_rate_row(m, result.baseline) for m in result.max_rates()]


def tokens_rows(result: SweepResult) -> list[list[str]]:
    """One row per variant, `TOKENS_COLUMNS`: its capacity and the decode and prefill tokens
    per GPU-second its runs delivered there (median over repeats; `>=` capacities are read at
    their lower bound)."""
    by_variant = {m.variant: m for m in result.max_rates()}
    return [_tokens_row(t, by_variant[t.variant]) for t in result.tokens_per_gpu()]


def _tokens_row(t: TokensPerGpu, m: MaxRate) -> list[str]:
    read = f"{t.repeats}" + (f" ({t.censored} censored)" if t.censored else "")
    return [t.variant, m.capacity.text(), fmt(t.decode), fmt(t.prefill), read]


def _max_rate_row(m: MaxRate, baseline: str) -> list[str]:
    per = ", ".join(f"r{k} {c.text()}" for k, c in sorted(m.per_repeat.items()))
    notes = [f"r{k} {c.censored}" for k, c in sorted(m.per_repeat.items()) if c.censored]
    if m.stopped_after is not None:
        notes.append(f"past saturation at {rate_tag(m.stopped_after)}")
    if m.variant == baseline:
        ratio = "baseline"
    else:
        ratio = m.ratio.text() if m.ratio is not None else "unknown"
    return [m.variant, m.capacity.text(), per or "-", ratio, "; ".join(notes) or "-"]


def plot_sweep(result: SweepResult, out: Path) -> Path:
    """Two panels: client TTFT against achieved throughput per fabric, at the SLO's TTFT share
    (p99 without a TTFT target) with its threshold drawn; goodput against the offered rate.
    Medians with [min-max] bars; untrustworthy points hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ttft = result.slo.target("ttft")
    if ttft is not None:
        label = ttft.label

        def ttft_of(p: Point) -> Spread:
            return spread([r.observed.get(label) for r in p.runs])

        share = f"p{100 * ttft.attainment:g}"
    else:

        def ttft_of(p: Point) -> Spread:
            return p.figure("ttft_p99_s")

        share = "p99"
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    by_variant: dict[str, list[Point]] = {}
    for p in result.points():
        by_variant.setdefault(p.variant, []).append(p)
    for i, (variant, pts) in enumerate(by_variant.items()):
        xy = [(p, p.figure("achieved_per_s"), ttft_of(p)) for p in pts]
        _series(left, xy, f"C{i}", variant)
        rate = [(p, _sent(p), p.figure("goodput_per_s")) for p in pts]
        _series(right, rate, f"C{i}", variant)
    for i, m in enumerate(result.max_rates()):
        c = m.capacity
        if c.repeats and c.rate > 0:
            right.axvline(c.rate, color=f"C{i}", ls=":" if c.censored else "--", lw=1,
                          label=f"{m.variant} capacity {c.text()}")  # fmt: skip
    if ttft is not None:
        left.axhline(ttft.threshold_s, color="red", ls="--", lw=1, label=f"SLO {ttft.shown}")
    left.set_title(f"TTFT {share} vs achieved throughput" + ("" if ttft else " (no TTFT target)"))
    left.set_xlabel("achieved requests/s")
    left.set_ylabel(f"client TTFT {share} (s)")
    top = max(result.rates, default=1.0)
    right.plot([0, top], [0, top], color="grey", ls=":", lw=1, label="offered")
    right.set_title(f"goodput under SLO {result.slo.shown}")
    right.set_xlabel("requests/s sent in the load window")
    right.set_ylabel("requests/s meeting the SLO")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.plot([], [], "o", mfc="none", color="black", label="not trustworthy (hollow)")
        ax.legend(fontsize=7)
    over = "one run per point" if result.repeat == 1 else f"medians of {result.repeat} [min-max]"
    fig.suptitle(f"{result.workload}: load sweep, {over}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _sent(p: Point) -> Spread:
    """The rate the point's runs sent (the nominal rate for runs that did not say)."""
    s = p.figure("sent_per_s")
    return s if s.median is not None else Spread(p.rate, p.rate, p.rate)


def _series(ax: Any, xy: Sequence[tuple[Point, Spread, Spread]], color: str, label: str) -> None:
    """One variant's line through its points' medians, markers filled where trustworthy, bars
    where the repeats differ."""
    rows = [(p, x, y) for p, x, y in xy if x.median is not None and y.median is not None]
    if not rows:
        return
    ax.plot([x.median for _, x, _ in rows], [y.median for _, _, y in rows], color=color, lw=1.2,
            label=label)  # fmt: skip
    for p, x, y in rows:
        if (x.low, y.low) != (x.high, y.high):
            ax.errorbar(
                [x.median], [y.median], fmt="none", ecolor=color, capsize=2,
                xerr=[[x.median - x.low], [x.high - x.median]],
                yerr=[[y.median - y.low], [y.high - y.median]],
            )  # fmt: skip
        face = color if p.trustworthy else "none"
        ax.plot([x.median], [y.median], "o", color=color, mfc=face, ms=6, zorder=3)


def structure_report(result: SweepResult, out_dir: Path) -> str:
    """Each variant's structure table, scaled beside full size (from its first run's folder),
    also written to the sweep's `structure.txt`."""
    text = structure_text_section([(r.variant, out_dir / r.run) for r in result.runs])
    (out_dir / STRUCTURE_FILE).write_text(text + "\n")
    return text
