"""Open-loop replay sharded over Locust workers: the shards of a plan are exactly the plan, a
sharded run sends its shard in the whole plan's window, and merging the shards' records gives
what one process writes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.workloads.client import RequestResult
from zcube_lab.workloads.locust_ext import WorkloadRun, build_run
from zcube_lab.workloads.openloop import RequestRecord
from zcube_lab.workloads.profiles import load_profile
from zcube_lab.workloads.requests import generate_requests
from zcube_lab.workloads.shards import (
    WORKERS_ENV,
    locust_workers,
    merge_shard_files,
    merge_shards,
    parse_shard,
    shard_files,
    shard_plan,
)


def test_plan_shard_option_parses_k_of_w() -> None:
    assert parse_shard("1/3") == (1, 3)
    assert parse_shard(" 0/1 ") == (0, 1)
    assert parse_shard(None) is None and parse_shard("") is None
    for bad in ("3/3", "-1/2", "1/0", "1", "a/b", "1/2/3", "1:2"):
        with pytest.raises(ConfigError) as e:
            parse_shard(bad)
        assert e.value.field == "plan_shard", bad


def test_three_shards_are_exactly_the_plan() -> None:
    plan = generate_requests(load_profile("coding-agent", length_scale=0.05), "poisson", 20, 5, 3)
    shards = [shard_plan(plan, (k, 3)) for k in range(3)]
    assert all(r.index % 3 == k for k, shard in enumerate(shards) for r in shard)
    union = sorted((r for shard in shards for r in shard), key=lambda r: r.index)
    # Same requests, same planned times: nothing lost, moved or sent twice.
    assert union == plan
    assert [(r.index, r.t) for r in union] == [(r.index, r.t) for r in plan]
    assert shard_plan(plan, None) == plan


def _options(tmp_path: Path, shard: int | None, **kw: Any) -> SimpleNamespace:
    requests, summary = shard_files(tmp_path, shard)
    base = {
        "workload": "chat",
        "seed": 5,
        "arrival": "poisson",
        "rate": 8.0,
        "burstiness": None,
        "stages": None,
        "model": "stub",
        "trace": None,
        "length_scale": 0.05,
        "duration": 6.0,
        "run_time": None,
        "requests_out": str(requests),
        "summary_out": str(summary),
        "request_timeout": 30.0,
        "max_in_flight": 64,
        "plan_shard": None if shard is None else f"{shard}/3",
    }
    return SimpleNamespace(**(base | kw))


def _run(tmp_path: Path, shard: int | None, **kw: Any) -> WorkloadRun:
    events = SimpleNamespace(request=SimpleNamespace(fire=lambda **_: None))
    options = _options(tmp_path, shard, **kw)
    return build_run(
        SimpleNamespace(host="http://127.0.0.1:1", parsed_options=options, events=events)
    )


def test_a_shard_keeps_the_whole_plans_window(tmp_path: Path) -> None:
    whole = _run(tmp_path, None)
    shards = [_run(tmp_path, k) for k in range(3)]
    assert [r.shard for r in shards] == [(0, 3), (1, 3), (2, 3)] and whole.shard is None
    assert sorted((r for s in shards for r in s.plan), key=lambda r: r.index) == whole.plan
    assert {s.duration for s in shards} == {whole.duration}
    # A trace without --duration: the window ends after the whole plan's last request.
    trace = [_run(tmp_path, k, workload="trace", arrival=None, duration=None) for k in (None, 0)]
    assert trace[1].duration == trace[0].duration
    assert trace[1].plan[-1].index < trace[0].plan[-1].index


def test_a_bad_shard_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _run(tmp_path, None, plan_shard="3/3")
    assert e.value.field == "plan_shard"


def _result(i: int) -> RequestResult:
    """A request's fate as a function of its index: mostly ok, some timeouts and refusals."""
    if i % 7 == 3:
        return RequestResult("timeout", 0, 2.0, error="read timeout")
    if i % 11 == 5:
        return RequestResult("overload", 0, 0.0, error="driver in-flight limit")
    return RequestResult("ok", 200, 0.3 + 0.01 * (i % 5), 0.05 + 0.001 * i, (0.01,) * 3, 4)


def _replay(run: WorkloadRun) -> None:
    """Hand the run its plan's records (late by a few ms, a few sent after the window) and end
    it, as the driver would."""
    for req in run.plan:
        sent = req.t + 0.002 * (req.index % 4) + (2.0 if req.index % 13 == 0 else 0.0)
        run.record(RequestRecord(req, sent, _result(req.index), 1.7e9 + sent))
    run.stop()


def test_merging_the_shards_gives_the_one_process_files(tmp_path: Path) -> None:
    whole_dir, shard_dir = tmp_path / "whole", tmp_path / "shards"
    whole_dir.mkdir()
    shard_dir.mkdir()
    _replay(_run(whole_dir, None))
    for k in range(3):
        _replay(_run(shard_dir, k))
    shard_summaries = [json.loads(shard_files(shard_dir, k)[1].read_text()) for k in range(3)]
    assert [s["shard"] for s in shard_summaries] == ["0/3", "1/3", "2/3"]

    merged = merge_shard_files(shard_dir, 3)
    whole_requests, whole_summary = shard_files(whole_dir, None)
    expected = json.loads(whole_summary.read_text())
    assert sum(s["planned"] for s in shard_summaries) == expected["planned"] == 48  # 8/s x 6 s
    assert "shard" not in merged and merged == expected
    assert set(expected["outcomes"]) == {"ok", "timeout", "overload"}
    assert expected["sent"] < expected["planned"]  # refusals
    assert expected["achieved_rate"] < expected["sent"] / expected["duration_s"]  # late ones
    assert json.loads(shard_files(shard_dir, None)[1].read_text()) == expected
    rows = [json.loads(x) for x in shard_files(shard_dir, None)[0].read_text().splitlines()]
    one = [json.loads(x) for x in whole_requests.read_text().splitlines()]
    assert rows == sorted(one, key=lambda r: (r["sent_s"], r["index"]))


def test_merge_refuses_shards_that_are_not_one_plan() -> None:
    def summary(shard: str, **kw: Any) -> dict[str, Any]:
        return {
            "shard": shard,
            "planned": 1,
            "duration_s": 5.0,
            "seed": 1,
            "mode": "open-loop",
        } | kw

    def row(index: int) -> dict[str, Any]:
        return {"index": index, "sent_s": 0.1 * index, "lag_s": 0.0, "outcome": "ok"} | {
            "ttft_s": 0.1,
            "e2e_s": 0.2,
            "output_tokens": 3,
        }

    merged, total = merge_shards([summary("1/2"), summary("0/2")], [[row(1)], [row(0), row(2)]])
    assert [r["index"] for r in merged] == [0, 1, 2] and total["sent"] == 3
    cases = [
        ([summary("0/2")], [[row(0)]]),  # shard 1 missing
        ([summary("0/2"), summary("0/2")], [[row(0)], [row(2)]]),  # shard 0 twice
        ([summary("0/2"), summary("1/2")], [[row(1)], [row(3)]]),  # a row in the wrong shard
        ([summary("0/2"), summary("1/2", seed=2)], [[row(0)], [row(1)]]),  # another plan
        ([summary("0/2"), {"planned": 1}], [[row(0)], [row(1)]]),  # not a sharded run
    ]
    for summaries, rows in cases:
        with pytest.raises(ValueError):
            merge_shards(summaries, rows)


def test_the_user_count_is_the_number_of_workers() -> None:
    assert locust_workers({}) == 1
    assert locust_workers({WORKERS_ENV: "3"}) == 3
    for bad in ("0", "-2", "two"):
        with pytest.raises(ConfigError) as e:
            locust_workers({WORKERS_ENV: bad})
        assert e.value.field == WORKERS_ENV
