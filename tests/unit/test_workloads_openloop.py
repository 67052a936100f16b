"""The open-loop driver: arrivals are not gated by completions, sends keep to the plan, the end
of a run cancels what is in flight; and the run summary's arithmetic."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest

from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.workloads.client import RequestResult
from zcube_lab.workloads.loadsummary import summarize
from zcube_lab.workloads.locust_ext import build_run, over_context
from zcube_lab.workloads.openloop import OpenLoopDriver, RequestRecord
from zcube_lab.workloads.profiles import load_profile
from zcube_lab.workloads.requests import PlannedRequest, generate_requests


def _plan(rate: float, duration: float) -> list[PlannedRequest]:
    return generate_requests(load_profile("chat", length_scale=0.05), "fixed", duration, rate, 0)


def test_slow_answers_do_not_slow_arrivals() -> None:
    plan = _plan(rate=100.0, duration=0.5)  # 50 requests, 10 ms apart
    records: list[RequestRecord] = []
    peak = [0]

    def send(req: PlannedRequest) -> RequestResult:
        peak[0] = max(peak[0], driver.in_flight)
        gevent.sleep(0.3)  # every answer takes 30 arrival gaps
        return RequestResult("ok", 200, 0.3, 0.1, (), req.max_tokens)

    driver = OpenLoopDriver(plan, send, records.append)
    start = time.perf_counter()
    driver.run()
    elapsed = time.perf_counter() - start
    # Closed-loop with one user would take 50 * 0.3 = 15 s; open-loop ends after 0.49 + 0.3 s.
    assert 0.75 < elapsed < 1.5
    assert len(records) == 50 and all(r.result.ok for r in records)
    assert peak[0] >= 25
    lags = sorted(r.lag for r in records)
    assert lags[0] >= 0.0
    assert lags[len(lags) // 2] < 0.02
    assert {r.req.index for r in records} == set(range(50))
    assert driver.in_flight == 0


def test_sends_follow_the_planned_times() -> None:
    plan = _plan(rate=50.0, duration=1.0)
    records: list[RequestRecord] = []
    driver = OpenLoopDriver(plan, lambda r: RequestResult("ok", 200, 0.0), records.append)
    driver.run()
    sent = sorted(r.sent for r in records)
    assert len(sent) == 50
    for i, t in enumerate(sent):
        # Never early; late by less than a few gaps (a loaded CI machine), and no drift.
        assert i * 0.02 <= t < i * 0.02 + 0.05


def test_dilated_sends_stretch_the_gaps_and_records_are_in_modelled_seconds() -> None:
    # k = 2: the same plan is sent over twice the wall time; what is recorded is as at k = 1.
    plan = _plan(rate=20.0, duration=0.5)  # 10 requests, 50 ms apart
    records: list[RequestRecord] = []

    def send(req: PlannedRequest) -> RequestResult:
        gevent.sleep(0.1)  # a server answering in 0.1 s of wall time: 0.05 s modelled
        # as the client returns it: in modelled seconds
        return RequestResult("ok", 200, 0.1, 0.04, (0.02, 0.04), 3).modelled(Clock(2.0))

    driver = OpenLoopDriver(plan, send, records.append, clock=Clock(2.0))
    start = time.perf_counter()
    driver.run()
    elapsed = time.perf_counter() - start
    assert 2 * 0.45 + 0.1 <= elapsed < 2 * 0.45 + 0.6  # the last send at 0.9 s wall
    assert len(records) == 10
    for r in sorted(records, key=lambda r: r.req.index):
        assert r.req.t <= r.sent < r.req.t + 0.05  # planned times, in modelled seconds
        assert (r.result.e2e, r.result.ttft, r.result.itl) == (0.05, 0.02, (0.01, 0.02))
        assert r.result.tpot == pytest.approx(0.015)


def test_modelled_results_divide_every_time() -> None:
    r = RequestResult("ok", 200, 3.0, 1.0, (0.5, 1.5), 3, 7, "")
    assert r.modelled(Clock(1.0)) is r
    half = r.modelled(Clock(2.0))
    assert (half.e2e, half.ttft, half.itl, half.tpot) == (1.5, 0.5, (0.25, 0.75), 0.5)
    assert (half.outcome, half.output_tokens, half.prompt_tokens) == ("ok", 3, 7)
    assert RequestResult("timeout", 0, 4.0).modelled(Clock(4.0)).ttft is None


def test_in_flight_limit_refuses_instead_of_waiting() -> None:
    plan = _plan(rate=100.0, duration=0.2)
    records: list[RequestRecord] = []

    def send(req: PlannedRequest) -> RequestResult:
        gevent.sleep(0.5)
        return RequestResult("ok", 200, 0.5)

    OpenLoopDriver(plan, send, records.append, max_in_flight=5).run()
    outcomes = [r.result.outcome for r in records]
    assert outcomes.count("ok") == 5
    assert outcomes.count("overload") == 15


def test_cancel_reports_in_flight_requests() -> None:
    plan = _plan(rate=100.0, duration=0.1)
    records: list[RequestRecord] = []

    def send(req: PlannedRequest) -> RequestResult:
        gevent.sleep(30)
        return RequestResult("ok", 200, 30.0)

    driver = OpenLoopDriver(plan, send, records.append)
    g = gevent.spawn(driver.run)
    gevent.sleep(0.3)
    assert driver.in_flight == 10
    assert driver.cancel() == 10
    g.join(timeout=5)
    assert g.dead
    assert [r.result.outcome for r in records] == ["cancelled"] * 10
    assert all(0.1 < r.result.e2e < 1.0 for r in records)


def test_record_json_row() -> None:
    req = _plan(1.0, 1.0)[0]
    rec = RequestRecord(req, 0.25, RequestResult("ok", 200, 1.0, 0.2, (0.1, 0.1), 3), 1.7e9)
    row = rec.to_json()
    assert row["planned_s"] == 0.0 and row["sent_s"] == 0.25 and row["lag_s"] == 0.25
    assert row["ttft_s"] == 0.2 and row["tpot_s"] == pytest.approx(0.4)
    assert row["itl_s"] == [0.1, 0.1] and row["outcome"] == "ok"
    assert row["planned_output_tokens"] == req.max_tokens


def test_summary() -> None:
    plan = _plan(10.0, 2.0)
    rows = [
        {"sent_s": 0.1 * i, "lag_s": 0.001, "outcome": "ok", "ttft_s": 0.05, "e2e_s": 0.2}
        | {"output_tokens": 4}
        for i in range(18)
    ]
    rows.append({"sent_s": 2.5, "lag_s": 0.7, "outcome": "ok", "ttft_s": 0.05, "e2e_s": 1.0})
    rows[-1]["output_tokens"] = 4
    rows.append({"sent_s": 1.9, "lag_s": 0.0, "outcome": "overload", "ttft_s": None})
    rows[-1] |= {"e2e_s": 0.0, "output_tokens": 0}
    s = summarize(plan, rows, 2.0)
    assert s["planned"] == 20 and s["planned_rate"] == 10.0
    # 19 sent, but one only after the window closed: the driver fell behind.
    assert s["sent"] == 19 and s["achieved_rate"] == 9.0
    assert s["outcomes"] == {"ok": 19, "overload": 1}
    assert s["lag_max_s"] == 0.7 and s["ttft_p50_s"] == 0.05


def _options(**kw: object) -> SimpleNamespace:
    base = {
        "workload": "chat",
        "seed": 0,
        "arrival": None,
        "rate": None,
        "burstiness": None,
        "stages": None,
        "model": None,
        "trace": None,
        "length_scale": 0.05,
        "duration": None,
        "run_time": None,
        "requests_out": None,
    }
    return SimpleNamespace(**(base | kw))


def _env(**kw: object) -> SimpleNamespace:
    return SimpleNamespace(host="http://127.0.0.1:1", parsed_options=_options(**kw))


def test_build_run_resolves_the_plan_window() -> None:
    run = build_run(_env(arrival="fixed", rate=4.0, duration=5.0))
    assert (run.duration, len(run.plan), run.stream_name) == (5.0, 20, "chat-stream")
    # Without --duration the plan spans --run-time.
    assert build_run(_env(arrival="fixed", rate=2.0, run_time=30)).duration == 30.0
    # --stages implies a staged arrival and sets the window.
    staged = build_run(_env(stages="2:5,3:10", workload="coding-agent"))
    assert staged.duration == 5.0 and staged.stream_name == "completion-stream"
    # Dilated: the plan is the same; --run-time is wall time, the plan's window modelled.
    dilated = build_run(_env(arrival="fixed", rate=4.0, duration=5.0, dilation=2.0))
    assert (dilated.plan, dilated.duration, dilated.clock) == (run.plan, 5.0, Clock(2.0))
    assert build_run(_env(arrival="fixed", rate=2.0, run_time=30, dilation=2)).duration == 15
    trace = build_run(_env(workload="trace", rate=100.0))
    assert len(trace.plan) == 240
    assert trace.duration == pytest.approx(trace.plan[-1].t, abs=1e-5)


def test_build_run_rejects_bad_options_by_field(tmp_path: Path) -> None:
    cases = [
        ({"workload": "nope"}, "workload"),
        ({"rate": -1.0}, "rate"),
        ({"stages": "5"}, "stages"),
        ({"stages": "5:1", "arrival": "poisson"}, "stages"),
        ({"trace": str(tmp_path / "t.jsonl")}, "trace"),
        ({"workload": "trace", "arrival": "poisson"}, "arrival"),
        ({"dilation": 0.5}, "dilation"),
        ({"dilation": 17.0}, "dilation"),
    ]
    for kw, field in cases:
        with pytest.raises(ConfigError) as e:
            build_run(_env(**kw))
        assert e.value.field == field, kw
    with pytest.raises(ConfigError) as e:
        build_run(SimpleNamespace(host="", parsed_options=_options()))
    assert e.value.field == "host"


def test_over_context_counts_requests_the_model_cannot_take() -> None:
    plan = generate_requests(load_profile("coding-agent"), None, 30.0, None, 0)
    assert over_context(plan, "tiny") == len(plan)  # 8K context, 4K+ token prompts
    assert over_context(plan, "llama-3.1-8b") == 0
    assert over_context(plan, "some-other-model") == 0


def test_a_stopped_run_under_keep_running_replays_the_plan_again(tmp_path: Path) -> None:
    """`up --serve`'s Locust web UI: Stop, then Start, must send the plan again (a second user
    was told "a second OpenLoopUser in one process does nothing" and no load came). Without
    --keep-running, and while a round runs, a second user still gets nothing to drive."""
    log, summary = tmp_path / "requests.jsonl", tmp_path / "summary.json"
    opts = {"arrival": "fixed", "rate": 20.0, "duration": 0.2, "keep_running": True}
    env = _env(requests_out=str(log), summary_out=str(summary), **opts)
    fired: list[dict] = []
    env.events = SimpleNamespace(request=SimpleNamespace(fire=lambda **k: fired.append(k)))
    run = build_run(env)
    assert run.claim()  # the first user drives
    run.drive()  # 127.0.0.1:1 refuses: every request ends at once, with an error
    assert not run.claim()  # a second user while the round has not stopped
    run.stop()
    first = log.read_text().splitlines()
    assert len(first) == len(run.plan) == 4
    assert run.claim() and run.rounds == 2 and not run.finished and run.records == []
    run.drive()
    run.stop()
    assert len(log.read_text().splitlines()) == 8  # the log is appended to, not truncated
    assert '"round": 2' in summary.read_text()
    assert len([f for f in fired if f["request_type"] == "POST"]) == 8
    # Without --keep-running a stopped run stays stopped.
    once = build_run(_env(arrival="fixed", rate=20.0, duration=0.2, keep_running=False))
    assert once.claim()
    once.finished = once.started = True
    assert not once.claim()
