"""Emulator health: did the machine and the switch datapath keep up during a run?

The Mininet-HiFi idea: an emulated result is only worth reporting if the emulator itself was not
saturated, because every scheduling delay on the host shows up as latency in the numbers it
prints. So every run samples CPU use and a verdict marks it trustworthy or not.

This module is the adapter: `HealthSampler` reads /proc in a background thread every
`interval_s`, finds `ovs-vswitchd` itself (and samples each of its threads by thread name),
samples any pids the caller registers by name, and exports the latest values as Prometheus
gauges so the run's Prometheus scrapes them too: `zcube_emulator_cpu_utilization` (busy share of
all CPUs, 0-1) and `zcube_emulator_process_cpu_cores{process=...}` (cores used by one named
process). The pure parts are in the verdict package: `zcube_lab.emulator.verdict.cpustats` parses
the /proc text and turns two readings into a `HealthSample` (its docstring says how CPU is
accounted), and `zcube_lab.emulator.verdict.judge.judge` turns samples into a `HealthVerdict`.

Memory stays flat however long the run: each sample is appended to a JSON-lines file (`path`,
one `HealthSample` a line; an anonymous temporary file without one) and only the count stays in
memory. `samples` and `verdict` read the file back; the verdict keeps only the samples of its
window, once, when the load is over.

The verdict's limits (`zcube_lab.emulator.verdict.limits.Limits`), and why they are what they are,
are documented in `zcube_lab.emulator.verdict.judge` and `zcube_lab.emulator.verdict.limits`.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO

from prometheus_client import CollectorRegistry, Gauge

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.lab import ovs
from zcube_lab.emulator.verdict.cpustats import (
    ProcessTimes,
    Reading,
    parse_pid_stat,
    parse_proc_stat,
    parse_task_stat,
    sample_between,
    sample_from_line,
    sample_line,
    thread_names,
)
from zcube_lab.emulator.verdict.judge import DATAPATH, HealthSample, HealthVerdict, inside, judge
from zcube_lab.emulator.verdict.limits import Limits
from zcube_lab.emulator.verdict.network import NetworkEvidence

OVS_PIDFILE = Path("/var/run/openvswitch/ovs-vswitchd.pid")
CPU_METRIC = "zcube_emulator_cpu_utilization"
PROCESS_METRIC = "zcube_emulator_process_cpu_cores"


class HealthSampler:
    """Samples machine, ovs-vswitchd and registered processes' CPU every `interval_s` seconds.

    `start()` begins sampling in a daemon thread; `stop()` ends it. Samples go to the JSON-lines
    file `path` (a temporary file without one) as they are taken; `samples` reads them back.
    With a `registry`, the latest values are also exported as gauges on it.
    """

    def __init__(
        self,
        interval_s: float = 1.0,
        registry: CollectorRegistry | None = None,
        *,
        watch_datapath: bool = True,
        proc: Path | str = Path("/proc"),
        ovs_pidfile: Path | str = OVS_PIDFILE,
        path: Path | str | None = None,
        private_pids: Callable[[], Sequence[int]] = ovs.vswitchd_pids,
    ) -> None:
        if isinstance(interval_s, bool) or not isinstance(interval_s, int | float):
            raise ConfigError("interval_s", interval_s, "seconds between 0.05 and 60")
        if not 0.05 <= interval_s <= 60:
            raise ConfigError("interval_s", interval_s, "seconds between 0.05 and 60")
        self.interval_s = float(interval_s)
        self.watch_datapath = watch_datapath
        self.proc = Path(proc)
        self.ovs_pidfile = Path(ovs_pidfile)
        self.private_pids = (
            private_pids  # private ovs-vswitchd instances' pids (zcube_lab.emulator.lab.ovs)
        )
        self.clk_tck = os.sysconf("SC_CLK_TCK")
        self._registered: dict[str, tuple[int, ...]] = {}
        self._datapath_pids: tuple[int, ...] = ()
        self.path = None if path is None else Path(path)
        self._file: IO[str] | None = None  # the samples, one JSON line each
        self._count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._cpu_gauge: Gauge | None = None
        self._process_gauge: Gauge | None = None
        self._exported: set[str] = set()
        if registry is not None:
            self._cpu_gauge = Gauge(
                CPU_METRIC,
                "Busy share (0-1) of all CPUs of the emulator machine over the last interval",
                registry=registry,
            )
            self._process_gauge = Gauge(
                PROCESS_METRIC,
                "CPU used by one process of the emulator over the last interval, in cores",
                ["process"],
                registry=registry,
            )

    def register(self, name: str, pids: int | Sequence[int]) -> None:
        """Sample the CPU of `pids` (one process, or several summed) under `name`."""
        if not name or (self.watch_datapath and name == DATAPATH):
            raise ConfigError("process", name, f"a non-empty name other than {DATAPATH!r}")
        group = (pids,) if isinstance(pids, int) else tuple(pids)
        if not group or not all(isinstance(p, int) and p > 0 for p in group):
            raise ConfigError(f"process.{name}", pids, "one or more positive pids")
        with self._lock:
            self._registered[name] = group

    def unregister(self, name: str) -> None:
        """Stop sampling `name` (e.g. before its process is replaced)."""
        with self._lock:
            self._registered.pop(name, None)

    def start(self) -> HealthSampler:
        """Begin sampling in the background."""
        if self._thread is not None:
            raise RuntimeError("HealthSampler is already started")
        if self._file is None:  # open for the sampler's life: `close()` closes it
            self._file = (
                tempfile.TemporaryFile("w+", prefix="zcube-health-")  # noqa: SIM115
                if self.path is None
                else self.path.open("w+")
            )
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="health-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop sampling; the number of samples taken. Re-raises an error the sampling thread
        hit."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError("health sampling failed") from error
        return self.count

    def close(self) -> None:
        """Stop sampling and close the samples' file (a temporary one is removed)."""
        self.stop()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @property
    def count(self) -> int:
        """Samples taken so far."""
        with self._lock:
            return self._count

    @property
    def samples(self) -> list[HealthSample]:
        """Every sample taken so far, read back from the file."""
        return self.read()

    def read(self, window: tuple[float, float] | None = None) -> list[HealthSample]:
        """The samples taken so far, from the file; with `window` (start, end in
        time.monotonic()) only those `judge` would count in it."""
        with self._lock:
            return [s for s in self._stored() if window is None or inside(s, *window)]

    def _stored(self) -> Iterator[HealthSample]:
        """The file's samples, one at a time (the caller holds the lock)."""
        f = self._file
        if f is None:
            return
        f.flush()
        f.seek(0)
        try:
            for line in f:
                yield sample_from_line(line)
        finally:
            f.seek(0, os.SEEK_END)

    def verdict(
        self,
        limits: Limits | None = None,
        evidence: NetworkEvidence | None = None,
        window: tuple[float, float] | None = None,
    ) -> HealthVerdict:
        """`judge` over the samples so far (those of `window`, in time.monotonic(), when
        given) and the network evidence, when given; every registered process is expected."""
        limits = limits or Limits(require_datapath=self.watch_datapath)
        with self._lock:
            expected = tuple(self._registered)
        return judge(self.read(window), limits, evidence, window=window, expected=expected)

    def to_json(self, limits: Limits | None = None) -> str:
        """Samples, verdict and the limits it was judged by as JSON."""
        limits = limits or Limits(require_datapath=self.watch_datapath)
        return json.dumps(
            {
                "interval_s": self.interval_s,
                "samples": [asdict(s) for s in self.samples],
                "verdict": self.verdict(limits).to_dict(),
                "limits": limits.to_dict(),
            },
            indent=1,
        )

    # the thread

    def _run(self) -> None:
        try:
            prev = self._read()
            while not self._stop.wait(self.interval_s):
                cur = self._read()
                sample = sample_between(prev, cur, self.clk_tck)
                if sample is not None:
                    self._store(sample)
                    self._export(sample)
                prev = cur
        except BaseException as exc:  # surfaced by stop(); a silent dead sampler would lie
            self._error = exc

    def _store(self, sample: HealthSample) -> None:
        with self._lock:
            assert self._file is not None  # opened by start()
            self._file.write(sample_line(sample))
            self._file.flush()  # on disk at once: a killed run leaves its samples
            self._count += 1

    def _read(self) -> Reading:
        with self._lock:
            groups = dict(self._registered)
        if self.watch_datapath:
            groups[DATAPATH] = self._find_datapath()
        t = time.monotonic()
        cpus = parse_proc_stat((self.proc / "stat").read_text())
        processes = {
            name: tuple(times for pid in pids if (times := self._pid_times(pid)) is not None)
            for name, pids in groups.items()
        }
        threads = self._threads(groups.get(DATAPATH, ()))
        return Reading(t=t, cpus=cpus, processes=processes, threads=threads)

    def _threads(self, pids: Sequence[int]) -> dict[str, ProcessTimes]:
        """ovs-vswitchd's threads, by name (one directory listing and a stat read each)."""
        found: list[tuple[str, ProcessTimes]] = []
        for pid in pids:
            try:
                tasks = list((self.proc / str(pid) / "task").iterdir())
            except OSError:
                continue
            for task in tasks:
                try:
                    found.append(parse_task_stat((task / "stat").read_text()))
                except (OSError, ValueError):
                    continue  # the thread exited between listing and reading
        return thread_names(found)

    def _pid_times(self, pid: int) -> ProcessTimes | None:
        try:
            return parse_pid_stat((self.proc / str(pid) / "stat").read_text())
        except (FileNotFoundError, ProcessLookupError):
            return None  # exited; it simply drops out of the sample

    def _find_datapath(self) -> tuple[int, ...]:
        """ovs-vswitchd's pid(s): cached while alive, else the pidfile, else a /proc scan."""
        if self._datapath_pids and all(
            (self.proc / str(pid)).exists() for pid in self._datapath_pids
        ):
            return self._datapath_pids
        pids: tuple[int, ...] = ()
        try:
            pid = int(self.ovs_pidfile.read_text().strip())
            if self._comm(pid) == DATAPATH:
                pids = (pid,)
        except (OSError, ValueError):
            pass
        # A lab's private instances (`LabOptions.ovs_instances`) are datapaths too.
        pids += tuple(p for p in self.private_pids() if p not in pids and self._comm(p) == DATAPATH)
        if not pids:
            # With --monitor a watchdog parent shares the name; summing includes its idle ticks.
            pids = tuple(
                int(entry.name)
                for entry in self.proc.iterdir()
                if entry.name.isdigit() and self._comm(int(entry.name)) == DATAPATH
            )
        self._datapath_pids = pids
        return pids

    def _comm(self, pid: int) -> str | None:
        try:
            return (self.proc / str(pid) / "comm").read_text().strip()
        except OSError:
            return None

    def _export(self, sample: HealthSample) -> None:
        if self._cpu_gauge is None or self._process_gauge is None:
            return
        self._cpu_gauge.set(sample.machine_cpu)
        for name, cores in sample.processes.items():
            self._process_gauge.labels(process=name).set(cores)
        # A process that went away must not keep reporting its last value.
        for name in self._exported - set(sample.processes):
            self._process_gauge.remove(name)
        self._exported = set(sample.processes)
