"""How verdicts combine (`zcube_lab.emulator.verdict.combine`): over the machines of a cluster run,
over
runs, and up one repeat's ladder of rates; and that the callers keep their outputs."""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.emulator.verdict.combine import (
    NO_REASON,
    Judged,
    all_trustworthy,
    over_machines,
    over_runs,
    walk_ladder,
)
from zcube_lab.emulator.verdict.judge import HealthVerdict, Usage


def _verdict(ok: bool, *reasons: str) -> HealthVerdict:
    return HealthVerdict(
        trustworthy=ok, reasons=reasons, samples=30, machine_cpu_mean=0.5, machine_cpu_p95=0.7,
        datapath_cpu_mean=0.1, datapath_cpu_p95=0.2, per_core_p95=(0.6, 0.7),
        softirq_mean=0.01, steal_mean=0.0, processes={"gateway": Usage(0.2, 0.3, 0.0)},
    )  # fmt: skip


@dataclass(frozen=True)
class Step:
    rate: float
    slo_met: bool
    trustworthy: bool = True


def test_a_cluster_run_is_trustworthy_only_when_every_machine_is() -> None:
    local = _verdict(True)
    assert over_machines(local, [("machine 1 (10.0.0.2)", _verdict(True))]) == local
    merged = over_machines(
        _verdict(False, "machine CPU above 90%"),
        [("machine 1 (a)", _verdict(True)), ("machine 2 (b)", _verdict(False, "cpu1 pegged"))],
    )
    assert not merged.trustworthy
    assert merged.reasons == ("machine CPU above 90%", "machine 2 (b): cpu1 pegged")
    assert merged.samples == 30  # machine 0's figures are kept
    # one other machine untrustworthy (even without a reason) makes the whole so
    assert not over_machines(local, [("machine 1 (a)", _verdict(False))]).trustworthy
    assert over_machines(local, []) == local


def test_the_cluster_runs_merge_is_the_verdict_packages_rule() -> None:
    from zcube_lab.emulator.cluster.remote import Machine
    from zcube_lab.emulator.experiment.clusterrun import merge_verdicts

    other = Machine(1, "198.19.254.2")
    merged = merge_verdicts(_verdict(True), [(other, _verdict(False, "steal 9%"))])
    assert merged.reasons == ("machine 1 (198.19.254.2): steal 9%",) and not merged.trustworthy


def test_over_runs_counts_names_and_gives_the_first_reason() -> None:
    runs = [
        Judged("r1", True),
        Judged("r2", False),  # gave no reason
        Judged("r3", False, ("timeouts on h3", "CPU above 90%")),
    ]
    v = over_runs(runs)
    assert (v.runs, v.trusted, v.trustworthy) == (3, 1, False)
    assert v.count_text() == "no (1 of 3 trusted)"  # not "no (2 of 3)": read as 2 trusted
    assert v.reasons == (f"r2: {NO_REASON}", "r3: timeouts on h3", "r3: CPU above 90%")
    assert v.first_reason == "timeouts on h3"  # the first reason given, skipping a run with none
    assert over_runs([Judged("r2", False)]).first_reason == NO_REASON
    good = over_runs([Judged("r1", True), Judged("r4", True)])
    assert (good.trustworthy, good.count_text(), good.first_reason, good.reasons) == (
        True, "yes", None, ()
    )  # fmt: skip
    empty = over_runs([])
    assert not empty.trustworthy and empty.count_text() == "yes" and empty.runs == 0


def test_all_trustworthy_needs_at_least_one_part() -> None:
    assert all_trustworthy([Step(1, True), Step(2, False)])
    assert not all_trustworthy([Step(1, True), Step(2, True, False)])
    assert not all_trustworthy([])
    assert all_trustworthy(iter([_verdict(True)]))


def test_the_walk_stops_at_the_first_miss_or_untrustworthy_run_and_sorts() -> None:
    met_all = walk_ladder([Step(4, True), Step(1, True), Step(2, True)])
    assert (met_all.reached, met_all.stop, met_all.ended) == (4, None, False)
    miss = walk_ladder([Step(8, True), Step(2, True), Step(4, False), Step(1, True)])
    assert (miss.reached, miss.stop, miss.censored_by_verdict) == (2, Step(4, False), False)
    # an untrustworthy run stops it whether it met or missed, and a met rate above never counts
    bad = walk_ladder([Step(1, True), Step(2, True, False), Step(4, True)])
    assert (bad.reached, bad.stop, bad.censored_by_verdict) == (1, Step(2, True, False), True)
    assert walk_ladder([Step(1, False)]).reached == 0 and walk_ladder([]).stop is None


def test_capacity_and_the_report_read_the_combination_unchanged() -> None:
    from zcube_lab.emulator.results.sweep.capacity import repeat_capacity, walk_ended

    @dataclass(frozen=True)
    class Trial(Step):
        variant: str = "zcube"
        repeat: int = 1

    censored = repeat_capacity(1, [Trial(1, True), Trial(2, False, False), Trial(4, True)])
    assert (censored.rate, censored.censored, censored.stopped_at) == (
        1, "not trustworthy at 2 (missed)", 2
    )  # fmt: skip
    exact = repeat_capacity(1, [Trial(1, True), Trial(2, False)])
    assert (exact.rate, exact.censored, exact.stopped_at) == (1, None, 2)
    top = repeat_capacity(1, [Trial(1, True), Trial(2, True)])
    assert top.censored == "met at every rate tried (up to 2)" and top.stopped_at is None
    assert repeat_capacity(1, []).censored == "no rate was run"
    assert not walk_ended([]) and walk_ended([Trial(1, False)])
    assert not walk_ended([Trial(1, True)])
