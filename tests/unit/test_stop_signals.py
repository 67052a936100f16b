"""Ctrl-C, SIGTERM and SIGHUP raise KeyboardInterrupt in a lab command, even in a process that
inherited SIGINT ignored (started in the background by a non-interactive shell), where Python
installs no handler of its own and a Ctrl-C was lost."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from zcube_lab.adapters.procs import interrupt_on_stop_signals
    if sys.argv[1] == "install":
        interrupt_on_stop_signals()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(2)
        print("ran on")
    except KeyboardInterrupt:
        print("interrupted")
    """
)


@pytest.mark.parametrize("install,expected", [("install", "interrupted"), ("none", "ran on")])
def test_a_process_that_inherited_sigint_ignored(install: str, expected: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, install],
        capture_output=True,
        text=True,
        timeout=20,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert out.stdout.strip() == expected, out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_is_an_interrupt(sig: int) -> None:
    child = CHILD.replace("signal.SIGINT)", f"{int(sig)})")
    out = subprocess.run(
        [sys.executable, "-c", child, "install"], capture_output=True, text=True, timeout=20
    )
    assert out.stdout.strip() == "interrupted", out
