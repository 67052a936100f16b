"""Tokens per GPU-second at the SLO: TPS_per_GPU read at each repeat's capacity rate, the
median over repeats, beside the capacity in sweep.json and the capacity table."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.unit.test_sweep import rp
from zcube_lab.emulator.results.run.goodput import parse_slo
from zcube_lab.emulator.results.sweep.gputhroughput import at_capacity, per_gpu
from zcube_lab.emulator.results.sweep.sweeppoints import SweepResult
from zcube_lab.emulator.results.sweep.sweepreport import tokens_rows


def _tps(decode: float, prefill: float) -> dict:
    return {"TPS_per_GPU": {"output": decode, "input": prefill, "decode_gpus": 8,
                            "prefill_gpus": 8}}  # fmt: skip


def _result() -> SweepResult:
    runs = (
        # zcube: both repeats meet 1 and 2, so the capacity is 2 in each: read there
        replace(rp("zcube", 1.0, 1), bmwg=_tps(10.0, 100.0)),
        replace(rp("zcube", 2.0, 1), bmwg=_tps(20.0, 200.0)),
        replace(rp("zcube", 1.0, 2), bmwg=_tps(11.0, 110.0)),
        replace(rp("zcube", 2.0, 2), bmwg=_tps(24.0, 240.0)),
        # roft: repeat 1 misses 2 (capacity 1), repeat 2 misses 1 (capacity 0: no point)
        replace(rp("roft", 1.0, 1), bmwg=_tps(9.0, 90.0)),
        replace(rp("roft", 2.0, 1, met=False), bmwg=_tps(15.0, 150.0)),
        replace(rp("roft", 1.0, 2, met=False), bmwg=_tps(8.0, 80.0)),
    )
    slo = parse_slo("ttft_p99=2s")
    return SweepResult("production", slo, (1.0, 2.0), 2, "roft", ("zcube", "roft"), runs)


def test_read_at_each_repeats_capacity() -> None:
    r = _result()
    rows = {t.variant: t for t in at_capacity(r.runs, r.max_rates())}
    z, f = rows["zcube"], rows["roft"]
    assert (z.decode, z.prefill, z.repeats) == (pytest.approx(22.0), pytest.approx(220.0), 2)
    assert (f.decode, f.prefill, f.repeats) == (9.0, 90.0, 1)


def test_in_sweep_json_and_the_capacity_table() -> None:
    r = _result()
    data = json.loads(json.dumps(r.to_dict()))
    by = {t["variant"]: t for t in data["tokens_per_gpu_at_capacity"]}
    assert by["zcube"]["decode"] == pytest.approx(22.0)
    rows = {row[0]: row for row in tokens_rows(r)}
    # zcube met every rate tried: its capacity is the ladder's top, a lower bound
    assert rows["zcube"] == ["zcube", ">= 2", "22.0", "220", "2 (2 censored)"]
    assert rows["roft"] == ["roft", "0.5 [0-1]", "9.00", "90.0", "1"]  # median of 0 and 1


def test_a_run_without_the_kpi_has_no_figure() -> None:
    assert per_gpu({}) == (None, None)
