"""The live lab's scrape pace: the run's interval while requests flow, relaxed after a quiet
spell, back at the first request; and the watch that reloads Prometheus only on a change."""

from __future__ import annotations

from typing import Any

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.experiment.live import ScrapeWatch
from zcube_lab.emulator.prometheus.config import scrape_plan
from zcube_lab.emulator.prometheus.pace import Activity, ScrapePace


def test_the_pace_starts_at_the_run_s_interval_and_relaxes_after_a_quiet_spell() -> None:
    pace = ScrapePace(1.0, idle_s=10.0, quiet_s=10.0)
    still = Activity(received=0, outstanding=0)
    assert pace.seen(100.0, still) == 1.0  # the first look counts as activity
    assert pace.seen(109.0, still) == 1.0
    assert pace.seen(110.0, still) == 10.0
    assert pace.seen(200.0, still) == 10.0


def test_the_first_request_brings_the_run_s_interval_back_at_once() -> None:
    pace = ScrapePace(1.0, idle_s=10.0, quiet_s=10.0)
    pace.seen(0.0, Activity(5, 0))
    assert pace.seen(50.0, Activity(5, 0)) == 10.0
    assert pace.seen(51.0, Activity(6, 0)) == 1.0  # one new request
    assert pace.seen(60.0, Activity(6, 0)) == 1.0  # still within the quiet spell
    assert pace.seen(61.0, Activity(6, 0)) == 10.0


def test_requests_in_flight_and_an_unread_gateway_keep_it_active() -> None:
    pace = ScrapePace(1.0, idle_s=10.0, quiet_s=10.0)
    pace.seen(0.0, Activity(1, 1))
    assert pace.seen(30.0, Activity(1, 1)) == 1.0  # one long request, no new one
    assert pace.seen(45.0, Activity(1, 0)) == 10.0  # it ended 15 s after the last activity
    assert pace.seen(46.0, None) == 1.0  # no answer: the safe side
    # the same count as before the gap is no new activity
    assert pace.seen(56.0, Activity(1, 0)) == 10.0


def test_a_dilated_lab_never_relaxes_below_its_interval() -> None:
    with pytest.raises(ConfigError):
        ScrapePace(16.0, idle_s=10.0)
    pace = ScrapePace(16.0, idle_s=16.0, quiet_s=10.0)
    pace.seen(0.0, Activity(0, 0))
    assert pace.seen(100.0, Activity(0, 0)) == 16.0


def test_the_plan_renders_at_another_wall_interval() -> None:
    plan = scrape_plan({"decode": ["h1:8200"]}, 1.0, {"run": "r"}, clock=Clock(2))
    assert '"2000ms"' in plan.render() and "10000ms" not in plan.render()
    relaxed = plan.render(10.0)
    assert relaxed.count('"10000ms"') == 5  # global interval, timeout, evaluation; the job's two
    assert "2000ms" not in relaxed
    with pytest.raises(ConfigError):
        plan.render(0.0)


class _Prometheus:
    def __init__(self) -> None:
        self.reloads: list[str] = []

    def reload(self, text: str) -> None:
        self.reloads.append(text)


def test_the_watch_reloads_prometheus_only_when_the_interval_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = scrape_plan({"decode": ["h1:8200"]}, 1.0, {"run": "r"})
    prometheus = _Prometheus()
    watch = ScrapeWatch(prometheus, plan, "http://127.0.0.1:1/activity")  # type: ignore[arg-type]
    answers: list[Any] = [Activity(0, 0)] * 12 + [Activity(1, 1)] + [Activity(1, 0)] * 3
    monkeypatch.setattr(watch, "read", lambda: answers.pop(0))
    intervals = []
    for second in range(16):
        watch.tick(float(second))
        intervals.append(watch.interval_s)
    assert intervals == [1.0] * 10 + [10.0] * 2 + [1.0] * 4
    assert len(prometheus.reloads) == 2
    assert '"10000ms"' in prometheus.reloads[0] and '"1000ms"' in prometheus.reloads[1]
    assert prometheus.reloads[1] == plan.render()  # back to exactly the run's config


def test_the_watch_reads_nothing_from_a_gateway_that_is_not_there() -> None:
    plan = scrape_plan({"decode": ["h1:8200"]}, 1.0)
    watch = ScrapeWatch(_Prometheus(), plan, f"http://127.0.0.1:{free_port()}/activity")  # type: ignore[arg-type]
    assert watch.read() is None
