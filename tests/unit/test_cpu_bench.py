"""bench/cpu_per_request.py without a lab: CPU ticks by component over the load window (exited
and late-born processes, Locust from birth, the run's reaped helpers), the machine's rest, the
per-request and per-Mb figures from a real summary.json, and the marginal cost between rates."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.cpu_per_request import (
    HELPERS,
    OTHER,
    component_ticks,
    components,
    marginal_ms_per_request,
    rate_result,
)
from bench.procwatch import ProcSample
from zcube_lab.emulator.results.run.summary import RunSummary
from zcube_lab.emulator.verdict.cpustats import CpuTimes

SUMMARY = RunSummary.from_dict(
    json.loads((Path(__file__).parent / "data" / "summary-zcube.json").read_text())
)
TCK = 100


def p(name: str, role: str, pid: int, ticks: int, child_ticks: int = 0) -> ProcSample:
    return ProcSample(name, role, pid, 7, ticks, child_ticks)


def by_key(*samples: ProcSample) -> dict[tuple[int, int], ProcSample]:
    return {s.key: s for s in samples}


FIRST = by_key(
    p("run", "run", 100, 50, child_ticks=10),
    p("decode/h12", "decode", 101, 200),
    p("prefill/h0", "prefill", 104, 100),
    p("locust", "locust", 103, 30),
    p("ovs-vswitchd", "ovs-vswitchd", 300, 1000),
)
LAST = by_key(
    # Locust exited after using 130 ticks; the run reaped it and 25 ticks of `nsenter tc`.
    p("run", "run", 100, 80, child_ticks=10 + 130 + 25),
    p("decode/h12", "decode", 101, 260),
    p("decode/h13", "decode", 102, 40),  # born inside the window
    p("prefill/h0", "prefill", 104, 150),  # exited: its last reading
    p("locust", "locust", 103, 130),
    p("ovs-vswitchd", "ovs-vswitchd", 300, 1300),
)


def test_ticks_by_component_over_the_window() -> None:
    assert component_ticks(FIRST, LAST) == {
        "run": (1, 30),
        "decode": (2, 60 + 40),
        "prefill": (1, 50),
        "locust": (1, 130),  # from birth: its start is the window's
        "ovs-vswitchd": (1, 300),
        HELPERS: (0, 25),
    }


def test_a_reused_pid_is_another_process() -> None:
    # pid 101 again, started later (start time 99, not 7): all 30 of its ticks are the window's.
    reborn = by_key(ProcSample("decode/h12", "decode", 101, 99, 30, 0))
    assert component_ticks(FIRST, reborn) == {"decode": (1, 30)}


def test_components_add_the_machines_rest_and_sort_by_cpu() -> None:
    ticks = component_ticks(FIRST, LAST)
    rows = components(ticks, window_s=10.0, completed=50, busy_cpu_s=8.0, clk_tck=TCK)
    assert [c.name for c in rows] == [
        "ovs-vswitchd", OTHER, "locust", "decode", "prefill", "run", HELPERS,
    ]  # fmt: skip
    by_name = {c.name: c for c in rows}
    assert by_name[OTHER].cpu_s == pytest.approx(8.0 - 6.35)
    ovs = by_name["ovs-vswitchd"]
    assert (ovs.cpu_s, ovs.cores, ovs.processes) == (3.0, 0.3, 1)
    assert ovs.ms_per_request == pytest.approx(60.0) and ovs.busy_share == pytest.approx(3 / 8)
    assert components({}, 10.0, 0, 0.0, TCK)[0].ms_per_request is None


def cpu_times(busy: int, idle: int) -> dict[str, CpuTimes]:
    half = CpuTimes(user=busy // 2, nice=0, system=0, idle=idle // 2)
    return {"cpu": CpuTimes(user=busy, nice=0, system=0, idle=idle), "cpu0": half, "cpu1": half}


def test_rate_figures_from_a_real_summary() -> None:
    cpu = (cpu_times(1000, 1000), cpu_times(1000 + 1600, 1000 + 400))  # 16 CPU-s busy of 20
    r = rate_result(8, 10.0, cpu, component_ticks(FIRST, LAST), SUMMARY, 0.2, clk_tck=TCK)
    assert (r.completed, r.machine_cores, r.trustworthy) == (77, 2, True)
    assert (r.machine_busy_cpu_s, r.machine_busy_share) == (16.0, pytest.approx(0.8))
    mbit = SUMMARY.fabric_stats.host_ingress_bytes * 8 / 1e6  # about 357 Mb
    assert r.datapath_cpu_s_per_mbit == pytest.approx(3.0 / mbit)
    assert r.fabric_mbps == pytest.approx(mbit / SUMMARY.window_s)
    assert sum(c.cpu_s for c in r.components) == pytest.approx(16.0)
    unfinished = rate_result(8, 10.0, cpu, {}, None, 0.2, clk_tck=TCK)
    assert unfinished.completed is None and unfinished.datapath_cpu_s_per_mbit is None
    assert [c.name for c in unfinished.components] == [OTHER]


def test_the_marginal_cost_cancels_fixed_costs() -> None:
    def at(rate: float, completed: int, prometheus_ticks: int, decode_ticks: int):
        summary = replace(SUMMARY, client=replace(SUMMARY.client, completed=completed))
        ticks = {"prometheus": (1, prometheus_ticks), "decode": (4, decode_ticks)}
        busy = prometheus_ticks + decode_ticks
        cpu = (cpu_times(0, 0), cpu_times(busy, 2000 - busy))
        return rate_result(rate, 10.0, cpu, ticks, summary, 0.0, clk_tck=TCK)

    # Prometheus costs 0.1 core whatever the load; decode 20 ms per request.
    low, high = at(4, 40, 100, 80), at(8, 80, 100, 160)
    slope = marginal_ms_per_request(low, high)
    assert slope["prometheus"] == pytest.approx(0.0)
    assert slope["decode"] == pytest.approx(20.0)
    assert slope["machine"] == pytest.approx(20.0)
    assert {c.name: c.ms_per_request for c in low.components}["prometheus"] == 25.0
    assert marginal_ms_per_request(high, high) == {}
