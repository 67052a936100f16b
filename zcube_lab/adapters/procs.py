"""Processes the lab starts: stop a process group, wait for an HTTP endpoint, turn a signal into
KeyboardInterrupt, ignore signals during teardown. Thin adapters over `os` and `urllib`; no state.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from types import FrameType


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (it may belong to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pid: int, grace: float = 3.0) -> None:
    """SIGTERM the process group `pid` leads, then SIGKILL what is left after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)


def stop_groups(procs: list[subprocess.Popen[bytes]], grace: float = 5.0) -> None:
    """Stop child processes that each lead a process group (`start_new_session=True`): SIGTERM
    all of them (last started first), wait up to `grace` seconds in all, then SIGKILL the rest."""
    for proc in reversed(procs):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)


def http_ok(url: str, timeout: float = 1.0) -> bool:
    """Whether `url` answers with a 2xx status now (no proxy: lab addresses are local)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return 200 <= resp.status < 300
    except OSError:
        return False


def wait_http(
    urls: list[str],
    timeout: float,
    alive: Callable[[], None] | None = None,
    poll_s: float = 0.3,
) -> list[str]:
    """Wait until every url answers 2xx; returns the ones still failing after `timeout` (empty
    when all answered). `alive()` is called each round and may raise to stop waiting (a child
    process died)."""
    deadline = time.monotonic() + timeout
    pending = list(urls)
    while pending:
        if alive is not None:
            alive()
        pending = [u for u in pending if not http_ok(u)]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(poll_s)
    return pending


def raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    """A signal handler that turns SIGTERM (or any signal) into KeyboardInterrupt, so one
    teardown path handles Ctrl-C and a kill alike."""
    raise KeyboardInterrupt(f"signal {signum}")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def interrupt_on_stop_signals() -> None:
    """Ctrl-C, SIGTERM and a closed terminal all raise KeyboardInterrupt, so one teardown path
    handles each. SIGINT explicitly too: a process started in the background by a
    non-interactive shell inherits SIGINT ignored, and Python then never installs its own
    handler (a Ctrl-C sent to such a `zcube-lab up` was lost and the bring-up ran on)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, raise_interrupt)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM for the duration (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
