"""§10.1 (TTFT under varying prompt lengths) worked out before any lab: prompt lengths, the send
gap that keeps requests single, the case's profile, requests in flight, a trial's figures from
hand-made records and logs, the section as the runner builds it, and the comparison that marks
an overlapped run out of reach (zcube_lab.core.bmwg.ttftlen, .ttft, .report;
zcube_lab.emulator.bmwg.ttftlen)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg import ttft as t61
from zcube_lab.core.bmwg import ttftlen as t101
from zcube_lab.core.bmwg.catalogue import test_of as catalogue_test
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.trials import OUT_OF_REACH
from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.workloads.arrivals import ArrivalSpec, schedule
from zcube_lab.workloads.profiles import load_profile


def test_prompt_lengths_default_to_the_drafts_eight() -> None:
    assert t101.prompt_lengths("") == (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    assert t101.prompt_lengths("1024, 128") == (1024, 128)
    with pytest.raises(ConfigError, match="prompts"):
        t101.prompt_lengths("8")


def test_the_gap_is_one_and_a_half_expected_requests_rounded_up() -> None:
    # 0.05 + 0.9 prefill + 0.03 pull + 2 x 0.031 decode = 1.042 s; x 1.5 = 1.563 -> 1.6 s
    e2e = t101.e2e_estimate_s(0.9, 0.03, 0.031)
    assert e2e == pytest.approx(1.042)
    assert t101.gap_s(e2e) == 1.6
    assert t101.gap_s(0.1) == t101.MIN_GAP_S  # 0.15 -> the floor of 0.25 s
    assert t101.gap_s(0.2) == 0.3  # exactly 0.3: not rounded past it
    with pytest.raises(ConfigError, match="e2e_s"):
        t101.gap_s(0)
    # 15 s at one every 0.3 s: sends at 0, 0.3, ..., 14.7 = 50
    assert t101.repetitions(15, 0.3) == 50
    assert t101.repetitions(15, 1.6) == 10


def test_the_profile_sends_evenly_spaced_single_requests(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(t101.profile(4096, 0.55)))
    p = load_profile(str(path))  # the lab's own profile reader accepts it
    assert (p.prompt.min, p.prompt.max, p.output.max) == (4096, 4096, t101.OUTPUT_TOKENS)
    assert p.prefix_cache_hit_rate == 0.0 and p.session is None
    assert p.arrival.process == "fixed"
    times = schedule(ArrivalSpec(process="fixed", rate=p.arrival.rate), 15.0, None)  # type: ignore[arg-type]
    assert len(times) == t101.repetitions(15, 0.55) == 28
    assert min(b - a for a, b in itertools.pairwise(times)) == pytest.approx(0.55)


def _rec(sent: float, e2e: float, ttft: float, outcome: str = "ok") -> dict:
    return {"sent_s": sent, "e2e_s": e2e, "ttft_s": ttft, "outcome": outcome}


def test_requests_in_flight() -> None:
    one = [_rec(0.0, 0.2, 0.1), _rec(0.3, 0.2, 0.1), _rec(0.6, 0.3, 0.1)]
    assert t101.in_flight_max(one) == 1
    # ends exactly when the next is sent: still one at a time
    assert t101.in_flight_max([_rec(0.0, 0.3, 0.1), _rec(0.3, 0.3, 0.1)]) == 1
    # the second is sent before the first ends, the third before both end
    two = [_rec(0.0, 0.5, 0.1), _rec(0.3, 0.5, 0.1), _rec(0.6, 0.1, 0.1)]
    assert t101.in_flight_max(two) == 2
    three = [_rec(0.0, 1.0, 0.1), _rec(0.3, 1.0, 0.1), _rec(0.6, 0.1, 0.1)]
    assert t101.in_flight_max(three) == 3
    assert t101.in_flight_max([]) == 0


# Five requests: client TTFTs 100..140 ms; parts (wall s) whose transfers are 10..50 ms.
RECORDS = [_rec(0.3 * i, 0.2, 0.1 + 0.01 * i) for i in range(5)]
PARTS = [(0.06, 0.01 * (i + 1), 0.03) for i in range(5)]


def test_a_trials_figures_from_hand_made_records() -> None:
    summary = {"trustworthy": True, "bmwg": {"TTFT_fabric": {"p50": 9.0, "p99": 20.0}},
               "transfers": {"ttft_parts_requests": 5}}  # fmt: skip
    f = t101.trial_figures(summary, RECORDS, PARTS)
    # TTFT 100, 110, 120, 130, 140 ms: p50 120, p95 at rank 3.8 = 130 + 0.8 x 10 = 138,
    # p99 at 3.96 = 139.6
    assert f["TTFT_p50_ms"] == pytest.approx(120.0)
    assert f["TTFT_p95_ms"] == pytest.approx(138.0)
    assert f["TTFT_p99_ms"] == pytest.approx(139.6)
    # T_transfer 10..50 ms: p50 30, p95 48
    assert f["T_transfer_p50_ms"] == pytest.approx(30.0)
    assert f["T_transfer_p95_ms"] == pytest.approx(48.0)
    assert f["T_prefill_p99_ms"] == pytest.approx(60.0)
    assert f["T_decode_init_p95_ms"] == pytest.approx(30.0)
    # ratio per request: t / (0.06 + t + 0.03): 0.1, 0.1818, 0.25, 0.3077, 0.3571
    assert f["T_transfer_over_TTFT_p50"] == pytest.approx(0.25)
    assert f["T_transfer_over_TTFT_p95"] == pytest.approx(
        0.3077 + 0.8 * (0.3571 - 0.3077), abs=1e-3
    )
    # kept from the summary: one pull's time (not a §10.1 figure of its own)
    assert f["TTFT_fabric_p50_ms"] == 9.0
    assert (f["repetitions"], f["requests"], f["in_flight_max"], f["overlapped"]) == (5, 5, 1, 0)
    assert f["untrusted"] == 0


def test_a_failed_request_and_a_dilated_run() -> None:
    records = [*RECORDS, _rec(1.5, 0.2, None, outcome="timeout")]  # type: ignore[arg-type]
    f = t101.trial_figures({"trustworthy": False}, records, PARTS, Clock(2.0))
    assert f["repetitions"] == 5 and f["untrusted"] == 1
    # the logs' wall seconds halve into modelled ones; the client's are modelled already
    assert f["T_transfer_p50_ms"] == pytest.approx(15.0)
    assert f["TTFT_p50_ms"] == pytest.approx(120.0)
    # the ratio is the same at any dilation
    assert f["T_transfer_over_TTFT_p50"] == pytest.approx(0.25)
    empty = t101.trial_figures({"trustworthy": True}, [], [])
    assert empty["TTFT_p95_ms"] is None and empty["T_transfer_over_TTFT_p99"] is None


def test_section_61s_figures_are_unchanged_without_samples() -> None:
    summary = {"trustworthy": True, "bmwg": {"TTFT": {"p50": 1.0, "p99": 2.0}}}
    f = t61.trial_figures(summary)
    assert "TTFT_p95_ms" not in f and f["TTFT_p50_ms"] == 1.0 and f["TTFT_p99_ms"] == 2.0
    g = t61.trial_figures(summary, {"TTFT": [0.001, 0.003]}, (50, 95))
    assert g["TTFT_p50_ms"] == pytest.approx(2.0) and g["TTFT_p95_ms"] == pytest.approx(2.9)
    assert "TTFT_p99_ms" not in g and g["T_prefill_p99_ms"] is None


def _row(fabric: str, trial: int, ttft_ms: float, overlapped: int = 0) -> dict:
    figs = {"TTFT_p50_ms": ttft_ms, "TTFT_p99_ms": ttft_ms + 5, "T_transfer_p50_ms": 10.0,
            "T_transfer_p99_ms": 12.0, "T_transfer_over_TTFT_p50": 10 / ttft_ms,
            "untrusted": 0, "overlapped": overlapped}  # fmt: skip
    return {"section": "10.1", "case": "prompt_tokens=1024", "params": {"prompt_tokens": 1024},
            "fabric": fabric, "trial": trial, "figures": figs}  # fmt: skip


def test_the_comparison_judges_the_headline_and_refuses_overlapped_runs() -> None:
    rows = [_row("zcube", 0, 100.0), _row("zcube", 1, 101.0),
            _row("clos", 0, 200.0), _row("clos", 1, 201.0)]  # fmt: skip
    cs = report.compare(report.summarize(rows))
    assert {c["figure"] for c in cs} == set(report.HEADLINE["10.1"])
    ttft = next(c for c in cs if c["figure"] == "TTFT_p50_ms")
    assert ttft["verdict"] == "lower"
    rows[3] = _row("clos", 1, 201.0, overlapped=1)
    cs = report.compare(report.summarize(rows))
    assert {c["verdict"] for c in cs} == {OUT_OF_REACH}


def test_the_graphs_series() -> None:
    s = report.summarize([_row("zcube", 0, 100.0), _row("zcube", 1, 110.0)])
    (pt,) = t101.series(s, "zcube")
    assert pt["prompt_tokens"] == 1024 and pt["TTFT_p50_ms"] == pytest.approx(105.0)
    assert t101.series(s, "clos") == []


def test_the_section_the_runner_builds() -> None:
    from zcube_lab.emulator.bmwg import ttftlen as e101
    from zcube_lab.emulator.bmwg.live import SECTIONS, build

    assert "10.1" in SECTIONS and catalogue_test("10.1").runner
    sec = build("10.1", BmwgConfig(trials=2, trial_seconds=15, prompts="128,16384"))
    assert [c.key for c in sec.cases] == ["128", "16384"]
    small, big = sec.cases
    assert small.params == {"prompt_tokens": 128, "gap_s": 0.25}
    # 16,384 tokens: 0.92 s of prefill, ~29 ms of pull, two ~30 ms steps: one every 1.6 s
    assert big.params["gap_s"] == 1.6 and big.profile["arrival"] == {"process": "fixed",
                                                                      "rate": 0.625}  # fmt: skip
    assert e101.expected_e2e_s(16384) * t101.GAP_FACTOR <= 1.6
    lines = "\n".join(sec.parameter_lines)
    assert "repetitions: >= 100 per prompt length -> 2 trial(s) x 15 s, per length 128: 120, " \
        "16,384: 20" in lines  # fmt: skip
    assert "CFG-E" in lines and "H_kv=1, D=288" in lines
    assert sec.head["configuration"] == "CFG-E" and sec.head["gaps_s"] == {"128": 0.25,
                                                                          "16384": 1.6}  # fmt: skip
    with pytest.raises(ConfigError, match="trial_seconds"):
        build("10.1", BmwgConfig(trial_seconds=1))


def test_a_trial_row_from_a_run_folder(tmp_path: Path) -> None:
    from zcube_lab.emulator.bmwg.ttftlen import trial_row

    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "summary.json").write_text(json.dumps({"trustworthy": True}))
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    gateway, kv = [], []
    for i, (pre, xfer, dec) in enumerate(PARTS):
        t0 = 100.0 + i
        gateway.append({"request_id": f"r{i}", "arrival": t0, "first_token": t0 + pre + xfer + dec})
        # two pull attempts: the span is the first's start to the last's end
        kv.append({"request_id": f"r{i}", "start": t0 + pre, "end": t0 + pre + xfer / 2})
        kv.append({"request_id": f"r{i}", "start": t0 + pre + xfer / 2, "end": t0 + pre + xfer})
    # one request whose pull lies outside it: left out
    gateway.append({"request_id": "bad", "arrival": 200.0, "first_token": 200.1})
    kv.append({"request_id": "bad", "start": 199.0, "end": 199.5})
    (logs / "requests-gateway.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gateway))
    (logs / "kv-decode-3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kv))
    f = trial_row(tmp_path)["figures"]
    assert f["requests"] == 5 and f["parts_left_out"] == 1
    assert f["T_transfer_p50_ms"] == pytest.approx(30.0)
    assert f["T_transfer_over_TTFT_p50"] == pytest.approx(0.25)
    # a dilated run: its logs' wall seconds are not modelled ones, refused rather than misread
    (tmp_path / "summary.json").write_text(json.dumps({"trustworthy": True, "dilation": 2.0}))
    with pytest.raises(RuntimeError, match="dilated"):
        trial_row(tmp_path)


def test_the_pages_sentence_and_untrusted_runs() -> None:
    from bench.bmwg_ttftlen import ttftlen_sentences, untrusted

    def row(fabric: str, trial: int, n: int, ttft: float, ratio: float) -> dict:
        r = _row(fabric, trial, ttft)
        r["case"], r["params"] = f"prompt_tokens={n}", {"prompt_tokens": n}
        r["figures"].update(T_transfer_over_TTFT_p50=ratio, in_flight_max=1)
        return r

    rows = [row(f, t, n, ttft, ratio) for f in ("zcube", "clos") for t in (0, 1)
            for n, ttft, ratio in ((128, 60.0, 0.08), (16384, 1000.0, 0.04))]  # fmt: skip
    rows[0]["figures"]["untrusted"] = 1
    rows[0]["reasons"] = ["cpu1 above 95% busy in 40% of samples", "KV pulls: p50 12x"]
    summary = report.summarize(rows)
    doc = {"sections": ["10.1"], "fabrics": ["zcube", "clos"], "rows": rows,
           "summary": summary, "comparison": report.compare(summary)}  # fmt: skip
    (text,) = ttftlen_sentences([doc])
    assert "mean TTFT p50 is 60 ms at 128 prompt tokens and 1,000 ms at 16,384" in text
    assert "(p50) 8.0% and 4.0%: the share falls as the prompt grows" in text
    assert "at most 1 in flight" in text and "out of reach" in text
    assert untrusted(doc) == ["ZCube 128 tokens trial 1: a core above 95% busy; KV pulls"]
    assert ttftlen_sentences([{**doc, "sections": ["10.2"]}]) == []
