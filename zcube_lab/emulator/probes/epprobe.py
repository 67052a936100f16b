"""All-to-all fidelity: uncontended expert-parallel exchanges across a lab, timed exactly and
set against bytes / rate (issue 11, item 5), and engine steps that tell the exchange's time
from the step's.

The leader sends `bytes_per_peer` to every peer and reads as many back (full duplex), each peer
reached at the addresses the engines use (`plan.peer_addresses`: with `ports="all"` every
address of the peer, each lane leaving the leader port the KV source map names; with "one" the
first address, through the port the leader's routes pick), so the busiest port, the leader's or
a peer's, sets the ideal time (`alltoall_ideal_s`). The fixed software cost is the median of a
tiny exchange on the same warm connections (engines keep their peer connections open); the
verdict rows are `fidelity.fidelity_row`'s, within `ALLTOALL_TOLERANCE`. `port_split` also
reads every NIC port's byte counters of the leader and a peer around the exchanges, to show
which ports carried them.

The module is also the probe run inside the hosts (a peer is `ADDR:PORT[+ADDR:PORT...]`):

    python -m zcube_lab.emulator.probes.epprobe serve ADDR:PORT...                  (prints "ready")
    python -m zcube_lab.emulator.probes.epprobe exchanges --sizes A,B,.. [--repeat R] [--source
    CIDR=IP]
        PEER...
    python -m zcube_lab.emulator.probes.epprobe steps --bytes N --compute-s C [--repeat R] PEER...

A client prints "started", then one JSON line per exchange `{"bytes_per_peer", "seconds",
"failures"}`, or per engine step (`zcube_lab.serving.engine_step.run_step`) the exchange log's
record (`zcube_lab.serving.alltoall`: `seconds`, `compute_s`, `step_s`, ...) followed by one line
`{"histograms": {name: [sum, count]}}` of the engine's all-to-all and step histograms; then
"done".
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import subprocess
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from zcube_lab.emulator.probes.fidelity import Fidelity, fidelity_row, ideal_seconds, port_mbps
from zcube_lab.emulator.probes.hostprobe import parse_addr, parse_sizes, probes, start_probe

if TYPE_CHECKING:
    from zcube_lab.core.fabric.description import Fabric
    from zcube_lab.core.fabric.scale import Scale
    from zcube_lab.emulator.lab.network import Lab

EP_PORT = 7301
ALLTOALL_TOLERANCE = 0.20
MODULE = "zcube_lab.emulator.probes.epprobe"
# Leader and peers: an EP instance over four servers exchanging on rail 0 (`--alltoall rail`),
# the same hosts on every 16-GPU fabric of `comparison.fabric_specs`.
EP_GROUP = ("h0", ("h4", "h8", "h12"))


# -- pure --------------------------------------------------------------------------------------
def peer_paths(fabric: Fabric, leader: str, peer: str, ports: str = "all") -> tuple[str, ...]:
    """The addresses of `peer` the leader's exchange uses (`--ep-ports`)."""
    from zcube_lab.emulator.experiment.plan import peer_addresses

    addrs = peer_addresses(fabric, leader, peer)
    return addrs if ports == "all" else addrs[:1]


def source_map(fabric: Fabric, leader: str, ports: str = "all") -> tuple[tuple[str, str], ...]:
    """The leader's source map for its lanes: the KV pulls' one with all ports, none with one."""
    from zcube_lab.core.fabric.hostplan import kv_source_map

    return kv_source_map(fabric, fabric.host(leader)) if ports == "all" else ()


def lane_ports(fabric: Fabric, leader: str, peer: str, ports: str = "all") -> list[tuple[int, int]]:
    """Per lane to `peer`: (the leader's port it leaves, the peer's port it arrives at)."""
    from zcube_lab.core.fabric.hostplan import egress_interface
    from zcube_lab.serving.kvwire.paths import pick_source

    lead = fabric.host(leader)
    smap = source_map(fabric, leader, ports)
    out: list[tuple[int, int]] = []
    for ip in peer_paths(fabric, leader, peer, ports):
        local = pick_source(ip, smap)
        if local is not None:
            (port,) = (i.index for i in lead.interfaces if i.ip == local)
        else:
            found = egress_interface(lead, ip)
            if found is None:
                raise ValueError(f"{leader} has no route to {ip}")
            port = found
        (there,) = (i.index for i in fabric.host(peer).interfaces if i.ip == ip)
        out.append((port, there))
    return out


def alltoall_ideal_s(
    fabric: Fabric,
    scale: Scale,
    leader: str,
    peers: Sequence[str],
    bytes_per_peer: int,
    ports: str = "all",
) -> float:
    """An uncontended exchange's time at the port rates: `bytes_per_peer` to every peer, then as
    many back, each peer's bytes split evenly over its lanes (`lane_ports`). Two phases in
    sequence, as on a real engine: a peer's experts need the tokens dispatched to them before
    they can send the combine, so the leader's ports send during the dispatch and receive
    during the combine, each phase as long as the busiest port (bytes through it over its
    rate), the leader's or a peer's."""
    load: dict[tuple[str, int], float] = {}
    for peer in peers:
        lanes = lane_ports(fabric, leader, peer, ports)
        for out, there in lanes:
            for end in ((leader, out), (peer, there)):
                load[end] = load.get(end, 0) + bytes_per_peer / len(lanes)
    return 2 * max(ideal_seconds(b, port_mbps(fabric, scale, *end)) for end, b in load.items())


def histogram_totals(registry: Any, name: str) -> tuple[float, float]:
    """(sum, count) of histogram `name` over every label set of a prometheus registry."""
    total = count = 0.0
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == f"{name}_sum":
                total += sample.value
            elif sample.name == f"{name}_count":
                count += sample.value
    return total, count


# -- the probe, inside a host ------------------------------------------------------------------
async def _serve(args: argparse.Namespace) -> None:
    from zcube_lab.serving.alltoall import start_ep_server

    servers = [await start_ep_server(parse_addr(a)) for a in args.addrs]
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def _a2a(args: argparse.Namespace) -> Any:
    from zcube_lab.serving.addresses import parse_ep_peers, parse_source_map
    from zcube_lab.serving.alltoall import AllToAll

    return AllToAll(
        parse_ep_peers(args.addrs, "peers"),
        timeout_s=args.timeout_s,
        source_map=parse_source_map(args.source, "source"),
    )


async def _exchanges(args: argparse.Namespace) -> None:
    a2a = _a2a(args)
    sizes = parse_sizes(args.sizes)
    # Warm-up: engines keep their peer connections open, so a step does not pay the connect.
    for _ in range(max(1, args.warmup)):
        await a2a.timed_exchange(sizes[0])
    print("started", flush=True)
    for size in (s for s in sizes for _ in range(args.repeat)):
        ex = await a2a.timed_exchange(size)
        row = {"bytes_per_peer": size, "seconds": ex.seconds, "failures": ex.failures}
        print(json.dumps(row), flush=True)
    await a2a.close()
    print("done", flush=True)


async def _steps(args: argparse.Namespace) -> None:
    from prometheus_client import CollectorRegistry

    from zcube_lab.serving.engine_step import run_step
    from zcube_lab.serving.eptraffic import single_frame
    from zcube_lab.serving.vllm_metrics import ALLTOALL_TIME, EP_STEP_TIME, EngineMetrics

    registry = CollectorRegistry()
    metrics = EngineMetrics(registry, "probe", "0")
    a2a = _a2a(args)
    for _ in range(max(1, args.warmup)):
        await a2a.timed_exchange(args.bytes)  # connected, as a running engine is
    print("started", flush=True)
    a2a.log = sink = io.StringIO()
    for _ in range(args.repeat):
        await run_step(args.compute_s, a2a, single_frame(args.bytes), metrics)
    a2a.log = None
    for line in sink.getvalue().splitlines():
        print(line, flush=True)
    hists = {name: histogram_totals(registry, name) for name in (ALLTOALL_TIME, EP_STEP_TIME)}
    print(json.dumps({"histograms": hists}), flush=True)
    await a2a.close()
    print("done", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="EP peer, timed exchanges or engine steps")
    parser.add_argument("mode", choices=["serve", "exchanges", "steps"])
    parser.add_argument(
        "addrs", nargs="+", help="ADDR:PORT to serve, or every peer as ADDR:PORT[+ADDR:PORT...]"
    )
    parser.add_argument(
        "--source", action="append", default=[], help="CIDR=LOCAL: bind LOCAL for CIDR's lanes"
    )
    parser.add_argument("--sizes", default="", help="exchanges: bytes per peer, comma-separated")
    parser.add_argument("--bytes", type=int, default=0, help="steps: bytes per peer")
    parser.add_argument("--compute-s", type=float, default=0.0, help="steps: compute seconds")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1, help="untimed first exchanges")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="per exchange")
    args = parser.parse_args(argv)
    run = {"serve": _serve, "exchanges": _exchanges, "steps": _steps}
    asyncio.run(run[args.mode](args))


# -- the experiment, from the root namespace ---------------------------------------------------
def _start_peers(
    lab: Lab,
    leader: str,
    peers: Sequence[str],
    procs: list[subprocess.Popen[str]],
    ports: str = "all",
) -> list[str]:
    """An EP peer on each of `peers`, serving every address of it (as `ep_worker` does); the
    peer arguments of the leader's probe, then its `--source` flags."""
    args = []
    for peer in peers:
        every = [f"{i.ip}:{EP_PORT}" for i in lab.fabric.host(peer).interfaces]
        start_probe(lab, peer, ["serve", *every], procs, "ready", MODULE)
        args.append(
            "+".join(f"{ip}:{EP_PORT}" for ip in peer_paths(lab.fabric, leader, peer, ports))
        )
    for cidr, local in source_map(lab.fabric, leader, ports):
        args += ["--source", f"{cidr}={local}"]
    return args


def port_bytes(lab: Lab, host: str) -> dict[str, int]:
    """Bytes each NIC port of `host` has sent so far (`tx_bytes`, headers included)."""
    out = {}
    for iface in lab.fabric.host(host).interfaces:
        text = lab.net.get(host).cmd(f"cat /sys/class/net/{iface.name}/statistics/tx_bytes")
        out[iface.name] = int(text.strip().splitlines()[-1])
    return out


def alltoall_fidelity(
    lab: Lab,
    leader: str,
    peers: Sequence[str],
    sizes: Sequence[int],
    *,
    repeat: int = 3,
    fixed_bytes: int = 1000,
    progress: Callable[[dict[str, Any]], None] | None = None,
    ports: str = "all",
) -> Fidelity:
    """On a running lab: EP peers on `peers`, and on `leader` one `AllToAll` running `repeat`
    uncontended exchanges of `fixed_bytes` per peer (the fixed cost) and of every size, over
    `ports` ("all" or "one"), judged against `alltoall_ideal_s` within `ALLTOALL_TOLERANCE`.
    `mbps` in the result: the rate the exchange's busiest ports give it, from the ideal time of
    the largest size (which spends half of it on the dispatch and half on the combine)."""
    return port_split(
        lab, leader, peers, sizes, repeat=repeat, fixed_bytes=fixed_bytes, progress=progress,
        ports=ports,
    )[0]  # fmt: skip


def port_split(
    lab: Lab,
    leader: str,
    peers: Sequence[str],
    sizes: Sequence[int],
    *,
    repeat: int = 3,
    fixed_bytes: int = 1000,
    progress: Callable[[dict[str, Any]], None] | None = None,
    ports: str = "all",
) -> tuple[Fidelity, dict[str, int]]:
    """`alltoall_fidelity`'s measurement, and the bytes every NIC port of the leader and of
    the peers sent while it ran (by interface name)."""
    fabric, scale = lab.fabric, lab.options.scale
    every = [fixed_bytes, *sizes]
    longest = max(alltoall_ideal_s(fabric, scale, leader, peers, s, ports) for s in every)
    argv = ["exchanges", "--sizes", ",".join(map(str, every)), "--repeat", str(repeat)]
    argv += ["--timeout-s", f"{3 * longest + 10:g}"]
    recs = []
    hosts = [leader, *peers]
    with probes() as procs:
        addrs = _start_peers(lab, leader, peers, procs, ports)
        before = {k: v for h in hosts for k, v in port_bytes(lab, h).items()}
        client = start_probe(lab, leader, [*argv, *addrs], procs, "started", MODULE)
        for rec in client.records(3 * longest * repeat * len(every) + 20):
            recs.append(rec)
            if progress is not None:
                progress(rec)
        after = {k: v for h in hosts for k, v in port_bytes(lab, h).items()}
    sent = {k: after[k] - before[k] for k in before}
    fixed = [r["seconds"] for r in recs if r["bytes_per_peer"] == fixed_bytes]
    fixed_s = statistics.median(fixed) if fixed else 0.0
    rows = []
    for size in sizes:
        mine = [r for r in recs if r["bytes_per_peer"] == size]
        times = [r["seconds"] for r in mine if not r["failures"]]
        ideal = alltoall_ideal_s(fabric, scale, leader, peers, size, ports)
        failed = len(mine) - len(times)
        rows.append(fidelity_row(size, times, failed, fixed_s, ideal, ALLTOALL_TOLERANCE))
    top = max(sizes)
    ideal_top = alltoall_ideal_s(fabric, scale, leader, peers, top, ports)
    mbps = 2 * ideal_seconds(len(peers) * top, 1.0) / ideal_top
    route = f"{leader}->{','.join(peers)}"
    return Fidelity(fabric.kind, ports, route, mbps, fixed_s, tuple(rows)), sent


def ep_steps(
    lab: Lab,
    leader: str,
    peers: Sequence[str],
    bytes_per_peer: int,
    compute_s: float,
    repeat: int,
    ports: str = "all",
) -> tuple[list[dict[str, Any]], dict[str, tuple[float, float]]]:
    """On a running lab: `repeat` engine steps of `compute_s` with an exchange of
    `bytes_per_peer` to EP peers on `peers`: the exchange log's records and the (sum, count)
    of the all-to-all and step histograms."""
    argv = ["steps", "--bytes", str(bytes_per_peer), "--compute-s", f"{compute_s:g}"]
    argv += ["--repeat", str(repeat)]
    recs: list[dict[str, Any]] = []
    hists: dict[str, tuple[float, float]] = {}
    with probes() as procs:
        addrs = _start_peers(lab, leader, peers, procs, ports)
        client = start_probe(lab, leader, [*argv, *addrs], procs, "started", MODULE)
        for rec in client.records(60):
            if "histograms" in rec:
                hists = {k: (v[0], v[1]) for k, v in rec["histograms"].items()}
            else:
                recs.append(rec)
    return recs, hists


if __name__ == "__main__":
    main()
