"""Reads the lab's network counters during a run (adapter: /proc, tc, nsenter, the clock).

`NetSampler(hosts, rates_mbps)` is given each GPU host's namespace as the pid of a process in
it (a Mininet host's shell) and the shaped interfaces with their rates. `start()` takes a full
reading and begins sampling in a daemon thread; `stop()` ends it and takes a final full
reading; `evidence(...)` turns the readings into `NetworkEvidence` for the verdict.

Memory stays flat however long the run: each reading goes into a `netstats.NetTally` (the
run's events and running figures) and is dropped, so the sampler holds the last reading of
each counter, not the run's readings. The rate limits that decide the rate events are therefore
fixed when the sampler is made (`limits`).

Every `interval_s` (1 s) the thread reads, each as its own `NetReading` with its own clock
bracket: the root namespace (one `tc -s -j qdisc show`, /proc/net/dev, /proc/net/softnet_stat:
the switch ports' queues, every second for the peak backlog and the per-window rate), and each
host's TCP counters and /proc/<pid>/net/dev (file reads, no process). A host's qdiscs need a
process in its namespace (`nsenter --net=/proc/<pid>/ns/net tc -s -j qdisc show`), about 3 ms
of CPU each, so they are read every `host_qdisc_every` intervals (5 s: 16 hosts cost about
1% of one core) and at the start and end; their drops are exact, their peak backlog sampled.
Cost per second on the default fabric: one tc process and about 50 small /proc reads.

A read that fails (a host gone, tc missing) skips that part of that reading and is counted in
`failures`, and by where it was read (`failed`: "root" or the host); the thread never stops a
run, and `evidence` names each place whose reads failed as a missing source for the verdict.
"""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.verdict.netstats import (
    DevCounters,
    NetReading,
    NetTally,
    QdiscStats,
    RateLimits,
    parse_net_dev,
    parse_qdiscs,
    parse_softnet,
    parse_tcp_counters,
    root_qdiscs,
)
from zcube_lab.emulator.verdict.network import (
    FaultWindow,
    NetworkEvidence,
    StepOverruns,
    histogram_buckets,
    overrun_buckets,
)

TC_QDISCS = ("tc", "-s", "-j", "qdisc", "show")
PROC = Path("/proc")
# what a read of the counters below raises when a part cannot be read or parsed
READ_ERRORS = (OSError, subprocess.SubprocessError, ValueError, KeyError)
T = TypeVar("T")


def qdisc_stats(
    pid: int | None = None, proc: Path = PROC, timeout: float = 5.0
) -> dict[str, QdiscStats]:
    """Every root qdisc's counters by device (`tc -s -j qdisc show`), in the root namespace or,
    with `pid`, in that process's (through nsenter); raises one of `READ_ERRORS`."""
    argv = list(TC_QDISCS)
    if pid is not None:
        argv = ["nsenter", f"--net={proc}/{pid}/ns/net", *argv]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True)
    return root_qdiscs(parse_qdiscs(out.stdout))


def net_path(name: str, pid: int | None = None, proc: Path = PROC) -> Path:
    """/proc/net/NAME of the root namespace, or /proc/PID/net/NAME of that process's."""
    return proc / "net" / name if pid is None else proc / str(pid) / "net" / name


def dev_counters(pid: int | None = None, proc: Path = PROC) -> dict[str, DevCounters]:
    """Every interface's counters (/proc/net/dev) in the root namespace or `pid`'s; raises
    OSError (not readable) or ValueError (not parsed)."""
    return parse_net_dev(net_path("dev", pid, proc).read_text())


def softnet_counters(proc: Path = PROC) -> dict[str, int]:
    """The CPUs' input-queue counters (/proc/net/softnet_stat); raises OSError or ValueError."""
    return parse_softnet(net_path("softnet_stat", None, proc).read_text())


def engine_overrun_buckets(
    metrics_urls: Mapping[str, str], timeout: float = 2.0
) -> dict[str, dict[float, float]]:
    """Each engine's step-overrun histogram buckets, read from its /metrics URL; an engine
    that does not answer is left out."""
    return {
        name: overrun_buckets(text) for name, text in metrics_texts(metrics_urls, timeout).items()
    }


def metrics_texts(metrics_urls: Mapping[str, str], timeout: float = 2.0) -> dict[str, str]:
    """Each /metrics URL's text, by name; a URL that does not answer is left out."""
    out: dict[str, str] = {}
    for name, url in metrics_urls.items():
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                out[name] = resp.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            continue
    return out


def buckets_of(texts: Mapping[str, str], metric: str) -> dict[str, dict[float, float]]:
    """Histogram `metric`'s cumulative buckets in each text, by name (empty where absent)."""
    return {name: histogram_buckets(text, metric) for name, text in texts.items()}


class NetSampler:
    """Samples root-namespace queues and each host's TCP and interface counters."""

    def __init__(
        self,
        hosts: Mapping[str, int],
        rates_mbps: Mapping[str, float],
        *,
        interval_s: float = 1.0,
        host_qdisc_every: int = 5,
        proc: Path | str = Path("/proc"),
        limits: RateLimits | None = None,
    ) -> None:
        if not 0.05 <= interval_s <= 60:
            raise ConfigError("interval_s", interval_s, "seconds between 0.05 and 60")
        if host_qdisc_every < 1:
            raise ConfigError("host_qdisc_every", host_qdisc_every, "an integer >= 1")
        self.hosts = dict(hosts)
        self.rates_mbps = dict(rates_mbps)
        self.interval_s = float(interval_s)
        self.host_qdisc_every = host_qdisc_every
        self.proc = Path(proc)
        self.failed: dict[str, int] = {}  # where ("root" or a host) -> reads that failed
        self.taken: dict[str, int] = {}  # where -> readings taken
        self._source = "root"
        self._tally = NetTally(self.rates_mbps, limits)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> NetSampler:
        """A full reading now, then sampling in the background."""
        if self._thread is not None:
            raise RuntimeError("NetSampler is already started")
        self._read_all(host_qdiscs=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="net-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop sampling and take a final full reading; the number of readings taken."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
            self._read_all(host_qdiscs=True)
        return self.readings

    @property
    def failures(self) -> int:
        """Reads that failed, everywhere."""
        return sum(self.failed.values())

    @property
    def readings(self) -> int:
        """Readings taken so far (each is tallied, then dropped)."""
        with self._lock:
            return self._tally.readings

    def evidence(
        self,
        overruns: StepOverruns | None = None,
        faults: Sequence[FaultWindow] = (),
        limits: RateLimits | None = None,
    ) -> NetworkEvidence:
        """The readings so far as evidence for `zcube_lab.emulator.verdict.judge.judge`; the places
        whose
        reads failed are missing sources. `limits`, when given, must be the sampler's own."""
        if limits is not None and limits != self._tally.limits:
            raise ValueError(f"rate limits {limits} differ from the sampler's {self._tally.limits}")
        missing = {}
        if self.failed:
            where = ", ".join(f"{w} {n}" for w, n in sorted(self.failed.items()))
            missing["network sampler"] = (
                f"{self.failures} reads failed ({where}): those counters are unchecked"
            )
        with self._lock:
            t = self._tally
            events, tcp, queues, softnet = tuple(t.events), t.tcp(), t.queues(), t.softnet()
        return NetworkEvidence(
            events=events,
            tcp=tcp,
            queues=queues,
            softnet=softnet,
            overruns=overruns,
            faults=tuple(faults),
            missing=missing,
        )

    # the thread

    def _run(self) -> None:
        tick = 0
        while not self._stop.wait(self.interval_s):
            tick += 1
            try:
                self._read_all(host_qdiscs=tick % self.host_qdisc_every == 0)
            except Exception:  # a sampler thread that dies must not take the run with it
                self._fail("sampler")

    def _read_all(self, host_qdiscs: bool) -> None:
        readers = [("root", self._read_root)] + [
            (host, lambda host=host, pid=pid: self._read_host(host, pid, host_qdiscs))
            for host, pid in self.hosts.items()
        ]
        for source, read in readers:
            self._source = source
            try:
                self._add(read())
            except ValueError:  # text we could not parse: that part is missing this time
                self._fail(source)

    def _fail(self, source: str | None = None) -> None:
        where = source or self._source
        self.failed[where] = self.failed.get(where, 0) + 1

    def _add(self, reading: NetReading | None) -> None:
        if reading is not None:
            with self._lock:
                self._tally.add(reading)
                self.taken[self._source] = self.taken.get(self._source, 0) + 1

    def _read_root(self) -> NetReading | None:
        t0 = time.monotonic()
        qdiscs = self._qdiscs(None)
        devs = self._read(lambda: dev_counters(None, self.proc))
        softnet = self._read(lambda: softnet_counters(self.proc))
        t1 = time.monotonic()
        return NetReading(
            t0, t1, qdiscs=qdiscs, devs=self._shaped(devs or {}), softnet=softnet or {}
        )

    def _read_host(self, host: str, pid: int, with_qdiscs: bool) -> NetReading | None:
        t0 = time.monotonic()
        qdiscs = self._qdiscs(pid) if with_qdiscs else {}
        netstat = self._read(net_path("netstat", pid, self.proc).read_text)
        snmp = self._read(net_path("snmp", pid, self.proc).read_text)
        devs = self._read(lambda: dev_counters(pid, self.proc))
        t1 = time.monotonic()
        if netstat is None or snmp is None:
            return None  # the host is gone
        return NetReading(
            t0,
            t1,
            tcp={host: parse_tcp_counters(netstat, snmp)},
            qdiscs=qdiscs,
            devs=self._shaped(devs or {}),
        )

    def _qdiscs(self, pid: int | None) -> dict[str, QdiscStats]:
        try:
            return self._shaped(qdisc_stats(pid, self.proc))
        except READ_ERRORS:
            self._fail()
            return {}

    def _read(self, read: Callable[[], T]) -> T | None:
        """`read()`, or None (counted as a failure) when its file cannot be read; text it
        cannot parse raises ValueError, which fails the whole reading (`_read_all`)."""
        try:
            return read()
        except OSError:
            self._fail()
            return None

    def _shaped(self, by_dev: Mapping[str, T]) -> dict[str, T]:
        return {dev: v for dev, v in by_dev.items() if dev in self.rates_mbps}
