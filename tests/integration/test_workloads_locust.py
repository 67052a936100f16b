"""Real Locust, headless, as the orchestrator runs it: open-loop load on a local PD cluster, a
bad option failing before any request, SIGTERM ending a run with every request accounted, and
a distributed run (a master, two workers each sending its shard of the plan) merged back.

Needs no root: the cluster is `zcube_lab.serving.cluster.LocalCluster` (gateway, prefill, decode as
processes on loopback) and Locust a subprocess in its own process group; both are stopped in
`finally`, and the test checks nothing of theirs is left.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.experiment.plan import RunConfig, plan_run
from zcube_lab.serving.cluster import ClusterSpec, LocalCluster
from zcube_lab.workloads.shards import merge_shard_files, shard_files

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
LOCUST = Path(sys.executable).with_name("locust")
RATE = 10.0
DURATION = 8.0


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    c = LocalCluster(ClusterSpec(model="tiny"), tmp_path_factory.mktemp("cluster-logs"))
    c.start()
    try:
        yield c.gateway_url
    finally:
        c.stop()


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _why(out: Path) -> str:
    """The end of Locust's log and the first failed requests' status and error, for a failure."""
    text = (out / "locust.log").read_text()[-3000:]
    rows = out / "requests.jsonl"
    if rows.exists():
        failed = [r for r in map(json.loads, rows.read_text().splitlines()) if r["outcome"] != "ok"]
        text += "\nfirst failed requests: " + json.dumps(failed[:3])
    return text


def test_locust_headless_open_loop_against_the_gateway(gateway: str, tmp_path: Path) -> None:
    metrics_port = free_port()
    out = tmp_path / "run"
    cmd = [
        str(LOCUST),
        "-f",
        str(ROOT / "zcube_lab" / "workloads" / "locustfile.py"),
        "--headless",
        "--host",
        gateway,
        "-u",
        "1",
        "-r",
        "1",
        "--run-time",
        "30s",
        "--csv",
        str(out / "locust"),
        "--json-file",
        str(out / "locust"),
        "--only-summary",
        "--workload",
        "chat",
        "--model",
        "tiny",
        "--length-scale",
        "0.05",
        "--arrival",
        "fixed",
        "--rate",
        str(RATE),
        "--duration",
        str(DURATION),
        "--seed",
        "11",
        "--metrics-port",
        str(metrics_port),
        "--requests-out",
        str(out / "requests.jsonl"),
        "--summary-out",
        str(out / "summary.json"),
    ]
    out.mkdir()
    log = (out / "locust.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    scraped = ""
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            text = _scrape(metrics_port)
            if "zcube_client_ttft_seconds_count" in text and 'outcome="ok"' in text:
                scraped = text
            time.sleep(0.5)
        assert proc.poll() == 0, _why(out)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        log.close()

    summary = json.loads((out / "summary.json").read_text())
    planned = int(RATE * DURATION)
    assert summary["planned"] == planned
    assert summary["completed_ok"] == planned, summary
    assert abs(summary["achieved_rate"] - RATE) <= 0.05 * RATE
    assert summary["lag_p99_s"] < 0.05

    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == planned
    for r in rows:
        assert r["outcome"] == "ok", r
        assert r["output_tokens"] == r["planned_output_tokens"]
        # The gateway counted exactly the prompt the plan meant to send.
        assert r["usage_prompt_tokens"] == r["prompt_tokens"]
        assert 0 < r["ttft_s"] <= r["e2e_s"]
    assert sorted(r["planned_s"] for r in rows) == [i / RATE for i in range(planned)]

    with (out / "locust_stats.csv").open() as f:
        stats = {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}
    assert int(stats[("POST", "chat-stream")]["Request Count"]) == planned
    assert int(stats[("POST", "chat-stream")]["Failure Count"]) == 0
    ttft = stats[("TTFT", "chat-stream")]
    assert int(ttft["Request Count"]) == planned
    assert 0 < float(ttft["50%"]) <= float(ttft["99%"])
    json_stats = json.loads((out / "locust.json").read_text())
    assert {(s["method"], s["name"]) for s in json_stats} >= {("POST", "chat-stream")}

    assert "zcube_client_ttft_seconds_bucket" in scraped
    assert "zcube_client_requests_in_flight" in scraped
    # Torn down: the exporter went with the process.
    assert not _port_open(metrics_port)


def test_bad_option_fails_before_any_request(tmp_path: Path) -> None:
    cmd = [
        str(LOCUST),
        "-f",
        str(ROOT / "zcube_lab" / "workloads" / "locustfile.py"),
        "--headless",
        "--host",
        "http://127.0.0.1:9",
        "--run-time",
        "5s",
        "--workload",
        "chat",
        "--rate",
        "-3",
        "--requests-out",
        str(tmp_path / "requests.jsonl"),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "rate=-3.0 is not valid" in proc.stderr
    assert not (tmp_path / "requests.jsonl").exists()


def test_sigterm_ends_the_run_and_accounts_for_every_request(tmp_path: Path) -> None:
    port = free_port()
    stub = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zcube_lab.workloads.stubserver",
            "--port",
            str(port),
            "--ttft",
            "2",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    locust = None
    try:
        deadline = time.monotonic() + 15
        while not _port_open(port):
            assert time.monotonic() < deadline, "stub server did not start"
            time.sleep(0.1)
        cmd = [
            str(LOCUST),
            "-f",
            str(ROOT / "zcube_lab" / "workloads" / "locustfile.py"),
            "--headless",
            "--host",
            f"http://127.0.0.1:{port}",
            "--run-time",
            "60s",
            "--workload",
            "chat",
            "--model",
            "stub",
            "--length-scale",
            "0.05",
            "--arrival",
            "fixed",
            "--rate",
            "10",
            "--duration",
            "30",
            "--requests-out",
            str(tmp_path / "requests.jsonl"),
            "--summary-out",
            str(tmp_path / "summary.json"),
        ]
        locust = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(4.0)
        locust.send_signal(signal.SIGTERM)
        locust.wait(15)
    finally:
        for p in (locust, stub):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = (tmp_path / "requests.jsonl").read_text().splitlines()
    # Answers take 2 s: about 20 of the ~40 sent were in flight and are reported cancelled.
    assert summary["outcomes"]["ok"] >= 10
    assert summary["outcomes"]["cancelled"] >= 10
    assert len(rows) == summary["sent"] == sum(summary["outcomes"].values())


def test_distributed_open_loop_sends_each_shard_once(tmp_path: Path) -> None:
    """A master and two workers, each its own process started from `RunPlan`'s argv, against
    the stub: each worker sends its half of the plan, the master counts every request, and the
    merged records are the whole plan."""
    port, master_port = free_port(), free_port()
    stub = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zcube_lab.workloads.stubserver",
            "--port",
            str(port),
            "--ttft",
            "0.05",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    config = RunConfig(
        fabric=FabricSpec.of("zcube", n=4),
        workload="chat",
        model="tiny",
        seed=11,
        rate=6.0,
        arrival="fixed",
        duration_s=5,
        drain_s=30,
        length_scale=0.05,
    )
    plan = plan_run(config)
    argvs = {
        "master": plan.locust_master_argv(
            2, bind_host="127.0.0.1", bind_port=master_port, out_dir=tmp_path
        )
    }
    for k in range(2):
        argvs[f"worker-{k}"] = plan.locust_worker_argv(
            (k, 2),
            master_host="127.0.0.1",
            master_port=master_port,
            gateway_url=f"http://127.0.0.1:{port}",
            metrics_addr="127.0.0.1",
            metrics_port=free_port(),
            out_dir=tmp_path,
        )
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        deadline = time.monotonic() + 15
        while not _port_open(port):
            assert time.monotonic() < deadline, "stub server did not start"
            time.sleep(0.1)
        for name, argv in argvs.items():
            with (tmp_path / f"{name}.log").open("w") as log:
                procs[name] = subprocess.Popen(
                    argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
        codes = {name: p.wait(60) for name, p in procs.items()}
    finally:
        for p in (*procs.values(), stub):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
    logs = {name: (tmp_path / f"{name}.log").read_text()[-1500:] for name in procs}
    assert codes == {"master": 0, "worker-0": 0, "worker-1": 0}, logs

    for k in range(2):
        shard = json.loads(shard_files(tmp_path, k)[1].read_text())
        assert shard["shard"] == f"{k}/2"
        assert shard["planned"] == shard["completed_ok"] == 15, shard
    summary = merge_shard_files(tmp_path, 2)
    assert (summary["planned"], summary["completed_ok"], summary["achieved_rate"]) == (30, 30, 6)
    assert summary["lag_p99_s"] < 0.05
    rows = [json.loads(x) for x in shard_files(tmp_path, None)[0].read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == list(range(30))
    # Rows keep times to the microsecond.
    planned = sorted(r["planned_s"] for r in rows)
    assert planned == pytest.approx([i / 6 for i in range(30)], abs=1e-6)
    # The master aggregated both workers' stats into Locust's CSV.
    with (tmp_path / "locust_stats.csv").open() as f:
        stats = {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}
    assert int(stats[("POST", "chat-stream")]["Request Count"]) == 30
    assert int(stats[("POST", "chat-stream")]["Failure Count"]) == 0


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _wait_for(what: str, ok: object, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not ok():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_stop_then_start_in_the_web_ui_sends_the_plan_again(tmp_path: Path) -> None:
    """`up --serve` runs Locust with its web UI and --keep-running: after the plan is sent,
    Stop then Start (Locust's own /stop and /swarm, as the UI's buttons call them) must send
    the plan again; the second user used to log "a second OpenLoopUser ..." and send nothing."""
    port, web = free_port(), free_port()
    requests_out = tmp_path / "requests.jsonl"
    stub = subprocess.Popen(
        [sys.executable, "-m", "zcube_lab.workloads.stubserver", "--port", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    locust = None
    try:
        _wait_for("the stub server", lambda: _port_open(port), 15)
        locust = subprocess.Popen(
            [
                str(LOCUST), "-f", str(ROOT / "zcube_lab" / "workloads" / "locustfile.py"),
                "--host", f"http://127.0.0.1:{port}", "--web-host", "127.0.0.1",
                "--web-port", str(web), "--autostart", "-u", "1", "-r", "1", "--keep-running",
                "--workload", "chat", "--model", "stub", "--length-scale", "0.05",
                "--arrival", "fixed", "--rate", "10", "--duration", "1",
                "--requests-out", str(requests_out),
                "--summary-out", str(tmp_path / "summary.json"),
            ],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        _wait_for("the first round's 10 requests", lambda: _lines(requests_out) == 10)
        base = f"http://127.0.0.1:{web}"
        urllib.request.urlopen(urllib.request.Request(f"{base}/stop", data=b""), timeout=10)
        _wait_for("the first round's summary", lambda: (tmp_path / "summary.json").exists())
        form = b"user_count=1&spawn_rate=1"
        urllib.request.urlopen(urllib.request.Request(f"{base}/swarm", data=form), timeout=10)
        _wait_for("the second round's 10 requests", lambda: _lines(requests_out) == 20)
    finally:
        for p in (locust, stub):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(10)
    rows = [json.loads(line) for line in requests_out.read_text().splitlines()]
    assert len(rows) == 20 and all(r["outcome"] == "ok" for r in rows), rows[-3:]
    assert sorted(r["index"] for r in rows) == sorted(2 * list(range(10)))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["round"] == 2 and summary["outcomes"] == {"ok": 10}, summary
