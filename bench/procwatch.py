"""The processes of one `zcube-lab run`, read from /proc: which they are and what they hold.

Which: every lab process but Open vSwitch's is a descendant of the run (the serving roles in
Mininet hosts too: `mnexec` attaches to the host's namespaces and execs in place), so only the
run's process tree is looked at and a second lab on the machine is never counted. ovs-vswitchd
is the system's daemon, found by its name (in the run's mount namespace: a peer machine's
is not counted); its `--monitor` watchdog rewrites its command line and is left out. A
process is named `<role>` or `<role>/<instance>` (`decode/h12`, `ep/198.18.0.1`) from its
command line (`classify`); the run itself is `run`.

What, per process (`ProcSample`):
- CPU: utime + stime of all its threads, and (`child_ticks`) cutime + cstime, the CPU of the
  children it has reaped; clock ticks (`CLK_TCK` per second).
- memory: VmRSS of /proc/PID/status, in kB.
- fds: the entries of /proc/PID/fd.
- tcp: the TCP sockets it holds open, LISTEN left out: its socket fds whose inode is a row of
  /proc/PID/net/tcp or tcp6. Those tables are the process's network namespace's, and each
  Mininet host has its own, so counting rows would count the namespace; counting by inode
  counts the process. TIME_WAIT sockets have no fd and are not counted; a leaked CLOSE_WAIT is.

Pure: `parse_*`, `classify`, `descendants`, `count_tcp`, `process_names`, `display_order`;
adapter: `scan`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from zcube_lab.emulator.prometheus.server import PROMETHEUS_BINARY
from zcube_lab.emulator.verdict.cpustats import parse_pid_stat
from zcube_lab.emulator.verdict.judge import DATAPATH

CLK_TCK = os.sysconf("SC_CLK_TCK")
RUN = "run"
LOCUST = "locust"
PROMETHEUS = "prometheus"
# `python -m <module>` -> role (zcube_lab.serving.launch, the runner's Locust, the lab's
# controller).
MODULE_ROLES = {
    "zcube_lab.serving.gateway": "gateway",
    "zcube_lab.serving.prefill": "prefill",
    "zcube_lab.serving.decode": "decode",
    "zcube_lab.serving.ep_worker": "ep",
    "locust": LOCUST,
    "zcube_lab.controller": "controller",
    "zcube_lab.emulator.lab.lossless": "lossless",
}
ROLES = (*MODULE_ROLES.values(), PROMETHEUS, DATAPATH, RUN)  # display order
TCP_LISTEN = "0A"  # the `st` column of /proc/net/tcp


# --- pure: parsing /proc text ----------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """The fields of /proc/PID/stat this module uses; `start` tells a reused pid apart."""

    pid: int
    ppid: int
    comm: str
    start: int
    ticks: int  # utime + stime
    child_ticks: int  # cutime + cstime: reaped children


def parse_stat(text: str) -> Stat:
    """A /proc/PID/stat line."""
    times = parse_pid_stat(text)
    head, _, rest = text.rpartition(")")  # the name may itself hold spaces and ')'
    fields = rest.split()  # fields[0] is field 3 (state) of proc(5)
    return Stat(
        pid=times.pid,
        ppid=int(fields[1]),
        comm=head.split("(", 1)[1],
        start=times.start,
        ticks=times.ticks,
        child_ticks=int(fields[13]) + int(fields[14]),
    )


def parse_cmdline(raw: bytes) -> tuple[str, ...]:
    """The argv of /proc/PID/cmdline (NUL-separated; empty for kernel threads and zombies)."""
    if not raw:
        return ()
    return tuple(a.decode(errors="replace") for a in raw.removesuffix(b"\0").split(b"\0"))


def parse_rss_kb(status: str) -> int | None:
    """VmRSS in kB from /proc/PID/status; None when it has none (a zombie, a kernel thread)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def parse_tcp_table(text: str) -> dict[int, str]:
    """Socket inode -> state (`01` ESTABLISHED, `0A` LISTEN, ...) of the rows of /proc/net/tcp
    or tcp6; rows without an inode (TIME_WAIT: no socket is held) are left out."""
    table: dict[int, str] = {}
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) > 9 and (inode := int(cols[9])):
            table[inode] = cols[3]
    return table


def socket_inode(link: str) -> int | None:
    """The inode of an fd link `socket:[12345]`; None for any other kind of fd."""
    if link.startswith("socket:[") and link.endswith("]"):
        return int(link[8:-1])
    return None


def count_tcp(fd_links: Iterable[str], table: Mapping[int, str]) -> int:
    """TCP sockets among a process's fds (their link texts) that are not listening."""
    inodes = {i for link in fd_links if (i := socket_inode(link)) is not None}
    return sum(1 for i in inodes if i in table and table[i] != TCP_LISTEN)


# --- pure: who is who ------------------------------------------------------------------------


def python_module(argv: Sequence[str]) -> str | None:
    """`M` of `python [options] -m M ...`; None for anything else."""
    if not argv or not Path(argv[0]).name.startswith("python"):
        return None
    for i, arg in enumerate(argv[1:-1], start=1):
        if arg == "-m":
            return argv[i + 1]
        if not arg.startswith("-"):
            return None  # a script: `python x.py -m y` is not a module run
    return None


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg == flag:
            return argv[i + 1]
    return None


def classify(argv: Sequence[str]) -> tuple[str, str] | None:
    """(role, instance) of a lab process from its argv, or None if it is none of the lab's.
    Engines are told apart by `--engine-index` (the GPU host's gid), EP workers by their
    first `--bind` address."""
    if not argv:
        return None
    program = Path(argv[0]).name
    if program == DATAPATH:
        return DATAPATH, ""
    if program == Path(PROMETHEUS_BINARY).name:
        return PROMETHEUS, ""
    role = MODULE_ROLES.get(python_module(argv) or "")
    if role is None:
        return None
    if (index := _flag_value(argv, "--engine-index")) is not None:
        return role, f"h{index}"
    if (bind := _flag_value(argv, "--bind")) is not None:
        return role, bind.rsplit(":", 1)[0]
    return role, ""


def descendants(parents: Mapping[int, int], root: int) -> set[int]:
    """`root` and every process below it, given each pid's parent."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def process_names(found: Sequence[tuple[int, str, str]]) -> dict[int, str]:
    """pid -> name for (pid, role, instance) triples: `role` or `role/instance`, with `#pid`
    appended where two processes would share a name."""
    base = {pid: f"{role}/{inst}" if inst else role for pid, role, inst in found}
    counts: dict[str, int] = {}
    for name in base.values():
        counts[name] = counts.get(name, 0) + 1
    return {pid: name if counts[name] == 1 else f"{name}#{pid}" for pid, name in base.items()}


def display_order(role: str, name: str) -> tuple[int, tuple[str | int, ...]]:
    """Sort key: roles in `ROLES` order, then names with their numbers compared as numbers
    (`decode/h2` before `decode/h10`)."""
    rank = ROLES.index(role) if role in ROLES else len(ROLES)
    parts = re.split(r"(\d+)", name)  # text, number, text, ...: like types line up
    return rank, tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


# --- adapter: reading /proc ------------------------------------------------------------------


@dataclass(frozen=True)
class ProcSample:
    """One lab process at one scan; the resources are None in a CPU-only scan."""

    name: str
    role: str
    pid: int
    start: int
    ticks: int
    child_ticks: int
    rss_kb: int | None = None
    fds: int | None = None
    tcp: int | None = None

    @property
    def key(self) -> tuple[int, int]:
        """What identifies the process across scans (a pid can be reused)."""
        return self.pid, self.start


def scan(root: int, *, resources: bool = True, proc: Path = Path("/proc")) -> list[ProcSample]:
    """The run `root`'s lab processes and ovs-vswitchd as they are now. A process that exits
    while it is read is left out; with `resources=False` only CPU is read (cheaper)."""
    stats: dict[int, Stat] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = parse_stat((entry / "stat").read_text())
            except (OSError, ValueError, IndexError):
                continue  # gone between listing and reading
    tree = descendants({pid: s.ppid for pid, s in stats.items()}, root) & stats.keys()
    own = _mount_ns(proc, root)
    candidates = tree | {
        pid
        for pid, s in stats.items()
        if s.comm == DATAPATH and _mount_ns(proc, pid) in (own, None)
    }
    found: list[tuple[int, str, str]] = []
    for pid in sorted(candidates):
        if pid == root:
            found.append((pid, RUN, ""))
            continue
        try:
            kind = classify(parse_cmdline((proc / str(pid) / "cmdline").read_bytes()))
        except OSError:
            continue
        if kind is not None:
            found.append((pid, *kind))
    names = process_names(found)
    tables: dict[str, dict[int, str]] = {}  # per network namespace, read once per scan
    samples = []
    for pid, role, _inst in found:
        s = stats[pid]
        sample = ProcSample(names[pid], role, pid, s.start, s.ticks, s.child_ticks)
        if resources:
            try:
                rss, fds, tcp = _resources(proc / str(pid), tables)
            except OSError:
                continue
            sample = replace(sample, rss_kb=rss, fds=fds, tcp=tcp)
        samples.append(sample)
    return samples


def _mount_ns(proc: Path, pid: int) -> str | None:
    """The mount namespace of `pid` (`mnt:[inode]`), None when it cannot be read. A peer
    machine of `scripts/peer.sh` runs its own ovs-vswitchd in its own mount namespace (and
    chroot): that datapath is not this lab's."""
    try:
        return os.readlink(proc / str(pid) / "ns" / "mnt")
    except OSError:
        return None


def _resources(pdir: Path, tables: dict[str, dict[int, str]]) -> tuple[int | None, int, int]:
    """RSS (kB), open fds and held TCP sockets of the process in `pdir`."""
    rss = parse_rss_kb((pdir / "status").read_text())
    links = []
    for fd in os.listdir(pdir / "fd"):
        try:
            links.append(os.readlink(pdir / "fd" / fd))
        except FileNotFoundError:
            continue  # closed while listed
    netns = os.readlink(pdir / "ns" / "net")
    if netns not in tables:
        table: dict[int, str] = {}
        for name in ("tcp", "tcp6"):
            try:
                table.update(parse_tcp_table((pdir / "net" / name).read_text()))
            except FileNotFoundError:
                continue  # no IPv6 in this kernel
        tables[netns] = table
    return rss, len(links), count_tcp(links, tables[netns])
