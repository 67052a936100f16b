"""The lossless agent at real-time priority (the fine time scale's replays): the option's range,
and the pre-exec hook really putting a child at SCHED_FIFO."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.lab.losslessproc import realtime
from zcube_lab.emulator.lab.options import LabOptions


def test_priority_is_off_by_default_and_bounded():
    assert LabOptions().lossless_priority == 0
    with pytest.raises(ConfigError, match="lossless priority"):
        LabOptions(lossless_priority=100)


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
