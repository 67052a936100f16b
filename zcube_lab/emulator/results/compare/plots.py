"""The comparison's plots (PNG, matplotlib with the Agg backend, no screen): TTFT CDF and
throughput over time per variant, a fault timeline, and per-port utilization heatmaps. Each
takes run summaries read with `RunSummary.read` (they know their folder) and writes one file.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcube_lab.controller.port_metrics import PORT_RX_BYTES, PORT_TX_BYTES
from zcube_lab.emulator.results.run.figures import read_jsonl
from zcube_lab.emulator.results.run.summary import RunSummary


def run_dir(run: RunSummary) -> Path:
    """The folder a run summary was read from."""
    if run.dir is None:
        raise ValueError(f"run {run.run}: read with RunSummary.read, so its folder is known")
    return run.dir


def plot_ttft_cdf(runs: Sequence[RunSummary], out: Path) -> Path:
    """TTFT CDF per fabric over all its repeats."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    by_fabric: dict[str, list[float]] = {}
    for r in runs:
        for rec in read_jsonl(run_dir(r) / "requests.jsonl"):
            if rec.get("outcome") == "ok" and rec.get("ttft_s") is not None:
                by_fabric.setdefault(r.variant, []).append(float(rec["ttft_s"]))
    for fabric, vals in sorted(by_fabric.items()):
        vals.sort()
        ys = [(i + 1) / len(vals) for i in range(len(vals))]
        ax.step(vals, ys, where="post", label=f"{fabric} (n={len(vals)})")
    ax.set_xlabel("time to first token (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT CDF (client-measured, all repeats)")
    ax.grid(alpha=0.3)
    if by_fabric:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no request answered", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_throughput(runs: Sequence[RunSummary], out: Path) -> Path:
    """Completed requests/s over time, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        if r.throughput_series:
            xs, ys = zip(*r.throughput_series, strict=True)
            ax.plot(xs, ys, label=f"{r.variant} {run_dir(r).name[-6:]}", alpha=0.8)
    shaded = next((r for r in runs if fault_spans(r)), None)
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


def fault_spans(run: RunSummary) -> tuple[tuple[float, float], ...]:
    """The run's fault windows on the load generator's clock; none without faults."""
    return run.faults.spans_s if run.faults is not None else ()


def _shade_faults(ax: Any, run: RunSummary) -> None:
    for i, (s, e) in enumerate(fault_spans(run)):
        ax.axvspan(s, e, color="red", alpha=0.12, label="fault" if i == 0 else None)


def plot_fault_timeline(runs: Sequence[RunSummary], out: Path) -> Path:
    """TTFT of every request by send time, failed ones marked, fault windows shaded: the first
    run of each label, one panel per label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    firsts: dict[str, RunSummary] = {}
    for r in runs:
        firsts.setdefault(r.variant, r)
    fig, axes = plt.subplots(
        len(firsts), 1, figsize=(8, 2.2 * len(firsts) + 0.6), sharex=True, squeeze=False
    )
    for ax, (label, r) in zip(axes[:, 0], sorted(firsts.items()), strict=True):
        recs = read_jsonl(run_dir(r) / "requests.jsonl")
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
        ax.set_title(f"{label} (run {run_dir(r).name.rsplit('-', 1)[-1]})", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("request sent, seconds since load start")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def heatmap_rows(
    data: dict[str, Any], capacity_bps: dict[str, float]
) -> list[tuple[str, list[float]]]:
    """The heatmap's rows from `series.json`, sorted by name: every switch port's transmit
    (`a0:3>h5`) and, in runs that exported the receive counters, every host's transmit into its
    switch port (`h5>a0:3`), as utilization between consecutive samples."""
    rows: list[tuple[str, list[float]]] = []
    for s in data.get("series", []):
        m = s["metric"]
        peer = m.get("peer", "?")
        if m.get("__name__") == PORT_TX_BYTES:
            key = f"{m['switch']}:{m['port']}>{peer}"
        elif m.get("__name__") == PORT_RX_BYTES and peer[:1] == "h" and peer[1:].isdigit():
            key = f"{peer}>{m['switch']}:{m['port']}"
        else:
            continue
        cap = capacity_bps.get(f"{m['switch']}:{m['port']}")
        vals = [(float(t), float(v)) for t, v in s["values"]]
        util = []
        for (t0, v0), (t1, v1) in itertools.pairwise(vals):
            rate = max(v1 - v0, 0.0) * 8 / max(t1 - t0, 1e-9)
            util.append(rate / cap if cap else 0.0)
        if util:
            rows.append((key, util))
    return sorted(rows)


def heatmap_scale(grid: Sequence[Sequence[float]]) -> float:
    """The top of the heatmap's colour scale: the observed peak utilization, at least 1% (an
    idle run stays dark) and at most 1."""
    peak = max((v for row in grid for v in row), default=0.0)
    return min(1.0, max(0.01, peak))


def plot_port_heatmap(run: RunSummary, out: Path, capacity_bps: dict[str, float]) -> Path:
    """Per-link utilization over time of one run, one row per direction (`heatmap_rows`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads((run_dir(run) / "series.json").read_text())
    rows = heatmap_rows(data, capacity_bps)
    fig, ax = plt.subplots(figsize=(8, max(3, 0.12 * len(rows) + 1)))
    if rows:
        width = max(len(u) for _, u in rows)
        grid = [u + [0.0] * (width - len(u)) for _, u in rows]
        # The colours span what was observed: at a few percent of load a 0-1 scale paints every
        # cell the same. The colour bar says where the scale tops out.
        top = heatmap_scale(grid)
        im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=top, interpolation="none")
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([k for k, _ in rows], fontsize=5)
        fig.colorbar(im, ax=ax, label=f"utilization (scale tops at the peak, {top:.0%})")
    ax.set_xlabel(f"time ({data.get('step', 2):g} s steps)")
    ax.set_title(f"Per-link utilization, both directions: {run.variant}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
