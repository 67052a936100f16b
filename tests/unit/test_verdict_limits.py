"""The verdict rules of issue 20 (item 6): KV pulls against their ideal, engine lateness relative
to the modelled step, CPU over the load window only, the gateway's loop lag and the load
generator's send lag, missing sources of evidence; and every limit in one `Limits` object that
health.json carries beside the verdict. Each rule: a run that breaks it is not trustworthy and
its reason names it; a run near but within the limit passes."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.experiment.comparison import fabric_specs
from zcube_lab.emulator.experiment.plan import RunConfig
from zcube_lab.emulator.experiment.runner import Experiment
from zcube_lab.emulator.lab.health import HealthSampler
from zcube_lab.emulator.lab.netsampler import NetSampler
from zcube_lab.emulator.results.fabric.transfers import (
    kv_path_busy,
    kv_ratio_p50,
    kv_seen_busy,
    pull_links,
    span_rate,
)
from zcube_lab.emulator.verdict.judge import (
    DATAPATH,
    FIDELITY_FIELDS,
    HealthSample,
    HealthVerdict,
    judge,
)
from zcube_lab.emulator.verdict.limits import Limits
from zcube_lab.emulator.verdict.network import (
    GATEWAY,
    LOADGEN,
    EngineOverruns,
    KvPulls,
    LoopLag,
    NetworkEvidence,
    StepOverruns,
    histogram_buckets,
    lateness_buckets,
    loop_lag,
    overrun_buckets,
    send_lag,
    step_overruns,
)
from zcube_lab.serving.gateway import sample_loop_lag
from zcube_lab.serving.vllm_metrics import GATEWAY_LOOP_LAG, EngineMetrics, GatewayMetrics


def _samples(cpu: list[float], start: float = 0.0, **processes: float) -> list[HealthSample]:
    return [
        HealthSample(
            t=start + i + 1.0,
            interval_s=1.0,
            machine_cpu=c,
            per_core=(c, c),
            softirq=0.0,
            steal=0.0,
            processes={DATAPATH: 0.1, **processes},
        )
        for i, c in enumerate(cpu)
    ]


QUIET = _samples([0.3] * 10)


def _judge(evidence: NetworkEvidence, limits: Limits | None = None) -> HealthVerdict:
    return judge(QUIET, limits, evidence)


KV_JUDGED = Limits()  # judged by default (1.5x)
KV_RECORDED = Limits(judge_kv_pulls=False)


# --- KV pulls against their ideal --------------------------------------------------------------


def test_slow_kv_pulls_on_quiet_links_are_an_end_host_artifact() -> None:
    slow = NetworkEvidence(kv=KvPulls(rated=80, ratio_p50=1.9, path_busy=0.03, fixed_s=0.005))
    assert _judge(slow, KV_RECORDED).trustworthy  # recorded, not judged, when switched off
    v = _judge(slow)  # judged by default
    assert not v.trustworthy
    assert v.reasons == (
        "KV pulls: p50 1.90x their ideal after 5 ms of fixed cost each over 80 pulls (allowed "
        "1.5x) while their busiest link was 3% busy (under 20%): an end-host artifact, not the "
        "fabric",
    )
    assert HealthVerdict.from_dict(json.loads(json.dumps(v.to_dict()))).kv_pulls == v.kv_pulls


def test_the_judged_kv_ratio_takes_the_fixed_cost_off_each_pull() -> None:
    rate = 100e6  # 1 MB: 80 ms ideal

    def pull(seconds: float, ok: bool = True, src: str = "prefill-0") -> tuple[str, dict]:
        return ("decode-4", {"start": 0.0, "end": seconds, "ok": ok, "bytes": 1_000_000,
                             "engine_id": src})  # fmt: skip

    def rate_of(src: str, dst: str) -> float | None:
        return rate if src == "prefill-0" else None

    pulls = [pull(0.085), pull(0.105), pull(0.125), pull(9.0, ok=False), pull(1.0, src="x")]
    rated, raw = kv_ratio_p50(pulls, rate_of)
    assert rated == 3 and raw == pytest.approx(0.105 / 0.08)
    assert kv_ratio_p50(pulls, rate_of, 0.005)[1] == pytest.approx(0.1 / 0.08)
    assert kv_ratio_p50([], rate_of) == (0, None)


def test_kv_pulls_near_their_ideal_or_on_busy_links_pass() -> None:
    assert _judge(NetworkEvidence(kv=KvPulls(80, 1.45, 0.03)), KV_JUDGED).trustworthy  # < 1.5x
    assert not _judge(NetworkEvidence(kv=KvPulls(80, 1.55, 0.03)), KV_JUDGED).trustworthy
    assert _judge(NetworkEvidence(kv=KvPulls(80, 1.9, 0.22)), KV_JUDGED).trustworthy  # busy
    assert _judge(NetworkEvidence(kv=KvPulls(9, 3.0, 0.01)), KV_JUDGED).trustworthy  # too few


@pytest.mark.parametrize("kv_off", [True, False])
def test_a_kv_off_run_s_one_byte_pulls_are_not_judged_and_the_verdict_says_why(
    tmp_path: Path, kv_off: bool
) -> None:
    """With KV transfer off (the run's config) each pull moves one byte, all fixed cost: the
    verdict does not judge the pulls and says so; a KV-on run with the same pulls fails."""
    config = RunConfig(fabric=FabricSpec.of("zcube", n=4), results_root=tmp_path, kv_off=kv_off)
    exp = Experiment(config)
    exp._evidence = NetworkEvidence()
    # the first §9.3 EP-only run on ZCube: 40 one-byte pulls, p50 22,028x, links 2% busy
    pulls = KvPulls(40, 22028.33, 0.02, 0.005, seen_busy=0.02)
    evidence = exp._load_evidence([{"lag_s": 0.001, "outcome": "ok"}], pulls)
    assert evidence is not None and evidence.kv is not None
    v = judge(QUIET, None, evidence)
    stored = HealthVerdict.from_dict(json.loads(json.dumps(v.to_dict())))  # as summary.json
    assert stored == v and stored.kv_pulls is not None and stored.kv_pulls.kv_off is kv_off
    if kv_off:
        assert stored.trustworthy and stored.reasons == ()
        assert stored.not_judged == (
            "KV pulls: not judged over 40 pulls (p50 22028.33x their ideal): the run turned KV "
            "transfer off (--kv-off), so each pull moved one byte and its time was all fixed "
            "cost, which says nothing of how fast the end hosts moved KV",
        )
    else:
        assert not stored.trustworthy and stored.not_judged == ()
        assert stored.reasons == (
            "KV pulls: p50 22028.33x their ideal after 5 ms of fixed cost each over 40 pulls "
            "(allowed 1.5x) while the median pull's busiest link was 2% busy as it ran (under "
            "20%): an end-host artifact, not the fabric",
        )


def test_a_kv_off_run_is_still_judged_by_every_other_rule() -> None:
    off = KvPulls(40, 22028.33, 0.02, 0.005, seen_busy=0.02, kv_off=True)
    busy = judge(_samples([0.97] * 10), None, NetworkEvidence(kv=off))
    assert not busy.trustworthy and len(busy.not_judged) == 1
    assert [r.split(" ")[0] for r in busy.reasons] == ["machine", "cpu0", "cpu1"]
    # the rule switched off by the limits: nothing judged, so nothing to say it did not apply
    assert judge(QUIET, KV_RECORDED, NetworkEvidence(kv=off)).not_judged == ()


def test_kv_pulls_without_their_links_load_are_unchecked() -> None:
    v = _judge(NetworkEvidence(kv=KvPulls(80, 1.1, None)), KV_JUDGED)
    assert not v.trustworthy and "the load of their links was not counted" in v.reasons[0]


def test_the_kv_path_load_is_the_busiest_link_a_pull_can_cross() -> None:
    fabric = build_fabric(fabric_specs(["roft"], 16, 2)["roft"])
    (h0, _), a0 = next((k, a) for k, a in sorted(fabric.attachments.items()) if k[0] == "h0")
    (h1, _), a1 = next((k, a) for k, a in sorted(fabric.attachments.items()) if k[0] == "h1")
    trunk = next(
        (lk.node1, lk.port1)
        for lk in fabric.links
        if fabric.is_switch(lk.node1) and fabric.is_switch(lk.node2)
    )
    sent = {(a0.switch, a0.port): 0.05, trunk: 0.12}  # toward h0; a switch-to-switch link
    received = {(a1.switch, a1.port): 0.3, trunk: 0.9}  # from h1; a trunk's rx is its peer's tx
    assert kv_path_busy(fabric, sent, received, [h0]) == pytest.approx(0.12)
    assert kv_path_busy(fabric, sent, received, [h0, h1]) == pytest.approx(0.3)
    assert kv_path_busy(fabric, {}, {}, [h0]) is None


def test_a_counters_rate_over_the_samples_that_cover_a_span() -> None:
    samples = [(0.0, 0.0), (4.0, 400.0), (8.0, 400.0), (12.0, 1600.0)]
    assert span_rate(samples, 1.0, 3.0) == pytest.approx(100.0)  # (0, 4)
    assert span_rate(samples, 4.0, 8.0) == pytest.approx(0.0)  # on the samples themselves
    assert span_rate(samples, 3.0, 9.0) == pytest.approx(1600 / 12)  # (0, 12)
    assert span_rate(samples, -1.0, 3.0) is None and span_rate(samples, 11.0, 13.0) is None
    assert span_rate([], 1.0, 2.0) is None
    assert span_rate([(0.0, 50.0), (4.0, 10.0)], 1.0, 2.0) == 0.0  # a reset counts no bytes


def test_the_load_pulls_met_is_their_own_links_as_they_ran() -> None:
    """A hot decode: its NIC link is 80% busy for 4 s and idle for the next 12; the pulls to
    it all ran in the hot 4 s, so they met 80% where the link's mean over 16 s is 20%. A pull to
    another decode, on idle links, met 0; the median pull met 80%."""
    fabric = build_fabric(fabric_specs(["roft"], 16, 2)["roft"])
    hosts = {"prefill-0": "h0", "decode-8": "h8", "decode-9": "h9"}
    links = pull_links(fabric, hosts)
    toward_h8 = [p for d, p in links("prefill-0", "decode-8") if d == "tx"]
    from_h0 = [p for d, p in links("prefill-0", "decode-8") if d == "rx"]
    caps = {(a.switch, a.port): 50e6 for a in fabric.attachments.values()}
    assert len(from_h0) == 1 and len(toward_h8) > 1  # h0's port; h8's, then the trunks
    hot = toward_h8[0]
    full = 50e6 / 8  # bytes/s of one port
    toward_h9 = next(p for d, p in links("prefill-0", "decode-9") if d == "tx")
    samples = {
        "tx": {
            hot: [(0.0, 0.0), (4.0, 0.8 * full * 4), (16.0, 0.8 * full * 4)],
            toward_h9: [(0.0, 0.0), (16.0, 0.0)],
        }
    }
    assert samples["tx"][hot][-1][1] / 16 / full == pytest.approx(0.2)  # its mean over 16 s

    def pull(decode: str, t: float) -> tuple[str, dict[str, object]]:
        return decode, {"engine_id": "prefill-0", "start": t, "end": t + 0.3, "ok": True}

    pulls = [pull("decode-8", 1.0), pull("decode-8", 2.0), pull("decode-9", 6.0)]
    assert kv_seen_busy(pulls, links, samples, caps) == pytest.approx(0.8)
    assert kv_seen_busy(pulls[2:], links, samples, caps) == pytest.approx(0.0)
    # widened by a scrape interval each side, a pull at 4.2 s spans (0, 16): the mean again
    late = [pull("decode-8", 4.2)]
    assert kv_seen_busy(late, links, samples, caps, margin_s=4.0) == pytest.approx(0.2)
    failed = [("decode-8", {"engine_id": "prefill-0", "start": 1.0, "end": 2.0, "ok": False})]
    assert kv_seen_busy(failed, links, samples, caps) is None
    assert kv_seen_busy(pulls, links, {}, caps) is None


def test_slow_pulls_on_links_busy_as_they_ran_are_the_fabric() -> None:
    """The rule judges the load the pulls met when it was counted: a hotspot's 20% mean with
    its pulls meeting 50% passes; 3% met fails, saying so."""
    hot = KvPulls(720, 2.4, 0.20 - 0.01, 0.005, seen_busy=0.5)
    assert _judge(NetworkEvidence(kv=hot), KV_JUDGED).trustworthy
    idle = _judge(NetworkEvidence(kv=KvPulls(720, 2.4, 0.4, 0.005, seen_busy=0.03)), KV_JUDGED)
    assert not idle.trustworthy
    assert "the median pull's busiest link was 3% busy as it ran" in idle.reasons[0]


# --- engine lateness relative to the modelled step ---------------------------------------------


def _engine_buckets(steps: list[tuple[float, float]]) -> tuple[dict, dict, dict, dict]:
    """(overrun, lateness) buckets before and after an engine ran `steps` of (compute_s,
    overrun_s), through the engine's own metrics."""
    registry = CollectorRegistry()
    m = EngineMetrics(registry, "glm-5.1", "decode-4")
    before = generate_latest(registry).decode()
    for compute_s, overrun in steps:
        m.step_overrun.observe(overrun)
        m.step_lateness.observe(overrun / compute_s)
    after = generate_latest(registry).decode()
    return (
        overrun_buckets(before),
        overrun_buckets(after),
        lateness_buckets(before),
        lateness_buckets(after),
    )


def _lateness_verdict(steps: list[tuple[float, float]]) -> HealthVerdict:
    o0, o1, l0, l1 = _engine_buckets(steps)
    limits = Limits()
    overruns = step_overruns(
        {"decode-4": o0},
        {"decode-4": o1},
        limits.overrun_s,
        expected=["decode-4"],
        lateness=({"decode-4": l0}, {"decode-4": l1}),
        late_share=limits.late_share,
    )
    return _judge(NetworkEvidence(overruns=overruns))


def test_a_steady_15_ms_late_wake_on_a_30_ms_decode_step_fails() -> None:
    v = _lateness_verdict([(0.030, 0.015)] * 100)
    assert not v.trustworthy
    # under the fixed 20 ms, so only the relative rule catches it
    assert v.reasons == (
        "engine steps: 100 of 100 (100.0%) woke more than 25% of their modelled step late "
        "(allowed 1%; most on decode-4 100 of 100)",
    )
    assert v.step_overruns is not None and v.step_overruns.engines["decode-4"].late == 0


def test_lateness_within_the_share_or_in_few_steps_passes() -> None:
    assert _lateness_verdict([(0.030, 0.006)] * 100).trustworthy  # 20% of the step
    assert _lateness_verdict([(0.030, 0.001)] * 99 + [(0.030, 0.015)]).trustworthy  # 1%
    v = _lateness_verdict([(0.030, 0.001)] * 98 + [(0.030, 0.015)] * 2)  # 2%
    assert not v.trustworthy and v.reasons[0].startswith("engine steps: 2 of 100 (2.0%)")


def test_lateness_is_judged_over_all_engines_steps() -> None:
    overruns = StepOverruns(
        0.02,
        {
            "decode-4": EngineOverruns(steps=400, late=0, behind=5),  # 1.2% of its own
            "decode-5": EngineOverruns(steps=400, late=0, behind=1),
            "decode-6": EngineOverruns(steps=300, late=0, behind=0),
            "decode-7": EngineOverruns(steps=100, late=0, behind=None),  # an older engine
        },
        late_share=0.25,
    )
    assert _judge(NetworkEvidence(overruns=overruns)).trustworthy  # 6 of 1100: 0.5%
    hot = replace(overruns, engines={**overruns.engines, "decode-6": EngineOverruns(300, 0, 9)})
    v = _judge(NetworkEvidence(overruns=hot))
    assert v.reasons == (
        "engine steps: 15 of 1100 (1.4%) woke more than 25% of their modelled step late "
        "(allowed 1%; most on decode-6 9 of 300, decode-4 5 of 400, decode-5 1 of 400)",
    )


def test_the_step_observes_its_lateness_as_a_share_of_its_compute() -> None:
    from zcube_lab.serving.engine_step import run_step

    class NoPeers:
        peers: tuple = ()

    registry = CollectorRegistry()
    m = EngineMetrics(registry, "glm-5.1", "decode-4")

    async def main() -> None:
        blocker = asyncio.get_running_loop().call_later(0.005, time.sleep, 0.03)
        await run_step(0.01, NoPeers(), 0, m)  # type: ignore[arg-type]
        blocker.cancel()

    asyncio.run(main())
    buckets = lateness_buckets(generate_latest(registry).decode())
    # woke about 25 ms late on a 10 ms step: more than twice the step
    assert buckets[2.0] == 0 and buckets[float("inf")] == 1


# --- CPU over the load window only -------------------------------------------------------------


def test_cpu_is_judged_over_the_load_window_only() -> None:
    waiting = _samples([0.1] * 30)  # waiting for targets: t 1-30
    load = _samples([0.95] + [0.5] * 9, start=30.0)  # the load: t 31-40
    drain = _samples([0.1] * 30, start=40.0)
    samples = waiting + load + drain
    assert judge(samples).trustworthy  # 1 of 70 samples over 90%: diluted
    v = judge(samples, window=(30.0, 40.0))
    assert not v.trustworthy and v.samples == 10
    (reason,) = v.reasons
    assert reason.startswith("machine CPU above 90% in 10% of samples (allowed 5%;")


def test_a_load_window_without_a_saturated_share_passes() -> None:
    samples = _samples([0.1] * 30) + _samples([0.85] * 10, start=30.0)
    v = judge(samples, window=(30.2, 40.0))  # the 30-31 s sample is mostly inside
    assert v.trustworthy and v.samples == 10
    assert v.machine_cpu_mean == pytest.approx(0.85)


def test_a_registered_process_never_sampled_in_the_load_is_missing() -> None:
    samples = _samples([0.3] * 5, gateway=0.2) + _samples([0.3] * 10, start=5.0)
    v = judge(samples, window=(5.0, 15.0), expected=["gateway", DATAPATH])
    assert v.reasons == ("process gateway was never sampled during the load: its CPU is unchecked",)
    assert judge(samples, window=(0.0, 15.0), expected=["gateway"]).trustworthy


# --- the gateway's loop lag and the load generator's send lag ----------------------------------


def test_a_lagging_gateway_loop_fails_and_a_near_one_passes() -> None:
    v = _judge(NetworkEvidence(loops={GATEWAY: LoopLag(450, 10, 0.02)}))
    assert v.reasons == (
        "gateway: in 10 of 450 timer samples (2.2%) its event loop woke more than 20 ms late "
        "(allowed 1%)",
    )
    assert _judge(NetworkEvidence(loops={GATEWAY: LoopLag(450, 4, 0.02)})).trustworthy


def test_the_gateway_samples_its_loop_lag() -> None:
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry, "glm-5.1")
    before = histogram_buckets(generate_latest(registry).decode(), GATEWAY_LOOP_LAG)

    async def main() -> None:
        task = asyncio.create_task(sample_loop_lag(metrics.loop_lag.observe, 0.02))
        await asyncio.sleep(0.03)
        time.sleep(0.06)  # the loop is blocked: the pending timer fires about 50 ms late
        await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(main())
    after = histogram_buckets(generate_latest(registry).decode(), GATEWAY_LOOP_LAG)
    lag = loop_lag(before, after, 0.02)
    assert lag.samples >= 3 and lag.late == 1


def test_the_load_generators_send_lag_is_judged() -> None:
    lags = [0.001] * 97 + [0.05] * 3
    within = [0.001] * 99 + [0.05]  # 1%: at the limit, not above it
    lag = send_lag(lags, 0.02)
    assert lag == LoopLag(100, 3, 0.02)
    v = _judge(NetworkEvidence(loops={LOADGEN: lag}))
    assert v.reasons == (
        "load generator: in 3 of 100 requests (3.0%) they were sent more than 20 ms late "
        "(allowed 1%)",
    )
    assert _judge(NetworkEvidence(loops={LOADGEN: send_lag(within, 0.02)})).trustworthy


# --- missing sources of evidence ---------------------------------------------------------------


def test_an_engine_whose_metrics_did_not_answer_is_named() -> None:
    o0, o1, _, _ = _engine_buckets([(0.03, 0.001)] * 10)
    overruns = step_overruns(
        {"decode-4": o0}, {"decode-4": o1, "decode-5": o1}, 0.02, expected=["decode-4", "decode-5"]
    )
    assert overruns.missing == ("decode-5",)
    v = _judge(NetworkEvidence(overruns=overruns))
    assert v.reasons == ("decode-5: its metrics did not answer, so its step lateness is unchecked",)
    again = HealthVerdict.from_dict(json.loads(json.dumps(v.to_dict())))
    assert again.step_overruns == overruns


def test_failed_network_sampler_reads_name_where(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()  # the root namespace has no counters; host h9 does not exist
    sampler = NetSampler({"h9": 9999}, {}, interval_s=0.05, proc=tmp_path)
    sampler.start()
    sampler.stop()
    evidence = sampler.evidence()
    assert set(sampler.failed) >= {"root", "h9"} and sampler.failures == sum(
        sampler.failed.values()
    )
    v = _judge(evidence)
    assert not v.trustworthy
    assert v.reasons[0].startswith(f"network sampler: {sampler.failures} reads failed (h9 ")
    assert v.missing == evidence.missing


def test_the_runner_names_a_silent_gateway_and_an_empty_request_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = Experiment(RunConfig(fabric=FabricSpec.of("zcube", n=4), results_root=tmp_path))
    engines = exp.launcher.engine_metrics_urls()
    assert set(exp._metrics_urls()) == {*engines, GATEWAY}

    class Sampler:
        failures = 0

        def stop(self) -> None: ...

        def evidence(self, overruns, faults, limits) -> NetworkEvidence:
            return NetworkEvidence(overruns=overruns)

    monkeypatch.setattr(exp.launcher, "net_sampler", Sampler())
    monkeypatch.setattr(exp.launcher, "datapath_drops", dict)
    # every engine answers before and after; the gateway does not
    monkeypatch.setattr(
        "zcube_lab.emulator.experiment.runner.metrics_texts",
        lambda urls: dict.fromkeys(engines, ""),
    )
    exp._metrics_before = dict.fromkeys(engines, "")
    exp._evidence = exp._network_evidence()
    assert exp._evidence is not None and exp._evidence.overruns is not None
    assert exp._evidence.overruns.missing == ()
    evidence = exp._load_evidence([], KvPulls(0, None, None))
    assert evidence is not None
    v = judge(QUIET, None, evidence)
    assert v.reasons == (
        "gateway: its metrics did not answer, so its loop lag is unchecked",
        "load generator: no request was recorded, so its send lag is unchecked",
    )
    lagged = exp._load_evidence([{"lag_s": 0.03, "outcome": "ok"}], KvPulls(0, None, None))
    assert lagged is not None and lagged.loops[LOADGEN] == LoopLag(1, 1, 0.02)


# --- one limits object, written beside the verdict ---------------------------------------------


def test_the_limits_round_trip_and_an_older_file_reads_with_defaults() -> None:
    limits = Limits(kv_ratio_p50=1.5, judge_qdisc_drops=False)
    assert Limits.from_dict(json.loads(json.dumps(limits.to_dict()))) == limits
    older = {"machine_cpu": 0.8, "network": {"overrun_s": 0.02}}  # a key it no longer has
    assert Limits.from_dict(older) == Limits(machine_cpu=0.8)
    assert limits.rates.over == 1.05 and limits.rates.under == 0.5


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kv_ratio_p50": 0}, "limits.kv_ratio_p50"),
        ({"kv_path_busy": 1.5}, "limits.kv_path_busy"),
        ({"late_share": -0.1}, "limits.late_share"),
        ({"loop_lag_s": -1}, "limits.loop_lag_s"),
        ({"kv_min_pulls": 0}, "limits.kv_min_pulls"),
        ({"send_lag_fraction": True}, "limits.send_lag_fraction"),
    ],
)
def test_bad_limits_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        Limits(**kwargs)
    assert err.value.field == field


def test_the_sampler_writes_its_limits_beside_its_verdict() -> None:
    sampler = HealthSampler(0.1, watch_datapath=False)
    data = json.loads(sampler.to_json(Limits(require_datapath=False, late_share=0.5)))
    assert Limits.from_dict(data["limits"]) == Limits(require_datapath=False, late_share=0.5)
    assert "limits" not in HealthVerdict.from_dict(data["verdict"]).to_dict()


def test_older_verdicts_without_the_new_fields_still_read() -> None:
    v = _judge(
        NetworkEvidence(
            kv=KvPulls(80, 1.1, 0.02),
            loops={GATEWAY: LoopLag(450, 0, 0.02)},
            missing={"network sampler": "1 reads failed (h3 1): those counters are unchecked"},
        )
    )
    data = json.loads(json.dumps(v.to_dict()))
    assert HealthVerdict.from_dict(data) == v
    old = {k: x for k, x in data.items() if k not in FIDELITY_FIELDS}
    before = HealthVerdict.from_dict(old)
    assert before.kv_pulls is None and before.loop_lag == {} and before.missing == {}
    assert json.loads(json.dumps(before.to_dict())) == old
