"""The lossless agent at real-time priority in every lab (issue 48: the replays had it, live runs
now too): the option's default and range, a live run's options and config.json carrying it, the
agent's rest between readings (it cannot hold a core at SCHED_FIFO), and the pre-exec hook
really putting a child at SCHED_FIFO."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.experiment.launcher import Launcher
from zcube_lab.emulator.experiment.plan import RunConfig, plan_run
from zcube_lab.emulator.lab.lossless import POLL_S, rest_s
from zcube_lab.emulator.lab.losslessproc import realtime
from zcube_lab.emulator.lab.options import LOSSLESS_PRIORITY, LabOptions
from zcube_lab.emulator.replay import driver


def test_priority_is_real_time_by_default_as_a_replay_s_and_bounded():
    assert LabOptions().lossless_priority == LOSSLESS_PRIORITY > 0
    assert driver.LOSSLESS_PRIORITY == LOSSLESS_PRIORITY  # live runs and replays alike
    assert LabOptions(lossless_priority=0).lossless_priority == 0  # off: as any process
    with pytest.raises(ConfigError, match="lossless priority"):
        LabOptions(lossless_priority=100)


def test_a_live_lossless_run_starts_its_agent_at_real_time_priority_and_records_it(
    tmp_path: Path,
) -> None:
    spec = FabricSpec.of("zcube", n=2)
    plan = plan_run(RunConfig(fabric=spec, lossless=True, results_root=tmp_path / "on"))
    launcher = Launcher(plan)
    opts = launcher.lab_options(of_port=7001, metrics_port=7002)
    assert opts.lossless and opts.lossless_priority == LOSSLESS_PRIORITY
    assert (opts.of_port, opts.metrics_port) == (7001, 7002)
    launcher.prepare()
    cfg = json.loads((launcher.dir / "config.json").read_text())
    assert cfg["lab"] == {
        "lossless_priority": LOSSLESS_PRIORITY,
        "lossless_poll_s": POLL_S,
        "lossless_ingress": False,
    }
    lossy = Launcher(plan_run(RunConfig(fabric=spec, results_root=tmp_path / "off")))
    assert not lossy.lab_options().lossless
    lossy.prepare()
    assert "lab" not in json.loads((lossy.dir / "config.json").read_text())


def test_the_lab_summary_names_the_agent_s_priority_when_lossless():
    fabric = build_fabric(FabricSpec.of("zcube", n=2))
    on = LabOptions(lossless=True).summary(fabric)
    assert on["lossless_priority"] == LOSSLESS_PRIORITY and on["lossless_poll_s"] == POLL_S
    assert "lossless_priority" not in LabOptions().summary(fabric)


def test_the_agent_rests_at_least_as_long_as_a_reading_took():
    # a short reading: the rest of the interval, as before
    assert rest_s(0.001, 0.0002) == pytest.approx(0.0008)
    # a reading longer than the interval (a large lab): it still leaves the core as long, so
    # at SCHED_FIFO it holds at most half of one and the datapath runs
    assert rest_s(0.001, 0.003) == pytest.approx(0.003)
    assert rest_s(0.001, 0.0006) == pytest.approx(0.0006)
    busy = 0.004
    assert busy / (busy + rest_s(0.001, busy)) <= 0.5


@pytest.mark.skipif(os.geteuid() != 0, reason="setting SCHED_FIFO needs root (CI runs as root)")
def test_the_hook_puts_the_child_at_sched_fifo():
    probe = "import os; print(os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)"
    out = subprocess.run(
        [sys.executable, "-c", probe], preexec_fn=realtime(7), capture_output=True, text=True
    )
    assert out.stdout.split() == [str(os.SCHED_FIFO), "7"], out.stderr
    plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert plain.stdout.split()[0] == str(os.SCHED_OTHER)


def test_a_replay_lab_keeps_htb_bursts_to_two_frames():
    from zcube_lab.core.fabric.linkplan import HTB_BURST, PortShape, shaping_lines

    default = shaping_lines([("s1-eth1", PortShape(50.0, 12))])
    assert f"burst {HTB_BURST}" in default[1]
    small = shaping_lines([("s1-eth1", PortShape(50.0, 12, None, 3000))])
    assert "burst 3000" in small[1] and "15k" not in small[1]
    with pytest.raises(ConfigError, match="htb burst"):
        LabOptions(htb_burst_bytes=100)  # below one frame
