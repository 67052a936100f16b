"""Failure specifications, their schedule, and the fault report (pure parts)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fault_schedule import (
    Transition,
    parse_fault,
    parse_faults,
    schedule,
    switch_links,
)
from zcube_lab.core.policies import RUN_POLICIES, get_policy
from zcube_lab.emulator.lab.injector import FaultInjector
from zcube_lab.emulator.results.run.fault_report import analyze, fault_windows

ZCUBE = build_fabric(FabricSpec.of("zcube", n=4))
ROFT = build_fabric(FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2))
ENGINES = ("prefill-0", "prefill-1", "decode-2", "decode-3")


def test_link_fault_names_both_switch_ends_and_its_timing() -> None:
    (f,) = parse_fault("link A1-B2 at 30s for 10s", ZCUBE, 60)
    assert (f.kind, f.at_s, f.for_s, f.end_s) == ("link", 30.0, 10.0, 40.0)
    (lk,) = f.links
    assert {lk.node1, lk.node2} == {"a1", "b2"}
    ends = ZCUBE.switch_interfaces(f.links)
    assert len(ends) == 2
    assert {e.split("-")[0] for e in ends} == {"a1", "b2"}


def test_times_accept_seconds_and_milliseconds_and_no_end() -> None:
    (f,) = parse_fault("link a0-b0 at 1500ms", ZCUBE, 60)
    assert f.at_s == 1.5 and f.for_s is None and f.end_s is None


def test_switch_fault_takes_every_link_of_the_switch() -> None:
    (f,) = parse_fault("switch spine1 at 5s for 2s", ROFT, 30)
    assert f.kind == "switch"
    assert len(f.links) == sum(1 for lk in ROFT.links if "spine1" in (lk.node1, lk.node2))
    assert all(e.startswith(("spine1-", "leaf")) for e in ROFT.switch_interfaces(f.links))


def test_flaps_are_seeded_switch_links_inside_the_window() -> None:
    a = parse_fault("flaps 4 seed 7 for 3s from 10s to 20s", ZCUBE, 60)
    b = parse_fault("flaps 4 seed 7 for 3s from 10s to 20s", ZCUBE, 60)
    c = parse_fault("flaps 4 seed 8 for 3s from 10s to 20s", ZCUBE, 60)
    assert a == b and a != c
    assert len(a) == 4
    inner = set(switch_links(ZCUBE))
    for f in a:
        assert 10 <= f.at_s <= 20 and f.for_s == 3
        assert set(f.links) <= inner
    assert [f.at_s for f in a] == sorted(f.at_s for f in a)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("link a1-b9 at 3s", "fail.link"),
        ("link a1 at 3s", "fail.link"),
        ("link a1-b2", "fail.at"),
        ("link a1-b2 at 99s", "fail.at"),
        ("link a1-b2 at soon", "fail.at"),
        ("link a1-b2 at 3s for 0s", "fail.for"),
        ("link a1-b2#3 at 3s", "fail.link"),
        ("switch core9 at 3s", "fail.switch"),
        ("flaps 0", "fail.flaps"),
        ("flaps 2 from 50s to 10s", "fail.flaps"),
        ("melt a1 at 3s", "fail"),
        ("link a1-b2 at 3s at 4s", "fail"),
        ("", "fail"),
        ("engine", "fail.engine"),
        ("engine decode-9 at 3s", "fail.engine"),
        ("engine decode-3", "fail.at"),
        ("engine decode-3 at 3s for 2s", "fail"),
        ("engine decode-3 at 61s", "fail.at"),
        ("controller for 2s", "fail.at"),
        ("controller at 3s for 0s", "fail.for"),
        ("vswitchd at 3s for 2s", "fail"),
        ("vswitchd at later", "fail.at"),
    ],
)
def test_bad_specifications_name_the_field(text: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_fault(text, ZCUBE, 60, engines=ENGINES)
    assert info.value.field == field


def test_process_faults_parse_with_their_target_and_timing() -> None:
    (e,) = parse_fault("engine Decode-3 at 20s", ZCUBE, 60, engines=ENGINES)
    assert (e.label, e.kind, e.target, e.at_s, e.for_s, e.links) == (
        "engine decode-3",
        "engine",
        "decode-3",
        20.0,
        None,
        (),
    )
    (c,) = parse_fault("controller at 10s for 5s", ZCUBE, 60)
    assert (c.kind, c.at_s, c.end_s) == ("controller", 10.0, 15.0)
    (v,) = parse_fault("vswitchd at 500ms", ZCUBE, 60)
    assert (v.kind, v.at_s, v.for_s) == ("vswitchd", 0.5, None)


def test_unknown_engine_error_lists_the_run_engines() -> None:
    with pytest.raises(ConfigError, match="prefill-0") as info:
        parse_fault("engine decode-7 at 3s", ZCUBE, 60, engines=ENGINES)
    assert info.value.allowed == f"one of this run's engines {list(ENGINES)}"


def test_process_faults_schedule_by_kind_without_interfaces() -> None:
    faults = parse_faults(
        ["controller at 10s for 5s", "engine decode-3 at 12s", "vswitchd at 20s"],
        ZCUBE,
        60,
        engines=ENGINES,
    )
    steps = schedule(ZCUBE, faults)
    assert [(t.t_s, t.action, t.kind, t.target, t.interfaces) for t in steps] == [
        (10, "down", "controller", "", ()),
        (12, "down", "engine", "decode-3", ()),
        (15, "up", "controller", "", ()),
        (20, "down", "vswitchd", "", ()),
    ]


def test_a_second_kill_of_one_engine_gets_its_own_label() -> None:
    a, b = parse_faults(
        ["engine decode-3 at 5s", "engine decode-3 at 9s"], ZCUBE, 60, engines=ENGINES
    )
    assert (a.label, b.label) == ("engine decode-3", "engine decode-3 (2)")
    assert a.target == b.target == "decode-3"


def test_unknown_switch_error_lists_the_fabric_switches() -> None:
    with pytest.raises(ConfigError, match="a0"):
        parse_fault("switch zz at 3s", ZCUBE, 60)


def test_schedule_keeps_an_interface_down_while_any_fault_holds_it() -> None:
    faults = parse_faults(
        ["link a1-b2 at 10s for 10s", "switch a1 at 15s for 10s"], ZCUBE, duration_s=60
    )
    steps = schedule(ZCUBE, faults)
    assert [(t.t_s, t.action) for t in steps] == [
        (10, "down"),
        (15, "down"),
        (20, "up"),
        (25, "up"),
    ]
    link_ends = set(ZCUBE.switch_interfaces(faults[0].links))
    a1_end = next(e for e in link_ends if e.startswith("a1-"))
    # The switch fault takes both ends of every link of a1, the a1-b2 ones included: they
    # are already down when the switch fails, and stay down when the link fault ends.
    assert a1_end not in steps[1].interfaces
    assert steps[2].interfaces == ()
    assert link_ends <= set(steps[3].interfaces)
    assert len(steps[1].interfaces) + len(link_ends) == len(steps[3].interfaces)


def test_a_fabric_prefix_applies_a_fault_to_that_fabric_only() -> None:
    texts = ["zcube: link a0-b1 at 5s for 5s", "roft: link leaf0-spine0 at 5s for 5s"]
    (z,) = parse_faults(texts, ZCUBE, 60)
    (r,) = parse_faults(texts, ROFT, 60)
    assert z.label == "link a0-b1" and r.label == "link leaf0-spine0"


def test_injector_runs_the_schedule_and_restores_what_it_broke(tmp_path: Path) -> None:
    import time

    from prometheus_client import CollectorRegistry

    calls: list[list[str]] = []
    faults = parse_faults(["link a1-b2 at 0.05s", "link a0-b0 at 0.1s for 0.05s"], ZCUBE, 60)
    registry = CollectorRegistry()
    inj = FaultInjector(
        ZCUBE, faults, tmp_path / "faults.jsonl", registry=registry, runner=calls.append
    )
    inj.start(time.time())
    time.sleep(0.4)
    assert registry.get_sample_value("zcube_fault_active", {"fault": "link a1-b2"}) == 1
    assert registry.get_sample_value("zcube_fault_active", {"fault": "link a0-b0"}) == 0
    inj.stop()
    lines = [line for batch in calls for line in batch]
    assert sum(" down" in x for x in lines) == 4
    # a0-b0 came back on schedule; a1-b2 (no end) is brought back by stop().
    assert sum(" up" in x for x in lines) == 4
    assert all(x.startswith("link set dev ") for x in lines)
    events = (tmp_path / "faults.jsonl").read_text().splitlines()
    assert len(events) == 3


def _req(t: float, ttft: float, ok: bool = True) -> dict:
    return {
        "wall_time": t,
        "sent_s": t - 1000,
        "outcome": "ok" if ok else "server_error",
        "ttft_s": ttft if ok else None,
        "e2e_s": ttft + 0.5 if ok else 1.0,
        "error": "" if ok else "KV transfer failed",
    }


def _kv(rid: str, start: float, end: float, ok: bool = True, **kw: object) -> dict:
    row = {
        "request_id": rid,
        "start": start,
        "end": end,
        "ok": ok,
        "bytes": 100 if ok else 0,
        "expected_bytes": 100,
        "checksum_ok": True if ok else None,
        "attempt": 0,
        "retired_lanes": 0,
    }
    row.update(kw)
    return row


def test_fault_windows_merge_and_close_at_the_end() -> None:
    events = [
        {"action": "down", "fault": "x", "wall": 10.0},
        {"action": "down", "fault": "y", "wall": 12.0},
        {"action": "up", "fault": "x", "wall": 14.0},
        {"action": "up", "fault": "y", "wall": 15.0},
        {"action": "down", "fault": "z", "wall": 30.0},
    ]
    assert fault_windows(events, end_wall=40.0) == [(10.0, 15.0), (30.0, 40.0)]


def test_analysis_splits_phases_counts_failures_and_recovery() -> None:
    events = [
        {"action": "down", "fault": "link a1-b2", "wall": 1020.0},
        {"action": "up", "fault": "link a1-b2", "wall": 1030.0},
    ]
    requests = [_req(1000 + i, 0.5) for i in range(20)]
    requests += [_req(1021, 3.0), _req(1022, 2.0), _req(1023, 0.0, ok=False)]
    requests += [_req(1031 + i, 0.6) for i in range(10)]
    kv = [_kv(f"r{i}", 1000 + i, 1000.1 + i) for i in range(19)]
    # In flight at the onset: one lane retired, done 1.5 s after the onset.
    kv.append(_kv("hit", 1019.9, 1021.5, retired_lanes=1))
    # Failed once, retried and done after the link came back.
    kv.append(_kv("retry", 1022.0, 1027.0, ok=False, attempt=0, error="timed out"))
    kv.append(_kv("retry", 1027.0, 1031.0, attempt=1))
    out = analyze(events, requests, kv, end_wall=1045.0)
    rec = out.recovery
    assert rec is not None
    assert list(out.windows) == [(1020.0, 1030.0)]
    assert out.spans_s == ((20.0, 30.0),)  # the same window on the load generator's clock
    assert out.failed_requests == 1 and rec.failed_during == 1
    assert rec.failed_before == 0 and rec.failed_after == 0
    assert rec.ttft_p99_before_s == pytest.approx(0.5)
    assert rec.ttft_p99_during_s > 2.0
    assert rec.ttft_p99_after_s == pytest.approx(0.6)
    assert out.kv_retried == 1 and out.kv_lanes_retired == 1
    assert out.kv_bytes_lost == 0 and out.kv_checksum_failures == 0
    assert rec.kv_hit_transfers == 2
    assert rec.recovery_kv_first_s == pytest.approx(1.5)
    assert rec.recovery_kv_all_s == pytest.approx(9.0)  # started at 1022, done at 1031
    assert rec.recovery_kv_first_after_restore is False
    assert out.errors == {"KV transfer failed": 1}


def test_analysis_counts_integrity_over_all_attempts_and_runs_without_faults() -> None:
    kv = [
        _kv("whole", 1.0, 2.0),
        # Corruption caught by the checksum, then a clean retry.
        _kv("fixed", 1.0, 2.0, ok=False, checksum_ok=False, error="checksum mismatch"),
        _kv("fixed", 2.0, 3.0, attempt=1),
        # Never completed: its 100 bytes are lost.
        _kv("gone", 1.0, 5.0, ok=False, error="timed out"),
        # A completed attempt that does not add up (must never happen).
        _kv("odd", 1.0, 2.0, bytes=90),
    ]
    out = analyze([], [_req(1.0, 0.3)], kv, end_wall=10.0)
    assert out.kv_checksum_failures == 1
    assert out.kv_unfinished_transfers == 1 and out.kv_bytes_lost == 100
    assert out.kv_completed_unverified == 1
    assert out.kv_retried == 1
    assert out.faults == 0 and list(out.windows) == []
    assert out.recovery is None
    assert "ttft_p99_during_s" not in out.to_dict()


def test_a_second_fault_on_the_same_link_gets_its_own_label() -> None:
    faults = parse_faults(["link a0-b1 at 5s for 20s", "link a0-b1 at 10s for 2s"], ZCUBE, 60)
    assert [f.label for f in faults] == ["link a0-b1", "link a0-b1 (2)"]
    events = [
        {"action": "down", "fault": "link a0-b1", "wall": 5.0},
        {"action": "down", "fault": "link a0-b1 (2)", "wall": 10.0},
        {"action": "up", "fault": "link a0-b1 (2)", "wall": 12.0},
        {"action": "up", "fault": "link a0-b1", "wall": 25.0},
    ]
    assert fault_windows(events, end_wall=60.0) == [(5.0, 25.0)]


def test_injector_records_a_failed_command_and_still_restores(tmp_path: Path) -> None:
    import time

    calls: list[list[str]] = []

    def flaky(lines: list[str]) -> None:
        calls.append(lines)
        if " down" in lines[0]:
            raise RuntimeError("ip -batch failed (1): RTNETLINK answers: No such device")

    faults = parse_faults(["link a1-b2 at 0s"], ZCUBE, 60)
    inj = FaultInjector(ZCUBE, faults, tmp_path / "faults.jsonl", runner=flaky)
    inj.start(time.time())
    time.sleep(0.2)
    inj.stop()
    (event,) = [json.loads(x) for x in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert "No such device" in event["error"]
    assert any(" up" in line for batch in calls for line in batch)  # restored on stop


def test_throughput_recovery_after_a_dip() -> None:
    events = [
        {"action": "down", "fault": "f", "wall": 30.0},
        {"action": "up", "fault": "f", "wall": 40.0},
    ]
    # One completion per second, none sent between 30 and 40 complete until 40.
    requests = [_req(float(t), 0.1) for t in range(0, 30)]
    requests += [dict(_req(float(t), 0.1), e2e_s=40.5 - t) for t in range(30, 40)]
    requests += [_req(float(t), 0.1) for t in range(40, 60)]
    out = analyze(events, requests, [], end_wall=60.0)
    assert out.recovery is not None
    assert out.recovery.recovery_throughput_s is not None
    assert 5 <= out.recovery.recovery_throughput_s <= 16


def test_policies_map_to_routing_and_reactions() -> None:
    assert get_policy("static").routing == "static"
    assert get_policy("single") == get_policy("static")
    assert get_policy("ff").routing == "ff"
    assert get_policy("recompute").recompute and not get_policy("ecmp").recompute
    assert get_policy("spray").spray and get_policy("spray").routing == "ecmp"
    assert set(RUN_POLICIES) == {"static", "ecmp", "ff", "recompute", "spray"}
    with pytest.raises(ConfigError) as info:
        get_policy("magic")
    assert info.value.field == "policy" and "spray" in str(info.value)


class _FakeProcesses:
    def __init__(self, fail_on: str = "") -> None:
        self.applied: list[tuple[str, str, str]] = []
        self.restored = 0
        self.fail_on = fail_on

    def apply(self, tr: Transition) -> str:
        if tr.kind == self.fail_on:
            raise RuntimeError("no such process")
        self.applied.append((tr.kind, tr.action, tr.target))
        return f"{tr.kind} {tr.action}"

    def restore(self) -> None:
        self.restored += 1


def test_injector_hands_process_faults_over_and_records_them(tmp_path: Path) -> None:
    import time

    calls: list[list[str]] = []
    procs = _FakeProcesses(fail_on="vswitchd")
    faults = parse_faults(
        ["engine decode-3 at 0.02s", "controller at 0.05s for 0.05s", "vswitchd at 0.12s"],
        ZCUBE,
        60,
        engines=ENGINES,
    )
    inj = FaultInjector(
        ZCUBE, faults, tmp_path / "faults.jsonl", runner=calls.append, processes=procs
    )
    inj.start(time.time())
    time.sleep(0.4)
    inj.stop()
    assert calls == []  # no interface changes
    assert procs.applied == [
        ("engine", "down", "decode-3"),
        ("controller", "down", ""),
        ("controller", "up", ""),
    ]
    assert procs.restored == 1
    events = [json.loads(x) for x in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [(e["fault"], e["action"], e["kind"]) for e in events] == [
        ("engine decode-3", "down", "engine"),
        ("controller", "down", "controller"),
        ("controller", "up", "controller"),
        ("vswitchd", "down", "vswitchd"),
    ]
    assert events[0]["done"] == "engine down" and events[0]["error"] == ""
    assert events[3]["error"] == "RuntimeError: no such process"


class _SlowProcesses(_FakeProcesses):
    def apply(self, tr: Transition) -> str:
        time.sleep(0.2)  # a vswitchd kill and restart, a controller start: seconds
        return super().apply(tr)


def test_a_slow_process_fault_holds_from_its_start_until_it_is_done(tmp_path: Path) -> None:
    faults = parse_faults(["controller at 0.05s for 0.3s"], ZCUBE, 60)
    inj = FaultInjector(
        ZCUBE, faults, tmp_path / "faults.jsonl", runner=lambda _l: None,
        processes=_SlowProcesses(),
    )  # fmt: skip
    t0 = time.time()
    inj.start(t0)
    time.sleep(0.9)
    inj.stop()
    down, up = [json.loads(x) for x in (tmp_path / "faults.jsonl").read_text().splitlines()]
    # The down is stamped when the kill began, not when it returned; the up when it is done.
    assert down["t_s"] == pytest.approx(0.05, abs=0.05) and down["wall"] < t0 + 0.15
    assert up["t_s"] == pytest.approx(0.35 + 0.2, abs=0.08)
    assert down["took_s"] >= 0.19 and up["took_s"] >= 0.19


def test_injector_without_process_control_records_an_error(tmp_path: Path) -> None:
    import time

    (f,) = parse_faults(["controller at 0s for 1s"], ZCUBE, 60)
    inj = FaultInjector(ZCUBE, [f], tmp_path / "faults.jsonl", runner=lambda _l: None)
    inj.start(time.time())
    time.sleep(0.1)
    inj.stop()
    (e,) = [json.loads(x) for x in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert "no process control" in e["error"]


def test_lab_process_faults_kill_an_engine_group_and_cycle_the_controller() -> None:
    import subprocess
    import sys

    from zcube_lab.emulator.lab.procfaults import LabProcessFaults

    engine = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    controller: list[str] = []
    vswitchd: list[str] = []
    pf = LabProcessFaults(
        {"decode-3": engine},
        lambda: controller.append("stop"),
        lambda: controller.append("start") or 4242,
        vswitchd_kill=lambda: vswitchd.append("kill") or 77,
        vswitchd_start=lambda: vswitchd.append("start") or 78,
    )
    try:
        done = pf.apply(Transition(1.0, "down", "engine decode-3", (), "engine", "decode-3"))
        assert engine.poll() == -9 and done == f"killed decode-3 (pid {engine.pid})"
    finally:
        engine.kill()
        engine.wait()
    assert pf.apply(Transition(2.0, "down", "controller", (), "controller")) == "controller killed"
    pf.restore()  # teardown while the controller is down: it comes back first
    assert controller == ["stop", "start"]
    pf.restore()
    assert controller == ["stop", "start"]
    done = pf.apply(Transition(3.0, "down", "vswitchd", (), "vswitchd"))
    assert vswitchd == ["kill", "start"]
    assert done == "ovs-vswitchd killed (pid 77) and started again (pid 78)"
    with pytest.raises(ValueError, match="not a process fault"):
        pf.apply(Transition(4.0, "down", "x", (), "link"))


def test_a_vswitchd_fault_makes_the_run_untrustworthy_and_others_do_not() -> None:
    from zcube_lab.emulator.verdict.limits import Limits
    from zcube_lab.emulator.verdict.network import FaultWindow, NetworkEvidence, judge_network

    windows = (
        FaultWindow("controller", 1.0, 5.0),
        FaultWindow("engine decode-3", 2.0, None),
        FaultWindow("vswitchd", 6.0, None),
    )
    reasons = judge_network(NetworkEvidence(faults=windows), Limits()).reasons
    assert len(reasons) == 1 and reasons[0].startswith("vswitchd: ovs-vswitchd was killed")
    assert judge_network(NetworkEvidence(faults=windows[:2]), Limits()).reasons == ()


def test_the_health_sampler_follows_a_restarted_controller_to_its_new_pid() -> None:
    import subprocess
    import sys
    import time

    from zcube_lab.emulator.lab.health import HealthSampler
    from zcube_lab.emulator.lab.procfaults import LabProcessFaults

    def sleeper() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    old, new = sleeper(), None
    sampler = HealthSampler(0.1, watch_datapath=False)
    sampler.register("controller", old.pid)

    def restart() -> int:
        nonlocal new
        new = sleeper()
        return new.pid

    pf = LabProcessFaults({}, lambda: (old.kill(), old.wait()), restart, follow=sampler.register)
    sampler.start()
    try:
        time.sleep(0.35)
        pf.apply(Transition(1.0, "down", "controller", (), "controller"))
        time.sleep(0.35)
        down = sampler.count
        pf.apply(Transition(2.0, "up", "controller", (), "controller"))
        time.sleep(0.45)
        sampler.stop()
        samples = sampler.samples
        assert new is not None and sampler._registered["controller"] == (new.pid,)
        # Sampled before the kill, and again once restarted (the new pid, not the dead one).
        assert any("controller" in s.processes for s in samples[:2])
        assert any("controller" in s.processes for s in samples[down + 1 :])
    finally:
        sampler.close()
        for p in (old, new):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
