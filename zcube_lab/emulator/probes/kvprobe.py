"""KV transfer fidelity: uncontended KV pulls across a lab, timed exactly and set against
bytes / path rate (issue 11, item 3). The ideal times and verdict rows are
`zcube_lab.emulator.probes.fidelity`'s, the probe plumbing (a lab for the probes, a probe started in
a host and its lines read) `zcube_lab.emulator.probes.hostprobe`'s; both are shared with `epprobe`.
Names: `KV_*` and `kv_*` are the KV pull's (its server port, tolerance, host pairs, ports and rate,
pulls, sockets and fidelity).

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

    python -m zcube_lab.emulator.probes.kvprobe pulls --max-bytes N --sizes A,B,.. [--repeat R]
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
import json
import statistics
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from zcube_lab.emulator.probes.fidelity import Fidelity, fidelity_row, ideal_seconds, port_mbps
from zcube_lab.emulator.probes.hostprobe import parse_addr, parse_sizes, probes, start_probe

if TYPE_CHECKING:  # the probe runs inside hosts: it imports only what it uses, when it does
    from zcube_lab.core.fabric.description import Fabric
    from zcube_lab.core.fabric.scale import Scale
    from zcube_lab.emulator.lab.network import Lab

KV_PORT = 7100  # cutprobe's KV server port
KV_TOLERANCE = 0.10
PATH_MODES = ("disjoint", "shortest")  # ZCube's KV path modes (`run --kv-paths`)
# Server and puller per fabric kind, for the 16-GPU fabrics of `comparison.fabric_specs`: each
# pair crosses the fabric. ZCube's is a same-rail pair (so `shortest` squeezes the pull through
# one puller port and `disjoint` does not), ROFT's crosses a spine (other rail), and so does
# Clos's (other leaf).
KV_PAIRS = {"zcube": ("h0", "h4"), "roft": ("h0", "h5"), "clos": ("h0", "h12")}


# -- pure: the KV pull's rate ---------------------------------------------------------------
def kv_ports(
    fabric: Fabric, server: str, puller: str, source_map: Sequence[tuple[str, str]]
) -> tuple[set[int], set[int]]:
    """The interfaces of the server and of the puller that a pull over every server address
    uses: the server answers from the address's own port (source routing); the puller sends
    from the bound source address (`source_map`) or, unbound, where its routes point."""
    from zcube_lab.core.fabric.hostplan import egress_interface
    from zcube_lab.serving.kvwire import pick_source

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


def decode_pull_defaults() -> tuple[int, int, int]:
    """A decode engine's default pull: lanes per address, largest chunk, chunks per lane."""
    import dataclasses

    from zcube_lab.serving.config import DecodeConfig

    d = {f.name: f.default for f in dataclasses.fields(DecodeConfig)}
    return d["kv_streams"], d["kv_chunk_bytes"], d["kv_chunks_per_lane"]


# -- the probe, inside a host ------------------------------------------------------------------
async def _pulls(args: argparse.Namespace) -> None:
    from zcube_lab.emulator.probes.cutprobe import payload
    from zcube_lab.serving.kvwire import IDLE_PULLS, KVConnections, KVTransferError, pull_kv

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
                from zcube_lab.serving.kvwire.mrc import pull_kv_mrc

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
        start_probe(lab, server, serve, procs, "ready", "zcube_lab.emulator.probes.cutprobe")
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
        start_probe(lab, server, serve, procs, "ready", "zcube_lab.emulator.probes.cutprobe")
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
