"""The side-by-side comparison of fabrics: a table, PNG plots and report.html.

`aggregate(runs)` groups run summaries by fabric and takes medians and spreads (pure);
`write_report(runs, out_dir)` draws the plots with matplotlib (Agg, no screen) and writes a
self-contained HTML page that links them. Each run is the folder `zcube-lab run` wrote.
"""

from __future__ import annotations

import html
import itertools
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.results.figures import read_jsonl
from zcube_lab.fabric.cost import CostInputs, compare

# (label, path into summary.json, lower is better?)
METRICS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("completed requests/s", ("client", "requests_per_s"), False),
    ("output tokens/s", ("client", "output_tokens_per_s"), False),
    ("failed requests", ("client", "failed"), True),
    ("TTFT p50 client (s)", ("client", "ttft_p50_s"), True),
    ("TTFT p90 client (s)", ("client", "ttft_p90_s"), True),
    ("TTFT p99 client (s)", ("client", "ttft_p99_s"), True),
    ("TTFT p50 Prometheus (s)", ("server", "gateway_ttft_p50_s"), True),
    ("TTFT p99 Prometheus (s)", ("server", "gateway_ttft_p99_s"), True),
    ("TPOT p50 (s)", ("client", "tpot_p50_s"), True),
    ("TPOT p99 (s)", ("client", "tpot_p99_s"), True),
    ("ITL p50 (s)", ("client", "itl_p50_s"), True),
    ("ITL p99 (s)", ("client", "itl_p99_s"), True),
    # Histogram quantiles: exact only to vLLM's buckets (the top ones span 0.25-1 s and 1-5 s).
    ("KV transfer p50 (s, bucketed)", ("server", "kv_xfer_p50_s"), True),
    ("KV transfer p99 (s, bucketed)", ("server", "kv_xfer_p99_s"), True),
    ("all-to-all p99 (s, bucketed)", ("server", "alltoall_p99_s"), True),
    ("link util max", ("fabric_stats", "link_util_max"), True),
    ("link util mean", ("fabric_stats", "link_util_mean"), True),
    ("fabric drops", ("fabric_stats", "drops"), True),
    # Faults (docs/FAILURES.md): "-" in runs without an injected failure.
    ("TTFT p99 before fault (s)", ("faults", "ttft_p99_before_s"), True),
    ("TTFT p99 during fault (s)", ("faults", "ttft_p99_during_s"), True),
    ("TTFT p99 after fault (s)", ("faults", "ttft_p99_after_s"), True),
    ("failed during fault", ("faults", "failed_during"), True),
    ("KV transfers retried", ("faults", "kv_retried"), True),
    ("KV subflows retired", ("faults", "kv_lanes_retired"), True),
    ("all-to-all exchanges failed", ("server", "alltoall_failed"), True),
    ("KV bytes never delivered", ("faults", "kv_bytes_lost"), True),
    ("KV checksum failures caught", ("faults", "kv_checksum_failures"), True),
    ("recovery: first hit KV done (s)", ("faults", "recovery_kv_first_s"), True),
    ("recovery: last hit KV done (s)", ("faults", "recovery_kv_all_s"), True),
    ("recovery: throughput (s)", ("faults", "recovery_throughput_s"), True),
    ("emulated switches", ("fabric_stats", "switches"), True),
    ("emulated switching Tb/s", ("fabric_stats", "switching_capacity_tbps"), True),
)


def load_run(path: Path) -> dict[str, Any]:
    """A run folder's summary, with its folder recorded. `fabric` becomes the run's label
    (`zcube`, or `zcube/spray` when a policy or fault distinguishes it); `fabric_kind` keeps the
    fabric."""
    summary = json.loads((path / "summary.json").read_text())
    summary["_dir"] = str(path)
    summary["fabric_kind"] = summary["fabric"]
    summary["fabric"] = summary.get("label") or summary["fabric"]
    stats = summary.get("fabric_stats", {})
    if "switching_capacity_gbps" in stats:
        stats["switching_capacity_tbps"] = stats["switching_capacity_gbps"] / 1000
    return summary


def value_at(summary: dict[str, Any], path: tuple[str, ...]) -> float | None:
    """The number at `path` in a run summary, or None (missing, not a number, NaN)."""
    cur: Any = summary
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    if isinstance(cur, int | float) and cur == cur:  # drop NaN
        return float(cur)
    return None


@dataclass(frozen=True)
class Cell:
    """A metric for one fabric over its repeats."""

    median: float | None
    low: float | None
    high: float | None
    n: int


def aggregate(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Cell]]:
    """fabric -> metric label -> median and spread over repeats."""
    fabrics: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        fabrics.setdefault(r["fabric"], []).append(r)
    out: dict[str, dict[str, Cell]] = {}
    for fabric, rs in fabrics.items():
        cells = {}
        for label, path, _ in METRICS:
            vals = [v for v in (value_at(r, path) for r in rs) if v is not None]
            cells[label] = Cell(
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


def trust(runs: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """fabric -> the reasons any of its runs was not trustworthy (empty: all kept up)."""
    out: dict[str, list[str]] = {}
    for r in runs:
        reasons = out.setdefault(r["fabric"], [])
        if not r.get("trustworthy", False):
            reasons += [f"{Path(r['_dir']).name}: {x}" for x in r["health"].get("reasons", [])]
    return out


def table_rows(
    agg: dict[str, dict[str, Cell]], fabrics: Sequence[str], baseline: str
) -> list[list[str]]:
    """Rows of the comparison table: metric, each fabric's median [min-max], diff vs baseline."""
    rows = []
    for label, _, _ in METRICS:
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


# The columns of the transposed console table `compare` prints when it compares many variants.
HEADLINE = (
    "completed requests/s",
    "failed requests",
    "TTFT p50 client (s)",
    "TTFT p99 client (s)",
    "TTFT p99 during fault (s)",
    "KV subflows retired",
    "KV bytes never delivered",
    "recovery: last hit KV done (s)",
    "link util max",
)


def headline_rows(agg: dict[str, dict[str, Cell]], labels: Sequence[str]) -> list[list[str]]:
    """One row per label with the `HEADLINE` medians: readable in a terminal where a column per
    label (and per difference) is not."""
    return [[lb, *(_fmt(agg[lb][m].median) for m in HEADLINE)] for lb in labels]


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


# -- plots ----------------------------------------------------------------------------------
def plot_ttft_cdf(runs: Sequence[dict[str, Any]], out: Path) -> Path:
    """TTFT CDF per fabric over all its repeats."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    by_fabric: dict[str, list[float]] = {}
    for r in runs:
        for rec in read_jsonl(Path(r["_dir"]) / "requests.jsonl"):
            if rec.get("outcome") == "ok" and rec.get("ttft_s") is not None:
                by_fabric.setdefault(r["fabric"], []).append(float(rec["ttft_s"]))
    for fabric, vals in sorted(by_fabric.items()):
        vals.sort()
        ys = [(i + 1) / len(vals) for i in range(len(vals))]
        ax.step(vals, ys, where="post", label=f"{fabric} (n={len(vals)})")
    ax.set_xlabel("time to first token (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT CDF (client-measured, all repeats)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_throughput(runs: Sequence[dict[str, Any]], out: Path) -> Path:
    """Completed requests/s over time, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        series = r.get("throughput_series") or []
        if series:
            xs, ys = zip(*series, strict=True)
            ax.plot(xs, ys, label=f"{r['fabric']} {Path(r['_dir']).name[-6:]}", alpha=0.8)
    shaded = next((r for r in runs if (r.get("faults") or {}).get("spans_s")), None)
    if shaded is not None:
        _shade_faults(ax, shaded)
    ax.set_xlabel("time since load start (s)")
    ax.set_ylabel("completed requests/s (5 s bins)")
    ax.set_title("Throughput over time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _shade_faults(ax: Any, run: dict[str, Any]) -> None:
    for i, (s, e) in enumerate((run.get("faults") or {}).get("spans_s") or ()):
        ax.axvspan(s, e, color="red", alpha=0.12, label="fault" if i == 0 else None)


def plot_fault_timeline(runs: Sequence[dict[str, Any]], out: Path) -> Path:
    """TTFT of every request by send time, failed ones marked, fault windows shaded: the first
    run of each label, one panel per label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    firsts: dict[str, dict[str, Any]] = {}
    for r in runs:
        firsts.setdefault(r["fabric"], r)
    fig, axes = plt.subplots(
        len(firsts), 1, figsize=(8, 2.2 * len(firsts) + 0.6), sharex=True, squeeze=False
    )
    for ax, (label, r) in zip(axes[:, 0], sorted(firsts.items()), strict=True):
        recs = read_jsonl(Path(r["_dir"]) / "requests.jsonl")
        ok = [
            (x["sent_s"], x["ttft_s"]) for x in recs if x.get("outcome") == "ok" and x.get("ttft_s")
        ]
        bad = [x["sent_s"] for x in recs if x.get("outcome") != "ok"]
        if ok:
            xs, ys = zip(*ok, strict=True)
            ax.scatter(xs, ys, s=6, alpha=0.7, label="TTFT")
        if bad:
            top = max((y for _, y in ok), default=1.0)
            ax.scatter(bad, [top] * len(bad), marker="x", color="red", label="failed")
        _shade_faults(ax, r)
        ax.set_ylabel("TTFT (s)")
        ax.set_title(f"{label} (run {Path(r['_dir']).name.rsplit('-', 1)[-1]})", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("request sent, seconds since load start")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_port_heatmap(run: dict[str, Any], out: Path, capacity_bps: dict[str, float]) -> Path:
    """Per-port transmit utilization over time of one run (rows: switch ports)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads((Path(run["_dir"]) / "series.json").read_text())
    rows: list[tuple[str, list[float]]] = []
    for s in data.get("series", []):
        m = s["metric"]
        if m.get("__name__") != "zcube_port_tx_bytes_total":
            continue
        key = f"{m['switch']}:{m['port']}>{m.get('peer', '?')}"
        cap = capacity_bps.get(f"{m['switch']}:{m['port']}")
        vals = [(float(t), float(v)) for t, v in s["values"]]
        util = []
        for (t0, v0), (t1, v1) in itertools.pairwise(vals):
            rate = max(v1 - v0, 0.0) * 8 / max(t1 - t0, 1e-9)
            util.append(rate / cap if cap else 0.0)
        if util:
            rows.append((key, util))
    rows.sort()
    fig, ax = plt.subplots(figsize=(8, max(3, 0.12 * len(rows) + 1)))
    if rows:
        width = max(len(u) for _, u in rows)
        grid = [u + [0.0] * (width - len(u)) for _, u in rows]
        im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="none")
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([k for k, _ in rows], fontsize=5)
        fig.colorbar(im, ax=ax, label="tx utilization")
    ax.set_xlabel(f"time ({data.get('step', 2):g} s steps)")
    ax.set_title(f"Per-port link utilization: {run['fabric']}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# -- report ---------------------------------------------------------------------------------
def write_report(
    runs: Sequence[dict[str, Any]],
    out_dir: Path,
    baseline: str,
    capacities: dict[str, dict[str, float]],
    title: str = "zcube-lab comparison",
) -> Path:
    """Plots and report.html in `out_dir`; returns the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fabrics = sorted({r["fabric"] for r in runs}, key=lambda f: (f == baseline, f))
    agg = aggregate(runs)
    rows = table_rows(agg, fabrics, baseline)
    plots = [plot_ttft_cdf(runs, out_dir / "ttft_cdf.png")]
    plots.append(plot_throughput(runs, out_dir / "throughput.png"))
    if any((r.get("faults") or {}).get("spans_s") for r in runs):
        plots.append(plot_fault_timeline(runs, out_dir / "fault_timeline.png"))
    for f in fabrics:
        first = next(r for r in runs if r["fabric"] == f)
        caps = capacities.get(f) or capacities.get(first["fabric_kind"], {})
        if (Path(first["_dir"]) / "series.json").exists():
            name = f.replace("/", "-")
            plots.append(plot_port_heatmap(first, out_dir / f"ports_{name}.png", caps))
    bad = trust(runs)
    config = json.loads((Path(runs[0]["_dir"]) / "config.json").read_text())
    gpus = config["fabric_summary"]["hosts"]
    cost = compare(CostInputs(gpus=1024, nic_gbps=400, switch_ports=64, port_gbps=400))
    heads = ["metric", *fabrics, *(f"{f} vs {baseline}" for f in fabrics if f != baseline)]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1100px}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;"
        "text-align:right}td:first-child,th:first-child{text-align:left}"
        ".bad{color:#b00;font-weight:bold}.ok{color:#070}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{len(runs)} runs; medians over repeats with [min-max]; {gpus} emulated GPU hosts; "
        f"baseline {html.escape(baseline)}.</p>",
        "<h2>Emulator health</h2><ul>",
    ]
    for f in fabrics:
        if bad.get(f):
            items = "; ".join(html.escape(x) for x in bad[f])
            parts.append(f"<li class='bad'>{html.escape(f)}: NOT TRUSTWORTHY: {items}</li>")
        else:
            parts.append(f"<li class='ok'>{html.escape(f)}: the emulator kept up in every run</li>")
    parts.append("</ul><h2>Results</h2><table><tr>")
    parts += [f"<th>{html.escape(h)}</th>" for h in heads]
    parts.append("</tr>")
    for row in rows:
        parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    parts.append("</table>")
    parts.append("<h2>Full-scale cost (1024 GPUs, 400G NICs, 64x400G switch chip)</h2><table>")
    parts.append("<tr><th>fabric</th><th>switches</th><th>switching Tb/s</th>"
                 "<th>transceiver ends (400G-eq)</th></tr>")  # fmt: skip
    for name, fc in (("roft", cost.roft), ("clos", cost.clos), ("zcube", cost.zcube)):
        parts.append(
            f"<tr><td>{name}</td><td>{fc.switches}</td><td>{fc.switching_tbps:,.1f}</td>"
            f"<td>{fc.transceiver_ends_400g:,.0f}</td></tr>"
        )
    parts.append("</table><h2>Plots</h2>")
    for p in plots:
        parts.append(f"<p><img src='{html.escape(p.name)}' alt='{html.escape(p.stem)}'></p>")
    parts.append("<h2>Runs</h2><ul>")
    for r in runs:
        parts.append(f"<li>{html.escape(r['fabric'])}: <code>{html.escape(r['_dir'])}</code></li>")
    parts.append("</ul></body></html>")
    page = out_dir / "report.html"
    page.write_text("\n".join(parts))
    (out_dir / "comparison.json").write_text(
        json.dumps(
            {
                "baseline": baseline,
                "runs": [r["_dir"] for r in runs],
                "medians": {f: {k: c.median for k, c in agg[f].items()} for f in fabrics},
                "untrustworthy": bad,
            },
            indent=2,
        )
        + "\n"
    )
    return page
