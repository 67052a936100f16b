"""The sweep's report (zcube_lab.emulator.results.sweep.sweepreport and `zcube-lab sweep
--report-only`):
table rows, the max-rate table, sweep.png from synthetic points, and the console in 100 columns."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from test_sweep import rp  # tests/unit is on the path (no __init__.py)

import zcube_lab.cli as cli
from zcube_lab.cli.commands import sweep as sweep_command
from zcube_lab.emulator.results.run.goodput import parse_slo
from zcube_lab.emulator.results.sweep.sweeppoints import SweepResult
from zcube_lab.emulator.results.sweep.sweepreport import (
    MAX_RATE_COLUMNS,
    POINT_COLUMNS,
    max_rate_rows,
    plot_sweep,
    point_rows,
)


def _result() -> SweepResult:
    runs = (
        rp("zcube", 1.0, 1), rp("roft", 1.0, 1), rp("zcube", 1.0, 2, ttft_p99=1.4),
        rp("roft", 1.0, 2),
        rp("zcube", 4.0, 1), rp("roft", 4.0, 1, met=False, achieved=3.0, ttft_p99=9.0),
        rp("zcube", 4.0, 2, trusted=False), rp("roft", 4.0, 2, met=False, achieved=3.2),
    )  # fmt: skip
    slo = parse_slo("ttft_p99=2s,tpot=50ms")
    return SweepResult("coding-agent", slo, (1.0, 4.0, 8.0), 2, "roft", ("zcube", "roft"), runs)


def test_point_rows_are_rate_major_with_spreads_and_verdicts() -> None:
    rows = point_rows(_result())
    assert [r[:2] for r in rows] == [["1", "zcube"], ["1", "roft"], ["4", "zcube"], ["4", "roft"]]
    assert all(len(r) == len(POINT_COLUMNS) for r in rows)
    assert rows[0][3] == "1.20 [1.00-1.40]"  # TTFT p99 median [min-max]
    col = {name: i for i, name in enumerate(POINT_COLUMNS)}
    assert rows[0][col["SLO met"]] == "yes" and rows[3][col["SLO met"]] == "no"
    assert rows[3][2] == "3.10 [3.00-3.20]" and rows[3][col["hottest link"]] == "40%"
    trust = col["trustworthy"]
    assert rows[2][trust] == "no (1 of 2): machine CPU above 90%" and rows[0][trust] == "yes"


def test_capacity_rows_mark_censored_repeats_and_bound_the_ratio() -> None:
    rows = {r[0]: r for r in max_rate_rows(_result())}
    assert all(len(r) == len(MAX_RATE_COLUMNS) for r in rows.values())
    # zcube: repeat 1 met both rates (at least 4), repeat 2 was not trustworthy at 4 (at least
    # 1); the median of the lower ends is 2.5, and roft's knee lies in [1, 4): the ratio is
    # only a bound, 2.5 / 4.
    assert rows["zcube"][1:4] == [">= 2.5 [1-4]", "r1 >=4, r2 >=1", ">= 0.62x"]
    assert "r2 not trustworthy at 4 (met)" in rows["zcube"][4]
    assert "r1 met at every rate tried (up to 4)" in rows["zcube"][4]
    assert rows["roft"][1:4] == ["1", "r1 1, r2 1", "baseline"]
    assert rows["roft"][4] == "past saturation at 4"


def test_a_rate_shows_what_was_sent_when_it_is_more_than_2_percent_off() -> None:
    base = _result()
    runs = (rp("roft", 4.0, 1), replace(rp("roft", 8.0, 1), sent_per_s=9.75),
            replace(rp("roft", 2.0, 1), sent_per_s=2.03))  # fmt: skip
    rows = point_rows(replace(base, runs=runs, variants=("roft",), repeat=1))
    assert [r[0] for r in rows] == ["2", "4", "8 (9.75 sent)"]


def test_the_plot_is_written_from_synthetic_points(tmp_path: Path) -> None:
    out = plot_sweep(_result(), tmp_path / "sweep.png")
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000
    no_ttft = SweepResult("chat", parse_slo("e2e=5s"), (1.0,), 1, "roft", ("roft",), ())
    assert plot_sweep(no_ttft, tmp_path / "empty.png").stat().st_size > 0


def test_report_only_rerenders_a_sweep_folder_in_100_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _result().write(tmp_path)
    buffer = io.StringIO()
    monkeypatch.setattr(
        sweep_command, "Console", lambda **kw: Console(file=buffer, width=100, **kw)
    )
    assert cli.main(["sweep", "--report-only", str(tmp_path)]) == 0
    text = buffer.getvalue()
    assert (tmp_path / "sweep.png").is_file()
    assert "capacity" in text and "past saturation at 4" in text and ">= 0.62x" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert cli.main(["sweep", "--report-only", str(tmp_path / "missing")]) == 2


def test_the_sweep_is_planned_and_refused_before_any_run(tmp_path: Path) -> None:
    parser = cli.build_parser()
    args = parser.parse_args(
        ["sweep", "--slo", "ttft_p99=2s", "--rates", "1:4:x2", "--repeat", "2",
         "--duration", "10", "--results", str(tmp_path)]
    )  # fmt: skip
    plan, empty = sweep_command._plan(args)
    assert len(plan) == 2 * 3 * 2 and empty.baseline == "roft" and empty.runs == ()
    assert empty.dir is not None and empty.dir.parent == tmp_path.resolve()
    assert {p.config.results_root for p in plan} == {empty.dir}  # runs inside the sweep folder
    assert not empty.dir.exists()  # nothing written before a run starts
    assert empty.refine == 0
    refined = parser.parse_args(["sweep", "--slo", "ttft=1s", "--refine", "3"])
    assert sweep_command._plan(refined)[1].refine == 3
    fine = parser.parse_args(["sweep", "--slo", "ttft=1s", "--rates", "32,40", "--refine", "2",
                              "--resolution", "0.1"])  # fmt: skip
    assert sweep_command._plan(fine)[1].refine == 2
    bad = (["--slo", "ttft=1s", "--rate", "4"], ["--rates", "1,2"],
           ["--slo", "ttft=1s", "--refine", "11"],
           # a +25% rung bisected once is 12.5%: too coarse for 10%, refused before any run
           ["--slo", "ttft=1s", "--rates", "32,40", "--refine", "1",
            "--resolution", "0.1"])  # fmt: skip
    for argv in bad:
        assert cli.main(["sweep", *argv, "--results", str(tmp_path)]) == 2


def test_a_point_with_few_samples_shows_its_interval_and_vllm_goodput() -> None:
    few = replace(rp("roft", 2.0, 1), few_samples=True, intervals={"ttft_p99_s": (0.9, 1.3)},
                  requests=96, vllm_goodput_per_s=1.5)  # fmt: skip
    other = replace(rp("roft", 2.0, 2), few_samples=True, intervals={"ttft_p99_s": (0.8, 1.2)},
                    requests=120, vllm_goodput_per_s=1.7)  # fmt: skip
    enough = replace(rp("roft", 4.0, 1), requests=1200, vllm_goodput_per_s=3.9)
    result = replace(_result(), runs=(few, other, enough), variants=("roft",), repeat=2)
    col = {name: i for i, name in enumerate(POINT_COLUMNS)}
    low, high = point_rows(result)
    assert low[col["TTFT p99 95% CI"]] == "[0.800, 1.30] few (96)"
    assert low[col["vLLM goodput"]] == "1.60 [1.50-1.70]"
    assert high[col["TTFT p99 95% CI"]] == "-" and high[col["vLLM goodput"]] == "3.90"
    unbounded = replace(few, intervals={"ttft_p99_s": (1.62, None)})
    (row,) = point_rows(replace(result, runs=(unbounded, other), repeat=2))
    assert row[col["TTFT p99 95% CI"]] == "[0.800, unbounded) few (96)"  # the envelope's high
    no_low = replace(few, intervals={"ttft_p99_s": (None, 1.62)})
    (row,) = point_rows(replace(result, runs=(no_low,), repeat=1))
    assert row[col["TTFT p99 95% CI"]] == "(unbounded, 1.62] few (96)"
    no_values = replace(few, intervals={})
    (row,) = point_rows(replace(result, runs=(no_values,), repeat=1))
    assert row[col["TTFT p99 95% CI"]] == "few (96)"
