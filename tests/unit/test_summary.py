"""summary.json as typed data: the format read and written back byte for byte, and a fully
populated RunSummary through a file and back equal."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from zcube_lab.emulator.results.run.summary import (
    ClientFigures,
    FabricStats,
    FaultRecovery,
    FaultReport,
    HotPort,
    InjectedFault,
    RunSummary,
    ServerFigures,
    Utilization,
)
from zcube_lab.emulator.verdict.judge import HealthVerdict, Usage

DATA = Path(__file__).parent / "data"
# As the runner wrote them before summaries were typed: a run without faults (values from a real
# run, NaN where a histogram saw nothing) and one with a link fault (the fault section written
# by the previous `analyze`).
FIXTURES = ("summary-zcube.json", "summary-zcube-ff.json")


@pytest.mark.parametrize("name", FIXTURES)
def test_a_summary_written_before_is_written_back_byte_for_byte(name: str) -> None:
    text = (DATA / name).read_text()
    summary = RunSummary.from_dict(json.loads(text))
    assert summary.to_json() == text


def test_the_fault_section_reads_as_a_fault_report() -> None:
    s = RunSummary.from_dict(json.loads((DATA / "summary-zcube-ff.json").read_text()))
    assert s.variant == "zcube/ff" and s.policy == "ff" and s.fabric == "zcube"
    assert s.faults is not None and s.faults.recovery is not None
    assert s.faults.recovery.requests_during == 6
    assert s.faults.recovery.recovery_kv_first_after_restore is False
    assert s.faults.injected == (InjectedFault("link a0-b1", "link", 10.0, 6.0, ("a0:6-b1:5",)),)
    assert s.faults.spans_s == ((10.0, 16.0),)
    plain = RunSummary.from_dict(json.loads((DATA / "summary-zcube.json").read_text()))
    assert plain.faults is not None and plain.faults.recovery is None
    assert "ttft_p99_during_s" not in plain.to_dict()["faults"]


def _full() -> RunSummary:
    client = ClientFigures(
        requests=11, completed=10, failed=1, requests_per_s=2.0, output_tokens_per_s=22.0,
        output_tokens=110, ttft_p50_s=0.5, ttft_p90_s=0.9, ttft_p99_s=1.0, ttft_mean_s=0.55,
        tpot_p50_s=0.03, tpot_p90_s=0.03, tpot_p99_s=0.04, tpot_mean_s=0.03, itl_p50_s=0.03,
        itl_p90_s=0.03, itl_p99_s=0.05, itl_mean_s=0.03, e2e_p50_s=0.8, e2e_p90_s=1.2,
        e2e_p99_s=1.3, e2e_mean_s=0.85,
    )  # fmt: skip
    server = ServerFigures(
        gateway_ttft_p50_s=0.5, gateway_ttft_p90_s=0.9, gateway_ttft_p99_s=1.1, ttft_p50_s=0.1,
        ttft_p90_s=0.2, ttft_p99_s=0.25, itl_p50_s=0.03, itl_p90_s=0.04, itl_p99_s=0.05,
        kv_xfer_p50_s=0.06, kv_xfer_p90_s=0.1, kv_xfer_p99_s=0.19, alltoall_p50_s=0.002,
        alltoall_p90_s=0.004, alltoall_p99_s=0.005, client_ttft_p50_s=0.52,
        client_ttft_p90_s=0.98, client_ttft_p99_s=2.3, kv_bytes=4.0e7, alltoall_bytes=1.0e5,
        kv_failed=0.0, alltoall_failed=1.0, alltoall_subflows_retired=2.0,
    )  # fmt: skip
    util = Utilization(0.5, 0.1, 0.5, 0.2, (HotPort("a0", 5, 0.5), HotPort("b1", 4, 0.25)))
    stats = FabricStats(util, 3.0, 4.4e7, 4.01e7, 4.4e7 / 4.01e7, 8, 12800.0)
    recovery = FaultRecovery(
        ttft_p99_before_s=0.5, requests_before=20, failed_before=0, ttft_p99_during_s=3.0,
        requests_during=3, failed_during=1, ttft_p99_after_s=0.6, requests_after=10,
        failed_after=0, kv_hit_transfers=2, recovery_kv_first_s=1.5, recovery_kv_all_s=9.0,
        recovery_kv_first_after_restore=False, recovery_throughput_s=None,
    )  # fmt: skip
    faults = FaultReport(
        faults=1, failed_requests=1, errors={"KV transfer failed": 1}, kv_transfers=21,
        kv_completed=21, kv_failed_attempts=1, kv_retried=1, kv_lanes_retired=1,
        kv_checksum_failures=0, kv_completed_unverified=0, kv_unfinished_transfers=0,
        kv_bytes_lost=0, recovery=recovery,
        injected=(InjectedFault("link a1-b2", "link", 20.0, 10.0, ("a1:7-b2:6",)),),
        spans_s=((20.0, 30.0),),
    )  # fmt: skip
    health = HealthVerdict(
        trustworthy=False, reasons=("machine CPU above 90%",), samples=30, machine_cpu_mean=0.8,
        machine_cpu_p95=0.95, datapath_cpu_mean=0.1, datapath_cpu_p95=0.3,
        per_core_p95=(0.9, 0.97), softirq_mean=0.01, steal_mean=0.0,
        processes={"gateway": Usage(0.2, 0.4, 0.0), "locust": Usage(0.5, 0.95, 0.3)},
    )  # fmt: skip
    return RunSummary(
        run="20261201-101010-zcube-coding-agent-ff-r1", label="zcube/ff", policy="ff",
        fabric="zcube", fabric_params={"n": 4, "m": 1, "gpus_per_server": 4},
        workload="coding-agent", model="glm-5.1", seed=1, window_s=61.5, client=client,
        loadgen={"sent": 11, "arrival": {"process": "poisson", "rate": 2.0}}, server=server,
        fabric_stats=stats, port_util={"a0:5": 0.5, "b1:4": 0.25},
        throughput_series=((0.0, 2.0), (5.0, 1.8)), faults=faults, health=health,
        trustworthy=False,
    )  # fmt: skip


def test_a_full_summary_written_and_read_back_is_equal(tmp_path: Path) -> None:
    summary = _full()
    path = summary.write(tmp_path)
    assert path == tmp_path / "summary.json"
    back = RunSummary.read(tmp_path)
    assert back == summary
    assert back.dir == tmp_path
    assert path.read_text() == json.dumps(summary.to_dict(), indent=2) + "\n"


def test_sections_older_runs_lack_stay_absent() -> None:
    data = _full().to_dict()
    for key in ("label", "policy", "faults"):
        del data[key]
    old = RunSummary.from_dict(data)
    assert (old.label, old.policy, old.faults) == (None, None, None)
    assert old.to_dict() == data
    assert old.variant == "zcube"  # what the comparison groups a run without a label by


def test_the_report_units_are_properties() -> None:
    s = _full()
    assert s.fabric_stats.switching_capacity_tbps == 12.8
    assert s.server.reported_bytes == 4.0e7 + 1.0e5
    assert replace(s, label=None).variant == "zcube"
    written = s.to_dict()
    assert list(written["fabric_stats"])[:5] == [
        "link_util_max",
        "link_util_mean",
        "trunk_util_max",
        "trunk_util_mean",
        "hottest_ports",
    ]
    assert "switching_capacity_tbps" not in written["fabric_stats"]
    assert "windows" not in written["faults"] and "dir" not in written


def test_the_victim_section_round_trips(tmp_path: Path) -> None:
    from dataclasses import replace

    from zcube_lab.emulator.results.lossless.victims import PauseEpisode, Transfer, account

    episode = PauseEpisode("a0-eth1", 1.0, 1.2, frozenset({"h1-eth0"}), "kv")
    report = account([Transfer("ep", 0.9, 1.1, 100, frozenset({"h1-eth0"}))], [episode])
    summary = replace(_full(), victims=report)
    summary.write(tmp_path)
    back = RunSummary.read(tmp_path)
    assert back.victims == report and back.victims.victim_share == 1.0
    assert "victims" not in _full().to_dict()


def test_class_bytes_round_trip_and_total() -> None:
    from dataclasses import replace

    counts = {"a0-eth1": {"ep": 100, "kv": 900}, "b1-eth3": {"ep": 50, "kv": 0}}
    summary = replace(_full(), class_bytes=counts)
    back = RunSummary.from_dict(summary.to_dict())
    assert back.class_bytes == counts
    assert back.class_totals() == {"ep": 150, "kv": 900}
    assert _full().class_totals() is None and "class_bytes" not in _full().to_dict()
