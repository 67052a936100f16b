"""The CPU counters of the lab, read as /proc text and turned into samples (pure).

What the CPU verdict (`zcube_lab.emulator.verdict.judge`) reads, and where it comes from:
- the machine and each core: the `cpu` and `cpuN` lines of `/proc/stat` (`parse_proc_stat`,
  cumulative jiffies as `CpuTimes`), as busy, softirq and steal shares of an interval
  (`cpu_share`);
- a process: utime + stime and its start time from `/proc/<pid>/stat` (`parse_pid_stat`); a
  thread of ovs-vswitchd from `/proc/<pid>/task/<tid>/stat` (`parse_task_stat`), named by its
  thread name (`thread_names`);
- `Reading` is everything read at one instant, and `sample_between` turns two readings into a
  `HealthSample` (machine and per-core busy share, per-process and per-thread CPU in cores);
  `sample_line` and `sample_from_line` write and read a sample as one JSON line.

Accounting. Machine busy = all jiffies except idle and iowait (a CPU waiting on I/O was free to
run us); guest time is already inside user time, so it is not added again. Steal (a hypervisor
running someone else) counts as busy and has its own rule. Process CPU = utime + stime of every
thread, over wall time, in cores (1.0 = one core flat out).

Nothing here reads /proc or the clock: `zcube_lab.emulator.lab.health.HealthSampler` does, and hands
the text and its instants over. Names: a core as `cpu<N>`, a process by the name it was registered
under, a thread by its name (`#<tid>` appended when several share it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from zcube_lab.emulator.verdict.judge import HealthSample


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative jiffies of one `cpu` line of /proc/stat."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int = 0
    irq: int = 0
    softirq: int = 0
    steal: int = 0

    @property
    def total(self) -> int:
        # guest and guest_nice are already counted in user and nice; leave them out.
        return (
            self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
        )

    @property
    def busy(self) -> int:
        return self.total - self.idle - self.iowait


def parse_proc_stat(text: str) -> dict[str, CpuTimes]:
    """The `cpu` (all cores) and `cpuN` lines of /proc/stat, by name."""
    cpus: dict[str, CpuTimes] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, *values = line.split()
        if len(values) < 4:
            raise ValueError(f"/proc/stat line has fewer than 4 counters: {line!r}")
        cpus[name] = CpuTimes(*(int(v) for v in values[:8]))
    if "cpu" not in cpus:
        raise ValueError("/proc/stat has no aggregate 'cpu' line")
    return cpus


@dataclass(frozen=True)
class CpuShare:
    """Shares (0-1) of one CPU line's jiffies over an interval."""

    busy: float
    softirq: float
    steal: float


def cpu_share(prev: CpuTimes, cur: CpuTimes) -> CpuShare:
    """Busy, softirq and steal share of the jiffies that passed between two readings."""
    total = cur.total - prev.total
    if total <= 0:  # no tick between the readings (or a counter reset): nothing to say
        return CpuShare(0.0, 0.0, 0.0)
    return CpuShare(
        busy=_clamp((cur.busy - prev.busy) / total),
        softirq=_clamp((cur.softirq - prev.softirq) / total),
        steal=_clamp((cur.steal - prev.steal) / total),
    )


@dataclass(frozen=True)
class ProcessTimes:
    """CPU ticks (utime + stime, all threads) of one pid; `start` tells a reused pid apart."""

    pid: int
    start: int
    ticks: int


def parse_pid_stat(text: str) -> ProcessTimes:
    """utime + stime and the start time from a /proc/<pid>/stat line."""
    # The command name (field 2) is in parentheses and may itself hold spaces and ')'.
    head, _, rest = text.rpartition(")")
    pid = int(head.split("(", 1)[0])
    fields = rest.split()  # fields[0] is field 3 (state) of proc(5)
    utime, stime, start = int(fields[11]), int(fields[12]), int(fields[19])
    return ProcessTimes(pid=pid, start=start, ticks=utime + stime)


def parse_task_stat(text: str) -> tuple[str, ProcessTimes]:
    """A thread's name and CPU ticks from a /proc/<pid>/task/<tid>/stat line."""
    name = text[text.index("(") + 1 : text.rindex(")")]
    return name, parse_pid_stat(text)


def thread_names(threads: Sequence[tuple[str, ProcessTimes]]) -> dict[str, ProcessTimes]:
    """Threads by name; a name several threads share gets `#<tid>` appended."""
    counts: dict[str, int] = {}
    for name, _t in threads:
        counts[name] = counts.get(name, 0) + 1
    return {(n if counts[n] == 1 else f"{n}#{t.pid}"): t for n, t in threads}


def process_cores(
    prev: Iterable[ProcessTimes], cur: Iterable[ProcessTimes], elapsed_s: float, clk_tck: int
) -> float | None:
    """Cores used by a process (summed over its pids) between two readings; None if none lived
    through the whole interval."""
    before = {(p.pid, p.start): p.ticks for p in prev}
    ticks = [p.ticks - before[(p.pid, p.start)] for p in cur if (p.pid, p.start) in before]
    if not ticks or elapsed_s <= 0:
        return None
    return max(0.0, sum(ticks) / clk_tck / elapsed_s)


@dataclass(frozen=True)
class Reading:
    """Raw counters read at one instant `t` (monotonic seconds)."""

    t: float
    cpus: Mapping[str, CpuTimes]
    processes: Mapping[str, tuple[ProcessTimes, ...]] = field(default_factory=dict)
    threads: Mapping[str, ProcessTimes] = field(default_factory=dict)  # datapath thread names


def sample_between(prev: Reading, cur: Reading, clk_tck: int) -> HealthSample | None:
    """The sample for the interval between two readings; None if no time passed."""
    elapsed = cur.t - prev.t
    if elapsed <= 0:
        return None
    machine = cpu_share(prev.cpus["cpu"], cur.cpus["cpu"])
    cores = sorted(
        (name for name in cur.cpus if name != "cpu" and name in prev.cpus),
        key=lambda name: int(name[3:]),  # cpu10 after cpu9
    )
    processes: dict[str, float] = {}
    for name, times in cur.processes.items():
        cores_used = process_cores(prev.processes.get(name, ()), times, elapsed, clk_tck)
        if cores_used is not None:
            processes[name] = cores_used
    threads: dict[str, float] = {}
    for name, times in cur.threads.items():
        if name in prev.threads:
            cores_used = process_cores((prev.threads[name],), (times,), elapsed, clk_tck)
            if cores_used is not None:
                threads[name] = cores_used
    return HealthSample(
        t=cur.t,
        interval_s=elapsed,
        machine_cpu=machine.busy,
        per_core=tuple(cpu_share(prev.cpus[c], cur.cpus[c]).busy for c in cores),
        softirq=machine.softirq,
        steal=machine.steal,
        processes=processes,
        threads=threads,
    )


def _clamp(share: float) -> float:
    return min(1.0, max(0.0, share))


def sample_line(sample: HealthSample) -> str:
    """One sample as a JSON line; floats are written exactly, so `sample_from_line` reads back
    an equal sample."""
    return json.dumps(asdict(sample), separators=(",", ":")) + "\n"


def sample_from_line(line: str) -> HealthSample:
    """The sample `sample_line` wrote."""
    d: dict[str, Any] = json.loads(line)
    return HealthSample(
        t=d["t"],
        interval_s=d["interval_s"],
        machine_cpu=d["machine_cpu"],
        per_core=tuple(d["per_core"]),
        softirq=d["softirq"],
        steal=d["steal"],
        processes=d["processes"],
        threads=d.get("threads", {}),
    )
