"""The side-by-side comparison of fabrics: a table, PNG plots and report.html.

`aggregate(runs)` groups run summaries (`RunSummary`, read with `RunSummary.read`) by variant (the
run's label: `zcube`, `zcube/spray`) and takes medians and spreads over the figures of `METRICS`
(`zcube_lab.emulator.results.compare.compare_metrics`; pure); `write_report(runs, out_dir)` draws
the plots (`zcube_lab.emulator.results.compare.plots`) and writes a self-contained HTML page that
links them, opening with a verdict paragraph (`zcube_lab.emulator.results.compare.verdicttext`).
Each run is the folder `zcube-lab run` wrote.

When a run has fewer than 1,000 requests (`sweeppoints.ENOUGH_SAMPLES`), the table's TTFT p99
row is followed by `TTFT p99 95% CI (s)` (`with_interval_row`): per variant, the envelope of
its runs' 95% order-statistic intervals of the client TTFT p99 (`sweeppoints.sample_intervals`),
an end the samples cannot bound written `unbounded` (`[1.62, unbounded)`), marked `few samples`
with the fewest requests of a run (just that mark for runs read without their folder or
records).
"""

from __future__ import annotations

import html
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zcube_lab.core.fabric.cost import compare
from zcube_lab.core.fabric.pricing import CostInputs
from zcube_lab.emulator.results.compare.compare_metrics import (
    METRICS,
    Metric,
    figure,
    shown_metrics,
)
from zcube_lab.emulator.results.compare.plots import (
    fault_spans,
    plot_fault_timeline,
    plot_port_heatmap,
    plot_throughput,
    plot_ttft_cdf,
    run_dir,
)
from zcube_lab.emulator.results.compare.verdicttext import (
    HEALTH_COLUMNS,
    Attempt,
    Excluded,
    Headline,
    HealthRow,
    health_rows,
    health_summary,
    verdict_sentences,
)
from zcube_lab.emulator.results.ietf.kpitable import kpi_section
from zcube_lab.emulator.results.lossless.victimtable import lossless_fact, victim_section
from zcube_lab.emulator.results.run.figures import read_jsonl
from zcube_lab.emulator.results.run.summary import RunSummary
from zcube_lab.emulator.results.structure.structuresection import structure_html_section
from zcube_lab.emulator.verdict.combine import Judged, over_runs
from zcube_lab.emulator.verdict.retry import RETRY_FILE, Rejected, retries_from_json, retry_decision


@dataclass(frozen=True)
class Cell:
    """A metric for one fabric over its repeats."""

    median: float | None
    low: float | None
    high: float | None
    n: int


def aggregate(runs: Sequence[RunSummary]) -> dict[str, dict[str, Cell]]:
    """variant -> metric label -> median and spread over repeats."""
    fabrics: dict[str, list[RunSummary]] = {}
    for r in runs:
        fabrics.setdefault(r.variant, []).append(r)
    out: dict[str, dict[str, Cell]] = {}
    for fabric, rs in fabrics.items():
        cells = {}
        for m in METRICS:
            vals = [v for v in (figure(r, m.get) for r in rs) if v is not None]
            cells[m.label] = Cell(
                statistics.median(vals) if vals else None,
                min(vals) if vals else None,
                max(vals) if vals else None,
                len(vals),
            )
        out[fabric] = cells
    return out


def difference_pct(value: float | None, base: float | None) -> float | None:
    """(value - base) / base in %, or None when undefined."""
    if value is None or base is None or base == 0:
        return None
    return 100.0 * (value - base) / base


def judged(r: RunSummary) -> Judged:
    """A run as the verdict's combination sees it: its folder's name, its outcome, its reasons."""
    return Judged(_run_name(r), r.trustworthy, tuple(r.health.reasons))


def trust(runs: Sequence[RunSummary]) -> dict[str, list[str]]:
    """variant -> the reasons any of its runs was not trustworthy (empty: all kept up)."""
    by_variant: dict[str, list[RunSummary]] = {}
    for r in runs:
        by_variant.setdefault(r.variant, []).append(r)
    return {v: list(over_runs(map(judged, rs)).reasons) for v, rs in by_variant.items()}


def verdict_cells(runs: Sequence[RunSummary], variant: str) -> tuple[str, str]:
    """A variant's trustworthiness over its runs (`yes`, or `no (k of n trusted)`) and the
    first reason one of them was not trustworthy (`-` when all were)."""
    verdict = over_runs(judged(r) for r in runs if r.variant == variant)
    return verdict.count_text(), verdict.first_reason or "-"


def verdict_rows(
    runs: Sequence[RunSummary], fabrics: Sequence[str], baseline: str
) -> list[list[str]]:
    """The rows `trustworthy` and `first reason` to lead the comparison table (blank in the
    difference columns)."""
    cells = [verdict_cells(runs, f) for f in fabrics]
    pad = [""] * sum(1 for f in fabrics if f != baseline)
    return [
        ["trustworthy", *(c[0] for c in cells), *pad],
        ["first reason", *(c[1] for c in cells), *pad],
    ]


# The figures the verdict paragraph compares: its name for one, the metric label, the unit.
VERDICT_FIGURES = (
    ("TTFT p50", "TTFT p50 client (s)", "s"),
    ("TTFT p99", "TTFT p99 client (s)", "s"),
    ("Throughput", "completed requests/s", "req/s"),
    ("KV transfer p50", "KV transfer p50 (s)", "s"),
    ("Busiest link peak", "busiest link util peak", "%"),
)


def verdict_paragraph(
    runs: Sequence[RunSummary], fabrics: Sequence[str], baseline: str
) -> list[str]:
    """The sentences that open the report (`verdict_sentences`): `VERDICT_FIGURES` over the
    trustworthy runs of each variant, the others named with their first reason."""
    trusted = [r for r in runs if r.trustworthy]
    metrics = {m.label: m for m in METRICS}
    headlines = []
    for name, label, unit in VERDICT_FIGURES:
        m = metrics[label]
        values = {f: [figure(r, m.get) for r in trusted if r.variant == f] for f in fabrics}
        present = {f: [v for v in vs if v is not None] for f, vs in values.items()}
        headlines.append(Headline(name, unit, m.lower_is_better, present))
    repeats = {f: sum(r.variant == f for r in trusted) for f in fabrics}
    excluded = [
        Excluded(r.variant, _run_name(r), over_runs([judged(r)]).first_reason or "-")
        for r in runs
        if not r.trustworthy
    ]
    return verdict_sentences(headlines, repeats, baseline, excluded)


# Verdict fields the report does not repeat as "other checks": the CPU figures and the outcome.
_CPU_FIELDS = frozenset(
    {
        "trustworthy", "reasons", "samples", "machine_cpu_mean", "machine_cpu_p95",
        "datapath_cpu_mean", "datapath_cpu_p95", "per_core_p95", "softirq_mean", "steal_mean",
        "processes",
    }
)  # fmt: skip


def verdict_checks(run: RunSummary) -> list[str]:
    """The verdict's figures beyond CPU that read as a line (TCP timeouts per host, drops per
    CPU, the events a fault explains, ... as the verdict of the run has them), `name: value`,
    leaving out empty and zero ones. A figure made of records (each host's TCP counters, each
    interface's queue figures) is named once at the end, and left to the run's summary.json."""
    out, left = [], []
    for name, value in run.health.to_dict().items():
        if name in _CPU_FIELDS or value in (None, 0, 0.0, "", (), [], {}):
            continue
        if isinstance(value, dict):
            if any(isinstance(v, dict | list) for v in value.values()):
                left.append(name)
                continue
            shown = ", ".join(f"{k} {_short(v)}" for k, v in sorted(value.items()) if v)
            if shown:
                out.append(f"{name}: {shown}")
        elif isinstance(value, list | tuple):
            out.append(f"{name}: {'; '.join(_short(v) for v in value)}")
        else:
            out.append(f"{name}: {_short(value)}")
    if left:
        out.append(f"in summary.json (health): {', '.join(left)}")
    return out


def busiest_link(run: RunSummary) -> str:
    """`name mean X% peak Y%` of the run's busiest link in either direction, `-` without."""
    d = run.fabric_stats.directed
    if d is None or d.busiest_link is None:
        return "-"
    peak = d.busiest_link_util_peak
    peak_text = "-" if peak is None else f"{100 * peak:.0f}%"
    return f"{d.busiest_link} mean {100 * (d.busiest_link_util_mean or 0):.0f}% peak {peak_text}"


def _short(value: Any) -> str:
    if isinstance(value, float):
        return _fmt(value)
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _run_name(r: RunSummary) -> str:
    return r.dir.name if r.dir is not None else r.run


def table_rows(
    agg: dict[str, dict[str, Cell]],
    fabrics: Sequence[str],
    baseline: str,
    metrics: Sequence[Metric] = METRICS,
) -> list[list[str]]:
    """Rows of the comparison table: metric, each fabric's median [min-max], diff vs baseline;
    one per metric (`shown_metrics(runs)` for the runs' own), none for a metric no run has."""
    rows = []
    for label in (m.label for m in metrics):
        if all(agg[f][label].median is None for f in fabrics):
            continue
        row = [label]
        for f in fabrics:
            c = agg[f][label]
            if c.median is None:
                row.append("-")
            elif c.n > 1 and c.low != c.high:
                row.append(f"{_fmt(c.median)} [{_fmt(c.low)}-{_fmt(c.high)}]")
            else:
                row.append(_fmt(c.median))
        for f in fabrics:
            if f == baseline:
                continue
            if baseline not in agg:  # e.g. interrupted before the baseline's first run
                row.append("-")
                continue
            d = difference_pct(agg[f][label].median, agg[baseline][label].median)
            row.append("-" if d is None else f"{d:+.1f}%")
        rows.append(row)
    return rows


TTFT_P99_LABEL = "TTFT p99 client (s)"
INTERVAL_LABEL = "TTFT p99 95% CI (s)"


def ttft_p99_interval(runs: Sequence[RunSummary]) -> str:
    """`[low, high] (few samples: n)`: the envelope of the runs' TTFT p99 order-statistic
    intervals (an unbounded end `unbounded`), n the fewest requests of a run; `-` when every
    run had enough samples."""
    from zcube_lab.emulator.results.sweep.sweeppoints import (
        ENOUGH_SAMPLES,
        envelope,
        interval_text,
        sample_intervals,
    )

    few = [r for r in runs if r.client.requests < ENOUGH_SAMPLES]
    if not few:
        return "-"
    cis = []
    for r in few:
        if r.dir is None:
            continue
        ci = sample_intervals(read_jsonl(run_dir(r) / "requests.jsonl")).get("ttft_p99_s")
        if ci is not None:
            cis.append(ci)
    n = min(r.client.requests for r in few)
    if not cis:
        return f"few samples: {n}"
    return f"{interval_text(envelope(cis), _fmt)} (few samples: {n})"


def with_interval_row(
    rows: list[list[str]], runs: Sequence[RunSummary], fabrics: Sequence[str], baseline: str
) -> list[list[str]]:
    """The table rows with `INTERVAL_LABEL` after the TTFT p99 row when a run has few samples
    (blank in the difference columns)."""
    cells = [ttft_p99_interval([r for r in runs if r.variant == f]) for f in fabrics]
    if all(c == "-" for c in cells):
        return rows
    pad = [""] * sum(1 for f in fabrics if f != baseline)
    out = []
    for row in rows:
        out.append(row)
        if row[0] == TTFT_P99_LABEL:
            out.append([INTERVAL_LABEL, *cells, *pad])
    return out


# The columns of the transposed console table `compare` prints when it compares many variants:
# metric label -> a short column head (a row per variant must fit a terminal).
HEADLINE = {
    "completed requests/s": "req/s",
    "failed requests": "failed",
    "TTFT p50 client (s)": "TTFT p50 (s)",
    "TTFT p99 client (s)": "TTFT p99 (s)",
    "TTFT p99 during fault (s)": "TTFT p99 in fault (s)",
    "KV subflows retired": "subflows retired",
    "KV bytes never delivered": "KV bytes lost",
    "recovery: last hit KV (s)": "last hit KV (s)",
    "link util max": "link util max",
    "busiest link util peak": "busiest link peak",
    "KV pulls stalled": "KV stalled",
}


def headline_columns(agg: dict[str, dict[str, Cell]], runs: Sequence[RunSummary]) -> list[str]:
    """The `HEADLINE` figures about these runs (`shown_metrics`) that one of them has."""
    shown = {m.label for m in shown_metrics(runs)}
    has = {label for cells in agg.values() for label, c in cells.items() if c.median is not None}
    return [m for m in HEADLINE if m in shown and m in has]


def headline_rows(
    agg: dict[str, dict[str, Cell]],
    labels: Sequence[str],
    runs: Sequence[RunSummary] | None = None,
    columns: Sequence[str] = tuple(HEADLINE),
) -> list[list[str]]:
    """One row per label with the medians of `columns` (`HEADLINE`, or `headline_columns`):
    readable in a terminal where a column per label (and per difference) is not; with `runs`,
    then `trustworthy` and `first reason`."""
    rows = [[lb, *(_fmt(agg[lb][m].median) for m in columns)] for lb in labels]
    if runs is not None:
        rows = [[*row, *verdict_cells(runs, lb)] for row, lb in zip(rows, labels, strict=True)]
    return rows


def median_spread(values: Sequence[float], fmt: str = ".3g") -> str:
    """`median [min-max]` of values (just the median when they agree), `-` for none."""
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) > 1 and min(values) != max(values):
        return f"{med:{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"
    return f"{med:{fmt}}"


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if float(v).is_integer():
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


# -- report ---------------------------------------------------------------------------------
def write_report(
    runs: Sequence[RunSummary],
    out_dir: Path,
    baseline: str,
    capacities: dict[str, dict[str, float]],
    title: str = "zcube-lab comparison",
) -> Path:
    """Plots, report.html and comparison.json in `out_dir`; returns the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fabrics = variants(runs, baseline)
    agg = aggregate(runs)
    bad = trust(runs)
    plots = _write_plots(runs, fabrics, out_dir, capacities)
    config = json.loads((run_dir(runs[0]) / "config.json").read_text())
    verdict = " ".join(verdict_paragraph(runs, fabrics, baseline))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1100px}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;"
        "text-align:right}td:first-child,th:first-child{text-align:left}"
        ".bad{color:#b00;font-weight:bold}.ok{color:#070}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p><b>Verdict.</b> {html.escape(verdict)}</p>",
        f"<p>{len(runs)} runs; medians over repeats with [min-max]; "
        f"{config['fabric_summary']['hosts']} emulated GPU hosts; "
        f"baseline {html.escape(baseline)}.</p>",
    ]
    parts += health_section(runs, fabrics)
    parts += _results_table(agg, fabrics, baseline, runs)
    parts += kpi_section(runs, fabrics)  # the IETF BMWG draft's KPIs by name
    parts += structure_html_section([(r.variant, run_dir(r)) for r in runs])  # scaled vs full
    parts += victim_section(runs, fabrics)  # EP and KV behind pauses, when recorded
    parts += _cost_table()
    parts.append("</table><h2>Plots</h2>")
    for p in plots:
        parts.append(f"<p><img src='{html.escape(p.name)}' alt='{html.escape(p.stem)}'></p>")
    parts += _run_items(runs)
    parts.append("</body></html>")
    page = out_dir / "report.html"
    page.write_text("\n".join(parts))
    comparison = {
        "baseline": baseline,
        "runs": [str(run_dir(r)) for r in runs],
        "medians": {f: {k: c.median for k, c in agg[f].items()} for f in fabrics},
        "untrustworthy": bad,
        # runs the loop rejected for the machine and ran again: the retry -> those attempts
        "retried": {
            str(run_dir(r)): [e.to_dict() for e in read_retries(r.dir)]
            for r in runs
            if read_retries(r.dir)
        },
    }
    (out_dir / "comparison.json").write_text(json.dumps(comparison, indent=2) + "\n")
    return page


def variants(runs: Sequence[RunSummary], baseline: str) -> list[str]:
    """The runs' variants in report order: alphabetical, the baseline last."""
    return sorted({r.variant for r in runs}, key=lambda f: (f == baseline, f))


def _write_plots(
    runs: Sequence[RunSummary],
    fabrics: Sequence[str],
    out_dir: Path,
    capacities: dict[str, dict[str, float]],
) -> list[Path]:
    plots = [plot_ttft_cdf(runs, out_dir / "ttft_cdf.png")]
    plots.append(plot_throughput(runs, out_dir / "throughput.png"))
    if any(fault_spans(r) for r in runs):
        plots.append(plot_fault_timeline(runs, out_dir / "fault_timeline.png"))
    for f in fabrics:
        first = next(r for r in runs if r.variant == f)
        caps = capacities.get(f) or capacities.get(first.fabric, {})
        if (run_dir(first) / "series.json").exists():
            name = f.replace("/", "-")
            plots.append(plot_port_heatmap(first, out_dir / f"ports_{name}.png", caps))
    return plots


def _results_table(
    agg: dict[str, dict[str, Cell]],
    fabrics: Sequence[str],
    baseline: str,
    runs: Sequence[RunSummary],
) -> list[str]:
    """The comparison table, led by the verdict rows; an untrustworthy variant's column head
    and verdict cells in red."""
    untrusted = {f for f in fabrics if verdict_cells(runs, f)[0] != "yes"}
    parts = ["<h2>Results</h2><table><tr><th>metric</th>"]
    for f in fabrics:
        mark = " class='bad'" if f in untrusted else ""
        note = " (not trustworthy)" if f in untrusted else ""
        parts.append(f"<th{mark}>{html.escape(f + note)}</th>")
    parts += [f"<th>{html.escape(f'{f} vs {baseline}')}</th>" for f in fabrics if f != baseline]
    parts.append("</tr>")
    for row in verdict_rows(runs, fabrics, baseline):
        cells = [f"<td>{html.escape(row[0])}</td>"]
        for f, c in zip(fabrics, row[1:], strict=False):
            mark = " class='bad'" if f in untrusted else ""
            cells.append(f"<td{mark}>{html.escape(c)}</td>")
        cells += [f"<td>{html.escape(c)}</td>" for c in row[1 + len(fabrics) :]]
        parts.append("<tr>" + "".join(cells) + "</tr>")
    rows = table_rows(agg, fabrics, baseline, shown_metrics(runs))
    for row in with_interval_row(rows, runs, fabrics, baseline):
        parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    parts.append("</table>")
    return parts


def _run_items(runs: Sequence[RunSummary]) -> list[str]:
    """Every run in a table: where it is, trusted or not (the reasons are in the health
    section), its busiest link, its stalled KV pulls and its lossless pauses; the checks beyond
    CPU fold below it, one run each."""
    parts = ["<h2>Runs</h2><table><tr><th>variant</th><th>run folder</th><th>trusted</th>"
             "<th>busiest link</th><th>KV pulls stalled</th><th>lossless</th></tr>"]  # fmt: skip
    folds = []
    for r in runs:
        t = r.transfers
        cells = [
            r.variant,
            str(run_dir(r)),
            "yes" if r.trustworthy else "no",
            busiest_link(r),
            "-" if t is None else f"{t.kv_pulls_stalled} of {t.kv_pulls_rated}",
            "-" if r.lossless is None else lossless_fact(r.lossless),
        ]
        parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        if checks := verdict_checks(r):
            folds.append(_fold(f"{_run_name(r)}: checks beyond CPU", checks))
    return [*parts, "</table>", *folds]


def read_retries(folder: Path | None) -> tuple[Rejected, ...]:
    """The earlier attempts a run folder's `retry.json` names (none without one): the runs the
    run loop rejected for the machine and ran again (`zcube_lab.emulator.experiment.runloop`)."""
    if folder is None or not (folder / RETRY_FILE).is_file():
        return ()
    return retries_from_json(json.loads((folder / RETRY_FILE).read_text()))


def run_health(r: RunSummary) -> tuple[str, Attempt, tuple[Attempt, ...]]:
    """A run as the health section shows it: its variant, its last attempt, and the earlier
    attempts its folder's retry.json names."""
    earlier = tuple(
        Attempt(Path(e.run).name, False, e.reasons, retried=True, why=e.why)
        for e in read_retries(r.dir)
    )
    decision = retry_decision(r.health)
    last = Attempt(
        _run_name(r), r.trustworthy, tuple(r.health.reasons), machine=decision.retry, why=""
    )
    return r.variant, last, earlier


def health_rows_of(runs: Sequence[RunSummary], fabrics: Sequence[str]) -> list[HealthRow]:
    """The health section's rows (`verdicttext.health_rows`), variants in `fabrics`' order."""
    order = {f: i for i, f in enumerate(fabrics)}
    return health_rows([run_health(r) for r in sorted(runs, key=lambda r: order[r.variant])])


def health_section(runs: Sequence[RunSummary], fabrics: Sequence[str]) -> list[str]:
    """Emulator health: a sentence, one row per run (and per attempt the machine spoiled), the
    first reason and how many more, every reason folded below the table."""
    rows = health_rows_of(runs, fabrics)
    parts = ["<h2>Emulator health</h2>", f"<p>{html.escape(health_summary(rows))}</p><table><tr>"]
    parts += [f"<th>{html.escape(c)}</th>" for c in HEALTH_COLUMNS]
    parts.append("</tr>")
    folds = []
    for row in rows:
        mark = " class='ok'" if row.attempt.trusted else " class='bad'"
        cells = row.cells()
        tds = [f"<td>{html.escape(c)}</td>" for c in cells]
        tds[2] = f"<td{mark}>{html.escape(cells[2])}</td>"
        parts.append("<tr>" + "".join(tds) + "</tr>")
        if reasons := row.attempt.reasons:
            why = [f"run again: {row.attempt.why}"] if row.attempt.why else []
            folds.append(
                _fold(f"{row.attempt.run}: every reason ({len(reasons)})", [*reasons, *why])
            )
    return [*parts, "</table>", *folds]


def _fold(title: str, lines: Sequence[str]) -> str:
    """A folded block (`<details>`): the title, then a line each."""
    items = "".join(f"<li>{html.escape(x)}</li>" for x in lines)
    return f"<details><summary>{html.escape(title)}</summary><ul>{items}</ul></details>"


def _cost_table() -> list[str]:
    cost = compare(CostInputs(gpus=1024, nic_gbps=400, switch_ports=64, port_gbps=400))
    parts = ["<h2>Full-scale cost (1024 GPUs, 400G NICs, 64x400G switch chip)</h2><table>"]
    parts.append("<tr><th>fabric</th><th>switches</th><th>switching Tb/s</th>"
                 "<th>transceiver ends (400G-eq)</th></tr>")  # fmt: skip
    for name, fc in (("roft", cost.roft), ("clos", cost.clos), ("zcube", cost.zcube)):
        parts.append(
            f"<tr><td>{name}</td><td>{fc.switches}</td><td>{fc.switching_tbps:,.1f}</td>"
            f"<td>{fc.transceiver_ends_400g:,.0f}</td></tr>"
        )
    return parts
