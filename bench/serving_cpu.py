"""Benchmark: CPU-ms per request of the gateway, prefill and decode processes (issue 20 item 3),
for several variants of the Python runtime side by side in one run.

    .venv/bin/python -m bench.serving_cpu                                 # 4 variants x 3
    .venv/bin/python -m bench.serving_cpu --variants stock,uvloop --repeats 5 --requests 300

Each repeat starts the loopback cluster (`zcube_lab.serving.cluster.LocalCluster`, as `zcube-lab
serve --local`: one prefill, one decode, the gateway, KV over 127.0.0.1 and 127.0.0.2) once per
variant, in turn (stock, uvloop, orjson, both, stock, uvloop, ...), so a neighbour's load on the
machine falls on every variant alike; each figure is the median over the repeats, with the
lowest and highest beside it. A run warms up (`--warmup` requests), reads each role process's
utime + stime (/proc/PID/stat), sends `--requests` streamed completions open-loop at `--rate`
req/s through the gateway (each `--prompt` words, `--tokens` tokens with `ignore_eos`), waits
for the last one, and reads the CPU again: CPU-ms per request is the difference over the
requests. Every request must stream all its tokens, or the run fails.

`--profile DIR` instead runs the first variant once with `py-spy record --nonblocking` (100 Hz,
raw collapsed stacks, DIR/ROLE.txt) attached to each role during the load, and prints each
role's top functions by own samples and by inclusive samples (our code only).
`--idle S` instead measures the cluster with no load: after one request and 3 s of settling,
each role's CPU over S seconds, as cores (CPU-seconds per second), per repeat and variant.

Variants (measurement only; nothing in zcube_lab/serving/ knows of them): a `sitecustomize` put
first on the role processes' PYTHONPATH sets uvloop's event-loop policy (aiohttp's `run_app` then
makes a uvloop loop) and/or replaces `json.dumps`/`json.loads` process-wide with orjson-backed
functions (compact output as our call sites ask; `ensure_ascii` and `indent` are ignored), so
every JSON call in the roles, as written, goes through orjson. `kv-randbytes` puts back
prefill's KV buffer as it was made before (every byte drawn from `random.Random`);
`lease-poll` makes prefill's lease loop tick every second with nothing held, as it used to
(with `--idle`). Writes
bench/results/serving_cpu.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import aiohttp
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from zcube_lab.serving.cluster import ClusterSpec, LocalCluster

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "bench" / "results" / "serving_cpu.json"
IDLE_RESULTS = ROOT / "bench" / "results" / "serving_cpu_idle.json"
ROLES = ("gateway", "prefill", "decode")
VARIANTS = ("stock", "uvloop", "orjson", "both", "kv-randbytes", "lease-poll")
DEFAULT_VARIANTS = VARIANTS[:4]
CLK_TCK = os.sysconf("SC_CLK_TCK")

SITECUSTOMIZE = """\
import os

_variant = os.environ.get("ZCUBE_BENCH_VARIANT", "stock")
if _variant in ("uvloop", "both"):
    import asyncio

    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
if _variant in ("orjson", "both"):
    import json

    import orjson

    _loads = orjson.loads

    def _dumps(obj, *args, **kwargs):
        return orjson.dumps(obj).decode()

    json.dumps = _dumps
    json.loads = _loads
if _variant == "kv-randbytes":
    import random

    import zcube_lab.serving.kvstore

    def _drawn(request_id, seed, num_bytes):
        return random.Random(f"kv:{seed}:{request_id}").randbytes(num_bytes)

    zcube_lab.serving.kvstore.make_kv_buffer = _drawn
if _variant == "lease-poll":
    import zcube_lab.serving.kvstore

    # prefill's lease loop waits while nothing is held; never empty, it ticks as it used to
    zcube_lab.serving.kvstore.KVStore.__len__ = lambda self: 1
"""


@contextlib.contextmanager
def variant_cluster(variant: str, site_dir: Path) -> Iterator[LocalCluster]:
    """The loopback cluster, its role processes started with `variant` and `site_dir`'s
    sitecustomize first on their path; the environment is put back after."""
    env_before = dict(os.environ)
    os.environ["ZCUBE_BENCH_VARIANT"] = variant
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site_dir), str(ROOT)])
    try:
        with LocalCluster(ClusterSpec(kv_addresses=2, kv_streams=2)) as c:
            yield c
    finally:
        os.environ.clear()
        os.environ.update(env_before)


def cpu_ms(pid: int) -> float:
    """utime + stime of one process, in ms."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / CLK_TCK


def role_cpu(cluster: LocalCluster) -> dict[str, float]:
    """CPU-ms so far of each role (summed over its processes)."""
    out = dict.fromkeys(ROLES, 0.0)
    for rp in cluster.processes:
        if rp.role in out:
            out[rp.role] += cpu_ms(rp.proc.pid)
    return out


async def _one(session: aiohttp.ClientSession, url: str, body: dict) -> int:
    tokens = 0
    async with session.post(url + "/v1/completions", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"status {r.status}: {await r.text()}")
        async for line in r.content:
            if line.startswith(b"data: {"):
                tokens += 1
    return tokens


async def drive(url: str, n: int, rate: float, prompt: int, tokens: int) -> float:
    """Send n streamed requests open-loop at `rate`; return the seconds until the last ended."""
    body = {
        "model": "tiny",
        "prompt": "w " * prompt,
        "max_tokens": tokens,
        "stream": True,
        "ignore_eos": True,
    }
    loop = asyncio.get_running_loop()
    start = loop.time()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as s:

        async def at(i: int) -> int:
            await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
            return await _one(s, url, body)

        got = await asyncio.gather(*(at(i) for i in range(n)))
    if got != [tokens] * n:
        bad = sum(g != tokens for g in got)
        raise RuntimeError(f"{bad} of {n} requests did not stream {tokens} tokens")
    return loop.time() - start


def one_run(variant: str, site_dir: Path, args: argparse.Namespace) -> dict[str, float]:
    """Start the cluster with this variant, drive the load, return CPU-ms per request by role."""
    with variant_cluster(variant, site_dir) as c:
        asyncio.run(drive(c.gateway_url, args.warmup, args.rate, args.prompt, args.tokens))
        before = role_cpu(c)
        wall = asyncio.run(drive(c.gateway_url, args.requests, args.rate, args.prompt, args.tokens))
        after = role_cpu(c)
    out = {r: (after[r] - before[r]) / args.requests for r in ROLES}
    out["total"] = sum(out[r] for r in ROLES)
    out["wall_s"] = wall
    return out


def profile_run(variant: str, site_dir: Path, args: argparse.Namespace, out: Path) -> None:
    """One run with py-spy attached to each role during the load; print the hot spots."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out.mkdir(parents=True, exist_ok=True)
    seconds = int(args.requests / args.rate) + 2
    with variant_cluster(variant, site_dir) as c:
        asyncio.run(drive(c.gateway_url, args.warmup, args.rate, args.prompt, args.tokens))
        spies = [
            subprocess.Popen(
                [
                    spy,
                    "record",
                    "--nonblocking",
                    "-r",
                    "100",
                    "-d",
                    str(seconds),
                    "-f",
                    "raw",
                    "-o",
                    str(out / f"{rp.role}.txt"),
                    "-p",
                    str(rp.proc.pid),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for rp in c.processes
            if rp.role in ROLES
        ]
        time.sleep(1.0)  # py-spy attached
        asyncio.run(drive(c.gateway_url, args.requests, args.rate, args.prompt, args.tokens))
        for sp in spies:
            sp.wait(timeout=seconds + 30)
    for role in ROLES:
        own, incl, total = hot_spots((out / f"{role}.txt").read_text())
        print(f"\n{role}: {total} samples; top own (all code), then inclusive (ours)")
        for name, n in own.most_common(args.top):
            print(f"  own  {100 * n / total:5.1f}%  {name}")
        for name, n in incl.most_common(args.top):
            print(f"  incl {100 * n / total:5.1f}%  {name}")


def hot_spots(raw: str) -> tuple[Counter[str], Counter[str], int]:
    """From py-spy's raw format (`frame;frame;... count`, root first): samples per leaf frame,
    samples per frame of our packages anywhere on the stack (once per stack), and the total."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] += n
        ours = {f for f in frames if "zcube_lab/serving/" in f or "zcube_lab/" in f}
        for f in ours:
            incl[f] += n
    return own, incl, total


def idle_run(variant: str, site_dir: Path, args: argparse.Namespace) -> dict[str, float]:
    """Cores each role uses over `args.idle` seconds with no load."""
    with variant_cluster(variant, site_dir) as c:
        asyncio.run(drive(c.gateway_url, 1, 1.0, args.prompt, args.tokens))
        time.sleep(3.0)
        before, t0 = role_cpu(c), time.monotonic()
        time.sleep(args.idle)
        after, t1 = role_cpu(c), time.monotonic()
    out = {r: (after[r] - before[r]) / 1000 / (t1 - t0) for r in ROLES}
    out["total"] = sum(out[r] for r in ROLES)
    return out


def summarize(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Median, min and max of each figure per variant."""
    return {
        v: {
            k: {
                "median": statistics.median(r[k] for r in rs),
                "min": min(r[k] for r in rs),
                "max": max(r[k] for r in rs),
            }
            for k in rs[0]
        }
        for v, rs in runs.items()
    }


def table(
    summary: dict[str, dict[str, dict[str, float]]], repeats: int, unit: str = "CPU-ms per request"
) -> Table:
    """Roles down, variants across: median [min-max] of `unit`, and the change of the median
    against the first variant."""
    variants = list(summary)
    t = Table(title=escape(f"{unit}, median [min-max] of {repeats} alternating repeats"))
    t.add_column("role")
    for v in variants:
        t.add_column(v, justify="right")
    base = summary[variants[0]]
    for role in (*ROLES, "total"):
        cells = []
        for v in variants:
            s = summary[v][role]
            text = f"{s['median']:.3g} [{s['min']:.3g}-{s['max']:.3g}]"
            if v != variants[0] and base[role]["median"] > 0:
                text += f" {(s['median'] / base[role]['median'] - 1) * 100:+.0f}%"
            cells.append(text)
        t.add_row(role, *cells)
    return t


def main(argv: Sequence[str] | None = None) -> int:
    """Run every variant `--repeats` times, alternating; print and save the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help="comma-separated, of: " + ", ".join(VARIANTS),
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--rate", type=float, default=10.0, help="requests per second")
    p.add_argument("--prompt", type=int, default=500, help="prompt words (tokens)")
    p.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    p.add_argument("--out", type=Path, help=f"default {RESULTS.name}, idle: {IDLE_RESULTS.name}")
    p.add_argument("--profile", type=Path, metavar="DIR", help="profile one run instead")
    p.add_argument("--idle", type=float, metavar="S", help="measure S seconds of no load")
    p.add_argument("--top", type=int, default=15, help="hot spots printed per role")
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    if unknown := set(variants) - set(VARIANTS):
        p.error(f"unknown variants: {sorted(unknown)}")
    unit = "CPU-ms per request" if args.idle is None else "cores (CPU-s per s) idle"
    out = args.out or (RESULTS if args.idle is None else IDLE_RESULTS)
    console = Console()
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="zcube-serving-cpu-") as d:
        site_dir = Path(d)
        (site_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
        if args.profile is not None:
            profile_run(variants[0], site_dir, args, args.profile)
            return 0
        for rep in range(args.repeats):
            for v in variants:
                t0 = time.monotonic()
                r = one_run(v, site_dir, args) if args.idle is None else idle_run(v, site_dir, args)
                runs[v].append(r)
                console.print(
                    f"repeat {rep + 1} {v}: "
                    + ", ".join(f"{k} {r[k]:.4g}" for k in (*ROLES, "total"))
                    + f" {unit} ({time.monotonic() - t0:.0f} s)"
                )
    summary = summarize(runs)
    console.print(table(summary, args.repeats, unit))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs, "summary": summary},
            indent=1,
        )
        + "\n"
    )
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
