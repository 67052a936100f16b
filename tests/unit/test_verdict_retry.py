"""The retry rule: which rejected runs were the machine's fault (run again) and which the
fabric's or the lab's own (kept as they are). The verdicts are built by the real `judge` from
hand-made samples and evidence, so the rule is tested against the reasons' real wording."""

from __future__ import annotations

from dataclasses import replace

import pytest

from zcube_lab.emulator.verdict.combine import over_machines
from zcube_lab.emulator.verdict.judge import DATAPATH, HealthSample, HealthVerdict, judge
from zcube_lab.emulator.verdict.netstats import QDISC_DROPS, STALLED, TIMEOUTS, NetEvent
from zcube_lab.emulator.verdict.network import (
    EngineOverruns,
    KvPulls,
    LoopLag,
    NetworkEvidence,
    StepOverruns,
)
from zcube_lab.emulator.verdict.retry import (
    Cause,
    cause_of,
    disturbed,
    other_load_cores,
    retry_decision,
)

LAB = {DATAPATH: 0.3, "decode-0": 0.3, "gateway": 0.2}  # 0.8 of the lab's own cores


def _samples(
    busy: float = 0.4, steal: float = 0.0, processes: dict[str, float] | None = None
) -> list[HealthSample]:
    return [
        HealthSample(
            t=float(i),
            interval_s=1.0,
            machine_cpu=busy,
            per_core=(busy, busy),
            softirq=0.01,
            steal=steal,
            processes=dict(LAB if processes is None else processes),
        )
        for i in range(10)
    ]


def _late_steps() -> NetworkEvidence:
    return NetworkEvidence(overruns=StepOverruns(0.02, {"decode-0": EngineOverruns(1000, 40)}))


def _event(where: str, quantity: str, **detail: float) -> NetEvent:
    return NetEvent(3.0, 4.0, where, quantity, 2, detail)


def test_steal_alone_is_the_machines_and_is_retried() -> None:
    v = judge(_samples(steal=0.23))
    assert v.reasons == ("CPU steal averaged 23% (allowed 5%)",)
    assert cause_of(v.reasons[0]) is Cause.MACHINE
    d = retry_decision(v)
    assert d.retry and "CPU steal 23%" in d.why and "steal averaged 23%" in d.why


def test_late_steps_with_steal_are_the_machines() -> None:
    v = judge(_samples(steal=0.2), evidence=_late_steps())
    assert [cause_of(r) for r in v.reasons] == [Cause.MACHINE, Cause.LATE]
    assert retry_decision(v).retry


def test_late_steps_on_a_quiet_machine_are_the_labs_own() -> None:
    """Late wake-ups without steal or other load: the lab's own load made them, and the same
    run again would repeat them."""
    v = judge(_samples(), evidence=_late_steps())
    assert cause_of(v.reasons[0]) is Cause.LATE
    assert disturbed(v) is None
    d = retry_decision(v)
    assert not d.retry and "not busy from outside" in d.why


def test_other_processes_load_makes_a_busy_machine_the_machines() -> None:
    """Both cores at 97%, of which the lab's registered processes are 0.8 core: 1.1 cores of
    someone else's (a hog beside the run)."""
    v = judge(_samples(busy=0.97), evidence=_late_steps())
    assert [cause_of(r) for r in v.reasons] == [Cause.BUSY, Cause.BUSY, Cause.BUSY, Cause.LATE]
    assert other_load_cores(v) == pytest.approx(0.97 * 2 - 0.8 - 0.02)
    assert disturbed(v) == "other processes 1.1 cores"
    assert retry_decision(v).retry


def test_a_machine_busy_with_the_labs_own_load_is_not_retried() -> None:
    """The same 97% busy, all of it the lab's registered processes: no one else to blame."""
    mine = {DATAPATH: 0.6, "decode-0": 0.7, "gateway": 0.62}
    v = judge(_samples(busy=0.97, processes=mine))
    assert (other_load_cores(v) or 0.0) < 0.1
    assert not retry_decision(v).retry


@pytest.mark.parametrize(
    "evidence",
    [
        NetworkEvidence(events=(_event("h3", TIMEOUTS),)),
        NetworkEvidence(events=(_event("a0-eth1", QDISC_DROPS),)),
        NetworkEvidence(
            events=(
                _event("h1-eth0", STALLED, mbps=1.0, rate_mbps=50.0, window_s=1, backlog_bytes=9e6),
            )
        ),
        NetworkEvidence(datapath_drops={"receive_socket_drops": 4}),
    ],
    ids=["tcp-timeouts", "qdisc-drops", "stall", "datapath-drops"],
)
def test_the_fabrics_faults_are_never_retried_away_even_with_steal(
    evidence: NetworkEvidence,
) -> None:
    v = judge(_samples(steal=0.3), evidence=evidence)
    assert cause_of(v.reasons[0]) is Cause.MACHINE
    assert cause_of(v.reasons[-1]) is Cause.FABRIC
    d = retry_decision(v)
    assert not d.retry and d.why.startswith("not retried: the fabric's: ")


def test_the_labs_own_saturation_and_missing_evidence_are_not_retried() -> None:
    hot = judge(_samples(steal=0.2, processes={**LAB, "gateway": 0.97}))
    assert [cause_of(r) for r in hot.reasons] == [Cause.LAB, Cause.MACHINE]
    assert not retry_decision(hot).retry
    few = judge(_samples(steal=0.2)[:2])
    assert cause_of(few.reasons[0]) is Cause.LAB and not retry_decision(few).retry
    gone = judge(
        _samples(steal=0.2),
        evidence=NetworkEvidence(overruns=StepOverruns(0.02, {}, missing=("decode-1",))),
    )
    assert cause_of(gone.reasons[-1]) is Cause.LAB and not retry_decision(gone).retry


def test_loop_lag_send_lag_and_kv_artifact_are_late_wakeups() -> None:
    evidence = NetworkEvidence(
        loops={"gateway": LoopLag(100, 9, 0.02), "load generator": LoopLag(200, 30, 0.02)},
        kv=KvPulls(rated=40, ratio_p50=2.1, path_busy=0.05),
    )
    v = judge(_samples(steal=0.12), evidence=evidence)
    assert [cause_of(r) for r in v.reasons] == [Cause.MACHINE, Cause.LATE, Cause.LATE, Cause.LATE]
    assert retry_decision(v).retry


def test_another_machines_steal_is_the_machines_and_unknown_reasons_are_the_fabrics() -> None:
    local = judge(_samples())
    other = judge(_samples(steal=0.4))
    v = over_machines(local, [("machine 1 (198.19.254.2)", other)])
    assert v.reasons == ("machine 1 (198.19.254.2): CPU steal averaged 40% (allowed 5%)",)
    assert cause_of(v.reasons[0]) is Cause.MACHINE
    assert cause_of("h9: something new the verdict learnt to say") is Cause.FABRIC


def test_trusted_and_reasonless_runs_are_not_retried() -> None:
    good = judge(_samples())
    assert good.trustworthy and not retry_decision(good).retry
    bare = HealthVerdict.from_dict({"trustworthy": False, "reasons": [], "samples": 10})
    assert not retry_decision(bare).retry
    # no CPU figures at all (an old verdict): only steal's own reason can be the machine's
    steal_only = replace(bare, reasons=("CPU steal averaged 9% (allowed 5%)",))
    assert retry_decision(steal_only).retry
    late_only = replace(bare, reasons=_late_reasons())
    assert not retry_decision(late_only).retry


def _late_reasons() -> tuple[str, ...]:
    return judge(_samples(), evidence=_late_steps()).reasons
