"""KV transfer fidelity: uncontended KV pulls across a lab, timed exactly and set against
bytes / path rate (issue 11, item 3); the rates, verdict rows and probe plumbing that
`epprobe` (the all-to-all's) shares.

A transfer that the fabric alone limits takes `ideal = bytes * 8 / rate` plus a fixed software
cost (connect, framing, first byte), so the figure of merit is `ratio = (seconds - fixed) /
ideal`, where `fixed` is the median time of a tiny transfer in the same lab. `rate` is what
the NIC ports the pull can use carry (`Scale.link_mbps` of each host link): the rates of the
distinct ports the puller uses, summed, against the same for the server, the smaller of the
two (`kv_path_mbps`). On ZCube the `disjoint` path mode binds each lane's source to one port
(`kv_source_map`, as decode does by default), so both ports carry a pull at both ends;
`shortest` lets the host routes pick, so a same-rail pair squeezes through one puller port.

The module is also the probe run inside a host (the KV server is `cutprobe serve`: a seeded
payload whose prefixes the pulls read):

    python -m emulator.probes.kvprobe pulls --max-bytes N --sizes A,B,.. [--repeat R]
        [--warmup W] [--streams K] [--source CIDR=LOCAL]... [--timeout-s T]
        [--connections kept|fresh] [--step] ADDR:PORT...

It prints "started", one JSON line per pull `{"bytes", "seconds", "ok", "checksum_ok",
"error", "warmup", "opened"}` (seconds around `pull_kv` alone; the first W pulls, of the first
size, are warm-up; `opened`: connections the pull opened), then "done". A decode engine's
defaults (lanes per address, chunking, connections kept across pulls) are the probe's;
`--connections fresh` opens new ones for every pull (the transport before issue 21). With
`--step` each pull, and the close of the connections after the last, waits for a line on
stdin (so a test can look at the host between pulls).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import queue
import statistics
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the probe runs inside hosts: it imports only what it uses, when it does
    from emulator.lab.network import Lab
    from zcube_lab.core.fabric.description import Fabric
    from zcube_lab.core.fabric.scale import Scale

KV_PORT = 7100  # cutprobe's KV server port
KV_TOLERANCE = 0.10
PATH_MODES = ("disjoint", "shortest")  # ZCube's KV path modes (`run --kv-paths`)
# Server and puller per fabric kind, for the 16-GPU fabrics of `comparison.fabric_specs`: each
# pair crosses the fabric. ZCube's is a same-rail pair (so `shortest` squeezes the pull through
# one puller port and `disjoint` does not), ROFT's crosses a spine (other rail), and so does
# Clos's (other leaf).
KV_PAIRS = {"zcube": ("h0", "h4"), "roft": ("h0", "h5"), "clos": ("h0", "h12")}


# -- pure: rates, ideals, verdicts -------------------------------------------------------------
def port_mbps(fabric: Fabric, scale: Scale, host: str, index: int) -> float:
    """Emulated rate of interface `index` of `host`: its link's full-scale rate, scaled."""
    link = fabric.link_at(host, index)
    if link is None:
        raise ValueError(f"{host} interface {index} has no link")
    return scale.link_mbps(fabric, link.gbps)


def kv_ports(
    fabric: Fabric, server: str, puller: str, source_map: Sequence[tuple[str, str]]
) -> tuple[set[int], set[int]]:
    """The interfaces of the server and of the puller that a pull over every server address
    uses: the server answers from the address's own port (source routing); the puller sends
    from the bound source address (`source_map`) or, unbound, where its routes point."""
    from serving.kvwire import pick_source
    from zcube_lab.core.fabric.hostplan import egress_interface

    src, dst = fabric.host(server), fabric.host(puller)
    by_ip = {i.ip: i.index for i in dst.interfaces}
    server_ports, puller_ports = set(), set()
    for iface in src.interfaces:
        server_ports.add(iface.index)
        local = pick_source(iface.ip, source_map)
        port = by_ip[local] if local is not None else egress_interface(dst, iface.ip)
        if port is None:
            raise ValueError(f"{puller} has no route to {iface.ip}")
        puller_ports.add(port)
    return server_ports, puller_ports


def kv_path_mbps(
    fabric: Fabric,
    scale: Scale,
    server: str,
    puller: str,
    source_map: Sequence[tuple[str, str]] = (),
) -> float:
    """The rate an uncontended pull can reach: the ports it uses at each end, summed, the
    smaller end's."""
    server_ports, puller_ports = kv_ports(fabric, server, puller, source_map)
    out = sum(port_mbps(fabric, scale, server, i) for i in server_ports)
    into = sum(port_mbps(fabric, scale, puller, i) for i in puller_ports)
    return min(out, into)


def ideal_seconds(num_bytes: float, mbps: float) -> float:
    """Seconds `num_bytes` take at `mbps` (10^6 bits/s)."""
    return num_bytes * 8 / (mbps * 1e6)


@dataclass(frozen=True)
class FidelityRow:
    """One transfer size: the median of its times, the ideal, `ratio = (median - fixed) /
    ideal`, and whether that is within `tolerance` of 1."""

    size: int
    seconds: float | None  # median of the completed transfers; None: none completed
    runs: int
    failed: int
    ideal_s: float
    ratio: float | None
    within: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def fidelity_row(
    size: int, times: Sequence[float], failed: int, fixed_s: float, ideal_s: float, tolerance: float
) -> FidelityRow:
    """The row of one size from its transfer times (seconds)."""
    if not times:
        return FidelityRow(size, None, 0, failed, ideal_s, None, False)
    median = statistics.median(times)
    ratio = (median - fixed_s) / ideal_s
    ok = abs(ratio - 1) <= tolerance and failed == 0
    return FidelityRow(size, median, len(times), failed, ideal_s, ratio, ok)


@dataclass(frozen=True)
class Fidelity:
    """A fidelity measurement of one fabric (and path mode): the rate, the fixed cost and a
    row per size."""

    fabric: str
    mode: str
    route: str  # "h0->h4" (KV: server->puller; all-to-all: leader->peers)
    mbps: float
    fixed_s: float
    rows: tuple[FidelityRow, ...]

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "rows"}
        return out | {"rows": [r.to_dict() for r in self.rows]}


def fidelity_table(results: Sequence[Fidelity], tolerance: float) -> list[str]:
    """A markdown table of fidelity results, one row per size."""
    heads = ["fabric", "mode", "route", "rate Mb/s", "fixed ms", "bytes", "median s", "ideal s"]
    heads += ["ratio", f"within {tolerance:.0%}"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for f in results:
        for r in f.rows:
            median = "-" if r.seconds is None else f"{r.seconds:.4f}"
            ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
            failed = f" ({r.failed} failed)" if r.failed else ""
            cells = [f.fabric, f.mode, f.route, f"{f.mbps:g}", f"{f.fixed_s * 1e3:.1f}"]
            cells += [f"{r.size:,}", median, f"{r.ideal_s:.4f}", ratio]
            cells += [("yes" if r.within else "NO") + failed]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def decode_pull_defaults() -> tuple[int, int, int]:
    """A decode engine's default pull: lanes per address, largest chunk, chunks per lane."""
    import dataclasses

    from serving.config import DecodeConfig

    d = {f.name: f.default for f in dataclasses.fields(DecodeConfig)}
    return d["kv_streams"], d["kv_chunk_bytes"], d["kv_chunks_per_lane"]


# -- the probe, inside a host ------------------------------------------------------------------
def parse_addr(text: str) -> Any:
    from serving.config import Address

    host, _, port = text.rpartition(":")
    return Address(host, int(port))


def parse_sizes(text: str) -> list[int]:
    return [int(float(s)) for s in text.split(",") if s]


async def _pulls(args: argparse.Namespace) -> None:
    from emulator.probes.cutprobe import payload
    from serving.kvwire import IDLE_PULLS, KVConnections, KVTransferError, pull_kv

    data = payload(args.max_bytes, args.seed)
    addrs = [parse_addr(a) for a in args.addrs]
    sources = tuple(tuple(s.split("=", 1)) for s in args.source)
    print("started", flush=True)
    sizes = parse_sizes(args.sizes)
    plan = sizes[:1] * args.warmup + [s for s in sizes for _ in range(args.repeat)]
    kept = KVConnections(IDLE_PULLS * args.streams + 1) if args.connections == "kept" else None
    loop = asyncio.get_running_loop()
    for i, size in enumerate(plan):
        if args.step and not await loop.run_in_executor(None, sys.stdin.readline):
            break
        expected = zlib.crc32(data[:size])
        out: dict[str, Any] = {"bytes": size, "warmup": i < args.warmup}
        t0 = time.monotonic()
        try:
            if args.transport == "mrc":
                from serving.kvwire.mrc import pull_kv_mrc

                _buf, result = await pull_kv_mrc(
                    f"probe-{i}@{size}",  # the server answers the payload's first `size` bytes
                    addrs,
                    size,
                    expected,
                    timeout_s=args.timeout_s,
                    source_map=sources,
                    rate_bytes_s=args.rate_mbps * 1e6 / 8,
                )
            else:
                _buf, result = await pull_kv(
                    f"probe-{i}",
                    addrs,
                    size,
                    expected,
                    chunk_bytes=args.chunk_bytes,
                    streams=args.streams,
                    timeout_s=args.timeout_s,
                    source_map=sources,
                    chunks_per_lane=args.chunks_per_lane or None,
                    connections=kept,
                )
            out.update(ok=True, checksum_ok=result.checksum == expected, error="")
            out["opened"] = result.opened
        except KVTransferError as exc:
            out.update(ok=False, checksum_ok=False, error=str(exc))
        out["seconds"] = time.monotonic() - t0
        print(json.dumps(out), flush=True)
    if args.step:  # the connections stay up until the last look
        await loop.run_in_executor(None, sys.stdin.readline)
    if kept is not None:
        await kept.aclose()
    print("done", flush=True)


# -- the experiment, from the root namespace ---------------------------------------------------
@contextlib.contextmanager
def running_lab(fabric: Fabric, log_dir: Path, ev_rules: bool = False) -> Iterator[Lab]:
    """A started lab for the probes (ecmp routing, with the EV rules if `ev_rules`, 100 Mb/s
    NICs, free ports); stopped on leaving, on error and on Ctrl-C alike."""
    from emulator.probes.cutprobe import probe_lab
    from zcube_lab.core.policies import get_policy

    lab = probe_lab(fabric, get_policy("ecmp"), log_dir, ev_rules=ev_rules)
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()


@contextlib.contextmanager
def probes() -> Iterator[list[subprocess.Popen[str]]]:
    """A list the probes started go into; every one is killed on leaving."""
    from emulator.probes.cutprobe import stop_probes

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
    module: str = "emulator.probes.kvprobe",
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


def kv_pulls(
    lab: Lab,
    server: str,
    puller: str,
    sizes: Sequence[int],
    *,
    mode: str = "disjoint",
    repeat: int = 3,
    progress: Callable[[dict[str, Any]], None] | None = None,
    connections: str = "kept",
    transport: str = "tcp",
) -> list[dict[str, Any]]:
    """On a running lab: a KV server on `server` and, from `puller`, `repeat` pulls of every
    size, one at a time, as a decode engine pulls (its default lanes and chunking; ZCube
    `mode` "disjoint" binds lane sources, "shortest" does not; `connections` "kept" across
    pulls or "fresh" for each; `transport` "mrc": over the MRC-style transport, each leg paced
    as a run paces it, on a lab whose controller installed the EV rules); the probe's records."""
    from zcube_lab.core.fabric.evpaths import mrc_leg_mbps
    from zcube_lab.core.fabric.hostplan import kv_source_map

    fabric = lab.fabric
    addrs = [f"{i.ip}:{KV_PORT}" for i in fabric.host(server).interfaces]
    sources = kv_source_map(fabric, fabric.host(puller)) if mode == "disjoint" else ()
    mbps = kv_path_mbps(fabric, lab.options.scale, server, puller, sources)
    timeout = 3 * ideal_seconds(max(sizes), mbps) + 10
    argv = ["pulls", "--max-bytes", str(max(sizes)), "--sizes", ",".join(map(str, sizes))]
    argv += ["--repeat", str(repeat), "--timeout-s", f"{timeout:g}", "--connections", connections]
    argv += [f"--source={cidr}={local}" for cidr, local in sources]
    serve = ["serve", "--bytes", str(max(sizes)), *addrs]
    if transport == "mrc":
        leg = mrc_leg_mbps(fabric, lab.options.scale, (server, puller))
        argv += ["--transport", "mrc", "--rate-mbps", f"{leg:g}"]
        serve += ["--mrc-evs", "16", "--mtu", str(lab.options.mtu)]
    out = []
    with probes() as procs:
        start_probe(lab, server, serve, procs, "ready", "emulator.probes.cutprobe")
        client = start_probe(lab, puller, [*argv, *addrs], procs, "started")
        for rec in client.records(timeout + 10):
            if rec["warmup"]:
                continue
            out.append(rec)
            if progress is not None:
                progress(rec)
    return out


def kv_sockets(lab: Lab, host: str, port: int = KV_PORT) -> collections.Counter[str]:
    """TCP sockets in `host`'s namespace to or from `port` by state (`ss`'s names: "ESTAB",
    "TIME-WAIT", ...; LISTEN left out): a closed connection still counts, in TIME-WAIT, until
    the kernel forgets it a minute later."""
    assert lab.net is not None
    out = lab.net.get(host).cmd(f"ss -Htan '( dport = :{port} or sport = :{port} )'")
    states = (line.split()[0] for line in out.splitlines() if line.strip())
    return collections.Counter(s for s in states if s != "LISTEN")


def kv_socket_counts(
    lab: Lab,
    server: str,
    puller: str,
    size: int,
    pulls: int,
    *,
    connections: str = "kept",
    mode: str = "disjoint",
) -> list[collections.Counter[str]]:
    """On a running lab: `pulls` pulls of `size` bytes from `puller` one at a time, as a decode
    engine pulls (`connections` "kept" across pulls or "fresh" for each), and after each the
    KV sockets in the puller's namespace by state (`kv_sockets`); the first entry is before the
    first pull. A failed pull raises RuntimeError."""
    from zcube_lab.core.fabric.hostplan import kv_source_map

    fabric = lab.fabric
    addrs = [f"{i.ip}:{KV_PORT}" for i in fabric.host(server).interfaces]
    sources = kv_source_map(fabric, fabric.host(puller)) if mode == "disjoint" else ()
    argv = ["pulls", "--max-bytes", str(size), "--sizes", str(size), "--repeat", str(pulls)]
    argv += ["--warmup", "0", "--step", "--connections", connections]
    argv += [f"--source={cidr}={local}" for cidr, local in sources]
    counts = []
    with probes() as procs:
        serve = ["serve", "--bytes", str(size), *addrs]
        start_probe(lab, server, serve, procs, "ready", "emulator.probes.cutprobe")
        client = start_probe(lab, puller, [*argv, *addrs], procs, "started", stdin=True)
        assert client.proc.stdin is not None
        counts.append(kv_sockets(lab, puller))
        for _ in range(pulls):
            client.proc.stdin.write("\n")
            client.proc.stdin.flush()
            while not (line := client.line(60)).startswith("{"):
                pass  # a warning
            rec = json.loads(line)
            if not (rec["ok"] and rec["checksum_ok"]):
                raise RuntimeError(f"KV pull from {puller} failed: {rec['error']}")
            counts.append(kv_sockets(lab, puller))
    return counts


def kv_fidelity(
    lab: Lab,
    server: str,
    puller: str,
    sizes: Sequence[int],
    *,
    mode: str = "disjoint",
    repeat: int = 3,
    fixed_bytes: int = 1000,
    progress: Callable[[dict[str, Any]], None] | None = None,
    connections: str = "kept",
    transport: str = "tcp",
) -> Fidelity:
    """`kv_pulls` of `fixed_bytes` (the fixed cost: its median) and of `sizes`, judged against
    bytes / path rate within `KV_TOLERANCE`."""
    from zcube_lab.core.fabric.hostplan import kv_source_map

    fabric = lab.fabric
    recs = kv_pulls(
        lab,
        server,
        puller,
        [fixed_bytes, *sizes],
        mode=mode,
        repeat=repeat,
        progress=progress,
        connections=connections,
        transport=transport,
    )
    sources = kv_source_map(fabric, fabric.host(puller)) if mode == "disjoint" else ()
    mbps = kv_path_mbps(fabric, lab.options.scale, server, puller, sources)
    fixed = [r["seconds"] for r in recs if r["bytes"] == fixed_bytes and r["ok"]]
    fixed_s = statistics.median(fixed) if fixed else 0.0
    rows = []
    for size in sizes:
        mine = [r for r in recs if r["bytes"] == size]
        times = [r["seconds"] for r in mine if r["ok"] and r["checksum_ok"]]
        failed = len(mine) - len(times)
        rows.append(
            fidelity_row(size, times, failed, fixed_s, ideal_seconds(size, mbps), KV_TOLERANCE)
        )
    kind = mode if fabric.kind == "zcube" else "-"
    return Fidelity(fabric.kind, kind, f"{server}->{puller}", mbps, fixed_s, tuple(rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="KV pulls of several sizes, one at a time")
    parser.add_argument("mode", choices=["pulls"])
    parser.add_argument("addrs", nargs="+", help="ADDR:PORT of the KV server")
    parser.add_argument("--sizes", required=True, help="bytes of each pull, comma-separated")
    parser.add_argument("--max-bytes", type=int, required=True, help="bytes the server holds")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1, help="untimed first transfers")
    parser.add_argument("--seed", type=int, default=1)
    streams, chunk_bytes, per_lane = decode_pull_defaults()
    parser.add_argument("--streams", type=int, default=streams, help="lanes per address")
    parser.add_argument("--chunk-bytes", type=int, default=chunk_bytes, help="largest chunk")
    parser.add_argument("--chunks-per-lane", type=int, default=per_lane, help="0: fixed chunks")
    parser.add_argument("--source", action="append", default=[], help="CIDR=LOCAL binding")
    parser.add_argument("--timeout-s", type=float, default=30.0)
    parser.add_argument("--connections", choices=["kept", "fresh"], default="kept")
    parser.add_argument("--step", action="store_true", help="each pull waits for a stdin line")
    parser.add_argument("--transport", choices=["tcp", "mrc"], default="tcp")
    parser.add_argument("--rate-mbps", type=float, default=0.0, help="mrc: pacing per leg")
    args = parser.parse_args(argv)
    asyncio.run(_pulls(args))


if __name__ == "__main__":
    main()
