"""§12.3 (link failure during serving) worked out before any lab: the link each fabric loses,
the failure's timing, the recovery time from a synthetic series, a trial's figures from its
run's records, and the comparison (zcube_lab.core.bmwg.linkfail, .report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zcube_lab.cli import main
from zcube_lab.core.bmwg import catalogue, report
from zcube_lab.core.bmwg import linkfail as lf
from zcube_lab.core.bmwg.trials import HIGHER, OUT_OF_REACH
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.scaledown import scaled_fabric
from zcube_lab.emulator.bmwg.linkfail import links_of
from zcube_lab.emulator.bmwg.live import estimate_wall_s
from zcube_lab.workloads.profiles import load_profile


def test_every_16_gpu_fabric_loses_one_link_into_its_decode_hosts_switch() -> None:
    # 8 servers of 2 GPUs: 6 prefill (h0-h11), 2 decode (h12-h15) on every fabric
    links = links_of(["zcube", "roft", "clos"], 16)
    z, r, c = links["zcube"], links["roft"], links["clos"]
    # ZCube: every decode host's port 0 is on a3 (its port 1 on b0..b3, one each): a3-b0
    assert (z.spec, z.switch, z.decode_ports, z.fabric_links) == ("a3-b0", "a3", 4, 4)
    # ROFT: h12, h14 on leaf6 (rail 0), h13, h15 on leaf7; the first leaf, its spine0 uplink
    assert (r.spec, r.switch, r.decode_ports, r.fabric_links) == ("leaf6-spine0", "leaf6", 2, 2)
    # Clos: all four on leaf3, two parallel links to each spine: only the first fails
    assert (c.spec, c.switch, c.decode_ports, c.fabric_links) == (
        "leaf3-spine0#0", "leaf3", 4, 4)  # fmt: skip
    assert (c.link.node1, c.link.port1, c.link.node2, c.link.port2) == ("leaf3", 5, "spine0", 7)
    assert {x.switch_links for x in links.values()} == {16}
    for kind, x in links.items():
        fabric = scaled_fabric(kind, 16)
        assert lf.decode_hosts(fabric) == ("h12", "h13", "h14", "h15")
        assert fabric.is_switch(x.link.node1) and fabric.is_switch(x.link.node2)
    assert "1 of the 2 fabric-facing links of leaf6" in r.describe()


def test_the_link_spec_is_one_the_fault_schedule_accepts_and_cuts_one_link() -> None:
    from zcube_lab.core.fault_schedule import parse_faults

    for kind, x in links_of(["zcube", "roft", "clos"], 16).items():
        spec = lf.fail_spec(x, 20)
        assert spec == f"link {x.spec} at 8s for 5s"
        (fault,) = parse_faults([spec], scaled_fabric(kind, 16), 20)
        assert fault.links == (x.link,) and (fault.at_s, fault.for_s) == (8.0, 5.0)


def test_the_choice_follows_the_decode_hosts_and_refuses_a_fabric_without_switch_links() -> None:
    clos = scaled_fabric("clos", 16)
    # decode hosts on leaf0 instead (h0-h3): leaf0's first uplink
    assert lf.failed_link(clos, ("h0", "h1", "h2", "h3")).spec == "leaf0-spine0#0"
    # the switch with the most decode ports wins: two on leaf1 beat one on leaf0
    assert lf.failed_link(clos, ("h0", "h4", "h5")).switch == "leaf1"
    with pytest.raises(ConfigError, match="fabric"):
        lf.failed_link(clos, ())


def test_timing_and_trial_length() -> None:
    assert lf.fault_timing(60) == (24.0, 15.0)
    assert lf.fault_timing(10) == (4.0, 2.5)
    with pytest.raises(ConfigError, match=r"trial_seconds.*at least 10 s"):
        lf.fault_timing(8)
    assert estimate_wall_s(1, 3, 2, 20) == 6 * (20 + 23)  # one case on 3 fabrics, 2 trials


def test_the_trials_profile_is_read_by_the_labs_profile_reader(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(lf.profile()))
    p = load_profile(str(path))
    assert (p.prompt.min, p.prompt.max) == (lf.PROMPT_TOKENS, lf.PROMPT_TOKENS)
    assert p.arrival.rate == lf.RATE and p.prefix_cache_hit_rate == 0.0
    with pytest.raises(ConfigError, match="rate"):
        lf.profile(rate=0)


T0 = 1000.0  # the load's first send, wall seconds


def _req(t: float, ttft: float | None, ok: bool = True) -> dict:
    return {"wall_time": T0 + t, "outcome": "ok" if ok else "error", "ttft_s": ttft}


def test_recovery_is_the_end_of_the_last_second_out_of_the_before_range() -> None:
    # before: TTFT 1.0 and 1.1 s, so the bound is 1.1 x 1.1 = 1.21 s; onset at 10 s
    before = [_req(1, 1.0), _req(5, 1.1)]
    series = [_req(10.2, 1.2),   # bin 0: within the bound
              _req(11.5, 3.0),   # bin 1: out of it
              _req(12.1, 1.0), _req(12.9, 0.5, ok=False),  # bin 2: a failure
              _req(13.4, 1.05),  # bin 3: back
              _req(16.0, 1.1)]  # bin 6: still back  # fmt: skip
    rec = lf.recovery(before + series, T0 + 10)
    assert rec["ttft_bound_ms"] == pytest.approx(1210.0)
    assert rec["recovery_time_s"] == 3.0  # the end of bin 2
    assert rec["disruption_time_s"] == 2.0 and rec["unrecovered"] == 0
    # nothing out of range: 0; the last bin out of range: never recovered
    assert lf.recovery([*before, series[0], series[4]], T0 + 10)["recovery_time_s"] == 0.0
    stuck = lf.recovery(before + series + [_req(17.5, 9.0)], T0 + 10)
    assert stuck["recovery_time_s"] is None and stuck["unrecovered"] == 1
    assert stuck["disruption_time_s"] == 3.0
    # no served request before the onset: no bound to judge by
    assert lf.recovery(series, T0 + 10)["recovery_time_s"] is None


def _events(down: float, up: float) -> list[dict]:
    return [{"action": "down", "wall": T0 + down, "fault": "link a3-b0"},
            {"action": "up", "wall": T0 + up, "fault": "link a3-b0"}]  # fmt: skip


def _summary(trusted: bool = True) -> dict:
    faults = {"kv_retried": 2, "kv_failed_attempts": 3, "kv_hit_transfers": 4,
              "recovery_kv_first_s": 0.21}  # fmt: skip
    return {"trustworthy": trusted, "faults": faults,
            "bmwg": {"TPS_output": 64.0, "Packet_drop_rate": 0.001}}  # fmt: skip


def test_a_trials_figures_by_phase_against_the_faults_record() -> None:
    reqs = [_req(1, 1.0), _req(2, 1.2), _req(3, 1.1),  # before
            _req(8.5, 2.0), _req(9, 4.0), _req(9.5, None, ok=False),  # during 8-13
            _req(13, 1.0), _req(15, 1.1)]  # after (13 is the up: after)  # fmt: skip
    f = lf.trial_figures(_summary(), reqs, _events(8.0, 13.0))
    assert f["fault_held_s"] == 5.0
    assert (f["requests_before"], f["requests_during"], f["requests_after"]) == (3, 3, 2)
    assert (f["failed_requests"], f["failed_during"], f["failed_before"]) == (1, 1, 0)
    assert f["TTFT_p50_before_ms"] == pytest.approx(1100.0)
    assert f["TTFT_p99_before_ms"] == pytest.approx(1000 * (1.1 + 0.98 * 0.1))
    assert f["TTFT_p50_during_ms"] == pytest.approx(3000.0)  # of 2.0 and 4.0, the failed out
    assert f["TTFT_p99_after_ms"] == pytest.approx(1000 * (1.0 + 0.99 * 0.1))
    # bins from 8 s: 0 (2.0 s > 1.32 s), 1 (4.0 s and a failure), 5 (1.0), 7 (1.1): back at 10 s
    assert f["recovery_time_s"] == 2.0 and f["disruption_time_s"] == 2.0
    assert (f["KV_pulls_retried"], f["kv_failed_attempts"], f["recovery_kv_first_s"]) == (
        2, 3, 0.21)  # fmt: skip
    assert (f["TPS_output"], f["Packet_drop_rate"], f["untrusted"]) == (64.0, 0.001, 0)


def test_without_a_fault_record_the_failure_did_not_happen() -> None:
    f = lf.trial_figures(_summary(False), [_req(1, 1.0)], [])
    assert f["fault_held_s"] is None and f["TTFT_p99_during_ms"] is None
    assert f["recovery_time_s"] is None and f["untrusted"] == 1
    # a link never brought back holds to the run's end: no span
    assert lf.fault_window([{"action": "down", "wall": 5.0}]) == (5.0, float("inf"))


def _rows(fabric: str, failed: list[int], trusted: bool = True) -> list[dict]:
    return [{"section": "12.3", "case": lf.case_label(), "params": {}, "fabric": fabric,
             "trial": i, "figures": {"failed_requests": n, "TTFT_p99_during_ms": 1000.0 + n,
                                     "recovery_time_s": float(n), "untrusted": int(not trusted)}}
            for i, n in enumerate(failed)]  # fmt: skip


def test_the_comparison_judges_the_headline_figures_and_an_untrusted_run_is_out_of_reach() -> None:
    summary = report.summarize(_rows("zcube", [5, 6, 5]) + _rows("roft", [0, 1, 0]))
    got = {c["figure"]: c["verdict"] for c in report.compare(summary)}
    assert got == {"failed_requests": HIGHER, "TTFT_p99_during_ms": HIGHER,
                   "recovery_time_s": HIGHER}  # fmt: skip
    summary = report.summarize(_rows("zcube", [5, 6, 5]) + _rows("clos", [0, 1, 0], False))
    assert {c["verdict"] for c in report.compare(summary)} == {OUT_OF_REACH}


def test_parameters_name_the_drafts_beside_the_runs() -> None:
    t = catalogue.test_of("12.3")
    assert t.runner and (t.trials, t.trial_s) == (20, 60.0)
    text = "\n".join(lf.parameter_lines(2, 20, t.trials, t.trial_s))
    assert "draft: 20 of >= 60 s | here: 2 of 20 s" in text
    assert "at 8 s for 5 s" in text and "--policy ff" in text


def test_bmwg_run_refuses_a_12_3_trial_too_short_before_any_lab(capsys) -> None:
    assert main(["bmwg", "run", "12.3", "--trial-seconds", "6"]) == 2
    assert "at least 10 s" in capsys.readouterr().err


def test_the_failed_links_utilization_is_its_busier_direction() -> None:
    summary = {"port_util": {"a3:5": 0.0002, "b0:8": 0.0175, "a3:6": 0.5}}
    assert lf.link_util_pct(summary, "a3:5-b0:8") == pytest.approx(1.75)
    assert lf.link_util_pct({"port_util": {}}, "a3:5-b0:8") is None
    f = lf.trial_figures({**_summary(), **summary}, [_req(1, 1.0)], [], "a3:5-b0:8")
    assert f["failed_link_util_pct"] == pytest.approx(1.75)
    assert "failed_link_util_pct" not in lf.trial_figures(_summary(), [], [])


def test_refigure_computes_a_runs_figures_again_from_its_folders(tmp_path: Path) -> None:
    from zcube_lab.emulator.bmwg.linkfail import refigure

    rows = []
    for i, (fabric, ttft) in enumerate((("zcube", 1.0), ("zcube", 1.1), ("roft", 2.0))):
        run = tmp_path / f"{fabric}-t{i}" / "run"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({**_summary(), "port_util": {"x:1": 0.1}}))
        reqs = [_req(1, ttft), _req(9, ttft), _req(14, ttft)]
        (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reqs))
        (run / "faults.jsonl").write_text("".join(json.dumps(e) + "\n" for e in _events(8.0, 13.0)))
        rows.append({"section": "12.3", "case": lf.case_label(), "params": {},
                     "fabric": fabric, "trial": i, "run": f"{fabric}-t{i}/run",
                     "failed_link": {"link": "x:1-y:2"}, "figures": {}})  # fmt: skip
    path = tmp_path / "bmwg.json"
    path.write_text(json.dumps({"rows": rows, "summary": [], "comparison": []}))
    doc = refigure(path)
    f = doc["rows"][2]["figures"]
    assert f["TTFT_p99_during_ms"] == pytest.approx(2000.0) and f["requests_during"] == 1
    assert f["failed_link_util_pct"] == pytest.approx(10.0)
    (z,) = [s for s in doc["summary"] if s["fabric"] == "zcube"]
    assert z["trials"] == 2 and z["figures"]["TTFT_p50_before_ms"]["mean"] == pytest.approx(1050)
    assert {c["versus"] for c in doc["comparison"]} == {"roft"}


def test_the_pages_table_and_sentence_carry_each_fabrics_link_and_figures() -> None:
    from bench.bmwg_tables import linkfail_sentences, linkfail_table

    rows = _rows("zcube", [0, 2]) + _rows("clos", [1, 1])
    rows[1]["figures"].update(kv_hit_transfers=3, KV_pulls_retried=1, disruption_time_s=2.0)
    link = {"spec": "a3-b0", "why": "a3-b0: 1 of the 4 fabric-facing links of a3"}
    doc = {"rows": rows, "summary": report.summarize(rows), "failed_links": {"zcube": link},
           "fail_at_s": 8.0, "fail_for_s": 5.0, "policy": "ff", "rate": 4.0,
           "prompt_tokens": 16384, "notes": ["12.3: how", "6.1: not this one"]}  # fmt: skip
    text = "\n".join(linkfail_table(doc))
    (z,) = [ln for ln in text.splitlines() if ln.startswith("| ZCube")]
    assert "`a3-b0`" in z and "| 1 ± 12.7 |" in z and z.endswith("| 2 of 2 |")
    assert "at 8 s for 5 s" in text and "`ff`" in text and "- ZCube lost a3-b0: 1 of" in text
    assert "- 12.3: how" in text and "6.1" not in text
    said = " ".join(linkfail_sentences([doc]))
    assert "(4 trials" in said and "4 requests failed" in said and "met 3 KV pulls" in said
    assert "1 were retried and 2 s were disrupted" in said
    assert linkfail_sentences([{"rows": []}]) == []


def test_a_run_that_never_recovered_puts_the_recovery_comparison_out_of_reach() -> None:
    # ZCube recovers in 3 s in both trials; ROFT in 1 s once and never in the other. ROFT's mean
    # over its one recovered trial would flatter it: that figure is out of reach, the others
    # are still judged.
    zcube = _rows("zcube", [0, 0])
    for r in zcube:
        r["figures"].update(recovery_time_s=3.0, unrecovered=0)
    roft = _rows("roft", [0, 0])
    roft[0]["figures"].update(recovery_time_s=1.0, unrecovered=0)
    roft[1]["figures"].update(recovery_time_s=None, unrecovered=1)
    got = {c["figure"]: c["verdict"] for c in report.compare(report.summarize(zcube + roft))}
    assert got["recovery_time_s"] == OUT_OF_REACH
    assert got["failed_requests"] != OUT_OF_REACH
