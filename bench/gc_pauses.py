"""Benchmark: Python's garbage-collector pauses in the role processes, with the start-up heap
frozen (`zcube_lab.serving.gcpause.freeze_heap`, as the roles run) and without, side by side.

    .venv/bin/python -m bench.gc_pauses                        # 3 alternating repeats each
    .venv/bin/python -m bench.gc_pauses --repeats 5 --requests 400 --rate 8

First, in this process: the time of one full (generation 2) collection with the role modules
imported, before and after `gc.freeze()` (median of 5). Then each repeat starts the loopback
cluster (`zcube_lab.serving.cluster.LocalCluster`, as `zcube-lab serve --local`) once per variant,
in turn (`frozen`, `unfrozen`, `frozen`, ...), sends `--requests` streamed completions open-loop at
`--rate` req/s through the gateway, and reads every role's /metrics: its collections of each
generation and their pauses (`zcube:python_gc_pause_seconds`, wall time), and the decode
engine's steps and how many woke more than a quarter of their modelled step late
(`zcube:engine_step_lateness_ratio`, the verdict's rule). `unfrozen` is measurement only: a
`sitecustomize` first on the roles' PYTHONPATH makes `gc.freeze` do nothing. Figures are medians
over the repeats with the lowest and highest. Writes bench/results/gc_pauses.json.

    .venv/bin/python -m bench.gc_pauses --lab "--fabric zcube --n 2 --gpus-per-server 2 \
        --workload coding-agent --rate 1 --duration 15 --drain 20 --kv-transport mrc"

instead runs one lab run (root) with every process recording its collections, and prints for
each process those over 1 ms, and which of them fell inside the load window.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from bench.serving_cpu import drive, variant_cluster

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "bench" / "results" / "gc_pauses.json"
VARIANTS = ("frozen", "unfrozen")
ROLES = ("gateway", "prefill", "decode")
LATE_SHARE = "0.25"  # a step this share of its modelled step late counts against the run
SITECUSTOMIZE = """\
import gc
import os

if os.environ.get("ZCUBE_BENCH_VARIANT") == "unfrozen":
    gc.freeze = lambda: None
"""
# --lab: every Python process of a lab run records its collections (generation, ms, when) and
# writes them at exit; measurement only.
LAB_SITECUSTOMIZE = """\
import atexit, gc, json, os, sys, time

_out, _t = [], [0.0]

def _cb(phase, info):
    if phase == "start":
        _t[0] = time.perf_counter()
    else:
        _out.append((info["generation"], (time.perf_counter() - _t[0]) * 1e3, time.time()))

gc.callbacks.append(_cb)

def _dump():
    path = os.path.join(os.environ["ZCUBE_GC_LOG"], f"{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump({"argv": sys.argv[:1], "pauses": _out}, f)

if os.environ.get("ZCUBE_GC_LOG"):
    atexit.register(_dump)
"""


def full_collection_ms(repeats: int = 5) -> dict[str, float]:
    """One full collection's time in this process, with the roles' modules imported."""
    import zcube_lab.serving.decode
    import zcube_lab.serving.gateway
    import zcube_lab.serving.prefill  # noqa: F401

    def timed() -> float:
        samples = []
        for _ in range(repeats):
            t = time.perf_counter()
            gc.collect(2)
            samples.append((time.perf_counter() - t) * 1e3)
        return statistics.median(samples)

    out = {"objects": float(len(gc.get_objects())), "before_freeze_ms": timed()}
    gc.freeze()
    out["after_freeze_ms"] = timed()
    gc.unfreeze()
    return out


def scrape(url: str) -> dict[str, float]:
    """From one role's /metrics: collections and pause seconds per generation, the longest
    pause, and (an engine) its steps and those later than `LATE_SHARE` of their step."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            g = s.labels.get("generation")
            if s.name == "zcube:python_gc_pause_seconds_count":
                out[f"gen{g}_count"] = s.value
            elif s.name == "zcube:python_gc_pause_seconds_sum":
                out[f"gen{g}_ms"] = s.value * 1e3
            elif s.name == "zcube:python_gc_pause_longest_seconds":
                out[f"gen{g}_longest_ms"] = s.value * 1e3
            elif s.name == "zcube:engine_step_lateness_ratio_count":
                out["steps"] = out.get("steps", 0.0) + s.value
            elif s.name == "zcube:engine_step_lateness_ratio_bucket" and s.labels["le"] in (
                LATE_SHARE,
                "+Inf",
            ):
                key = "on_time" if s.labels["le"] == LATE_SHARE else "all"
                out[key] = out.get(key, 0.0) + s.value
    if "all" in out:
        out["late_steps"] = out.pop("all") - out.pop("on_time", 0.0)
    return out


def one_run(variant: str, site_dir: Path, args: argparse.Namespace) -> dict[str, dict]:
    """Start the cluster with this variant, drive the load, read each role's figures."""
    with variant_cluster(variant, site_dir) as c:
        asyncio.run(drive(c.gateway_url, args.requests, args.rate, args.prompt, args.tokens))
        urls = {rp.role: rp.url for rp in c.processes if rp.role in ROLES and rp.url}
        return {role: scrape(url) for role, url in urls.items()}


def lab_run(args: argparse.Namespace) -> None:
    """One lab run (`zcube-lab run ...` from `--lab`), every process recording its collections;
    print, per role process, its collections and those over 1 ms before and inside the load
    window (the first KV pull's start to the last one's end)."""
    with tempfile.TemporaryDirectory() as site, tempfile.TemporaryDirectory() as logs:
        Path(site, "sitecustomize.py").write_text(LAB_SITECUSTOMIZE)
        results = Path(logs, "results")
        env = os.environ | {
            "PYTHONPATH": os.pathsep.join([site, str(ROOT)]),
            "ZCUBE_GC_LOG": logs,
        }
        argv = [sys.executable, "-m", "zcube_lab.cli", "run", *args.lab.split(),
                "--results", str(results)]  # fmt: skip
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        pulls = [
            json.loads(line)
            for log in results.glob("*/logs/kv-decode-*.jsonl")
            for line in log.read_text().splitlines()
        ]
        start, end = min(p["start"] for p in pulls), max(p["end"] for p in pulls)
        console = Console()
        console.print(f"load window {end - start:.1f} s, {len(pulls)} KV pulls")
        for log in sorted(Path(logs).glob("*.json")):
            d = json.loads(log.read_text())
            role = Path(d["argv"][0]).stem
            long = [(g, ms, t) for g, ms, t in d["pauses"] if ms > 1.0]
            inside = [f"gen{g} {ms:.1f} ms at {t - start:.1f} s" for g, ms, t in long
                      if start <= t <= end]  # fmt: skip
            console.print(
                f"{role}: {len(d['pauses'])} collections, {len(long)} over 1 ms, "
                f"{len(long) - len(inside)} of them outside the load window; inside: "
                + (", ".join(inside) or "none")
            )


def _cell(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def table(runs: dict[str, list[dict[str, dict]]], repeats: int) -> Table:
    """Roles and figures down, variants across: median [min-max] over the repeats."""
    t = Table(title=f"GC pauses and late decode steps, median [min-max] of {repeats} repeats")
    t.add_column("role")
    t.add_column("figure")
    for v in runs:
        t.add_column(v, justify="right")
    figures = [
        ("gen2_count", "full collections", ".0f"),
        ("gen2_ms", "full collections, ms in all", ".1f"),
        ("gen2_longest_ms", "longest full collection, ms", ".1f"),
        ("gen1_count", "gen 1 collections", ".0f"),
        ("gen1_longest_ms", "longest gen 1 collection, ms", ".2f"),
    ]
    for role in ROLES:
        rows = figures + ([("late_steps", "steps > 25% late", ".0f"), ("steps", "steps", ".0f")]
                          if role == "decode" else [])  # fmt: skip
        for key, label, fmt in rows:
            cells = [_cell([r[role].get(key, 0.0) for r in rs], fmt) for rs in runs.values()]
            t.add_row(role, label, *cells)
    return t


def main(argv: Sequence[str] | None = None) -> int:
    """The in-process collection times, then the alternating cluster runs; print and save."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--rate", type=float, default=10.0, help="requests per second")
    p.add_argument("--prompt", type=int, default=500, help="prompt words (tokens)")
    p.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "--lab",
        metavar="ARGS",
        help="instead: one `zcube-lab run ARGS` (root), each process's collections in and "
        "outside the load window",
    )
    args = p.parse_args(argv)
    if args.lab:
        lab_run(args)
        return 0
    console = Console()
    heap = full_collection_ms()
    console.print(
        f"one full collection with the roles' modules imported ({heap['objects']:.0f} objects): "
        f"{heap['before_freeze_ms']:.2f} ms, after gc.freeze() {heap['after_freeze_ms']:.2f} ms"
    )
    runs: dict[str, list[dict[str, dict]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as site:
        Path(site, "sitecustomize.py").write_text(SITECUSTOMIZE)
        for i in range(args.repeats):
            for v in VARIANTS:
                console.print(f"repeat {i + 1}/{args.repeats}: {v}", style="dim")
                runs[v].append(one_run(v, Path(site), args))
    console.print(table(runs, args.repeats))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "heap": heap,
                                    "runs": runs}, indent=1))  # fmt: skip
    console.print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
