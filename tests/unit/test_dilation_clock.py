"""Complete time dilation (docs/DOMAIN.md §4): the clock, the TCP timers each host's routes get,
the intervals that follow k (scrapes, samplers, the controller's polls), the stall slack, and the
servers' histograms observing modelled seconds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from zcube_lab.core.clock import Clock, check_dilation, tcp_route_options
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_zcube
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.hostplan import ip_batch
from zcube_lab.core.fabric.linkplan import LinkSettings, host_setup
from zcube_lab.emulator.experiment.plan import Ports, RunConfig, plan_run
from zcube_lab.emulator.results.fabric.transfers import kv_figures
from zcube_lab.emulator.results.run.dilation import ladder_note, read_ladder
from zcube_lab.serving import vllm_metrics as m
from zcube_lab.serving.config import PrefillConfig

ZCUBE = FabricSpec.of("zcube", n=4)


def test_the_clock_converts_both_ways_and_refuses_what_no_run_takes() -> None:
    clock = Clock(4)
    assert clock.wall(0.2) == pytest.approx(0.8)
    assert clock.modelled(0.8) == pytest.approx(0.2)
    assert clock.dilated and not Clock().dilated
    assert Clock(120).wall(1e-6) == pytest.approx(120e-6)  # a replay's fine time scale
    for k in (0.5, 1000.5, math.nan):
        with pytest.raises(ConfigError):
            Clock(k)
    with pytest.raises(ConfigError):  # a run's own k stays within kernel TCP's bound
        check_dilation(17.0)


def test_routes_get_the_minimum_rto_times_k_and_no_delayed_acks_only_when_dilated() -> None:
    assert tcp_route_options(Clock()) == ""  # the kernel's own timers are the model's at k = 1
    assert tcp_route_options(Clock(2)) == "rto_min 400ms quickack 1"
    assert tcp_route_options(Clock(2.5)) == "rto_min 500ms quickack 1"


def test_every_fabric_route_of_a_host_carries_the_options_and_nothing_else_does() -> None:
    fabric = build_zcube(n=4)
    host = fabric.host("h0")
    plain = ip_batch(fabric, host, 9000)
    dilated = ip_batch(fabric, host, 9000, "rto_min 800ms quickack 1")
    routes = [line for line in dilated if line.startswith("route ")]
    assert routes and all(line.endswith(" rto_min 800ms quickack 1") for line in routes)
    # Both the shortest routes and each port's source-routing default route.
    assert any(" table " in line for line in routes) and any(
        " table " not in line for line in routes
    )
    others = [line for line in dilated if not line.startswith("route ")]
    assert others == [line for line in plain if not line.startswith("route ")]
    assert [r.removesuffix(" rto_min 800ms quickack 1") for r in routes] == [
        line for line in plain if line.startswith("route ")
    ]


def test_a_host_setup_script_sets_the_dilated_timers() -> None:
    fabric = build_zcube(n=4)
    host = fabric.host("h0")
    files = dict(host_setup(fabric, host, LinkSettings(mtu=9000, clock=Clock(4)), "/x").files)
    assert "rto_min 800ms quickack 1" in files["/x/h0.ip"]
    files = dict(host_setup(fabric, host, LinkSettings(mtu=9000), "/x").files)
    assert "rto_min" not in files["/x/h0.ip"] and "quickack" not in files["/x/h0.ip"]


def test_prometheus_scrapes_every_modelled_second() -> None:
    ports = Ports(gateway=1, controller=2, loadgen=3, emulator=4)
    for k, wall_ms in ((1.0, "1000ms"), (4.0, "4000ms"), (8.0, "8000ms")):
        plan = plan_run(RunConfig(fabric=ZCUBE, dilation=k))
        scrape = plan.scrape(ports, "run")
        assert scrape.interval_s == 1.0 and scrape.wall_interval_s == k
        doc = json.loads(scrape.render())
        assert doc["global"]["scrape_interval"] == wall_ms
        assert {c["scrape_interval"] for c in doc["scrape_configs"]} == {wall_ms}
    # The 2 s cap is on the modelled interval: 2 s at k = 8 is 16 s of wall time.
    plan = plan_run(RunConfig(fabric=ZCUBE, dilation=8, scrape_interval_s=2.0))
    assert plan.scrape(ports, "run").wall_interval_s == 16.0


def _pull(took: float, size: int) -> tuple[str, dict]:
    row = {"engine_id": "prefill-0", "start": 0.0, "end": took, "ok": True, "bytes": size}
    return "decode-4", row


def test_the_stall_slack_is_a_modelled_tenth_of_a_second() -> None:
    # Ideal 0.2 s on the wall clock (a 0.1 s pull at k = 2): stalled above 2 x 0.2 + slack.
    rate = 8e6 / 2
    pull = _pull(0.55, 100_000)  # 0.4 + 0.15: over a wall 0.1 s slack, under a dilated 0.2 s
    assert kv_figures([pull], lambda s, d: rate)["kv_pulls_stalled"] == 1
    assert kv_figures([pull], lambda s, d: rate, Clock(2))["kv_pulls_stalled"] == 0
    late = _pull(0.65, 100_000)
    assert kv_figures([late], lambda s, d: rate, Clock(2))["kv_pulls_stalled"] == 1


def _sums(registry: CollectorRegistry) -> dict[str, float]:
    return {
        s.name: s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name.endswith("_sum")
    }


def test_engine_histograms_observe_modelled_seconds_when_dilated() -> None:
    reg = CollectorRegistry()
    em = m.EngineMetrics(reg, "tiny", "0", clock=Clock(4))
    for hist in (em.ttft, em.itl, em.tpot, em.e2e, em.queue_time, em.xfer_time, em.a2a_time):
        hist.observe(2.0)  # wall seconds, as the engines time them
    em.step_overrun.observe(0.08)  # an 80 ms late wake is 20 ms of the modelled step
    em.step_lateness.observe(0.5)  # a ratio: the same at every k
    em.request_prompt_tokens.observe(100)  # a count: the same at every k
    sums = _sums(reg)
    for name in (
        m.TIME_TO_FIRST_TOKEN,
        m.INTER_TOKEN_LATENCY,
        m.REQUEST_TIME_PER_OUTPUT_TOKEN,
        m.LEGACY_TIME_PER_OUTPUT_TOKEN,
        m.E2E_REQUEST_LATENCY,
        m.REQUEST_QUEUE_TIME,
        m.NIXL_XFER_TIME,
        m.ALLTOALL_TIME,
    ):
        assert sums[name + "_sum"] == pytest.approx(0.5), name
    assert sums[m.STEP_OVERRUN + "_sum"] == pytest.approx(0.02)
    assert sums[m.STEP_LATENESS + "_sum"] == pytest.approx(0.5)
    assert sums[m.REQUEST_PROMPT_TOKENS + "_sum"] == 100


def test_gateway_histograms_observe_modelled_seconds_and_undilated_ones_are_untouched() -> None:
    reg = CollectorRegistry()
    gm = m.GatewayMetrics(reg, "tiny", Clock(2))
    gm.ttft.observe(1.0)
    gm.loop_lag.observe(0.04)
    sums = _sums(reg)
    assert sums[m.GATEWAY_TTFT + "_sum"] == pytest.approx(0.5)
    assert sums[m.GATEWAY_LOOP_LAG + "_sum"] == pytest.approx(0.02)
    plain = m.EngineMetrics(CollectorRegistry(), "tiny", "0")
    assert not isinstance(plain.ttft, m.Modelled)  # k = 1: the histogram itself


def test_the_serving_configs_carry_the_clock() -> None:
    cfg = PrefillConfig(dilation=4)
    assert cfg.clock == Clock(4) and cfg.wall_s(5.0) == 20.0
    assert plan_run(RunConfig(fabric=ZCUBE, dilation=4)).clock == Clock(4)


def test_a_dilated_run_is_told_what_the_saved_ladder_validated(tmp_path: Path) -> None:
    ladder = {
        "fabric": "--fabric zcube --n 2",
        "points": {"light": {"workload": "coding-agent", "rate": 1.0}, "heavy": {"rate": 4.0}},
        "validated_k": {"light": 4.0, "heavy": None},
    }
    note = ladder_note(2.0, ladder)
    assert "light (coding-agent at 1.0 req/s, --fabric zcube --n 2): k=4" in note
    assert "heavy (? at 4.0 req/s, --fabric zcube --n 2): none" in note
    assert note.endswith("k=2 is below every validated k: its figures are not validated")
    assert ladder_note(8.0, ladder).endswith("k=8 is at or above a validated k")
    per_point = {  # a ladder whose points each name their own fabric
        "points": {"kv": {"workload": "kv-heavy", "rate": 47.0, "fabric": "--fabric zcube --n 4"}},
        "validated_k": {"kv": 8.0},
    }
    assert "kv (kv-heavy at 47.0 req/s, --fabric zcube --n 4): k=8" in ladder_note(4.0, per_point)
    assert "no dilation ladder saved" in ladder_note(2.0, None)
    assert "no dilation ladder saved" in ladder_note(2.0, {"validated_k": {}})
    path = tmp_path / "ladder.json"
    assert read_ladder(path) is None  # absent
    path.write_text("{not json")
    assert read_ladder(path) is None
    path.write_text(json.dumps(ladder))
    assert read_ladder(path) == ladder
