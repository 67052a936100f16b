"""One `zcube-lab run` as a child process, for benchmarks that watch a run from outside.

`LabRun.start()` starts it in its own session, so a Ctrl-C at the terminal reaches the benchmark
only, which passes it on once: `stop()` sends SIGINT, as a Ctrl-C would (the run then tears the
lab down), and waits for the teardown with Ctrl-C ignored, because a second one is what leaves
labs behind. The run's progress goes to the terminal (stderr); its stdout, which ends with a
JSON object naming the results folder, goes to a file read back by `result()`.

The load starts when the run's Locust process appears (the runner starts Locust and nothing
else at that moment: `zcube_lab.emulator.experiment.runner`; `wait_for_load`) and ends when it is
gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.procwatch import LOCUST, ProcSample, scan
from zcube_lab.adapters.procs import signals_ignored
from zcube_lab.emulator.experiment.runconfig import run_argv_of
from zcube_lab.emulator.results.run.summary import RunSummary

ZCUBE = Path(sys.executable).with_name("zcube-lab")


def run_options(fabric: str, workload: str, rate: float, duration: float) -> list[str]:
    """The `zcube-lab run` options a benchmark sets itself (the rest come from its user); the
    run's flags written from `RunConfig`'s fields."""
    return ["--fabric", fabric, *run_argv_of(workload=workload, rate=rate, duration_s=duration)]


def run_argv(zcube: Path | str, options: Sequence[str], extra: Sequence[str]) -> list[str]:
    """`zcube-lab run <options> <extra>`; ValueError if `extra` sets a flag `options` sets (the
    benchmark's own setting would be overridden without a word)."""
    ours = {o for o in options if o.startswith("--")}
    clash = sorted({e.split("=", 1)[0] for e in extra if e.split("=", 1)[0] in ours})
    if clash:
        raise ValueError(f"set {', '.join(clash)} with the benchmark's own option, not after it")
    return [str(zcube), "run", *options, *extra]


def parse_run_output(text: str) -> dict[str, Any] | None:
    """The JSON object `zcube-lab run` prints last (it starts with a `{` line; anything printed
    after it is ignored); None without."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i] == "{":
            try:
                value, _end = json.JSONDecoder().raw_decode("\n".join(lines[i:]))
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


class LabRun:
    """A `zcube-lab run` child process (see the module docstring)."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.proc: subprocess.Popen[bytes] | None = None
        # The run's stdout: kept for `result()` as long as this object lives.
        self._out = tempfile.TemporaryFile()  # noqa: SIM115

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self) -> LabRun:
        """Start the run."""
        self.proc = subprocess.Popen(self.argv, stdout=self._out, start_new_session=True)
        return self

    @property
    def exit_code(self) -> int | None:
        """The run's exit code; None while it runs."""
        return None if self.proc is None else self.proc.poll()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`, less if the run exits; whether it is still running."""
        if self.proc is None:
            return False
        try:
            self.proc.wait(timeout=max(0.0, seconds))
        except subprocess.TimeoutExpired:
            return True
        return False

    def stop(self) -> int | None:
        """SIGINT the run if it still runs, wait for its teardown; its exit code."""
        if self.proc is None:
            return None
        with signals_ignored():
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGINT)
            return self.proc.wait()

    def result(self) -> dict[str, Any] | None:
        """The JSON object the run printed at its end (None if it printed none)."""
        self._out.seek(0)
        return parse_run_output(self._out.read().decode(errors="replace"))

    def summary(self) -> RunSummary | None:
        """The finished run's summary.json (None if the run did not get that far)."""
        result = self.result()
        if not result or not result.get("results"):
            return None
        try:
            return RunSummary.read(Path(result["results"]))
        except (OSError, ValueError, KeyError):
            return None

    def wait_for_load(
        self, poll_s: float = 1.0, progress: Callable[[float], None] | None = None
    ) -> list[ProcSample] | None:
        """Scan the run's processes (CPU only) every `poll_s` until its Locust is there: that
        scan, or None if the run exited first. `progress` gets the seconds waited, every 30 s."""
        t0, told = time.monotonic(), 0.0
        while self.running():
            samples = scan(self.pid, resources=False)
            if any(s.role == LOCUST for s in samples):
                return samples
            waited = time.monotonic() - t0
            if progress is not None and waited >= told + 30:
                told = waited
                progress(waited)
            self.sleep(poll_s)
        return None
