"""Benchmark: CPU per KV byte of the MRC-style transport over loopback, TCP's beside it (issue 36
item 5, issue 34 item 5). No lab, no root.

    .venv/bin/python -m bench.mrc_cost                          # mrc and tcp, 3 repeats
    .venv/bin/python -m bench.mrc_cost --rate-mbps 200          # each mrc leg paced at 200 Mb/s
    .venv/bin/python -m bench.mrc_cost --trees base=/work/wt-base,new=.   # two checkouts, paired

Each run starts a server process (prefill's side: `MrcServer`, or the TCP KV server on each
address) holding one random KV buffer per size, then a client process (decode's side:
`pull_kv_mrc`, or `pull_kv` with the decode engine's defaults: 2 streams per address, 4 chunks
per lane) that pulls every size `--pulls` times over two legs, 127.0.0.1 and 127.0.0.2, after
one unmeasured warm-up pull. Around every pull the client reads its own CPU time and the
server's (`/proc/PID/task/*/schedstat`: nanoseconds on a CPU, user and kernel both), so a
figure is the CPU both ends spent moving those bytes, syscalls included. Every pull is checked
(bytes and checksum), and MRC's retransmitted bytes are summed: goodput is bytes moved over
bytes sent.

Repeats alternate the transports (and the trees, with `--trees`: each a checkout whose
`serving` the server and client import), so a neighbour's load falls on each alike; each figure
is the median over the repeats with the lowest and highest beside it. Printed per tree,
transport and size: CPU-seconds per GB moved (client, server, both), Gb/s (bytes over the
pulls' wall time) and MRC's retransmitted share. Writes bench/results/mrc_cost.json.
`--profile DIR` runs both ends under cProfile (DIR/TRANSPORT-ROLE.prof; the figures then
include its overhead, so read only where the time goes).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

RESULTS = HERE / "bench" / "results" / "mrc_cost.json"
PYTHONPATH = os.environ.get("PYTHONPATH", "")
HOSTS = ("127.0.0.1", "127.0.0.2")
TRANSPORTS = ("mrc", "tcp")
GB = 1e9
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Pull:
    """One measured pull: its size, wall time, the CPU of each end and MRC's resent bytes."""

    size: int
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float
    retransmitted: int = 0
    kernel_cpu_s: float = 0.0  # of both ends' CPU, in the kernel (10 ms ticks: read summed)
    wakes: int = 0  # both ends' event loops' sleeps (voluntary context switches)


def task_cpu_s(pid: int) -> float:
    """CPU seconds every thread of process `pid` has run (schedstat: ns on a CPU)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended between the listing and the read
    return total / 1e9


def kernel_s(pid: int) -> float:
    """CPU seconds process `pid` has spent in the kernel (/proc/PID/stat's stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) / CLK_TCK


def sleeps(pid: int) -> int:
    """Voluntary context switches of process `pid`'s main thread (its event loop's sleeps)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def kv_buffer(size: int) -> bytes:
    """The KV bytes of one size (random, so no layer can compress them; the same each time)."""
    return random.Random(size).randbytes(size)


def free_port(host: str) -> int:
    """A port free for both UDP and TCP on `host` (the MRC control port is the KV port)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind((host, 0))
            port = u.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                try:
                    t.bind((host, port))
                except OSError:
                    continue
            return port


# -- the two ends (child processes) ---------------------------------------------------------
async def serve(transport: str, sizes: list[int], evs: int) -> None:
    """Hold a buffer per size and serve it on both hosts until stdin closes."""
    from zcube_lab.serving.config import Address

    store = {f"r{n}": kv_buffer(n) for n in sizes}
    addrs = [Address(h, free_port(h)) for h in HOSTS]
    closers = []
    if transport == "mrc":
        from zcube_lab.serving.kvwire.mrc import MrcServer

        server = await MrcServer(store.get, addrs, evs=evs).start()
        closers.append(server.close)
    else:
        from zcube_lab.serving.kvwire.protocol import start_kv_server

        for a in addrs:
            s = await start_kv_server(store.get, lambda _rid: True, a)
            closers.append(s.close)
    print(json.dumps([[a.host, a.port] for a in addrs]), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for close in closers:
        close()


async def pull(
    transport: str, addrs: list[tuple[str, int]], sizes: list[int], pulls: int, server: int,
    rate_mbps: float,
) -> list[Pull]:  # fmt: skip
    """Pull every size `pulls` times (after one warm-up), timing both ends around each."""
    from zcube_lab.serving.config import Address

    legs = [Address(h, p) for h, p in addrs]
    sums = {n: zlib.crc32(kv_buffer(n)) for n in sizes}
    if transport == "mrc":
        from zcube_lab.serving.kvwire.mrc import pull_kv_mrc

        async def one(n: int) -> int:
            _, res = await pull_kv_mrc(
                f"r{n}", legs, n, sums[n], timeout_s=120, rate_bytes_s=rate_mbps * 1e6 / 8
            )
            return res.retransmitted_bytes or 0
    else:
        from zcube_lab.serving.kvwire.pull import pull_kv

        async def one(n: int) -> int:
            await pull_kv(
                f"r{n}", legs, n, sums[n], chunk_bytes=256 * 1024, streams=2, timeout_s=120,
                chunks_per_lane=4,
            )  # fmt: skip
            return 0

    await one(min(sizes))
    out = []
    for n in sizes:
        for _ in range(pulls):
            k0 = kernel_s(os.getpid()) + kernel_s(server)
            w0 = sleeps(os.getpid()) + sleeps(server)
            c0, s0, t0 = time.process_time(), task_cpu_s(server), time.perf_counter()
            resent = await one(n)
            t1, c1, s1 = time.perf_counter(), time.process_time(), task_cpu_s(server)
            k1 = kernel_s(os.getpid()) + kernel_s(server)
            w1 = sleeps(os.getpid()) + sleeps(server)
            out.append(Pull(n, t1 - t0, c1 - c0, s1 - s0, resent, k1 - k0, w1 - w0))
    return out


# -- the parent: runs, alternation, the table -----------------------------------------------
def run_once(tree: Path, transport: str, args: argparse.Namespace) -> list[Pull]:
    """One server and one client process of `tree`; the client's pulls."""
    # The child imports the tree it is started for (first on its path); the parent, this one.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(tree), PYTHONPATH)))}
    me = [sys.executable, str(Path(__file__).resolve())]
    common = ["--sizes", args.sizes, "--evs", str(args.evs)]
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        common += ["--profile", str(args.profile.resolve())]
    server = subprocess.Popen(
        [*me, "--serve", transport, *common], env=env, cwd=tree, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdin is not None
        addrs = server.stdout.readline().strip()
        if not addrs:
            raise RuntimeError(f"the {transport} server of {tree} did not start")
        client = subprocess.run(
            [*me, "--pull", transport, "--addrs", addrs, "--server-pid", str(server.pid),
             "--pulls", str(args.pulls), "--rate-mbps", str(args.rate_mbps), *common],
            env=env, cwd=tree, text=True, capture_output=True, check=False,
        )  # fmt: skip
        if client.returncode != 0:
            raise RuntimeError(f"{transport} pulls of {tree} failed:\n{client.stderr}")
        return [Pull(**p) for p in json.loads(client.stdout)]
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@dataclass(frozen=True)
class Figures:
    """What one run's pulls of one size (or all sizes: size 0) come to."""

    size: int
    cpu_s_per_gb: float
    client_s_per_gb: float
    server_s_per_gb: float
    gbps: float
    resent_share: float
    kernel_share: float
    wakes_per_mb: float


def figures(pulls: list[Pull], size: int = 0) -> Figures:
    """The run's figures over its pulls of `size` (0: all of them)."""
    chosen = [p for p in pulls if size in (0, p.size)]
    moved = sum(p.size for p in chosen)
    client = sum(p.client_cpu_s for p in chosen) / moved * GB
    server = sum(p.server_cpu_s for p in chosen) / moved * GB
    wall = sum(p.wall_s for p in chosen)
    resent = sum(p.retransmitted for p in chosen) / moved
    cpu = sum(p.client_cpu_s + p.server_cpu_s for p in chosen)
    kernel = sum(p.kernel_cpu_s for p in chosen) / cpu if cpu else 0.0
    wakes = sum(p.wakes for p in chosen) / moved * 1e6
    gbps = moved * 8 / wall / GB
    return Figures(size, client + server, client, server, gbps, resent, kernel, wakes)


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """'median [lowest-highest]' of `values`."""
    med = fmt.format(statistics.median(values))
    if len(values) < 2:
        return med
    return f"{med} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def table(runs: dict[tuple[str, str], list[list[Pull]]], sizes: list[int]) -> list[str]:
    """One line per (tree, transport, size), the medians over the repeats."""
    lines = [
        f"{'tree':<8} {'kv':<4} {'size':>6}  {'CPU-s/GB both':<22} {'client':<8} "
        f"{'server':<8} {'Gb/s':<20} {'resent':<7} {'kernel':<7} wakes/MB"
    ]
    for (tree, transport), reps in runs.items():
        for size in [*sizes, 0]:
            f = [figures(r, size) for r in reps]
            label = f"{size / 2**20:g}M" if size else "all"
            lines.append(
                f"{tree:<8} {transport:<4} {label:>6}  "
                f"{spread([x.cpu_s_per_gb for x in f]):<22} "
                f"{statistics.median(x.client_s_per_gb for x in f):<8.2f} "
                f"{statistics.median(x.server_s_per_gb for x in f):<8.2f} "
                f"{spread([x.gbps for x in f]):<20} "
                f"{statistics.median(x.resent_share for x in f):<7.2%} "
                f"{statistics.median(x.kernel_share for x in f):<7.0%} "
                f"{statistics.median(x.wakes_per_mb for x in f):.0f}"
            )
    return lines


def _sizes(text: str) -> list[int]:
    return [round(float(x) * 2**20) for x in text.split(",") if x]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="1,4,16", help="KV sizes, MiB (default 1,4,16)")
    p.add_argument("--pulls", type=int, default=3, help="pulls of each size a run (default 3)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each transport (default 3)")
    p.add_argument("--transports", default="mrc,tcp", help="of: mrc, tcp (default both)")
    p.add_argument("--rate-mbps", type=float, default=0.0, help="mrc: pace each leg (0: unpaced)")
    p.add_argument("--evs", type=int, default=16, help="mrc: EVs per address (default 16)")
    p.add_argument("--trees", default="", help="NAME=DIR,... checkouts to pair (default: this)")
    p.add_argument("--json", type=Path, default=RESULTS, help="where the pulls go")
    p.add_argument("--profile", type=Path, help="run both ends under cProfile, stats to DIR")
    p.add_argument("--serve", choices=TRANSPORTS, help=argparse.SUPPRESS)
    p.add_argument("--pull", choices=TRANSPORTS, help=argparse.SUPPRESS)
    p.add_argument("--addrs", help=argparse.SUPPRESS)
    p.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    sizes = _sizes(args.sizes)
    if args.serve or args.pull:
        profile = cProfile.Profile() if args.profile else None
        if profile is not None:
            profile.enable()
        if args.serve:
            asyncio.run(serve(args.serve, sizes, args.evs))
        else:
            got = asyncio.run(
                pull(args.pull, json.loads(args.addrs), sizes, args.pulls, args.server_pid,
                     args.rate_mbps)
            )  # fmt: skip
            print(json.dumps([asdict(x) for x in got]))
        if profile is not None:
            profile.disable()
            role = "server" if args.serve else "client"
            profile.dump_stats(str(args.profile / f"{args.serve or args.pull}-{role}.prof"))
        return 0
    trees = dict(t.split("=", 1) for t in args.trees.split(",") if t) or {"this": str(HERE)}
    transports = [t for t in args.transports.split(",") if t]
    runs: dict[tuple[str, str], list[list[Pull]]] = {
        (name, t): [] for name in trees for t in transports
    }
    for i in range(args.repeats):
        for name, tree in trees.items():
            for t in transports:
                runs[(name, t)].append(run_once(Path(tree).resolve(), t, args))
                print(f"repeat {i + 1}/{args.repeats} {name} {t}: done", file=sys.stderr)
    rate = f", mrc legs paced at {args.rate_mbps:g} Mb/s" if args.rate_mbps else ", unpaced"
    print(f"{args.repeats} repeats x {args.pulls} pulls of each size, 2 legs{rate}; "
          f"median [lowest-highest] over the repeats")  # fmt: skip
    print("\n".join(table(runs, sizes)))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"args": {k: v for k, v in vars(args).items() if k != "json"} | {"json": None},
             "runs": {f"{n}/{t}": [[asdict(x) for x in r] for r in reps]
                      for (n, t), reps in runs.items()}},
            indent=1,
        )
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
