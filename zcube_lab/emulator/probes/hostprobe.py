"""A probe program in a lab's hosts: both sides of the plumbing the probes share.

From the root namespace: `running_lab` (a started lab for the probes, stopped on leaving),
`probes` (the list the probes started go into, every one killed on leaving), `start_probe`
(`python -m <probe module> ...` in a host, awaited until it prints a line) and `ProbeOutput`
(its output lines, read by a thread). Inside the host: `parse_addr` and `parse_sizes`, the
address and size arguments every probe program takes. The probe modules are `kvprobe`,
`epprobe` and `cutprobe` beside this one.
"""

from __future__ import annotations

import collections
import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the probes run inside hosts: they import only what they use, when they do
    from zcube_lab.core.fabric.description import Fabric
    from zcube_lab.emulator.lab.network import Lab


def parse_addr(text: str) -> Any:
    from zcube_lab.serving.config import Address

    host, _, port = text.rpartition(":")
    return Address(host, int(port))


def parse_sizes(text: str) -> list[int]:
    return [int(float(s)) for s in text.split(",") if s]


# -- the experiment, from the root namespace ---------------------------------------------------
@contextlib.contextmanager
def running_lab(fabric: Fabric, log_dir: Path, ev_rules: bool = False) -> Iterator[Lab]:
    """A started lab for the probes (ecmp routing, with the EV rules if `ev_rules`, 100 Mb/s
    NICs, free ports); stopped on leaving, on error and on Ctrl-C alike."""
    from zcube_lab.core.policies import get_policy
    from zcube_lab.emulator.probes.cutprobe import probe_lab

    lab = probe_lab(fabric, get_policy("ecmp"), log_dir, ev_rules=ev_rules)
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()


@contextlib.contextmanager
def probes() -> Iterator[list[subprocess.Popen[str]]]:
    """A list the probes started go into; every one is killed on leaving."""
    from zcube_lab.emulator.probes.cutprobe import stop_probes

    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        stop_probes(procs)


class ProbeOutput:
    """A probe's output lines, read by a thread: several lines arriving in one read are all
    seen at once (a `select` on the pipe would wait for more bytes while they sit buffered)."""

    def __init__(self, proc: subprocess.Popen[str], host: str) -> None:
        self.proc, self.host = proc, host
        self.seen: collections.deque[str] = collections.deque(maxlen=20)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)

    def _failed(self, why: str) -> RuntimeError:
        tail = "\n".join(self.seen)
        return RuntimeError(f"probe in {self.host} {why}; its last lines:\n{tail}")

    def line(self, timeout_s: float) -> str:
        """The next line; RuntimeError if none comes within `timeout_s` or the probe ended."""
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise self._failed(f"printed nothing within {timeout_s:g} s") from None
        if line is None:
            self._lines.put(None)
            raise self._failed(f"exited ({self.proc.wait()})")
        self.seen.append(line)
        return line

    def until(self, expect: str, timeout_s: float) -> None:
        """Skip lines (warnings) until `expect`, within `timeout_s` in all."""
        deadline = time.monotonic() + timeout_s
        while self.line(max(0.01, deadline - time.monotonic())) != expect:
            if time.monotonic() > deadline:
                raise self._failed(f"did not print {expect!r} within {timeout_s:g} s")

    def records(self, line_timeout_s: float) -> Iterator[dict[str, Any]]:
        """The JSON lines until "done" (other lines, e.g. warnings, skipped)."""
        while (line := self.line(line_timeout_s)) != "done":
            if line.startswith("{"):
                yield json.loads(line)


def start_probe(
    lab: Lab,
    host: str,
    argv: list[str],
    procs: list[subprocess.Popen[str]],
    expect: str,
    module: str = "zcube_lab.emulator.probes.kvprobe",
    stdin: bool = False,
) -> ProbeOutput:
    """Start `python -m module argv` in `host` (`stdin`: with a pipe to write to), add it to
    `procs` and return its output once it printed `expect`."""
    assert lab.net is not None
    proc = lab.net.get(host).popen(
        [sys.executable, "-m", module, *argv],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    procs.append(proc)
    lab.track_pid(proc.pid)
    out = ProbeOutput(proc, host)
    out.until(expect, 30)
    return out
