"""The run loop compare and sweep share (zcube_lab.emulator.experiment.runloop), with a fake lab: a
run the machine spoiled runs again with the same seed, the rejected folder is kept and named in
retry.json, a fabric's fault is never retried, and --retries is checked."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.experiment.comparison import (
    PlannedRun,
    fabric_specs,
    interleave,
    plan_variants,
    run_planned,
)
from zcube_lab.emulator.experiment.launcher import RunResult
from zcube_lab.emulator.experiment.plan import RunConfig
from zcube_lab.emulator.experiment.runloop import LoopConfig, RunLoop, check_retries
from zcube_lab.emulator.experiment.sweep import plan_sweep, run_sweep
from zcube_lab.emulator.results.compare.report import read_retries
from zcube_lab.emulator.results.run.goodput import parse_slo
from zcube_lab.emulator.results.run.summary import RunSummary
from zcube_lab.emulator.verdict.judge import HealthVerdict
from zcube_lab.emulator.verdict.retry import RETRY_FILE

DATA = Path(__file__).parent / "data"
STEAL = "CPU steal averaged 23% (allowed 5%)"
DROPS = "h3: 2 TCP retransmission timeouts"


def _summary(reasons: tuple[str, ...], steal: float = 0.0) -> RunSummary:
    base = RunSummary.from_dict(json.loads((DATA / "summary-zcube.json").read_text()))
    health = HealthVerdict.from_dict(
        {**base.health.to_dict(), "trustworthy": not reasons, "reasons": list(reasons)}
    )
    health = replace(health, steal_mean=steal, machine_cpu_mean=0.3)
    return replace(base, label="zcube", health=health, trustworthy=not reasons)


def _plan(repeat: int = 2) -> list[PlannedRun]:
    specs = fabric_specs(["zcube"], 16, 2)
    variants = plan_variants(RunConfig(fabric=specs["zcube"], duration_s=10), specs, ["ecmp"])
    return interleave(variants, repeat)


class FakeLab:
    """Answers each attempt with the next verdict of its tag's script (trusted when the
    script runs out), in a folder of its own; records every config it ran."""

    def __init__(self, root: Path, script: dict[str, list[tuple[str, ...]]]) -> None:
        self.root, self.script, self.ran = root, script, []

    def __call__(self, p: PlannedRun) -> RunResult:
        self.ran.append(p.config)
        folder = self.root / f"run{len(self.ran)}-{p.config.tag}"
        folder.mkdir()
        (folder / "requests.jsonl").write_text("")
        base = p.config.tag.split("-retry")[0]
        reasons = self.script.get(base, [])
        got = reasons.pop(0) if reasons else ()
        return RunResult(folder, _summary(got, steal=0.23 if STEAL in got else 0.0))


def test_a_run_the_machine_spoiled_runs_again_with_the_same_seed(tmp_path: Path) -> None:
    lab = FakeLab(tmp_path, {"r1": [(STEAL,)]})
    said: list[str] = []
    got = list(run_planned(_plan(), progress=said.append, execute=lab, retries=2))
    assert [c.tag for c in lab.ran] == ["r1", "r1-retry1", "r2"]
    assert lab.ran[0].seed == lab.ran[1].seed
    assert [r.summary.trustworthy for _p, r in got] == [True, True]
    first, retry = tmp_path / "run1-r1", got[0][1].path
    assert first.is_dir() and retry.name == "run2-r1-retry1"  # the rejected folder is kept
    (earlier,) = read_retries(retry)
    assert earlier.run == str(first) and earlier.reasons == (STEAL,)
    assert "CPU steal 23%" in earlier.why
    assert any("running it again with the same seed (retry 1 of 2)" in m for m in said)
    assert read_retries(got[1][1].path) == ()


def test_a_fabrics_fault_is_never_run_again(tmp_path: Path) -> None:
    lab = FakeLab(tmp_path, {"r1": [(STEAL, DROPS)]})
    got = list(run_planned(_plan(1), execute=lab, retries=2))
    assert [c.tag for c in lab.ran] == ["r1"]
    assert not got[0][1].summary.trustworthy
    assert not (got[0][1].path / RETRY_FILE).exists()


def test_a_retry_rejected_again_keeps_both_reasons_and_the_retries_end(tmp_path: Path) -> None:
    lab = FakeLab(tmp_path, {"r1": [(STEAL,), (STEAL,), (STEAL,), (STEAL,)]})
    said: list[str] = []
    loop = RunLoop(lab, config=LoopConfig(2), progress=said.append)
    out = loop.run(_plan(1)[0])
    assert [c.tag for c in lab.ran] == ["r1", "r1-retry1", "r1-retry2"]
    assert out.attempts == 3 and not out.result.summary.trustworthy
    assert [r.reasons for r in read_retries(out.result.path)] == [(STEAL,), (STEAL,)]
    assert "the machine is too noisy now" in said[-1]
    # a retry rejected for the fabric ends the retries; the first attempt is still listed
    lab = FakeLab(tmp_path / "b", {"r1": [(STEAL,), (DROPS,)]})
    (tmp_path / "b").mkdir()
    out = RunLoop(lab).run(_plan(1)[0])
    assert out.result.summary.health.reasons == (DROPS,)
    assert [r.reasons for r in read_retries(out.result.path)] == [(STEAL,)]


def test_no_retries_when_asked_for_none(tmp_path: Path) -> None:
    lab = FakeLab(tmp_path, {"r1": [(STEAL,), (STEAL,)]})
    list(run_planned(_plan(1), execute=lab, retries=0))
    assert [c.tag for c in lab.ran] == ["r1"]
    list(run_planned(_plan(1), execute=lab))  # a library caller (a benchmark) opts in
    assert [c.tag for c in lab.ran] == ["r1", "r1"]


@pytest.mark.parametrize("bad", ["-1", "1.5", "two", "", -1, 2.0, True, 11])
def test_retries_below_zero_or_not_a_whole_number_is_a_clear_error(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"retries=.*whole number of retries from 0"):
        check_retries(bad)
    with pytest.raises(ConfigError):  # before any run starts
        run_planned(_plan(1), retries=bad, execute=lambda p: pytest.fail("ran"))  # type: ignore[arg-type]
    assert check_retries("3") == 3 and check_retries(0) == 0


def test_the_sweep_runs_through_the_same_loop(tmp_path: Path) -> None:
    specs = fabric_specs(["zcube"], 16, 2)
    variants = plan_variants(RunConfig(fabric=specs["zcube"], duration_s=10), specs, ["ecmp"])
    plan = plan_sweep(variants, [1.0], repeat=1)
    lab = FakeLab(tmp_path, {"1rps-r1": [(STEAL,)]})
    started: list[PlannedRun] = []
    got = list(
        run_sweep(plan, parse_slo("ttft_p99=2s"), starting=started.append, execute=lab, retries=1)
    )
    assert [c.tag for c in lab.ran] == ["1rps-r1", "1rps-r1-retry1"]
    assert len(started) == 1  # a retry is not a new run of the plan
    assert got[0].trustworthy  # the point is the retry's
    with pytest.raises(ConfigError):
        run_sweep(plan, parse_slo("ttft_p99=2s"), execute=lab, retries="-2")


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_compare_and_sweep_take_retries_and_refuse_a_bad_one_before_running(command: str) -> None:
    from zcube_lab.cli import build_parser
    from zcube_lab.cli.commands.compare import variants_from_args

    args = build_parser().parse_args([command])
    assert args.retries == "2"  # the default, checked with the variants
    variants_from_args(args)
    assert args.retries == 2
    for bad in ("-1", "1.5"):
        args = build_parser().parse_args([command, "--retries", bad])
        with pytest.raises(ConfigError, match=r"retries='.*' is not valid: a whole number"):
            variants_from_args(args)
