"""§6.1 (end-to-end disaggregated TTFT) worked out before any lab: prompt lengths, the case's
workload profile, a trial's figures from its run's summary, the TTFT split, and the comparison
that marks an untrusted run out of reach (zcube_lab.core.bmwg.ttft, .report)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg import ttft as t61
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.trials import LOWER, OUT_OF_REACH
from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.bmwg.live import estimate_wall_s, run_argv
from zcube_lab.workloads.profiles import load_profile


def test_prompt_lengths_default_to_the_drafts_and_refuse_what_is_out_of_range() -> None:
    assert t61.prompt_lengths("") == (128, 512, 1024, 2048, 4096, 8192, 16384)
    assert t61.prompt_lengths("128, 2048") == (128, 2048)
    with pytest.raises(ConfigError, match=r"prompts.*16 to 131072"):
        t61.prompt_lengths("8")
    with pytest.raises(ConfigError, match="whole token counts"):
        t61.prompt_lengths("1e3")
    with pytest.raises(ConfigError, match="prompts"):
        BmwgConfig(prompts="128,999999")
    with pytest.raises(ConfigError, match="rate"):
        BmwgConfig(rate=0)
    with pytest.raises(ConfigError, match=r"trial_seconds.*at least 5 s"):
        t61.check_trial_seconds(0.002)  # a replay test's trial, not a live run's
    t61.check_trial_seconds(5.0)


def test_a_cases_profile_is_single_turn_at_exactly_its_prompt_length(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(t61.profile(2048, rate=0.5)))
    p = load_profile(str(path))  # the lab's own profile reader accepts it
    assert p.session is None
    assert (p.prompt.median, p.prompt.min, p.prompt.max, p.prompt.sigma) == (2048, 2048, 2048, 0)
    assert p.output.median == p.output.max == t61.OUTPUT_TOKENS
    assert p.prefix_cache_hit_rate == 0.0
    assert p.arrival.rate == 0.5
    with pytest.raises(ConfigError, match="rate"):
        t61.profile(128, rate=-1)


def _summary(trusted: bool, parts: dict[str, tuple[float, float]]) -> dict:
    kpis = {name: {"p50": a, "p99": b} for name, (a, b) in parts.items()}
    kpis["fabric_fraction"] = {"p50": 0.1, "p99": 0.3}
    return {"trustworthy": trusted, "bmwg": kpis, "transfers": {"ttft_parts_requests": 12}}


PARTS = {"TTFT": (140.0, 300.0), "T_prefill": (100.0, 250.0), "T_transfer": (30.0, 60.0),
         "T_decode_init": (10.0, 20.0)}  # fmt: skip


def test_a_trials_figures_are_its_runs_kpis_and_its_trust() -> None:
    f = t61.trial_figures(_summary(True, PARTS))
    assert f["TTFT_p50_ms"] == 140.0 and f["T_transfer_p99_ms"] == 60.0
    assert (f["fabric_fraction_p50"], f["requests"], f["untrusted"]) == (0.1, 12, 0)
    bare = t61.trial_figures({"trustworthy": False})
    assert bare["T_prefill_p50_ms"] is None and bare["untrusted"] == 1


def test_the_split_is_each_parts_median_over_their_sum() -> None:
    rows = [{"figures": t61.trial_figures(_summary(True, PARTS))},
            {"figures": t61.trial_figures(_summary(True, {**PARTS, "T_transfer": (50.0, 90.0)}))},
            {"figures": t61.trial_figures({"trustworthy": True})}]  # fmt: skip
    # prefill 100 + 100, transfer 30 + 50, decode init 10 + 10: of 300
    s = t61.shares(rows)
    assert s == pytest.approx({"T_prefill": 200 / 300, "T_transfer": 80 / 300,
                               "T_decode_init": 20 / 300})  # fmt: skip
    assert t61.shares([]) == {"T_prefill": None, "T_transfer": None, "T_decode_init": None}


def _rows(fabric: str, transfer_ms: list[float], trusted: bool = True) -> list[dict]:
    return [
        {"section": "6.1", "case": t61.case_label(2048), "params": {"prompt_tokens": 2048},
         "fabric": fabric, "trial": i,
         "figures": t61.trial_figures(_summary(trusted, {**PARTS, "T_transfer": (v, 2 * v)}))}
        for i, v in enumerate(transfer_ms)
    ]  # fmt: skip


def test_the_comparison_judges_the_transfer_and_marks_an_untrusted_run_out_of_reach() -> None:
    summary = report.summarize(_rows("zcube", [30.0, 31.0, 29.0]) + _rows("roft", [60, 61, 59]))
    verdicts = {c["figure"]: c["verdict"] for c in report.compare(summary)}
    assert verdicts["T_transfer_p50_ms"] == verdicts["T_transfer_p99_ms"] == LOWER, verdicts
    assert verdicts["TTFT_p50_ms"] != LOWER, verdicts  # the same 140 ms on both
    summary = report.summarize(
        _rows("zcube", [30.0, 31.0, 29.0]) + _rows("roft", [60, 61, 59], trusted=False)
    )
    assert {c["verdict"] for c in report.compare(summary)} == {OUT_OF_REACH}


def test_a_trial_is_one_zcube_lab_run_and_the_estimate_counts_them(tmp_path: Path) -> None:
    argv = run_argv("roft", 16, tmp_path / "w.json", 20.0, 3, tmp_path / "r")
    ns = argv[argv.index("run") + 1 :]
    assert ns[:4] == ["--fabric", "roft", "--gpus", "16"]
    assert "--seed" in ns and ns[ns.index("--seed") + 1] == "3"
    from zcube_lab.cli.commands.run import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(ns)  # the run command takes every flag
    assert (args.duration, args.seed) == (20.0, 3)
    # 3 prompts x 2 fabrics x 2 trials of (20 s + the run's overhead)
    assert estimate_wall_s(3, 2, 2, 20.0) == pytest.approx(12 * (20 + 23.0))


def test_a_trial_the_machine_spoiled_runs_again_and_keeps_the_spoiled_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`live._trial` against a fake `zcube-lab run`: each call writes the next summary."""
    from zcube_lab.emulator.bmwg import live
    from zcube_lab.emulator.verdict import judge, retry

    verdicts = iter([
        {"trustworthy": False, "health": {"why": "machine"}},
        {"trustworthy": True, "health": {}},
        {"trustworthy": False, "health": {"why": "fabric"}},
        {"trustworthy": False, "health": {"why": "machine"}},
        {"trustworthy": False, "health": {"why": "machine"}},
    ])  # fmt: skip
    calls = []

    def fake_run(argv, **_kw):
        calls.append(argv)
        folder = Path(argv[0]) / f"run-{len(calls)}"  # the trial's own results folder
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(next(verdicts)))
        return argv_done

    class argv_done:  # stands for a CompletedProcess
        returncode, stderr = 0, ""

    monkeypatch.setattr(live.subprocess, "run", fake_run)
    monkeypatch.setattr(judge.HealthVerdict, "from_dict", staticmethod(lambda d: d))
    monkeypatch.setattr(
        retry, "retry_decision",
        lambda v: retry.RetryDecision(v["why"] == "machine", f"the {v['why']}'s"),
    )  # fmt: skip
    said: list[str] = []
    trial = [tmp_path / f"t{i}" for i in range(3)]
    path, spoiled = live._trial([str(trial[0])], trial[0], 2, said.append)
    assert path.parent.name == "run-2" and [p.name for p in spoiled] == ["run-1"]
    assert "spoiled by the machine (the machine's)" in said[0]
    path, spoiled = live._trial([str(trial[1])], trial[1], 2, said.append)
    assert path.parent.name == "run-3" and spoiled == []  # the fabric's: kept as it is
    path, spoiled = live._trial([str(trial[2])], trial[2], 1, said.append)
    assert path.parent.name == "run-5" and len(spoiled) == 1  # retries spent: the last kept
    assert len(calls) == 5
