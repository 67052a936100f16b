"""bench/soak.py and bench/labrun.py without a lab: the first and last windows, the limits of
PASS, request figures from a real summary.json, the run's command line and its last output."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.labrun import parse_run_output, run_argv
from bench.procwatch import ProcSample
from bench.soak import (
    Limits,
    Point,
    by_process,
    process_figures,
    request_figures,
    soak_problems,
)
from zcube_lab.emulator.results.run.summary import RunSummary

SUMMARY = RunSummary.from_dict(
    json.loads((Path(__file__).parent / "data" / "summary-zcube.json").read_text())
)
D, W = 120.0, 30.0  # the smoke test's duration and window; samples every 10 s


def series(
    rss_mb: list[float],
    fds: list[int] | None = None,
    tcp: list[int] | None = None,
    *,
    name: str = "decode/h12",
    role: str = "decode",
    pids: list[int] | None = None,
) -> list[Point]:
    """One process sampled at 0, 10, 20, ... s."""
    n = len(rss_mb)
    fds, tcp, pids = fds or [40] * n, tcp or [6] * n, pids or [500] * n
    return [
        (10.0 * i, ProcSample(name, role, pids[i], 7, 0, 0, int(rss_mb[i] * 1024), fds[i], tcp[i]))
        for i in range(n)
    ]


FLAT = [100.0] * 13  # 0..120 s


def test_a_flat_process_passes_with_its_figures() -> None:
    f = process_figures(series(FLAT), D, W, Limits())
    assert f.problems == () and f.judged
    assert (f.rss_first_mb, f.rss_last_mb, f.rss_max_mb, f.rss_growth_pct) == (100, 100, 100, 0)
    assert (f.fds_first, f.fds_last, f.tcp_first, f.tcp_last, f.samples) == (40, 40, 6, 6, 13)
    assert (f.fds_allowed, f.tcp_allowed) == (2, 2)  # steady counts: the bare slack


def test_windows_are_the_first_and_last_window_of_the_load() -> None:
    # First window: 10, 20, 30 s (0 s is Locust's start, before any request); last: 100, 110,
    # 120 s; 40 s is in neither and 130 s is after the load.
    rss = [500, 100, 90, 110, 100, 100, 100, 100, 100, 100, 105, 110, 115, 999]
    f = process_figures(series(rss), D, W, Limits())
    assert (f.rss_first_mb, f.rss_last_mb) == (100, 110)
    assert f.rss_max_mb == 500 and f.samples == 13  # the peak is any load sample, not 130 s
    assert f.rss_growth_pct == pytest.approx(10.0) and f.rss_max_growth_pct == pytest.approx(400)
    assert f.problems == ()  # exactly 10% is allowed


def test_rss_growth_over_the_limit_fails() -> None:
    f = process_figures(series([100.0] * 10 + [112.0] * 3), D, W, Limits())
    assert f.problems == ("RSS grew 12.0% (limit 10%)",)
    assert process_figures(series([100.0] * 10 + [112.0] * 3), D, W, Limits(15)).problems == ()


def test_steady_fds_and_tcp_may_grow_by_the_slack_and_no_more() -> None:
    fds = [40] * 10 + [42] * 3
    tcp = [6] * 10 + [9] * 3
    f = process_figures(series(FLAT, fds, tcp), D, W, Limits())
    assert f.problems == ("TCP sockets grew from 6 to 9 (allowed +2)",)
    # One sample of a burst in the last window does not decide: the median does.
    f = process_figures(series(FLAT, tcp=[6] * 11 + [30, 6]), D, W, Limits())
    assert f.problems == ()


def test_counts_that_move_with_the_load_get_their_spread_on_top() -> None:
    # Sockets in flight moved between 6 and 9 in the first window (the 0 s sample, 0 sockets
    # before any request, is not part of it): growth up to 2 + 3 passes, beyond fails.
    first = [0, 6, 9, 6] + [7] * 6
    f = process_figures(series(FLAT, tcp=[*first, 11, 11, 11]), D, W, Limits())
    assert (f.tcp_first, f.tcp_last, f.tcp_allowed, f.problems) == (6, 11, 5, ())
    f = process_figures(series(FLAT, tcp=[*first, 12, 12, 12]), D, W, Limits())
    assert f.problems == ("TCP sockets grew from 6 to 12 (allowed +5)",)


def test_a_restart_or_a_missing_window_fails() -> None:
    restarted = process_figures(series(FLAT, pids=[500] * 6 + [501] * 7), D, W, Limits())
    assert restarted.problems == ("restarted (2 pids)",)
    gone = process_figures(series(FLAT[:8]), D, W, Limits())
    assert gone.problems == ("not running in the last 30 s of load",)


def test_the_run_itself_is_judged_like_every_process() -> None:
    f = process_figures(series([100.0] * 10 + [150.0] * 3, name="run", role="run"), D, W, Limits())
    assert f.judged and f.problems == ("RSS grew 50.0% (limit 10%)",)
    flat = process_figures(series(FLAT, name="run", role="run"), D, W, Limits())
    assert flat.judged and flat.problems == ()


def test_points_are_grouped_by_process_in_time_order() -> None:
    a, b = series([1.0, 2.0], name="a"), series([3.0], name="b")
    grouped = by_process([a[1], b[0], a[0]])
    assert grouped == {"a": a, "b": b}


def test_request_figures_from_a_real_summary() -> None:
    r = request_figures(SUMMARY)
    assert (r.planned, r.requests, r.completed, r.failed, r.not_sent) == (77, 77, 77, 0, 0)
    assert r.trustworthy and r.reasons == ()
    assert soak_problems(r, [process_figures(series(FLAT), D, W, Limits())], 0) == []


def test_failed_unsent_requests_and_process_problems_all_fail_the_soak() -> None:
    r = request_figures(SUMMARY)
    bad = replace(r, failed=2, not_sent=3, errors={"timeout": 2})
    grown = process_figures(series([100.0] * 10 + [120.0] * 3), D, W, Limits())
    assert soak_problems(bad, [grown], 0) == [
        "2 failed requests {'timeout': 2}",
        "3 planned requests never sent",
        "decode/h12: RSS grew 20.0% (limit 10%)",
    ]
    assert soak_problems(None, [], 1) == [
        "the run left no summary.json (exit code 1)",
        "no lab process was sampled during the load",
    ]


# --- labrun ----------------------------------------------------------------------------------


def test_run_argv_passes_extra_flags_on_but_not_over_ours() -> None:
    ours = ["--fabric", "zcube", "--rate", "8"]
    assert run_argv("/v/zcube-lab", ours, ["--n", "4"]) == [
        "/v/zcube-lab", "run", "--fabric", "zcube", "--rate", "8", "--n", "4",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="--rate"):
        run_argv("/v/zcube-lab", ours, ["--rate=3"])


def test_the_runs_last_json_object_is_its_result() -> None:
    out = 'warming up {"not": "this"}\n{\n  "results": "/r/x",\n  "reasons": ["a {b}"]\n}\n'
    assert parse_run_output(out) == {"results": "/r/x", "reasons": ["a {b}"]}
    assert parse_run_output('{\n  "results": "/r/y"\n}\n*** done\n') == {"results": "/r/y"}
    assert parse_run_output("interrupted\n") is None
    assert parse_run_output("{\n  cut short") is None
