"""bench/serving_cpu.py without a cluster: a process's CPU read from /proc, py-spy's raw stacks
folded into own and inclusive hot spots, medians and spreads per variant, the variant hook."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.serving_cpu import SITECUSTOMIZE, cpu_ms, hot_spots, summarize, table


def test_cpu_ms_grows_with_this_process_s_work() -> None:
    before = cpu_ms(os.getpid())
    end = time.process_time() + 0.1
    while time.process_time() < end:
        pass
    assert cpu_ms(os.getpid()) - before >= 50


def test_hot_spots_count_leaves_and_our_frames_once_per_stack() -> None:
    raw = "\n".join(
        [
            "run (zcube_lab/serving/decode.py:10);_emit (zcube_lab/serving/decode_engine.py:5);"
            "dumps (json/__init__.py:1) 7",
            "run (zcube_lab/serving/decode.py:10);run (zcube_lab/serving/decode.py:10);"
            "select (selectors.py:3) 3",
            "garbage",
        ]
    )
    own, incl, total = hot_spots(raw)
    assert total == 10
    assert own["dumps (json/__init__.py:1)"] == 7 and own["select (selectors.py:3)"] == 3
    assert incl["run (zcube_lab/serving/decode.py:10)"] == 10  # a recursive frame counts once
    assert incl["_emit (zcube_lab/serving/decode_engine.py:5)"] == 7
    assert "select (selectors.py:3)" not in incl


def test_summary_is_median_and_range_and_the_table_shows_the_change() -> None:
    runs = {
        "stock": [{"gateway": g, "total": g} for g in (10.0, 12.0, 11.0)],
        "uvloop": [{"gateway": g, "total": g} for g in (8.0, 9.0, 20.0)],
    }
    s = summarize(runs)
    assert s["stock"]["gateway"] == {"median": 11.0, "min": 10.0, "max": 12.0}
    assert s["uvloop"]["gateway"]["median"] == 9.0
    t = table({v: {**x, "prefill": x["gateway"], "decode": x["gateway"]} for v, x in s.items()}, 3)
    cells = [c for col in t.columns for c in col._cells]
    assert "9 [8-20] -18%" in cells


def test_the_variant_hook_switches_loop_and_json_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    probe = (
        "import asyncio, json; print(type(asyncio.new_event_loop()).__name__, json.dumps([1, 2]))"
    )

    def run(variant: str) -> str:
        env = {**os.environ, "PYTHONPATH": str(tmp_path), "ZCUBE_BENCH_VARIANT": variant}
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
        return out.stdout.strip()

    assert run("stock") == "_UnixSelectorEventLoop [1, 2]"
    assert run("uvloop") == "Loop [1, 2]"  # uvloop's loop
    assert run("orjson") == "_UnixSelectorEventLoop [1,2]"  # orjson's compact dumps
    assert run("both") == "Loop [1,2]"


def test_the_before_variants_put_the_old_kv_buffer_and_lease_tick_back(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    root = str(Path(__file__).resolve().parents[2])
    probe = (
        "import random; import zcube_lab.serving.prefill; "
        "from zcube_lab.serving.kvstore import make_kv_buffer, KVStore; "
        "print(make_kv_buffer('a', 0, 8) == random.Random('kv:0:a').randbytes(8), "
        "len(KVStore(1)))"
    )

    def run(variant: str) -> str:
        env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{root}", "ZCUBE_BENCH_VARIANT": variant}
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
        return out.stdout.strip()

    assert run("stock") == "False 0"
    assert run("kv-randbytes") == "True 0"
    assert run("lease-poll") == "False 1"
