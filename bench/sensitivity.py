"""Benchmark: how much the lab's congestion model moves a result (issue 21 item 5).

    sudo .venv/bin/python -m bench.sensitivity --workload hotspot --rate 10 \\
        --fabrics zcube,roft,clos --buffer-models shared,time --modes cubic,bbr,lossless \\
        --seeds 1,2 --duration 20 --drain 20 --dilation 2 --out bench/results/sensitivity/hotspot
    .venv/bin/python -m bench.sensitivity --out bench/results/sensitivity/hotspot --report-only

One `zcube-lab run` per cell: a fabric under one switch buffer model (`--buffer-model`) and one
congestion mode, `cubic` and `bbr` (lossy ports, that TCP congestion control in every host:
`--cc`) or `lossless` (`--lossless`, PFC-like pauses, with the default congestion control),
for each seed (the same requests on every fabric). The fabrics are innermost, so the runs
compared with each other are neighbours in time. Every run's folder is kept under
`OUT/runs/<workload>-r<rate>-<buffer model>-<mode>-<fabric>-s<seed>/`; a cell whose
summary.json is there already is not run again, so an interrupted grid resumes where it
stopped (Ctrl-C tears the running lab down first).

At the lab's default scale (NIC 100 Mb/s, MTU 9000) `port-floor`, `shared` and `bytes` set the
same queue limits on every port (docs/DOMAIN.md, Switch buffer models: the TCP floor binds), so
the default grid runs `shared` and `time`, the two that differ there.

Per cell, medians over the seeds that were trustworthy (the count is shown; a cell with none
shows the first reason, with that run's switch drops and pauses for the record, and no
figures): switch drops, pauses, KV p50/p99 and TTFT p50/p99 (modelled), the deepest switch
queue (modelled ms) and the hottest link's peak share of its rate. Then, per buffer model and
mode, each fabric against the first one (`--fabrics`' first) in KV p99 and TTFT p99: the
conclusions that hold under every model are the ones whose sign does not change down that
table. Writes OUT/sensitivity.json and OUT/table.md (the tables as Markdown).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.labrun import ZCUBE, LabRun, run_argv
from zcube_lab.emulator.experiment.runconfig import run_argv_of
from zcube_lab.emulator.results.run.summary import RunSummary

MODES = ("cubic", "bbr", "lossless")
BUFFER_MODELS = ("port-floor", "shared", "bytes", "time")


@dataclass(frozen=True)
class Cell:
    """One run of the grid."""

    workload: str
    rate: float
    buffer_model: str
    mode: str
    fabric: str
    seed: int

    @property
    def key(self) -> str:
        return (
            f"{self.workload}-r{self.rate:g}-{self.buffer_model}-{self.mode}-{self.fabric}"
            f"-s{self.seed}"
        )

    def options(self) -> list[str]:
        """The `zcube-lab run` options this cell sets."""
        mode = {"lossless": True} if self.mode == "lossless" else {"congestion_control": self.mode}
        return [
            "--fabric", self.fabric,
            *run_argv_of(workload=self.workload, rate=self.rate, seed=self.seed,
                         buffer_model=self.buffer_model, **mode),
        ]  # fmt: skip


def grid(args: argparse.Namespace) -> list[Cell]:
    """Every cell, seeds outermost and fabrics innermost."""
    return [
        Cell(args.workload, args.rate, bm, mode, fabric, seed)
        for seed in args.seeds
        for bm in args.buffer_models
        for mode in args.modes
        for fabric in args.fabrics
    ]


def summary_of(out: Path, cell: Cell) -> dict[str, Any] | None:
    """The cell's summary.json, if it ran to the end, with its config.json's dilation."""
    found = sorted((out / "runs" / cell.key).glob("*/summary.json"))
    if not found:
        return None
    config = json.loads((found[-1].parent / "config.json").read_text())
    return json.loads(found[-1].read_text()) | {"dilation": config.get("dilation") or 1.0}


def run_cell(out: Path, cell: Cell, args: argparse.Namespace) -> int | None:
    """Run one cell (its progress on the terminal); the run's exit code."""
    options = [
        *cell.options(),
        *run_argv_of(duration_s=args.duration, drain_s=args.drain, dilation=args.dilation,
                     results_root=out / "runs" / cell.key),
    ]  # fmt: skip
    run = LabRun(run_argv(ZCUBE, options, args.extra)).start()
    try:
        while run.sleep(5.0):
            pass
    except KeyboardInterrupt:
        run.stop()
        raise
    return run.exit_code


def figures(s: dict[str, Any]) -> dict[str, float]:
    """The figures the table shows, from one summary."""
    qdisc = (s.get("health") or {}).get("qdisc") or {}
    # Switch ports' qdiscs (host NICs are h<N>-eth<M>): their drops are the fabric's; the
    # OpenFlow port counters behind fabric_stats.drops do not see a qdisc's drops.
    switch = [q for name, q in qdisc.items() if not re.match(r"h\d+-", name)]
    lossless = s.get("lossless") or {}
    ports = lossless.get("ports") or {}
    fs, tr, cl = s["fabric_stats"], s["transfers"], s["client"]
    return {
        "drops": float(sum(q.get("drops") or 0 for q in switch)),
        "pauses": float(sum(p.get("pauses", 0) for p in ports.values())),
        "paused_ports": float(len(ports)),
        "kv_p50_ms": (tr.get("kv_xfer_p50_s") or 0.0) * 1e3,
        "kv_p99_ms": (tr.get("kv_xfer_p99_s") or 0.0) * 1e3,
        "ttft_p50_s": cl.get("ttft_p50_s") or 0.0,
        "ttft_p99_s": cl.get("ttft_p99_s") or 0.0,
        "queue_ms": RunSummary.from_dict(s).clock.modelled(  # wall ms -> modelled
            max((q.get("peak_delay_ms") or 0.0 for q in switch), default=0.0)
        ),
        "peak_link": fs.get("peak_link_util") or 0.0,
    }


def aggregate(out: Path, cells: list[Cell]) -> dict[tuple, dict[str, Any]]:
    """Per (buffer model, mode, fabric): runs, trusted runs, first reason, median figures."""
    rows: dict[tuple, dict[str, Any]] = {}
    for c in cells:
        row = rows.setdefault(
            (c.buffer_model, c.mode, c.fabric), {"runs": 0, "trusted": [], "reason": None}
        )
        s = summary_of(out, c)
        if s is None:
            continue
        row["runs"] += 1
        if s.get("trustworthy"):
            row["trusted"].append(figures(s))
        elif row["reason"] is None:
            reasons = (s.get("health") or {}).get("reasons") or ["not trustworthy"]
            f = figures(s)  # for the record only: the drops and pauses behind the reason
            lost = f"switch drops {f['drops']:.0f}, pauses {f['pauses']:.0f}"
            row["reason"] = f"{reasons[0]} ({lost})"
    for row in rows.values():
        t = row["trusted"]
        row["median"] = {k: statistics.median(f[k] for f in t) for k in t[0]} if t else None
    return rows


COLUMNS = (
    ("drops", "switch drops", ".0f"),
    ("pauses", "pauses", ".0f"),
    ("kv_p50_ms", "KV p50 ms", ".0f"),
    ("kv_p99_ms", "KV p99 ms", ".0f"),
    ("ttft_p50_s", "TTFT p50 s", ".3f"),
    ("ttft_p99_s", "TTFT p99 s", ".2f"),
    ("queue_ms", "deepest switch queue ms", ".1f"),
    ("peak_link", "hottest link peak", ".0%"),
)


def rows_text(rows: dict[tuple, dict[str, Any]]) -> list[list[str]]:
    """The cells' table as text rows."""
    out = []
    for (bm, mode, fabric), row in rows.items():
        med = row["median"]
        trusted = f"{len(row['trusted'])}/{row['runs']}"
        if med is None:
            note = row["reason"] or "not run yet"
            out.append([bm, mode, fabric, trusted, *["-"] * len(COLUMNS), note])
        else:
            cells = [format(med[k], fmt) for k, _, fmt in COLUMNS]
            out.append([bm, mode, fabric, trusted, *cells, ""])
    return out


def against_first(rows: dict[tuple, dict[str, Any]], fabrics: Sequence[str]) -> list[list[str]]:
    """Per buffer model and mode, each fabric's KV p99 and TTFT p99 against the first fabric."""
    base_fabric, out = fabrics[0], []
    for (bm, mode, fabric), row in rows.items():
        if fabric == base_fabric:
            continue
        base = rows.get((bm, mode, base_fabric), {}).get("median")
        med = row["median"]
        if base is None or med is None:
            out.append([bm, mode, f"{base_fabric} vs {fabric}", "-", "-", "-"])
            continue

        def pct(k: str, b: dict = base, m: dict = med) -> str:
            return f"{(b[k] / m[k] - 1) * 100:+.0f}%" if m[k] else "-"

        drops = f"{base['drops']:.0f} / {med['drops']:.0f}"
        out.append([bm, mode, f"{base_fabric} vs {fabric}", pct("kv_p99_ms"),
                    pct("ttft_p99_s"), drops])  # fmt: skip
    return out


HEAD = ["buffer model", "mode", "fabric", "trusted", *[c[1] for c in COLUMNS], "why not"]
VS_HEAD = ["buffer model", "mode", "fabrics", "KV p99", "TTFT p99", "switch drops"]


def markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def report(out: Path, cells: list[Cell], fabrics: Sequence[str], console: Console) -> None:
    """Print both tables, write them as Markdown and the figures as JSON."""
    rows = aggregate(out, cells)
    for title, head, body in (
        ("Per cell: medians over the trustworthy seeds", HEAD, rows_text(rows)),
        (f"{fabrics[0]} against each fabric (+: {fabrics[0]} higher)", VS_HEAD,
         against_first(rows, fabrics)),
    ):  # fmt: skip
        t = Table(title=title)
        for h in head:
            t.add_column(h)
        for r in body:
            t.add_row(*r)
        console.print(t)
    md = markdown(HEAD, rows_text(rows)) + "\n\n" + markdown(VS_HEAD, against_first(rows, fabrics))
    (out / "table.md").write_text(md + "\n")
    data = [{"buffer_model": bm, "mode": mode, "fabric": f} | row
            for (bm, mode, f), row in rows.items()]  # fmt: skip
    (out / "sensitivity.json").write_text(json.dumps(data, indent=1))
    console.print(f"saved {out / 'table.md'} and {out / 'sensitivity.json'}")


def _names(allowed: Sequence[str]) -> Any:
    def parse(text: str) -> list[str]:
        names = [n for n in text.split(",") if n]
        if bad := [n for n in names if n not in allowed]:
            raise argparse.ArgumentTypeError(f"{bad}: allowed {', '.join(allowed)}")
        return names

    return parse


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Run the grid's missing cells in order, then print and save the tables."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workload", default="hotspot")
    p.add_argument("--rate", type=float, default=10.0)
    p.add_argument("--fabrics", type=_names(("zcube", "roft", "clos")), default="zcube,roft,clos")
    p.add_argument("--buffer-models", type=_names(BUFFER_MODELS), default="shared,time")
    p.add_argument("--modes", type=_names(MODES), default=",".join(MODES))
    p.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",")], default="1,2")
    p.add_argument("--duration", type=float, default=20.0, help="modelled seconds of arrivals")
    p.add_argument("--drain", type=float, default=20.0)
    p.add_argument("--dilation", type=float, default=2.0)
    p.add_argument("--out", type=Path, required=True, help="folder (resumable)")
    p.add_argument("--report-only", action="store_true", help="print the tables, run nothing")
    p.add_argument("extra", nargs="*", help="more `zcube-lab run` options, after --")
    args = p.parse_args(argv)
    # A background job may start with SIGINT ignored; SIGTERM and SIGINT both stop the grid
    # after the running lab's teardown.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    console = Console(width=220)
    cells = grid(args)
    args.out.mkdir(parents=True, exist_ok=True)
    todo = [c for c in cells if summary_of(args.out, c) is None]
    if not args.report_only:
        console.print(f"{len(cells)} cells, {len(cells) - len(todo)} done, {len(todo)} to run")
        t0 = time.monotonic()
        with contextlib.suppress(KeyboardInterrupt):
            for i, c in enumerate(todo):
                left = (time.monotonic() - t0) / i * (len(todo) - i) / 60 if i else None
                eta = f", about {left:.0f} min left" if left is not None else ""
                console.print(f"[{i + 1}/{len(todo)}] {c.key}{eta}", style="bold")
                code = run_cell(args.out, c, args)
                if code:
                    console.print(f"{c.key}: the run exited {code}", style="red")
    report(args.out, cells, args.fabrics, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
