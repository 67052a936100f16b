"""The lossless agent at real-time priority (the fine time scale's replays): the option's range,
and the pre-exec hook really putting a child at SCHED_FIFO."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from emulator.lab.losslessproc import realtime
from emulator.lab.options import LabOptions
from zcube_lab.core.errors import ConfigError


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
