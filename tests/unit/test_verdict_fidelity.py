"""The verdict's fidelity rules: network events that no fault explains, engine step overruns,
datapath threads and single cores; and the new fields through to_dict/from_dict."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.experiment.launcher import Launcher
from zcube_lab.emulator.experiment.plan import RunConfig, plan_run
from zcube_lab.emulator.verdict.cpustats import parse_task_stat, thread_names
from zcube_lab.emulator.verdict.judge import (
    DATAPATH,
    FIDELITY_FIELDS,
    BusiestLink,
    HealthSample,
    HealthVerdict,
    judge,
)
from zcube_lab.emulator.verdict.limits import Limits
from zcube_lab.emulator.verdict.netstats import (
    OVER_RATE,
    QDISC_DROPS,
    SOFTNET_DROPS,
    STALLED,
    SYN_RETRANS,
    TIMEOUTS,
    NetEvent,
    QueueFigures,
    TcpCounters,
)
from zcube_lab.emulator.verdict.network import (
    DATAPATH_RECEIVE_DROPS,
    DATAPATH_SEND_ERRORS,
    EngineOverruns,
    FaultWindow,
    NetworkEvidence,
    StepOverruns,
    engine_overruns,
    overrun_buckets,
    step_overruns,
)
from zcube_lab.serving.vllm_metrics import EngineMetrics


def _samples(n: int = 10, cores: tuple[float, ...] = (0.4, 0.4), **threads: float) -> list:
    return [
        HealthSample(
            t=float(i),
            interval_s=1.0,
            machine_cpu=sum(cores) / len(cores),
            per_core=cores,
            softirq=0.01,
            steal=0.0,
            processes={DATAPATH: 0.2},
            threads=dict(threads),
        )
        for i in range(n)
    ]


def _event(t: float, where: str, quantity: str, count: int = 1, **detail: float) -> NetEvent:
    return NetEvent(t, t + 1.0, where, quantity, count, detail)


CLEAN = NetworkEvidence(
    tcp={"h0": TcpCounters(out_segs=5000, retrans_segs=4, fast_retrans=4)},
    queues={"s1-eth1": QueueFigures(rate_mbps=50.0, peak_backlog_bytes=18_000, peak_mbps=20.0)},
    softnet={"cpu0": 0, "cpu1": 0},
    overruns=StepOverruns(0.02, {"decode-4": EngineOverruns(steps=1000, late=3)}),
)


def test_a_clean_run_is_trustworthy_and_carries_its_figures() -> None:
    v = judge(_samples(), evidence=CLEAN)
    assert v.trustworthy and v.reasons == ()
    assert v.tcp["h0"].fast_retrans == 4  # reported, not judged
    # the busiest link is the summary's (zcube_lab.emulator.results.fabric.linkstats), named by the
    # run
    assert v.busiest_link is None
    assert v.step_overruns is not None and v.step_overruns.late == 3


def test_a_timeout_on_one_host_names_the_host() -> None:
    events = (_event(5, "h3", TIMEOUTS, 2), _event(9, "h3", SYN_RETRANS))
    v = judge(_samples(), evidence=NetworkEvidence(events=events))
    assert not v.trustworthy
    assert v.reasons == ("h3: 2 TCP retransmission timeouts, 1 SYN retransmit",)


def test_drops_during_a_fault_are_explained_not_reasons() -> None:
    fault = FaultWindow("link a0-b1 at 10s for 6s", start=10.0, end=16.0)
    events = (_event(12, "s1-eth1", QDISC_DROPS, 40), _event(24, "h2", TIMEOUTS, 1))
    v = judge(_samples(), evidence=NetworkEvidence(events=events, faults=(fault,)))
    # 24 s is within the 10 s grace after the fault: TCP's backed-off timer fires late.
    assert v.trustworthy, v.reasons
    assert v.explained == (
        "h2: 1 TCP retransmission timeout (during link a0-b1 at 10s for 6s)",
        "s1-eth1: 40 packets dropped by the qdisc (during link a0-b1 at 10s for 6s)",
    )
    late = (_event(40, "h2", TIMEOUTS, 1),)
    v = judge(_samples(), evidence=NetworkEvidence(events=late, faults=(fault,)))
    assert v.reasons == ("h2: 1 TCP retransmission timeout",)


def test_a_fault_without_an_end_explains_the_rest_of_the_run() -> None:
    fault = FaultWindow("switch b0 at 5s", start=5.0, end=None)
    v = judge(
        _samples(), evidence=NetworkEvidence((_event(500, "cpu1", SOFTNET_DROPS),), faults=(fault,))
    )
    assert v.trustworthy
    v = judge(
        _samples(),
        evidence=NetworkEvidence((_event(1, "cpu1", SOFTNET_DROPS, 3),), faults=(fault,)),
    )
    assert v.reasons == ("cpu1: 3 packets dropped by the CPU's input queue (softnet)",)


def test_shaping_that_does_not_hold_and_a_stalled_queue() -> None:
    events = (
        _event(3, "a0-eth5", OVER_RATE, mbps=56.0, rate_mbps=50.0, window_s=1.0, backlog_bytes=0),
        _event(4, "a0-eth5", OVER_RATE, mbps=53.0, rate_mbps=50.0, window_s=1.0, backlog_bytes=0),
        _event(7, "h1-eth0", STALLED, mbps=10.0, rate_mbps=50.0, window_s=1.0, backlog_bytes=9e6),
    )
    v = judge(_samples(), evidence=NetworkEvidence(events=events))
    assert v.reasons == (
        "a0-eth5: sent 56.0 Mb/s over 1.0 s, 12% above its 50 Mb/s rate (shaping did not hold; "
        "2 windows)",
        "h1-eth0: held a backlog (9000 KB) through 1.0 s while sending 10.0 Mb/s, 20% of its "
        "50 Mb/s rate (the emulator did not keep up; 1 window)",
    )


def test_late_engine_steps_beyond_one_percent_are_a_reason() -> None:
    overruns = StepOverruns(
        0.02, {"decode-4": EngineOverruns(1000, 31), "decode-5": EngineOverruns(1000, 10)}
    )
    v = judge(_samples(), evidence=NetworkEvidence(overruns=overruns))
    assert v.reasons == (
        "decode-4: 31 of 1000 engine steps (3.1%) woke more than 20 ms late (allowed 1%)",
    )


def test_one_saturated_datapath_thread_or_core() -> None:
    v = judge(_samples(**{"pmd-c00/id:5": 0.97, "handler1": 0.1}))
    assert v.reasons == (
        f"{DATAPATH} thread pmd-c00/id:5 above 0.85 core in 100% of samples (allowed 20%; "
        "p95 0.97 core)",
    )
    assert v.datapath_threads["handler1"].p95 == pytest.approx(0.1)
    v = judge(_samples(cores=(0.99, 0.2)))
    assert v.reasons == ("cpu0 above 95% busy in 100% of samples (allowed 20%; p95 99%)",)


def test_the_new_fields_survive_a_round_trip_and_old_verdicts_still_read() -> None:
    events = (_event(5, "h3", TIMEOUTS, 2),)
    fault = FaultWindow("f", 0.0, 1.0)
    evidence = NetworkEvidence(
        events=(*events, _event(0.5, "h1", TIMEOUTS)),
        tcp=dict(CLEAN.tcp),
        queues=dict(CLEAN.queues),
        softnet={"cpu0": 2},
        overruns=CLEAN.overruns,
        faults=(fault,),
    )
    busiest = BusiestLink("h5->a1:2", 50.0, 40.0, 0.8, 0.4)
    v = replace(judge(_samples(thread=0.3), evidence=evidence), busiest_link=busiest)
    data = json.loads(json.dumps(v.to_dict()))
    assert data["tcp"]["h0"]["retrans_segs"] == 4
    assert data["qdisc"]["s1-eth1"]["peak_backlog_bytes"] == 18_000
    assert data["step_overruns"]["engines"]["decode-4"] == {
        "steps": 1000,
        "late": 3,
        "behind": None,  # no lateness histogram in this evidence
    }
    assert data["busiest_link"]["iface"] == "h5->a1:2"
    assert HealthVerdict.from_dict(data) == v
    # a verdict from before issue 19 named a shaped interface, without the mean
    earlier = {"iface": "s1-eth1", "rate_mbps": 50.0, "peak_mbps": 20.0, "peak_share": 0.4}
    read = HealthVerdict.from_dict({**data, "busiest_link": earlier}).busiest_link
    assert read == BusiestLink("s1-eth1", 50.0, 20.0, 0.4, None)
    old = {k: x for k, x in data.items() if k not in FIDELITY_FIELDS}
    before = HealthVerdict.from_dict(old)
    assert before.tcp == {} and before.step_overruns is None and before.explained == ()
    assert json.loads(json.dumps(before.to_dict())) == old  # written back as it was read
    data["tcp"]["h0"]["future_counter"] = 1  # a newer run's extra figure is ignored
    assert HealthVerdict.from_dict(data).tcp["h0"] == CLEAN.tcp["h0"]


def test_overruns_from_an_engines_metrics() -> None:
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry, "glm-5.1", "decode-4")
    for lag in (0.0001, 0.003, 0.03):
        metrics.step_overrun.observe(lag)
    before = overrun_buckets(generate_latest(registry).decode())
    for lag in (0.0002, 0.025, 0.6):
        metrics.step_overrun.observe(lag)
    after = overrun_buckets(generate_latest(registry).decode())
    assert engine_overruns(before, after, 0.02) == EngineOverruns(steps=3, late=2)
    assert engine_overruns(before, after, 0.5) == EngineOverruns(steps=3, late=1)
    assert engine_overruns(before, after, 0.015) == EngineOverruns(steps=3, late=2)  # next bound
    both = step_overruns({"decode-4": before}, {"decode-4": after, "decode-5": after}, 0.02)
    assert set(both.engines) == {"decode-4"}  # read only once: no figure
    assert overrun_buckets("# nothing here\n") == {}


def test_thread_stat_names_and_duplicates() -> None:
    fields = ["S"] + ["0"] * 10 + ["30", "20"] + ["0"] * 6 + ["5"] + ["0"] * 20
    name, times = parse_task_stat("77 (pmd-c00/id:5) " + " ".join(fields))
    assert name == "pmd-c00/id:5" and times.ticks == 50
    other = replace(times, pid=78)
    named = thread_names([("handler", times), ("handler", other), ("urcu2", times)])
    assert named == {"handler#77": times, "handler#78": other, "urcu2": times}


def test_qdisc_drops_can_be_reported_without_being_judged() -> None:
    events = (_event(3, "s1-eth1", QDISC_DROPS, 9), _event(3, "h1", TIMEOUTS))
    limits = Limits(judge_qdisc_drops=False)
    v = judge(_samples(), limits, NetworkEvidence(events=events))
    assert v.reasons == ("h1: 1 TCP retransmission timeout",)
    with pytest.raises(ConfigError, match="overrun_fraction"):
        Limits(overrun_fraction=2.0)


def test_switch_port_drops_are_congestion_and_host_queue_drops_are_judged() -> None:
    events = (_event(3, "a0-eth5", QDISC_DROPS, 9), _event(3, "h1-eth0", QDISC_DROPS, 2))
    evidence = NetworkEvidence(events=events, switch_ports=frozenset({"a0-eth5"}))
    v = judge(_samples(), None, evidence)
    assert v.reasons == ("h1-eth0: 2 packets dropped by the qdisc",)


def test_the_datapaths_own_losses_are_judged() -> None:
    drops = {DATAPATH_SEND_ERRORS: 3, DATAPATH_RECEIVE_DROPS: 0}
    v = judge(_samples(), None, NetworkEvidence(datapath_drops=drops))
    assert not v.trustworthy
    assert v.reasons[0].startswith("ovs-vswitchd: 3 send errors logged")
    assert HealthVerdict.from_dict(v.to_dict()).datapath_drops == {DATAPATH_SEND_ERRORS: 3}
    clean = judge(_samples(), None, NetworkEvidence(datapath_drops={DATAPATH_SEND_ERRORS: 0}))
    assert clean.trustworthy and "datapath_drops" not in clean.to_dict()


def test_the_runner_reads_every_engines_metrics(tmp_path: Path) -> None:
    plan = plan_run(RunConfig(fabric=FabricSpec.of("zcube", n=4), results_root=tmp_path))
    urls = Launcher(plan).engine_metrics_urls()
    assert set(urls) == {e.engine_id for e in plan.placement.engines}
    for e in plan.placement.engines:
        assert urls[e.engine_id].startswith(f"http://{plan.management_ip(e.host)}:")
        assert urls[e.engine_id].endswith("/metrics")
