"""Emulator health: /proc parsing, interval arithmetic, the verdict, and the real sampler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.lab.health import CPU_METRIC, PROCESS_METRIC, HealthSampler
from zcube_lab.emulator.verdict.cpustats import (
    CpuTimes,
    ProcessTimes,
    Reading,
    cpu_share,
    parse_pid_stat,
    parse_proc_stat,
    process_cores,
    sample_between,
    sample_from_line,
    sample_line,
)
from zcube_lab.emulator.verdict.judge import DATAPATH, HealthSample, judge
from zcube_lab.emulator.verdict.limits import Limits

STAT_BEFORE = """\
cpu  1000 0 500 8000 100 0 50 0 40 0
cpu0 600 0 300 3900 50 0 30 0 40 0
cpu1 400 0 200 4100 50 0 20 0 0 0
intr 123456 0 0
ctxt 99
"""
# 100 jiffies per core passed: cpu0 was busy 90 of them (80 user, 10 softirq), cpu1 5 (and 5
# more waiting on I/O, which is not busy); the aggregate line is the sum of the two.
STAT_AFTER = """\
cpu  1085 0 500 8100 105 0 60 0 90 0
cpu0 680 0 300 3910 50 0 40 0 90 0
cpu1 405 0 200 4190 55 0 20 0 0 0
"""


def _stat(user: int, idle: int, softirq: int = 0, steal: int = 0) -> CpuTimes:
    return CpuTimes(user=user, nice=0, system=0, idle=idle, softirq=softirq, steal=steal)


def test_parse_proc_stat_reads_aggregate_and_cores() -> None:
    cpus = parse_proc_stat(STAT_BEFORE)
    assert set(cpus) == {"cpu", "cpu0", "cpu1"}
    assert cpus["cpu"] == CpuTimes(1000, 0, 500, 8000, 100, 0, 50, 0)
    # guest (40) is inside user already and must not be counted twice.
    assert cpus["cpu0"].total == 600 + 300 + 3900 + 50 + 30
    assert cpus["cpu0"].busy == 600 + 300 + 30


def test_parse_proc_stat_refuses_text_without_cpu_line() -> None:
    with pytest.raises(ValueError, match="no aggregate"):
        parse_proc_stat("intr 1 2 3\n")


def test_busy_share_excludes_idle_and_iowait() -> None:
    before, after = _stat(100, 900), CpuTimes(175, 0, 0, 915, iowait=10)
    # 100 jiffies passed: 75 busy, 15 idle, 10 waiting on I/O (free CPU, so not busy).
    assert cpu_share(before, after).busy == pytest.approx(0.75)


def test_softirq_and_steal_shares() -> None:
    share = cpu_share(_stat(0, 0), _stat(50, 30, softirq=10, steal=10))
    assert share.busy == pytest.approx(0.7)
    assert share.softirq == pytest.approx(0.1)
    assert share.steal == pytest.approx(0.1)


def test_no_ticks_between_readings_gives_zero_not_a_division_error() -> None:
    assert cpu_share(_stat(5, 5), _stat(5, 5)).busy == 0.0


def test_parse_pid_stat_handles_spaces_and_parens_in_the_name() -> None:
    fields = ["S"] + ["0"] * 10 + ["250", "50"] + ["0"] * 6 + ["777"] + ["0"] * 20
    line = "4242 (weird ) name) " + " ".join(fields)
    assert parse_pid_stat(line) == ProcessTimes(pid=4242, start=777, ticks=300)


def test_parse_pid_stat_on_this_process() -> None:
    with open("/proc/self/stat") as f:
        times = parse_pid_stat(f.read())
    assert times.ticks >= 0 and times.start > 0


def test_process_cores_is_ticks_over_wall_time() -> None:
    prev = [ProcessTimes(10, 1, 1000)]
    cur = [ProcessTimes(10, 1, 1150)]
    # 150 ticks at 100 Hz in 2 s = 0.75 core.
    assert process_cores(prev, cur, elapsed_s=2.0, clk_tck=100) == pytest.approx(0.75)


def test_process_cores_sums_pids_and_ignores_reused_or_new_ones() -> None:
    prev = [ProcessTimes(10, 1, 100), ProcessTimes(11, 1, 100), ProcessTimes(12, 5, 900)]
    cur = [
        ProcessTimes(10, 1, 150),  # +50
        ProcessTimes(11, 1, 130),  # +30
        ProcessTimes(12, 9, 5),  # same pid, another process: not a delta
        ProcessTimes(13, 9, 400),  # new during the interval: its past is unknown
    ]
    assert process_cores(prev, cur, elapsed_s=1.0, clk_tck=100) == pytest.approx(0.8)


def test_process_cores_none_when_nothing_lived_through() -> None:
    assert process_cores([], [ProcessTimes(1, 1, 10)], 1.0, 100) is None
    assert process_cores([ProcessTimes(1, 1, 5)], [], 1.0, 100) is None


def test_sample_between_machine_cores_and_processes() -> None:
    prev = Reading(
        t=10.0,
        cpus=parse_proc_stat(STAT_BEFORE),
        processes={DATAPATH: (ProcessTimes(7, 1, 0),), "gateway": (ProcessTimes(8, 1, 0),)},
    )
    cur = Reading(
        t=11.0,
        cpus=parse_proc_stat(STAT_AFTER),
        processes={DATAPATH: (ProcessTimes(7, 1, 20),), "gateway": ()},
    )
    sample = sample_between(prev, cur, clk_tck=100)
    assert sample is not None
    assert sample.interval_s == pytest.approx(1.0)
    assert sample.per_core == pytest.approx((0.9, 0.05))
    assert sample.machine_cpu == pytest.approx(95 / 200)
    assert sample.softirq == pytest.approx(10 / 200)
    assert sample.steal == 0.0
    assert sample.processes == {DATAPATH: pytest.approx(0.2)}  # gateway exited: no figure


def test_sample_between_orders_cores_numerically() -> None:
    names = [f"cpu{i}" for i in range(12)]
    before = {"cpu": _stat(0, 0), **{n: _stat(0, 0) for n in names}}
    after = {"cpu": _stat(1, 1), **{n: _stat(i, 11 - i) for i, n in enumerate(names)}}
    after["cpu11"] = _stat(11, 0)
    sample = sample_between(Reading(0, before), Reading(1, after), 100)
    assert sample is not None
    assert sample.per_core[2] == pytest.approx(2 / 11)
    assert sample.per_core[10] == pytest.approx(10 / 11)


def test_sample_between_needs_time_to_pass() -> None:
    cpus = parse_proc_stat(STAT_BEFORE)
    assert sample_between(Reading(5, cpus), Reading(5, cpus), 100) is None


# --- the verdict ---


def _samples(
    machine: list[float],
    datapath: list[float] | None = None,
    steal: float = 0.0,
    **processes: list[float],
) -> list[HealthSample]:
    out = []
    for i, cpu in enumerate(machine):
        procs = {name: values[i] for name, values in processes.items()}
        if datapath is not None:
            procs[DATAPATH] = datapath[i]
        out.append(
            HealthSample(
                t=float(i),
                interval_s=1.0,
                machine_cpu=cpu,
                per_core=(cpu, cpu),
                softirq=0.01,
                steal=steal,
                processes=procs,
            )
        )
    return out


def test_a_calm_run_is_trustworthy_with_figures() -> None:
    verdict = judge(_samples([0.5] * 20, datapath=[0.1] * 20, gateway=[0.3] * 20))
    assert verdict.trustworthy and verdict.reasons == ()
    assert verdict.samples == 20
    assert verdict.machine_cpu_mean == pytest.approx(0.5)
    assert verdict.machine_cpu_p95 == pytest.approx(0.5)
    assert verdict.datapath_cpu_mean == pytest.approx(0.1)
    assert verdict.per_core_p95 == pytest.approx((0.5, 0.5))
    assert verdict.processes["gateway"].mean == pytest.approx(0.3)
    assert json.dumps(verdict.to_dict())  # serialisable for summary.json


def test_machine_rule_is_p95_one_saturated_sample_in_twenty_is_allowed_two_are_not() -> None:
    one = [0.5] * 19 + [0.99]
    two = [0.5] * 18 + [0.99, 0.99]
    assert judge(_samples(one, datapath=[0.1] * 20)).trustworthy
    verdict = judge(_samples(two, datapath=[0.1] * 20))
    assert not verdict.trustworthy
    assert any("machine CPU above 90%" in r for r in verdict.reasons)


def test_datapath_rule_allows_bursts_not_sustained_load() -> None:
    bursts = [0.1] * 16 + [0.95] * 4  # 20%: at the limit, allowed
    sustained = [0.1] * 15 + [0.95] * 5  # 25%
    assert judge(_samples([0.5] * 20, datapath=bursts)).trustworthy
    verdict = judge(_samples([0.5] * 20, datapath=sustained))
    assert not verdict.trustworthy
    (reason,) = verdict.reasons
    assert DATAPATH in reason and "25%" in reason


def test_a_single_threaded_process_at_one_core_is_flagged_on_an_idle_machine() -> None:
    verdict = judge(_samples([0.55] * 10, datapath=[0.05] * 10, locust=[0.98] * 10))
    assert not verdict.trustworthy
    assert verdict.reasons == (
        "process locust above 0.90 core in 100% of samples (allowed 20%; p95 0.98 core)",
    )


def test_missing_datapath_is_a_reason_unless_not_required() -> None:
    verdict = judge(_samples([0.2] * 5))
    assert not verdict.trustworthy
    assert verdict.datapath_cpu_mean is None
    assert any("never sampled" in r for r in verdict.reasons)
    assert judge(_samples([0.2] * 5), Limits(require_datapath=False)).trustworthy


def test_too_few_samples_cannot_vouch_for_a_run() -> None:
    verdict = judge(_samples([0.2] * 2, datapath=[0.0] * 2))
    assert not verdict.trustworthy
    assert "only 2 health samples" in verdict.reasons[0]
    empty = judge([])
    assert not empty.trustworthy and empty.machine_cpu_mean is None and empty.per_core_p95 == ()


def test_steal_rule() -> None:
    verdict = judge(_samples([0.3] * 5, datapath=[0.0] * 5, steal=0.2))
    assert not verdict.trustworthy
    assert verdict.reasons == ("CPU steal averaged 20% (allowed 5%)",)


def test_custom_thresholds_apply() -> None:
    samples = _samples([0.7] * 10, datapath=[0.0] * 10)
    assert judge(samples).trustworthy
    assert not judge(samples, Limits(machine_cpu=0.6)).trustworthy


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"machine_cpu": 1.5}, "limits.machine_cpu"),
        ({"machine_fraction": -0.1}, "limits.machine_fraction"),
        ({"datapath_cores": 0}, "limits.datapath_cores"),
        ({"process_cores": "1"}, "limits.process_cores"),
        ({"min_samples": 0}, "limits.min_samples"),
        ({"steal_mean": True}, "limits.steal_mean"),
    ],
)
def test_bad_thresholds_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        Limits(**kwargs)
    assert err.value.field == field


def test_sampler_validates_its_arguments() -> None:
    with pytest.raises(ConfigError) as err:
        HealthSampler(interval_s=0)
    assert err.value.field == "interval_s"
    sampler = HealthSampler(0.1)
    with pytest.raises(ConfigError):
        sampler.register(DATAPATH, 1)
    with pytest.raises(ConfigError):
        sampler.register("x", [])


# --- the real sampler ---


@pytest.fixture
def children() -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """A busy-looping child and a sleeping one; both killed afterwards."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    # Interpreter start-up costs CPU; sample the idle child only once it is really asleep.
    assert idle.stdout is not None and idle.stdout.readline() == b"ready\n"
    try:
        yield busy, idle
    finally:
        for child in (busy, idle):
            if child.returncode is None:
                child.kill()
                child.wait()
        assert idle.stdout is not None
        idle.stdout.close()


def _kill_and_cpu_seconds(child: subprocess.Popen[bytes]) -> float:
    """Kill and reap `child`; the CPU seconds it used in its whole life, from the kernel's rusage
    (an account independent of /proc sampling)."""
    child.kill()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def test_real_sampler_sees_a_busy_child_busy_and_an_idle_one_idle(
    children: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    busy, idle = children
    registry = CollectorRegistry()
    sampler = HealthSampler(interval_s=0.2, registry=registry)
    sampler.register("busy", busy.pid)
    sampler.register("idle", idle.pid)
    sampler.start()
    time.sleep(1.1)
    taken = sampler.stop()
    samples = sampler.samples
    lifetime_cpu = _kill_and_cpu_seconds(busy)

    assert taken == len(samples) >= 4
    busy_cores = [s.processes["busy"] for s in samples]
    idle_cores = [s.processes["idle"] for s in samples]
    busy_mean = sum(busy_cores) / len(busy_cores)
    machine_mean = sum(s.machine_cpu for s in samples) / len(samples)
    # The sampled CPU-seconds must match the kernel's own account of the child, less what it
    # used outside the sampled window (interpreter start-up, and at most one interval at the end).
    sampled_cpu = sum(s.processes["busy"] * s.interval_s for s in samples)
    assert lifetime_cpu - 0.2 - 0.15 <= sampled_cpu <= lifetime_cpu + 0.02
    # A busy loop gets a whole core unless others saturate the machine (parallel tests, other
    # work on a 2-core box); then only the account above is a fair check.
    if machine_mean < 0.9:
        assert busy_mean > 0.5, f"busy child {busy_mean:.2f} core, machine {machine_mean:.0%}"
        assert registry.get_sample_value(PROCESS_METRIC, {"process": "busy"}) > 0.5
    assert busy_mean > 5 * max(max(idle_cores), 0.01)
    assert max(idle_cores) < 0.1
    assert registry.get_sample_value(PROCESS_METRIC, {"process": "idle"}) < 0.1
    # The busy loop alone keeps part of the machine busy.
    assert all(0 <= s.machine_cpu <= 1 for s in samples)
    assert 0 < registry.get_sample_value(CPU_METRIC) <= 1

    doc = json.loads(sampler.to_json())
    assert len(doc["samples"]) == len(samples)
    assert doc["verdict"]["samples"] == len(samples)
    if min(busy_cores) > 0.9:  # it held a whole core throughout: the verdict must say so
        assert any("process busy" in r for r in doc["verdict"]["reasons"])


def test_sampler_drops_a_process_that_exits_and_its_gauge() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    registry = CollectorRegistry()
    sampler = HealthSampler(interval_s=0.1, registry=registry, watch_datapath=False).start()
    sampler.register("short", child.pid)
    child.wait()
    time.sleep(0.4)
    sampler.stop()
    samples = sampler.samples
    assert any("short" in s.processes for s in samples)
    assert "short" not in samples[-1].processes
    assert registry.get_sample_value(PROCESS_METRIC, {"process": "short"}) is None


def test_sample_between_gives_each_datapath_thread_its_cores() -> None:
    cpus = parse_proc_stat(STAT_BEFORE)
    prev = Reading(t=0.0, cpus=cpus, threads={"handler1": ProcessTimes(9, 1, 100)})
    cur = Reading(
        t=2.0,
        cpus=parse_proc_stat(STAT_AFTER),
        threads={"handler1": ProcessTimes(9, 1, 290), "revalidator2": ProcessTimes(10, 1, 5)},
    )
    sample = sample_between(prev, cur, clk_tck=100)
    assert sample is not None
    assert sample.threads == {"handler1": pytest.approx(0.95)}  # 190 ticks in 2 s; new: none


# --- samples go to a file, not to memory ---


def test_a_sample_line_reads_back_equal() -> None:
    (s,) = _samples([1 / 3], datapath=[0.1 + 0.2], gateway=[2 / 7])
    s = HealthSample(**{**s.__dict__, "threads": {"handler1": 1e-17}})
    assert sample_from_line(sample_line(s)) == s


def test_samples_are_written_to_the_file_and_judged_from_it(tmp_path: Path) -> None:
    path = tmp_path / "health-samples.jsonl"
    sampler = HealthSampler(60, watch_datapath=False, path=path)
    sampler.register("gateway", os.getpid())
    samples = _samples([0.2, 0.95, 0.95, 0.3, 0.4, 0.5], gateway=[0.1] * 6)
    assert sampler.start().stop() == 0  # the file is open; the thread took no sample in 60 s
    for s in samples:
        sampler._store(s)
    assert [sample_from_line(line) for line in path.read_text().splitlines()] == samples
    assert sampler.samples == samples and sampler.count == 6
    limits = Limits(require_datapath=False)
    assert sampler.verdict(limits, window=(0.5, 5.0)) == judge(
        samples, limits, window=(0.5, 5.0), expected=("gateway",)
    )
    assert sampler.verdict(limits, window=(0.5, 5.0)).samples == 5  # t = 1 .. 5, not t = 0
    sampler.close()
    assert path.read_text().count("\n") == 6  # the file stays for the run's folder


def test_a_sampler_keeps_no_more_memory_after_ten_times_as_many_samples() -> None:
    import gc
    import tracemalloc

    sampler = HealthSampler(60, watch_datapath=False)
    sampler.start().stop()

    def grown(n: int) -> int:
        samples = _samples([0.5] * n, datapath=[0.1] * n, gateway=[0.3] * n, locust=[0.2] * n)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for s in samples:
            sampler._store(s)
        del samples
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return after - before

    grown(100)
    assert grown(3000) < 10_000  # a kept sample alone is about a kilobyte
    assert sampler.count == 3100 and len(sampler.samples) == 3100
    sampler.close()
