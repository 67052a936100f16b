"""Run the mock PD-disaggregated inference cluster (OpenAI API, vLLM metrics, real KV bytes).

`--local` starts a gateway, prefill and decode instances as local processes on loopback (each
prefill serves KV on 127.0.0.1 and 127.0.0.2 ... to imitate a ZCube host's two NIC ports) and
runs until Ctrl-C or `--duration`. `--role ROLE -- FLAGS` runs one role in this process with
that role's own flags (what the lab does inside a Mininet host; same as
`python -m zcube_lab.serving.ROLE FLAGS`).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import time
from pathlib import Path

from zcube_lab.core.options import add_flags, from_args
from zcube_lab.serving.cluster import ClusterSpec

ROLES = {
    "gateway": "zcube_lab.serving.gateway",
    "prefill": "zcube_lab.serving.prefill",
    "decode": "zcube_lab.serving.decode",
    "ep-worker": "zcube_lab.serving.ep_worker",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`serve` options."""
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--local", action="store_true", help="whole cluster on loopback")
    mode.add_argument("--role", choices=sorted(ROLES), help="run one role (flags after --)")
    # the cluster's options, declared once on `ClusterSpec`'s fields
    add_flags(parser.add_argument_group("cluster (--local)"), ClusterSpec)
    parser.add_argument("--log-dir", type=Path, default=None, help="per-process logs")
    parser.add_argument("--duration", type=float, default=0.0, help="stop after S seconds")
    parser.add_argument("role_args", nargs=argparse.REMAINDER, help="-- then the role's flags")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


def run(args: argparse.Namespace) -> int:
    """Start the local cluster or one role; return an exit code."""
    if args.role:
        extra = list(args.role_args)
        if extra[:1] == ["--"]:
            extra = extra[1:]
        return int(importlib.import_module(ROLES[args.role]).main(extra))
    from zcube_lab.serving.cluster import LocalCluster

    spec = from_args(ClusterSpec, args)
    cluster = LocalCluster(spec, log_dir=args.log_dir)
    # SIGTERM must unwind through `finally` so the role processes are stopped too.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    cluster.start()
    try:
        print(f"gateway  {cluster.gateway_url}  (OpenAI base URL {cluster.gateway_url}/v1)")
        for u in cluster.prefill_urls:
            print(f"prefill  {u}/metrics")
        for u in cluster.decode_urls:
            print(f"decode   {u}/metrics")
        print("Ctrl-C to stop", flush=True)
        deadline = time.monotonic() + args.duration if args.duration > 0 else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
            for rp in cluster.processes:
                if rp.proc.poll() is not None:
                    print(f"{rp.role} exited with {rp.proc.returncode}; stopping")
                    return 1
    finally:
        cluster.stop()
    return 0
