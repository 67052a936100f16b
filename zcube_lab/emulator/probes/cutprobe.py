"""Cut a fabric link under one live KV transfer, and see whether the transfer survives.

The smallest end-to-end failure experiment, used by the integration test and by
`bench/kv_cut.py`: a lab (Mininet, Open vSwitch, our controller with the policy's routing), a
real KV server (zcube_lab.serving.kvwire) in one host, a real pull from another host over every
address (with decode's source binding, and the policy's subflows and stall timeout), and, once bytes
flow, the real `FaultInjector` cutting a link for the rest of the transfer. Needs root.

The module is also the probe run inside the hosts:

    python -m zcube_lab.emulator.probes.cutprobe serve --bytes N [--mrc-evs E] [--mtu M]
    ADDR:PORT...
        (prints "ready"; with --mrc-evs also the MRC server, E EVs per address)
    python -m zcube_lab.emulator.probes.cutprobe pull --bytes N [--streams K]
        [--stall-s T] [--timeout-s T] [--source CIDR=LOCAL]... [--transport mrc
        --rate-mbps R] ADDR:PORT...
        prints "started", then one JSON line: ok, bytes, checksum_ok, retired, seconds,
        cpu_s (the puller's CPU seconds during the pull), error; over mrc also retired_evs,
        retransmitted_bytes, paths_used, source_ports, duplicates, corrupt, skipped,
        restored, first_bad_wall and last_retx_wall (the sender's first ASSUMED_BAD and last
        retransmission on a GOOD EV, time.time()).

`cut_during_pull(..., transport="mrc")` pulls over the MRC-style transport instead of TCP, on a
lab whose controller also installs the EV rules (`--ev-rules`), paced at each leg's NIC rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import select
import subprocess
import sys
import time
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the probe runs inside hosts: it imports only what it uses, when it does
    from zcube_lab.core.fabric.description import Fabric, Link
    from zcube_lab.core.policies import RunPolicy
    from zcube_lab.emulator.lab.injector import FaultInjector
    from zcube_lab.emulator.lab.network import Lab

PORT = 7100
CHUNK_BYTES = 256 * 1024


# -- the probe, inside a host ----------------------------------------------------------------
def payload(num_bytes: int, seed: int = 1) -> bytes:
    """The bytes served: seeded, so the puller knows their checksum."""
    return random.Random(seed).randbytes(num_bytes)


def _addr(text: str) -> Any:
    from zcube_lab.serving.config import Address

    host, _, port = text.rpartition(":")
    return Address(host, int(port))


def served_prefix(data: bytes, request_id: str) -> bytes:
    """What the mrc server answers for `request_id`: the first N bytes of the payload when the
    id ends in `@N` (the KV fidelity probe's pulls of several sizes), else all of it. A TCP pull
    asks for its byte count itself; an mrc GET must match the held buffer's length."""
    head, _, size = request_id.rpartition("@")
    return data[: int(size)] if head and size.isdigit() else data


async def _serve(args: argparse.Namespace) -> None:
    from zcube_lab.serving.kvwire import start_kv_server

    data = payload(args.bytes, args.seed)
    servers = [
        await start_kv_server(lambda _rid: data, lambda _rid: True, _addr(a)) for a in args.addrs
    ]
    if args.mrc_evs:
        from zcube_lab.core.fabric.evpaths import ev_ports
        from zcube_lab.serving.kvwire.mrc import start_mrc_server

        servers_mrc = await start_mrc_server(
            lambda rid: served_prefix(data, rid),
            [_addr(a) for a in args.addrs],
            ev_ports=ev_ports(args.mrc_evs),
            mtu=args.mtu,
        )
        del servers_mrc  # its sockets live on in the event loop until the probe is killed
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


# What an mrc pull reports beyond a TCP pull's fields
# (`zcube_lab.serving.kvwire.mrc.MrcPullResult`).
MRC_FIELDS = (
    "retired_evs", "retransmitted_bytes", "datagrams_sent", "datagrams_received", "paths_used",
    "source_ports", "duplicates", "corrupt", "skipped", "restored", "first_bad_wall",
    "last_retx_wall",
)  # fmt: skip


async def _pull(args: argparse.Namespace) -> None:
    from zcube_lab.serving.kvwire import KVTransferError, pull_kv

    expected = zlib.crc32(payload(args.bytes, args.seed))
    sources = tuple(tuple(s.split("=", 1)) for s in args.source)
    addrs = [_addr(a) for a in args.addrs]
    print("started", flush=True)
    t0, c0 = time.monotonic(), time.process_time()
    try:
        if args.transport == "mrc":
            from zcube_lab.serving.kvwire.mrc import pull_kv_mrc

            _buf, result = await pull_kv_mrc(
                "probe", addrs, args.bytes, expected, timeout_s=args.timeout_s,
                source_map=sources, rate_bytes_s=args.rate_mbps * 1e6 / 8,
            )  # fmt: skip
        else:
            _buf, result = await pull_kv(
                "probe", addrs, args.bytes, expected, chunk_bytes=CHUNK_BYTES,
                streams=args.streams, timeout_s=args.timeout_s, source_map=sources,
                stall_timeout_s=args.stall_s or None,
            )  # fmt: skip
        out: dict[str, Any] = {
            "ok": True,
            "bytes": result.num_bytes,
            "checksum_ok": result.checksum == expected,
            "retired": result.retired_lanes,
            "by_address": result.bytes_by_address,
            "error": "",
        }
        if args.transport == "mrc":
            out.update({name: getattr(result, name) for name in MRC_FIELDS})
    except KVTransferError as exc:
        out = {"ok": False, "bytes": 0, "checksum_ok": False, "retired": 0, "error": str(exc)}
    out["seconds"] = round(time.monotonic() - t0, 3)
    out["cpu_s"] = round(time.process_time() - c0, 3)
    print(json.dumps(out), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="KV server or one KV pull (in a lab host)")
    parser.add_argument("mode", choices=["serve", "pull"])
    parser.add_argument("addrs", nargs="+", help="ADDR:PORT of the server")
    parser.add_argument("--bytes", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--streams", type=int, default=2, help="subflows per address")
    parser.add_argument("--stall-s", type=float, default=0.0, help="retire stalled subflows")
    parser.add_argument("--timeout-s", type=float, default=8.0)
    parser.add_argument("--source", action="append", default=[], help="CIDR=LOCAL binding")
    parser.add_argument("--transport", choices=["tcp", "mrc"], default="tcp")
    parser.add_argument("--rate-mbps", type=float, default=0.0, help="mrc: pacing per leg")
    parser.add_argument("--mrc-evs", type=int, default=0, help="serve: also mrc, EVs/address")
    parser.add_argument("--mtu", type=int, default=1500, help="serve: mrc datagram MTU")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args) if args.mode == "serve" else _pull(args))


# -- the experiment, from the root namespace ---------------------------------------------------
@dataclass(frozen=True)
class CutResult:
    """One pull: what the probe printed, which link was cut (None: no cut) and how many bytes
    it carried in the sampling window before the cut, and controller recomputes."""

    pull: dict[str, Any]
    link: str | None
    carried: int
    recomputes: int
    cut_links: tuple[Link, ...] = ()
    # (switch, port) -> bytes it sent from the start of the pull to its end (switch links).
    port_bytes: dict[tuple[str, int], int] = field(default_factory=dict)
    cut_wall: float | None = None  # time.time() the cut began (faults.jsonl)


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if line:
                return line.strip()
        if proc.poll() is not None:
            break
    raise RuntimeError(f"probe printed nothing within {timeout}s (exit {proc.poll()})")


def _recomputes(metrics_port: int) -> int:
    from zcube_lab.controller.port_metrics import ROUTE_RECOMPUTES

    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        for row in resp.read().decode().splitlines():
            if row.startswith(ROUTE_RECOMPUTES):
                return int(float(row.split()[-1]))
    return 0


def probe_lab(
    fabric: Fabric,
    policy: RunPolicy,
    log_dir: Path,
    state_dir: Path | None = None,
    ev_rules: bool = False,
) -> Lab:
    """A lab (not started) routed by the policy, on free controller and metrics ports."""
    from zcube_lab.adapters.ports import free_port
    from zcube_lab.core.fabric.scale import Scale
    from zcube_lab.emulator.lab.network import Lab
    from zcube_lab.emulator.lab.options import LabOptions

    extra = {} if state_dir is None else {"state_dir": state_dir}
    return Lab(
        fabric,
        LabOptions(
            scale=Scale(nic_mbps=100.0),
            policy=policy.routing,
            recompute=policy.recompute,
            ev_rules=ev_rules,
            of_port=free_port(),
            metrics_port=free_port(),
            log_dir=log_dir,
            **extra,
        ),
    )


def _start_probes(
    lab: Lab,
    policy: RunPolicy,
    route: tuple[str, str],
    num_bytes: int,
    timeout_s: float,
    procs: list[subprocess.Popen[str]],
    transport: str = "tcp",
    mrc_evs: int = 0,
) -> subprocess.Popen[str]:
    """The KV server on host `src` and, once it is ready, the pull from host `dst` (both
    appended to `procs` as they start, for the caller to stop); returns the pull once started."""
    from zcube_lab.core.fabric.hostplan import kv_source_map
    from zcube_lab.core.policies import SPRAY_STALL_S, SPRAY_STREAMS

    assert lab.net is not None
    fabric, (src, dst) = lab.fabric, route
    addrs = [f"{i.ip}:{PORT}" for i in fabric.host(src).interfaces]
    probe = [sys.executable, "-m", "zcube_lab.emulator.probes.cutprobe"]
    serve = [*probe, "serve", "--bytes", str(num_bytes)]
    if transport == "mrc":
        serve += ["--mrc-evs", str(mrc_evs), "--mtu", str(lab.options.mtu)]
    server = lab.net.get(src).popen(
        [*serve, *addrs],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    procs.append(server)
    if _readline(server, 20) != "ready":
        raise RuntimeError("KV probe server did not start")
    argv = [*probe, "pull", "--bytes", str(num_bytes), "--timeout-s", str(timeout_s)]
    argv += [f"--source={c}={local}" for c, local in kv_source_map(fabric, fabric.host(dst))]
    if policy.spray:
        argv += ["--streams", str(SPRAY_STREAMS), "--stall-s", str(SPRAY_STALL_S)]
    if transport == "mrc":
        argv += ["--transport", "mrc", "--rate-mbps", f"{mrc_rate_mbps(lab, src, dst):g}"]
    client = lab.net.get(dst).popen(
        [*argv, *addrs], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    procs.append(client)
    if _readline(client, 20) != "started":
        raise RuntimeError("KV probe pull did not start")
    return client


def mrc_rate_mbps(lab: Lab, src: str, dst: str) -> float:
    """The pacing rate of one mrc leg between `src` and `dst` (`evpaths.mrc_leg_mbps`)."""
    from zcube_lab.core.fabric.evpaths import mrc_leg_mbps

    return mrc_leg_mbps(lab.fabric, lab.options.scale, (src, dst))


_PORT_TX = re.compile(
    r"port\s+(\d+):\s*rx pkts=[^,]*, bytes=[^,]*,.*?tx pkts=[^,]*, bytes=(\d+)", re.S
)


def switch_tx_bytes(dump_ports: str) -> dict[int, int]:
    """Port -> bytes sent, from one `ovs-ofctl dump-ports BRIDGE` of every port (LOCAL left
    out)."""
    return {int(port): int(sent) for port, sent in _PORT_TX.findall(dump_ports)}


def _port_counters(fabric: Fabric) -> dict[tuple[str, int], int]:
    """Bytes every switch-to-switch link end has sent so far: one `dump-ports` per switch (one
    per port took seconds on a big fabric, so a cut meant for 0.4 s into a pull came late)."""
    from zcube_lab.core.fault_schedule import switch_links
    from zcube_lab.emulator.lab import ovsbridges

    ends = {
        end for lk in switch_links(fabric) for end in ((lk.node1, lk.port1), (lk.node2, lk.port2))
    }
    sent: dict[tuple[str, int], int] = {}
    for switch in sorted({sw for sw, _ in ends}):
        for port, count in switch_tx_bytes(ovsbridges.ofctl("dump-ports", switch)).items():
            if (switch, port) in ends:
                sent[(switch, port)] = count
    return sent


def _bytes_moved(fabric: Fabric, sample_s: float) -> dict[Link, int]:
    """Bytes each switch-to-switch link sent (both ends) during `sample_s` from now."""
    from zcube_lab.core.fault_schedule import switch_links

    before = _port_counters(fabric)
    time.sleep(sample_s)
    after = _port_counters(fabric)
    moved: dict[Link, int] = {}
    for lk in switch_links(fabric):
        for end in ((lk.node1, lk.port1), (lk.node2, lk.port2)):
            moved[lk] = moved.get(lk, 0) + after.get(end, 0) - before.get(end, 0)
    return moved


def _link_to_cut(fabric: Fabric, moved: dict[Link, int], link: str | None) -> str | None:
    """The link spec to cut: `link` as given, or for "auto" the single busiest link (`#k` among
    parallel links of the pair); None: no cut."""
    if link != "auto":
        return link
    best = max(moved, key=lambda lk: moved[lk])
    pair = [lk for lk in fabric.links if {lk.node1, lk.node2} == {best.node1, best.node2}]
    chosen = f"{best.node1}-{best.node2}"
    if len(pair) > 1:
        chosen += f"#{pair.index(best)}"
    return chosen


def _cut_wall(log: Path) -> float | None:
    """When the first link went down, from the injector's log (None: not logged)."""
    if not log.exists():
        return None
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("action") == "down" and not rec.get("error"):
            return float(rec["wall"])
    return None


def stop_probes(procs: list[subprocess.Popen[str]]) -> None:
    """Kill the probe processes and reap them."""
    for p in procs:
        p.kill()
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)


def _stop(procs: list[subprocess.Popen[str]], injector: FaultInjector | None, lab: Lab) -> None:
    """Stop the probes, then the injector, then the lab, each even if the one before failed."""
    try:
        stop_probes(procs)
    finally:
        try:
            if injector is not None:
                injector.stop()
        finally:
            lab.stop()


def cut_during_pull(
    fabric: Fabric,
    policy_name: str,
    src: str,
    dst: str,
    *,
    link: str | None = "auto",
    num_bytes: int = 24 * 1024 * 1024,
    sample_s: float = 0.4,
    timeout_s: float = 6.0,
    log_dir: Path,
    state_dir: Path | None = None,
    transport: str = "tcp",
    mrc_evs: int = 16,
    controller: bool = True,
) -> CutResult:
    """Host `dst` pulls `num_bytes` from a KV server on host `src`; after `sample_s` of transfer
    the link is cut (`"a0-b1"`; `"auto"`: the switch-to-switch link that carried most of it in
    that window; None: no cut, the reference). Brings its own lab up and down. With
    `transport="mrc"` the pull uses the MRC-style transport (`mrc_evs` EVs per address) and
    the controller installs the EV rules besides the policy's. `controller=False` stops the
    controller once its rules are in (before the pull): what happens then is the switches'
    and the end hosts' doing alone."""
    from zcube_lab.core.fault_schedule import parse_faults
    from zcube_lab.core.policies import get_policy
    from zcube_lab.emulator.lab.injector import FaultInjector

    if transport not in ("tcp", "mrc"):
        raise ValueError(f"transport must be tcp or mrc, not {transport!r}")
    policy = get_policy(policy_name)
    lab = probe_lab(fabric, policy, log_dir, state_dir, ev_rules=transport == "mrc")
    procs: list[subprocess.Popen[str]] = []
    injector = None
    try:
        lab.start()
        if not controller:
            lab.stop_controller()
        before = _port_counters(fabric)
        client = _start_probes(
            lab, policy, (src, dst), num_bytes, timeout_s, procs, transport, mrc_evs
        )
        moved = _bytes_moved(fabric, sample_s)
        chosen = _link_to_cut(fabric, moved, link)
        carried = 0
        cut_links: tuple[Link, ...] = ()
        if chosen is not None:
            (fault,) = parse_faults([f"link {chosen} at 0s"], fabric, 3600)
            carried = sum(moved.get(lk, 0) for lk in fault.links)
            cut_links = tuple(fault.links)
            injector = FaultInjector(fabric, [fault], log_dir / "faults.jsonl")
            injector.start(time.time())
        result = json.loads(_readline(client, timeout_s + 10))
        after = _port_counters(fabric)
        recomputes = _recomputes(lab.options.metrics_port) if policy.recompute and controller else 0
        port_bytes = {end: after[end] - before[end] for end in after}
        cut_wall = _cut_wall(log_dir / "faults.jsonl") if chosen is not None else None
        return CutResult(result, chosen, carried, recomputes, cut_links, port_bytes, cut_wall)
    finally:
        _stop(procs, injector, lab)


if __name__ == "__main__":
    main()
