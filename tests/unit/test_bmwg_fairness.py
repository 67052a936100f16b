"""§9.4 (Jain's fairness index over the decode workers) worked out before any lab: Jain's index
against hand answers, the load levels and the workload, the decode engines' counters read from
a `promtool tsdb dump`, a trial's figures and row, the comparison and the page's words
(zcube_lab.core.bmwg.fairness, zcube_lab.emulator.bmwg.fairness, bench.bmwg_jfi)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bmwg_jfi
from bench.bmwg_tables import _cell, _table
from zcube_lab.cli import main
from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import fairness as f94
from zcube_lab.core.bmwg import report, scaling
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.trials import HIGHER, OUT_OF_REACH, WITHIN, jain
from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.bmwg import fairness as live94
from zcube_lab.emulator.bmwg.live import RUN_OVERHEAD_S, estimate_wall_s
from zcube_lab.workloads.profiles import load_profile


def test_jain_is_one_for_equal_shares_one_over_n_for_one_busy_worker_and_a_hand_case() -> None:
    assert jain([5.0] * 8) == pytest.approx(1.0)
    assert jain([7.0, 0, 0, 0, 0, 0, 0, 0]) == pytest.approx(1 / 8)
    # (1 + 2 + 3 + 4)^2 / (4 (1 + 4 + 9 + 16)) = 100 / 120
    assert jain([1, 2, 3, 4]) == pytest.approx(100 / 120)
    # two of four workers with everything, alike: 4^2 / (4 * 8) = 1/2
    assert jain([2, 0, 2, 0]) == pytest.approx(0.5)


def test_max_min_is_the_largest_share_over_the_smallest_and_none_with_an_idle_worker() -> None:
    assert f94.max_min([2, 8, 4]) == 4.0
    assert f94.max_min([3, 0, 3]) is None


def test_loads_default_to_below_and_near_the_knee_and_refuse_what_is_out_of_range() -> None:
    assert f94.loads("") == (0.5, 0.9)
    assert f94.loads("0.3, 0.7") == (0.3, 0.7)
    with pytest.raises(ConfigError, match=r"jfi_loads.*0.05 to 1.5"):
        f94.loads("2")
    with pytest.raises(ConfigError, match="shares of the knee"):
        f94.loads("half")
    with pytest.raises(ConfigError, match="jfi_loads"):
        BmwgConfig(jfi_loads="0,0.5")
    assert BmwgConfig(jfi_loads="0.4").jfi_levels == (0.4,)


def test_the_knee_is_the_prefill_pool_s_compute_and_the_profile_runs_at_its_share(
    tmp_path: Path,
) -> None:
    # 8 prefill GPUs of 16, each 10 ms + 16,384 / 18,000 tokens/s = 0.9202 s a prompt
    assert f94.decode_workers(16) == 8 and f94.prefill_gpus(16) == 8
    assert live94.knee(16) == pytest.approx(8 / (0.010 + 16384 / 18000))
    assert f94.knee_rate(16, 0.5) == 16.0 and f94.rate_of(0.5, 8.6936) == 4.347
    with pytest.raises(ConfigError, match="prefill_step_s"):
        f94.knee_rate(16, 0)
    path = tmp_path / "w.json"
    path.write_text(json.dumps(f94.profile(0.5, live94.knee(16))))
    p = load_profile(str(path))  # the lab's own profile reader accepts it
    assert p.session is None and p.prefix_cache_hit_rate == 0.0
    assert p.prompt.min == p.prompt.max == f94.PROMPT_TOKENS
    assert p.output.min == p.output.max == f94.OUTPUT_TOKENS
    assert p.arrival.rate == pytest.approx(0.5 * live94.knee(16), abs=1e-3)
    assert p.prefill_servers == 2  # of 4 in the profile's terms: half the servers
    with pytest.raises(ConfigError, match="jfi_loads"):
        f94.profile(0, 8.0)


def _line(metric: str, engine: str, value: float | str, ts: int, job: str = "decode") -> str:
    return (f'{{__name__="{metric}", engine="{engine}", fabric="zcube", instance="x:8200", '
            f'job="{job}", model_name="glm-5.1", run="r"}} {value} {ts}')  # fmt: skip


TOK, KV, BUSY = (m for m, _ in f94.METRICS.values())


def test_a_dump_is_read_per_metric_job_and_engine_and_a_counter_s_reset_is_counted() -> None:
    text = "\n".join([
        _line(TOK, "12", 16, 2000), _line(TOK, "12", 0, 1000), _line(TOK, "12", 48, 3000),
        _line(TOK, "3", 99, 1000, job="prefill"), "not a sample",
    ])  # fmt: skip
    series = f94.parse_dump(text)
    assert series[(TOK, "decode", "12")] == [(1000, 0.0), (2000, 16.0), (3000, 48.0)]
    assert (TOK, "prefill", "3") in series
    assert f94.counter_total([(1, 0), (2, 16), (3, 48)]) == 48
    # a restart after 48: 48 before it and 10 after
    assert f94.counter_total([(1, 16), (2, 48), (3, 4), (4, 10)]) == 58
    # the staleness marker Prometheus writes when the engine stops at teardown
    stale = f94.parse_dump(_line(TOK, "12", 16, 1000) + "\n" + _line(TOK, "12", "NaN", 2000))
    assert f94.counter_total(stale[(TOK, "decode", "12")]) == 16
    shares = f94.totals(series, ["12", "13"])
    assert shares["decode"] == {"12": 48.0, "13": None}  # prefill's series not a decode's


def _summary(trusted: bool = True) -> dict:
    return {"trustworthy": trusted, "client": {"completed": 10},
            "bmwg": {"TTFT": {"p50": 950.0, "p99": 1800.0}, "TPS_output": 160.0}}  # fmt: skip


def test_a_trial_s_figures_are_jain_and_max_min_per_metric_over_every_decode_worker() -> None:
    shares = {"decode": {"a": 32.0, "b": 32.0, "c": 64.0, "d": 0.0},
              "kv": {"a": 2.0, "b": 2.0, "c": 2.0, "d": 2.0},
              "busy": {"a": 1.0, "b": 2.0, "c": 3.0, "d": None}}  # fmt: skip
    f = f94.trial_figures(_summary(), shares, 4)
    # 128^2 / (4 (32^2 + 32^2 + 64^2)) = 16,384 / 24,576
    assert f["JFI_decode"] == pytest.approx(2 / 3)
    assert f["maxmin_decode"] is None  # worker d generated nothing
    assert f["JFI_kv"] == 1.0 and f["maxmin_kv"] == 1.0
    assert f["JFI_busy"] is None  # a worker's series missing: no index over three of four
    assert (f["TTFT_p99_ms"], f["TPS_output"], f["decode_workers"]) == (1800.0, 160.0, 4)
    assert f["untrusted"] == 0 and f94.trial_figures(_summary(False), shares, 4)["untrusted"]
    # fewer shares than the placement's workers: the index is not over the right workers
    assert f94.trial_figures(_summary(), shares, 5)["JFI_kv"] is None


def _run_dir(tmp_path: Path, pulls: dict[str, int]) -> Path:
    run = tmp_path / "bmwg-x" / "zcube-0.5-t0" / "r"
    (run / "logs").mkdir(parents=True)
    placement = [{"role": "prefill", "engine_id": "prefill-0"}] + [
        {"role": "decode", "engine_id": f"decode-{e}"} for e in pulls
    ]
    (run / "config.json").write_text(json.dumps({"placement": placement}))
    (run / "summary.json").write_text(json.dumps({**_summary(), "health": {"reasons": []}}))
    for e, n in pulls.items():
        rows = [{"request_id": f"{e}-{i}", "ok": True, "bytes": 100} for i in range(n)]
        rows.append({"request_id": f"{e}-0", "ok": False, "bytes": 0})  # a failed attempt
        (run / "logs" / f"kv-decode-{e}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
    return run


def test_a_trial_row_reads_the_decode_engines_of_the_placement_and_checks_the_kv_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run_dir(tmp_path, {"2": 3, "3": 1})
    assert live94.decode_engines(run) == ["2", "3"]
    dump = "\n".join(
        line
        for e, n in (("2", 3), ("3", 1))
        for line in (_line(TOK, e, 32 * n, 5), _line(KV, e, 100 * n, 5), _line(BUSY, e, n, 5))
    )
    monkeypatch.setattr(live94, "read_series", lambda _dir: f94.parse_dump(dump))
    sec = live94.section(BmwgConfig(jfi_loads="0.5", gpus=16))
    (case,) = sec.cases
    assert case.label == "load=0.5" and case.key == "0.5"
    assert case.params == {"load": 0.5, "rate": f94.rate_of(0.5, live94.knee(16))}
    row = sec.row(run, "zcube", case)
    # 3 and 1 requests: (3 + 1)^2 / (2 (9 + 1)) = 0.8 for every metric
    for k in ("JFI_decode", "JFI_kv", "JFI_busy"):
        assert row["figures"][k] == pytest.approx(0.8)
    assert row["figures"]["maxmin_decode"] == 3.0
    assert row["workers"]["kv_log"] == {"requests": {"2": 3.0, "3": 1.0},
                                        "kv_bytes": {"2": 300.0, "3": 100.0}}  # fmt: skip
    assert row["workers"]["kv"] == {"2": 300.0, "3": 100.0}
    assert "JFI over 2 decode workers: tokens 0.800" in live94.headline(row["figures"])


def test_the_estimate_counts_every_run_and_the_parameters_print_beside_the_draft_s() -> None:
    sec = live94.section(BmwgConfig(jfi_loads="0.5,0.9"))
    assert estimate_wall_s(2, 3, 2, 10.0, sec.drain_s) == 12 * (10 + RUN_OVERHEAD_S + 5)
    text = "\n".join(live94.parameter_lines(16, (0.5, 0.9), 2, 10.0))
    assert "8, 16, 32, 64 -> 8" in text
    assert "20 x 60 s -> 2 x 10 s" in text
    assert "0.5 (4.347 req/s)" in text and "8.69 req/s" in text


def _srow(fabric: str, trial: int, jfi: float, ttft: float, untrusted: int = 0) -> dict:
    figs = {"JFI_decode": jfi, "JFI_kv": jfi, "JFI_busy": jfi, "TTFT_p99_ms": ttft,
            "TTFT_p50_ms": ttft / 2, "maxmin_decode": 1.5, "requests": 40, "decode_workers": 8,
            "untrusted": untrusted}  # fmt: skip
    return {"section": "9.4", "case": "load=0.5", "params": {"load": 0.5, "rate": 4.347},
            "fabric": fabric, "trial": trial, "figures": figs}  # fmt: skip


def _doc(rows: list[dict]) -> dict:
    summary = report.summarize(rows)
    return {"sections": ["9.4"], "fabrics": ["zcube", "roft"], "rows": rows,
            "summary": summary, "comparison": report.compare(summary), "gpus": 16,
            "levels": [0.5], "knee_rate": 8.694, "decode_workers": 8, "prompt_tokens": 16384,
            "output_tokens": 32, "trials": 2, "trial_seconds": 10.0,
            "draft_trials": {"9.4": [20, 60.0]}}  # fmt: skip


def test_the_comparison_judges_each_index_and_ttft_and_the_page_says_a_tie_is_measured() -> None:
    tie = _doc([_srow("zcube", 0, 0.95, 1800), _srow("zcube", 1, 0.97, 1900),
                _srow("roft", 0, 0.96, 1850), _srow("roft", 1, 0.94, 1750)])  # fmt: skip
    assert {c["figure"] for c in tie["comparison"]} == set(report.HEADLINE["9.4"])
    assert {c["verdict"] for c in tie["comparison"]} == {WITHIN}
    assert "a measured tie" in bmwg_jfi.verdict_words(tie)
    apart = _doc([_srow("zcube", 0, 0.99, 1800), _srow("zcube", 1, 0.98, 1810),
                  _srow("roft", 0, 0.80, 1805), _srow("roft", 1, 0.81, 1795)])  # fmt: skip
    by = {c["figure"]: c["verdict"] for c in apart["comparison"]}
    assert by["JFI_decode"] == HIGHER and by["TTFT_p99_ms"] == WITHIN
    words = bmwg_jfi.verdict_words(apart)
    assert "ZCube's JFI_decode higher than ROFT's at load=0.5" in words
    assert "measured tie" not in words
    spoiled = _doc([_srow("zcube", 0, 0.99, 1800, untrusted=1), _srow("zcube", 1, 0.98, 1810),
                    _srow("roft", 0, 0.80, 1805), _srow("roft", 1, 0.81, 1795)])  # fmt: skip
    assert {c["verdict"] for c in spoiled["comparison"]} == {OUT_OF_REACH}


def test_the_page_s_section_has_the_parameters_a_row_per_level_and_fabric_and_the_policy() -> None:
    d = _doc([_srow("zcube", 0, 0.95, 1800), _srow("zcube", 1, 0.97, 1900),
              _srow("roft", 0, 0.96, 1850), _srow("roft", 1, 0.94, 1750)])  # fmt: skip
    text = "\n".join(bmwg_jfi.fairness_section(d, _table, _cell))
    assert "| decode workers N_D | 8, 16, 32, 64 | 8 (half of 16 GPU hosts" in text
    assert "| trials | 20 x 60 s | 2 x 10 s |" in text
    assert "| 0.5 (4.347 req/s) | ZCube | 8 | 0.96 ± 0.127 |" in text
    assert "| 0.5 (4.347 req/s) | ROFT | 8 |" in text
    assert "routing policy" in text and "not the fabric" in text


def test_9_4_is_run_by_bmwg_run_and_its_pool_is_half_the_hosts(capsys) -> None:
    assert cat.test_of("9.4").runner and "9.4" in cat.RUNNERS
    assert main(["bmwg", "list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("9.4"))
    assert "  run  " in line
    workers = cat.test_of("9.4").params[0]
    assert scaling.lab_value(workers, scaling.default_scale(), 16).startswith("8 (16, 32, 64")
    assert main(["bmwg", "run", "9.4", "--trial-seconds", "1"]) == 2  # a live run's minimum
    assert "trial_seconds" in capsys.readouterr().err
