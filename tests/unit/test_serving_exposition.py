"""The cached /metrics body: the same bytes as a fresh rendering, rendered again after any change
of any engine metric, and not rendered again while nothing changed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from zcube_lab.core.clock import Clock
from zcube_lab.serving import vllm_metrics as m
from zcube_lab.serving.exposition import Exposition, Tracked, VersionedRegistry, tracked
from zcube_lab.serving.gateway import ACTIVITY_PATH
from zcube_lab.serving.gcpause import GcPauseCollector, GcPauses

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving_fixtures import start_inprocess_cluster


def _engine(clock: Clock | None = None) -> tuple[VersionedRegistry, m.EngineMetrics, GcPauses]:
    reg = VersionedRegistry()
    pauses = GcPauses()
    reg.register(GcPauseCollector(pauses))  # first, as `httpapi.new_app` registers it
    return reg, m.EngineMetrics(reg, "glm-5.1", "3", clock=clock), pauses


def _leaves(obj: Any, path: str) -> list[tuple[str, Any]]:
    """Every metric an `EngineMetrics` hands to the engine, reached through its wrappers."""
    if isinstance(obj, dict):
        return [leaf for k, v in obj.items() for leaf in _leaves(v, f"{path}[{k}]")]
    if isinstance(obj, Tracked | m.Modelled):
        return [(path, obj)]
    if isinstance(obj, m._Both):
        return [(path, obj)]
    raise AssertionError(f"{path}: an untracked metric {type(obj).__name__}")


def _kind(metric: Any) -> type:
    """The prometheus_client class under a metric's wrappers."""
    if isinstance(metric, m._Both):
        return _kind(metric._metrics[0])
    if isinstance(metric, m.Modelled):
        return _kind(metric._histogram)
    if isinstance(metric, Tracked):
        return type(metric._metric)
    return type(metric)


def _change(metric: Any, step: int) -> None:
    kind = _kind(metric)
    if kind is Histogram:
        metric.observe(0.003 * step)
    elif kind is Counter:
        metric.inc()
    else:
        assert kind is Gauge
        metric.set(step)


@pytest.mark.parametrize("clock", [Clock(), Clock(4)], ids=["k1", "k4"])
def test_every_engine_metric_invalidates_the_kept_body(clock: Clock) -> None:
    reg, em, _ = _engine(clock)
    leaves = [leaf for name, v in vars(em).items() for leaf in _leaves(v, name)]
    assert len(leaves) > 30  # every scheduler, token, latency, KV, EP and step metric
    exposition = Exposition(
        reg, fresh=[c for c in reg._collector_to_names if isinstance(c, GcPauseCollector)]
    )
    before = exposition.body()
    for step, (name, metric) in enumerate(leaves, start=1):
        _change(metric, step)
        after = exposition.body()
        assert after != before, f"{name} changed and the kept body did not"
        assert after == generate_latest(reg), name
        before = after


def test_an_unchanged_registry_is_not_rendered_again() -> None:
    reg, em, _ = _engine()
    exposition = Exposition(reg)
    first = exposition.body()
    assert [exposition.body() for _ in range(5)] == [first] * 5
    assert exposition.renders == 1
    em.running.set(2)
    assert exposition.body() == generate_latest(reg) != first
    assert exposition.renders == 2


def test_a_new_series_is_a_change() -> None:
    reg = VersionedRegistry()
    by_reason = tracked(Counter("x", "x", ("reason",), registry=reg), reg)
    exposition = Exposition(reg)
    empty = exposition.body()
    by_reason.labels("full")  # a series at 0 appears on the wire without any inc
    assert exposition.body() == generate_latest(reg) != empty


def test_the_gc_pauses_are_fresh_on_every_scrape_without_a_render() -> None:
    reg, _em, pauses = _engine()
    collector = next(c for c in reg._collector_to_names if isinstance(c, GcPauseCollector))
    exposition = Exposition(reg, fresh=[collector])
    first = exposition.body()
    assert first == generate_latest(reg)
    pauses.observe(2, 0.004)  # a collection between two scrapes, no metric call
    second = exposition.body()
    assert second == generate_latest(reg) != first
    assert exposition.renders == 1


def test_a_plain_registry_is_rendered_on_every_scrape() -> None:
    reg = CollectorRegistry()
    counter = tracked(Counter("y", "y", registry=reg), reg)
    assert not isinstance(counter, Tracked)  # nothing counts changes there
    exposition = Exposition(reg)
    exposition.body()
    counter.inc()
    assert exposition.body() == generate_latest(reg)
    assert exposition.renders == 2


async def test_idle_engines_answer_from_the_kept_text_and_a_request_shows_at_once(
    aiohttp_server: Any,
) -> None:
    c = await start_inprocess_cluster(aiohttp_server, registry=VersionedRegistry)
    done = 'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"}'
    async with aiohttp.ClientSession() as s:

        async def scrape(url: str) -> str:
            async with s.get(url + "/metrics") as r:
                assert r.status == 200
                return await r.text()

        async def activity() -> dict[str, int]:
            async with s.get(c.gateway_url + ACTIVITY_PATH) as r:
                return await r.json()

        assert await activity() == {"received": 0, "outstanding": 0}
        idle = [await scrape(c.decode_url) for _ in range(3)]
        assert f"{done} 0.0" in idle[0]
        body = {"model": "tiny", "prompt": "w w w", "max_tokens": 4, "ignore_eos": True}
        async with s.post(c.gateway_url + "/v1/completions", json=body) as r:
            assert r.status == 200
        assert f"{done} 1.0" in await scrape(c.decode_url)
        assert await activity() == {"received": 1, "outstanding": 0}
