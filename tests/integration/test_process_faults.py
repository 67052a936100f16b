"""Issue 24 item 2: a whole switch, an engine process and the controller fail during a real
run on the smallest ZCube (n=2: 4 GPU hosts, 4 switches), through `--fail` to the report.

- switch: every link of a0 down for a while; the run records both transitions and reports
  every failed request, no more;
- engine: decode-3 killed; exactly its in-flight requests fail, fast and with an OpenAI-style
  error, and every later request is served by the other decode;
- controller: killed, then started again; the installed routes keep forwarding (no request
  fails), and the restarted controller resyncs every switch without an OpenFlow error;
- each run ends in bounded time, and nothing of the labs remains.

The vswitchd fault is not run here: it kills the machine's ovs-vswitchd.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

RUN_LIMIT_S = 300  # a run of 18 s load with its bring-up, drain and teardown


def _run(results: Path, fail: str, policy: str = "ff") -> tuple[Path, str, float]:
    t0 = time.monotonic()
    done = subprocess.run(
        [
            sys.executable, "-m", "zcube_lab.cli", "run",
            "--fabric", "zcube", "--n", "2",
            "--workload", "coding-agent", "--duration", "18", "--drain", "30", "--rate", "3",
            "--policy", policy, "--fail", fail,
            "--results", str(results),
        ],
        capture_output=True, text=True, timeout=RUN_LIMIT_S, check=False,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (p.parent for p in results.glob("*/summary.json"))
    return run, done.stderr, took


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _failed(run: Path) -> list[dict]:
    return [r for r in _jsonl(run / "requests.jsonl") if r["outcome"] != "ok"]


@pytest.fixture(scope="module")
def switch_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    return _run(tmp_path_factory.mktemp("switch"), "switch a0 at 6s for 5s")


@pytest.fixture(scope="module")
def engine_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    # At 3 s decode-3 is serving requests: with two decodes and least-outstanding routing, which
    # one serves the requests around a given moment turns on milliseconds, and at 6 s decode-3
    # was idle in runs whose pulls are faster (kept KV connections), so the kill hit nothing.
    return _run(tmp_path_factory.mktemp("engine"), "engine decode-3 at 3s")


@pytest.fixture(scope="module")
def controller_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    return _run(tmp_path_factory.mktemp("controller"), "controller at 6s for 6s", "ecmp")


def test_a_switch_fault_takes_all_its_links_and_counts_every_failure(
    switch_run: tuple[Path, str, float],
) -> None:
    run, stderr, took = switch_run
    assert took < RUN_LIMIT_S and "fault: switch a0 down" in stderr
    events = _jsonl(run / "faults.jsonl")
    assert [e["action"] for e in events] == ["down", "up"]
    assert events[1]["wall"] - events[0]["wall"] == pytest.approx(5.0, abs=0.5)
    # a0's 4 links: its own 4 ends and the far ends on b0 and b1 (hosts' ends are theirs)
    assert sorted(events[0]["interfaces"]) == sorted(events[1]["interfaces"])
    assert len(events[0]["interfaces"]) == 6
    summary = json.loads((run / "summary.json").read_text())
    f, client = summary["faults"], summary["client"]
    assert f["faults"] == 1 and len(f["spans_s"]) == 1
    failed = _failed(run)
    assert client["failed"] == f["failed_requests"] == len(failed)
    assert f["failed_before"] + f["failed_during"] + f["failed_after"] <= len(failed)
    assert f["requests_before"] > 0 and f["requests_during"] > 0 and f["requests_after"] > 0
    assert f["failed_before"] == 0
    assert f["ttft_p99_before_s"] is not None and f["ttft_p99_after_s"] is not None
    # every failure is reported, none hangs: each ended within the upstream timeout
    assert all(r["e2e_s"] < 60 for r in failed)


def test_an_engine_kill_fails_exactly_its_in_flight_requests_fast(
    engine_run: tuple[Path, str, float],
) -> None:
    run, stderr, took = engine_run
    assert took < RUN_LIMIT_S and "fault: engine decode-3 down" in stderr
    (event,) = _jsonl(run / "faults.jsonl")
    assert event["kind"] == "engine" and event["done"].startswith("killed decode-3")
    kill = event["wall"]
    summary = json.loads((run / "summary.json").read_text())
    f, client = summary["faults"], summary["client"]
    failed = _failed(run)
    # The gateway saw each request decode-3 was serving fail, once: the client counted exactly
    # those. At least the ones whose KV decode-3 had pulled and not finished are among them
    # (one still waiting for its pull is in no KV log).
    log = (run / "logs" / "gateway.log").read_text()
    lost = log.count("decode unreachable")
    gateway = {r["request_id"]: r for r in _jsonl(run / "logs" / "requests-gateway.jsonl")}
    pulled = {a["request_id"] for a in _jsonl(run / "logs" / "kv-decode-3.jsonl")}
    unfinished = {rid for rid in pulled if gateway[rid]["end"] > kill}
    assert lost >= 1, "the kill hit no request: nothing was measured"
    assert client["failed"] == f["failed_requests"] == len(failed) == lost >= len(unfinished)
    at_kill = [r for r in gateway.values() if r["arrival"] < kill < r["end"]]
    assert len(failed) <= len(at_kill)
    # In flight at the kill, failed within a second of it, OpenAI-style. The record's wall time
    # is taken once the engine is dead: its sockets closed a moment before.
    for r in failed:
        assert r["wall_time"] < kill
        assert kill - 0.2 < r["wall_time"] + r["e2e_s"] < kill + 1.0
        assert "decode instance failed mid-stream" in r["error"] or r["status"] == 502
    # Later requests went to the other decode: none failed, and decode-3 saw none.
    late = [r for r in _jsonl(run / "requests.jsonl") if r["wall_time"] > kill]
    assert len(late) >= 10 and all(r["outcome"] == "ok" for r in late)
    assert all(gateway[rid]["arrival"] < kill for rid in pulled)
    assert "decode http://" in log and "refused" in log and "trying another" in log
    assert f["requests_during"] > 0 and f["ttft_p99_during_s"] is not None


def test_a_controller_outage_keeps_installed_routes_and_resyncs_without_flushing(
    controller_run: tuple[Path, str, float],
) -> None:
    run, stderr, took = controller_run
    assert took < RUN_LIMIT_S and "fault: controller down" in stderr
    events = _jsonl(run / "faults.jsonl")
    assert [(e["action"], e["error"]) for e in events] == [("down", ""), ("up", "")]
    assert events[1]["done"].startswith("controller restarted")
    assert events[1]["wall"] - events[0]["wall"] == pytest.approx(6.0, abs=1.0)
    summary = json.loads((run / "summary.json").read_text())
    f, client = summary["faults"], summary["client"]
    assert f["requests_during"] > 0 and f["requests_after"] > 0
    # The switches forwarded on their installed rules throughout: nothing failed.
    assert client["failed"] == f["failed_requests"] == len(_failed(run)) == 0
    assert f["kv_completed"] == client["completed"] and f["kv_unfinished_transfers"] == 0
    log = (run / "logs" / "controller.log").read_text()
    assert log.count("controller listening") == 2
    # Every switch reconnected to the new controller and confirmed its rules; no switch
    # refused a message (add-or-modify groups over existing ones included).
    after = log.split("controller listening")[2]
    for switch in ("a0", "a1", "b0", "b1"):
        assert f"{switch}: rules installed" in after, switch
    assert "OpenFlow error" not in log


def test_nothing_of_the_process_fault_labs_remains(
    switch_run: tuple[Path, str, float],
    engine_run: tuple[Path, str, float],
    controller_run: tuple[Path, str, float],
) -> None:
    # Runs after the tests above (file order); each run's processes name its folder.
    bridges = subprocess.run(
        ["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not {"a0", "a1", "b0", "b1"} & set(bridges)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "a0-eth" not in links and "b1-eth" not in links
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "zcube" not in netns
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    for run, _stderr, _took in (switch_run, engine_run, controller_run):
        assert str(run) not in procs
        state = json.loads((run / "config.json").read_text())
        assert state["faults"], "the run had its fault"
    default = Path("/tmp/zcube-lab")
    assert not list(default.glob("lab-*.json")) if default.is_dir() else True
