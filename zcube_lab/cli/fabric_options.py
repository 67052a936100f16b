"""Command-line options that choose a fabric and its size, shared by `fabric`, `up` and later
commands. Options that do not apply to the chosen fabric are rejected by name."""

from __future__ import annotations

import argparse

from zcube_lab.core.fabric.builders import BUILDERS
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.fabric.queues import (
    HOST_QUEUE_PACKETS,
    MAX_MTU,
    MAX_QUEUE_PACKETS,
    MIN_QUEUE_PACKETS,
    QueueModel,
    fabric_mtu,
)
from zcube_lab.core.fabric.scale import Scale

# option dest -> builder parameter
SIZE_OPTIONS = {
    "n": "n",
    "m": "m",
    "servers": "servers",
    "gpus_per_server": "gpus_per_server",
    "spines": "spines",
    "oversubscription": "oversubscription",
    "servers_per_leaf": "servers_per_leaf",
    "nic_gbps": "nic_gbps",
    "planes": "planes",
}


def add_fabric_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --fabric and the size options (defaults are each builder's small default)."""
    group = parser.add_argument_group("fabric")
    group.add_argument("--fabric", choices=sorted(BUILDERS), default="zcube", help="fabric kind")
    group.add_argument("--n", type=int, help="zcube: switches per group (n*n GPUs; default 4)")
    group.add_argument("--m", type=int, help="zcube: parallel links per A-B pair (default 1)")
    group.add_argument("--servers", type=int, help="roft/clos: servers (default 4)")
    group.add_argument(
        "--gpus-per-server", type=int, help="GPUs per server (= rails on roft; default 4)"
    )
    group.add_argument("--spines", type=int, help="roft/clos: spine switches (default 2)")
    group.add_argument(
        "--oversubscription", type=float, help="roft/clos: leaf down:up ratio (default 1)"
    )
    group.add_argument(
        "--servers-per-leaf", type=int, help="roft: servers per rail leaf; clos: per leaf"
    )
    group.add_argument(
        "--nic-gbps", type=float, help="full-scale NIC bandwidth per GPU in Gb/s (default 400)"
    )
    group.add_argument(
        "--planes",
        type=int,
        help="roft: disconnected leaf-spine planes, one NIC port of nic-gbps/planes into each "
        "(MRC's multi-plane; 1 to 8, default 1)",
    )


def spec_from_args(args: argparse.Namespace) -> FabricSpec:
    """The fabric spec the options describe (unset options keep the builder's default)."""
    params = {}
    for dest, param in SIZE_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is not None:
            if isinstance(value, float) and value.is_integer() and dest == "oversubscription":
                value = int(value)
            params[param] = value
    return FabricSpec.of(args.fabric, **params)


def mtu_arg(text: str) -> int | str:
    """--mtu: a number of bytes or `auto` (the MTU rule of zcube_lab.core.fabric.queues)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or 'auto'") from None


def add_link_arguments(group: argparse._ArgumentGroup) -> None:
    """--mtu, --queue-packets and --host-queue-packets: packet size and queue limits of every
    shaped link."""
    group.add_argument(
        "--mtu",
        type=mtu_arg,
        default=MAX_MTU,
        help=f"MTU of every fabric interface (default {MAX_MTU}); auto: the largest whose "
        "per-hop serialization on the slowest link stays within 2%% of a 50 ms transfer",
    )
    group.add_argument(
        "--queue-packets",
        type=int,
        help=f"queue limit of every switch port in packets ({MIN_QUEUE_PACKETS} to "
        f"{MAX_QUEUE_PACKETS}; default: the buffer model of zcube_lab/core/fabric/queues.py)",
    )
    group.add_argument(
        "--host-queue-packets",
        type=int,
        default=HOST_QUEUE_PACKETS,
        help=f"queue limit of every host NIC port in packets (default {HOST_QUEUE_PACKETS}: "
        "a NIC back-pressures its host instead of dropping)",
    )


def link_options_from_args(
    args: argparse.Namespace, fabric: Fabric, scale: Scale
) -> tuple[int, QueueModel]:
    """The MTU and queue model the link options describe."""
    mtu = fabric_mtu(fabric, scale) if args.mtu == "auto" else args.mtu
    return mtu, QueueModel(packets=args.queue_packets, host_packets=args.host_queue_packets)
