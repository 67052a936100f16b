"""bench/labrun.py and the soak's sampling on real processes: a stand-in for `zcube-lab run` (a
real run needs root and a lab) that starts a stand-in Locust (`python -m locust`, found first on
its path), prints its result last, and on SIGINT stops its child and exits 130 as the run does
(SIGINT handled even when this test runs in a background job that ignores it, as the run's own
`interrupt_on_stop_signals` does)."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest

from bench.labrun import LabRun
from bench.soak import Point, sample_load

FAKE_RUN = """\
import json, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as the run does, even if inherited off
locust = subprocess.Popen([sys.executable, "-m", "locust"])
try:
    time.sleep(float(sys.argv[1]))
    locust.terminate()
    locust.wait()
    print("collecting")
    print(json.dumps({"results": sys.argv[2], "completed": 77}, indent=2))
except KeyboardInterrupt:
    locust.terminate()
    locust.wait()
    print("interrupted: torn down", file=sys.stderr)
    sys.exit(130)
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "run.py").write_text(FAKE_RUN)
    (tmp_path / "locust.py").write_text("import time\ntime.sleep(60)\n")
    run_dir = tmp_path / "results" / "20261201-000000-zcube-kv-heavy"
    run_dir.mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "data" / "summary-zcube.json", run_dir / "summary.json")
    monkeypatch.chdir(tmp_path)  # `python -m locust` finds the stand-in first
    return run_dir


def start(seconds: float, run_dir: Path) -> LabRun:
    return LabRun([sys.executable, "run.py", str(seconds), str(run_dir)]).start()


@pytest.mark.timeout(30)
def test_a_finished_run_its_load_start_and_its_summary(fake: Path) -> None:
    run = start(1.5, fake)
    try:
        at_start = run.wait_for_load(poll_s=0.05)
        assert at_start is not None
        # ovs-vswitchd too, when this machine runs Open vSwitch: it is the system's.
        assert {s.role for s in at_start} - {"ovs-vswitchd"} == {"run", "locust"}
        points: list[Point] = []
        sample_load(run, duration=0.4, interval=0.2, points=points)
        assert sorted({t for t, _s in points}) == [0.0, 0.2, 0.4]
        locust = [s for _t, s in points if s.role == "locust"]
        assert len(locust) == 3 and all(s.rss_kb and s.fds and s.tcp == 0 for s in locust)
        while run.sleep(0.1):
            pass
    finally:
        code = run.stop()
    assert code == 0
    assert run.result() == {"results": str(fake), "completed": 77}
    summary = run.summary()
    assert summary is not None and summary.client.completed == 77 and summary.dir == fake


@pytest.mark.timeout(30)
def test_stop_interrupts_the_run_and_waits_for_its_teardown(fake: Path) -> None:
    run = start(60, fake)
    assert run.wait_for_load(poll_s=0.05) is not None
    t0 = time.monotonic()
    assert run.stop() == 130
    assert time.monotonic() - t0 < 10 and not run.running()
    assert run.result() is None and run.summary() is None


@pytest.mark.timeout(30)
def test_a_run_that_exits_before_its_load(tmp_path: Path) -> None:
    run = LabRun([sys.executable, "-c", "import sys; sys.exit(1)"]).start()
    assert run.wait_for_load(poll_s=0.05) is None
    assert run.stop() == 1 and run.summary() is None
