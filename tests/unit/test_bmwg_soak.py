"""§13.3 (long-running serving stability, short form) worked out before any lab: the flap's
specification, the drift over thirds, the largest switch queue, the controller's lost
sessions in the serving window, retransmissions, and a trial's figures from a hand-made run
folder (zcube_lab.core.bmwg.soak, zcube_lab.emulator.bmwg.soak)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from zcube_lab.core.bmwg import linkfail as lf
from zcube_lab.core.bmwg import soak
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.bmwg import soak as live133
from zcube_lab.emulator.bmwg.live import build

T0 = 1_800_000_000.0


def _req(t: float, ttft: float | None, ok: bool = True) -> dict:
    return {"wall_time": T0 + t, "outcome": "ok" if ok else "error", "ttft_s": ttft,
            "e2e_s": 0.5}  # fmt: skip


def test_the_flap_sits_at_the_trial_s_midpoint_and_a_short_trial_is_refused() -> None:
    link = lf.FailedLink("a3-b0", None, "a3", 4, 4, 16)  # type: ignore[arg-type]
    assert soak.flap_spec(link, 60) == "link a3-b0 at 30s for 1s"
    with pytest.raises(ConfigError, match=r"trial_seconds.*at least 20 s"):
        soak.flap_spec(link, 19)
    with pytest.raises(ConfigError, match="trial_seconds"):
        build("13.3", BmwgConfig(trial_seconds=10))


def test_drift_is_the_last_third_s_ttft_p99_over_the_first_third_s() -> None:
    reqs = [_req(t, 0.1) for t in range(0, 4)] + [_req(t, 0.5) for t in range(4, 6)]
    reqs += [_req(t, 0.2) for t in range(6, 10)] + [_req(9.5, None, ok=False)]
    d = soak.drift(reqs)  # sent over 0..9.5 s: thirds [0, 3.17] and [6.33, 9.5]
    assert d["TTFT_p99_first_ms"] == pytest.approx(100.0)
    assert d["TTFT_p99_last_ms"] == pytest.approx(200.0)  # the failed one has no TTFT
    assert d["TTFT_p99_drift"] == pytest.approx(2.0)
    assert soak.drift([])["TTFT_p99_drift"] is None


def test_the_buffer_peak_is_the_fullest_switch_port_over_its_queue() -> None:
    qdisc = {
        "h0-eth0": {"peak_backlog_packets": 900, "peak_backlog_bytes": 9_000_000},
        "a0-eth1": {"peak_backlog_packets": 16, "peak_backlog_bytes": 144_000},
        "b1-eth3": {"peak_backlog_packets": 48, "peak_backlog_bytes": 432_000},
    }
    b = soak.buffer_peak(qdisc, 64, ["h0", "h1"])
    assert b == {"Buffer_utilization_pct": 75.0, "buffer_peak_packets": 48,
                 "buffer_peak_bytes": 432_000, "buffer_peak_port": "b1-eth3"}  # fmt: skip
    assert soak.buffer_peak(qdisc, None, ["h0"])["Buffer_utilization_pct"] is None


def _stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def test_sessions_lost_count_only_while_serving() -> None:
    log = "\n".join([
        f"{_stamp(T0 + 1)} ZCubeController INFO a3 port 4 down",
        f"{_stamp(T0 + 2)} ZCubeController WARNING a1 disconnected",
        f"{_stamp(T0 + 3)} ZCubeController WARNING b0 disconnected",
        f"{_stamp(T0 + 20)} ZCubeController WARNING a0 disconnected",  # the teardown's
    ])  # fmt: skip
    assert soak.adjacency_flaps(log, T0, T0 + 10) == 2
    assert soak.adjacency_flaps(log, T0 + 5, T0 + 10) == 0


def test_retransmissions_sum_over_the_hosts() -> None:
    tcp = {"h0": {"retrans_segs": 3, "timeouts": 0}, "h1": {"retrans_segs": 8, "timeouts": 1}}
    assert soak.retransmissions(tcp) == {"TCP_retransmissions": 11, "TCP_timeouts": 1}


def test_a_trial_s_figures_from_its_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "r"
    (run / "logs").mkdir(parents=True)
    reqs = [_req(t * 0.5, 0.1) for t in range(0, 20)]  # 0..9.5 s, 100 ms each
    reqs[11] = _req(5.5, None, ok=False)  # after the flap's onset at 5 s
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reqs))
    faults = [{"action": "down", "wall": T0 + 5.0}, {"action": "up", "wall": T0 + 6.0}]
    (run / "faults.jsonl").write_text("".join(json.dumps(e) + "\n" for e in faults))
    summary = {"trustworthy": True, "faults": {"kv_failed_attempts": 2},
               "bmwg": {"TPS_output": 40.0, "Packet_drop_rate": 0.0}}  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary))
    health = {"qdisc": {"a3-eth5": {"peak_backlog_packets": 32, "peak_backlog_bytes": 1}},
              "tcp": {"h0": {"retrans_segs": 5, "timeouts": 1}}}  # fmt: skip
    (run / "health.json").write_text(json.dumps(health))
    (run / "config.json").write_text(json.dumps({"queues": [{"queue_packets": 64}]}))
    (run / "logs" / "controller.log").write_text(
        f"{_stamp(T0 + 5.2)} ZCubeController WARNING a3 disconnected\n"
    )
    f = live133.figures(run, ("h0",))
    assert (f["requests"], f["failed_requests"], f["fault_held_s"]) == (20, 1, 1.0)
    # bins of 1 s from the onset: the 5-6 s bin holds the failed request; the rest served
    # within the before window's range: recovered at the end of that bin
    assert f["recovery_time_s"] == 1.0 and f["disruption_time_s"] == 1.0
    assert f["KV_connection_failures"] == 2 and f["TTFT_p99_drift"] == pytest.approx(1.0)
    assert f["Buffer_utilization_pct"] == 50.0 and f["buffer_peak_port"] == "a3-eth5"
    row = build("13.3", BmwgConfig(trial_seconds=30, fabrics="zcube")).row
    assert row(run, "zcube", None)["buffer_peak_port"] == "a3-eth5"  # type: ignore[arg-type]
    assert "buffer_peak_port" not in row(run, "zcube", None)["figures"]  # type: ignore[arg-type]
    assert (f["adjacency_flaps"], f["TCP_retransmissions"], f["TCP_timeouts"]) == (1, 5, 1)
    assert f["untrusted"] == 0 and f["TPS_output"] == 40.0
    assert "recovered in 1.0 s" in live133.headline(f)


def test_the_section_flaps_each_fabric_s_own_link_and_prints_the_draft_s_parameters() -> None:
    sec = build("13.3", BmwgConfig(trial_seconds=30, fabrics="zcube,roft"))
    (case,) = sec.cases
    assert sec.fabric_argv("zcube", case)[-2:] == ["--fail", "link a3-b0 at 15s for 1s"]
    assert sec.fabric_argv("roft", case)[-1] == "link leaf6-spine0 at 15s for 1s"
    text = "\n".join(sec.parameter_lines)
    assert "one link flap at 12 h" in text and "down at 15 s for 1 s" in text
    assert sec.head["not_representable"] == {"FEC error trend": soak.NOT_HERE["FEC error trend"]}


def test_the_page_part_has_a_row_per_fabric_and_names_what_is_not_represented() -> None:
    from bench.bmwg_soak import soak_section
    from bench.bmwg_tables import _cell, _table
    from zcube_lab.core.bmwg import report

    def row(fabric: str, trial: int, rec: float) -> dict:
        figs = {"failed_requests": 0, "recovery_time_s": rec, "TTFT_p99_drift": 1.0,
                "Buffer_utilization_pct": 50.0, "untrusted": 0}  # fmt: skip
        return {"section": "13.3", "case": soak.case_label(), "params": {}, "fabric": fabric,
                "trial": trial, "figures": figs, "buffer_peak_port": "a3-eth5"}  # fmt: skip

    rows = [row("zcube", i, 1.0 + i / 10) for i in range(3)]
    rows += [row("roft", i, 8.0 + i / 10) for i in range(3)]
    summary = report.summarize(rows)
    doc = {
        "rows": rows,
        "summary": summary,
        "comparison": report.compare(summary),
        "trials": 2,
        "trial_seconds": 30,
        "flap_at_s": 15,
        "flap_s": 1,
        "policy": "ff",
        "rate": 4,
        "prompt_tokens": 16384,
        "not_representable": soak.NOT_HERE,
        "flapped_links": {"zcube": {"spec": "a3-b0"}, "roft": {"spec": "leaf6-spine0"}},
    }
    text = "\n".join(soak_section(doc, _table, _cell))  # fmt: skip
    assert (
        "| ZCube | `a3-b0` | - | 0 ± 0 | 1.1 ± 0.248 | " in text
        and "| ROFT | `leaf6-spine0` |" in text
    )
    assert "Not representable here: FEC error trend: a veth pair has no forward" in text
    assert "ZCube's recovery_time_s lower than ROFT's (1.1 against 8.1)" in text
    assert "a3-eth5 | 3 of 3 |" in text
