"""Command-line options that choose a fabric and its size, shared by `fabric`, `up`, `run`,
`compare` and `sweep` (one declaration: `add_size_arguments`). Options that do not apply to the
chosen fabric are rejected by name; `compare` and `sweep` apply each to the compared fabrics that
take it (`sized_specs`)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import BUILDERS, PARAMETERS, build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.fabric.hostplan import CONGESTION_CONTROLS, DEFAULT_CONGESTION_CONTROL
from zcube_lab.core.fabric.queues import (
    BUFFER_MODELS,
    CHIPS,
    DEFAULT_BUFFER_MODEL,
    DEFAULT_CHIP,
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
    add_size_arguments(group)


def add_size_arguments(group: argparse._ArgumentGroup, from_gpus: bool = False) -> None:
    """The size options, unset unless given. `from_gpus`: the sizes a square `--gpus` sets
    (`compare`, `sweep`) say so as their default."""
    square = "from --gpus: its square root"
    group.add_argument(
        "--n",
        type=int,
        help=f"zcube: switches per group (n*n GPUs; default {square if from_gpus else 4})",
    )
    group.add_argument("--m", type=int, help="zcube: parallel links per A-B pair (default 1)")
    group.add_argument(
        "--servers", type=int, help=f"roft/clos: servers (default {square if from_gpus else 4})"
    )
    group.add_argument(
        "--gpus-per-server",
        type=int,
        help=f"GPUs per server (= rails on roft; default {square if from_gpus else 4})",
    )
    group.add_argument("--spines", type=int, help="roft/clos: spine switches (default 2)")
    group.add_argument(
        "--oversubscription", type=float, help="roft/clos: leaf down:up ratio (default 1)"
    )
    clos_leaf = "2, or 1 when that square root is odd" if from_gpus else "2"
    group.add_argument(
        "--servers-per-leaf",
        type=int,
        help=f"servers under one roft rail leaf or clos leaf (default: all on roft, {clos_leaf} "
        "on clos)",
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


def size_params(args: argparse.Namespace) -> dict[str, object]:
    """The builder parameters the size options given set (unset ones are left out)."""
    params: dict[str, object] = {}
    for dest, param in SIZE_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is not None:
            if isinstance(value, float) and value.is_integer() and dest == "oversubscription":
                value = int(value)
            params[param] = value
    return params


def sized_specs(
    specs: Mapping[str, FabricSpec], params: Mapping[str, object]
) -> dict[str, FabricSpec]:
    """Each compared fabric's spec with the size parameters it takes set (an option no compared
    fabric takes is refused by name), checked to hold the same number of GPU hosts."""
    for key, value in params.items():
        if not any(key in PARAMETERS[kind] for kind in specs):
            takers = sorted(k for k, names in PARAMETERS.items() if key in names)
            raise ConfigError(
                key, value, f"a size option of {', '.join(takers)}, none of them compared"
            )
    out = {}
    for kind, spec in specs.items():
        mine = {k: v for k, v in params.items() if k in PARAMETERS[kind]}
        out[kind] = FabricSpec.of(kind, **{**dict(spec.params), **mine}) if mine else spec
    if params:
        hosts = {kind: len(build_fabric(spec).hosts) for kind, spec in out.items()}
        if len(set(hosts.values())) > 1:
            sizes = ", ".join(f"{k} {n}" for k, n in hosts.items())
            raise ConfigError(
                "fabrics",
                ",".join(out),
                f"fabrics of one size (GPU hosts: {sizes}); set --gpus, or each fabric's size",
            )
    return out


def spec_from_args(args: argparse.Namespace) -> FabricSpec:
    """The fabric spec the options describe (unset options keep the builder's default)."""
    return FabricSpec.of(args.fabric, **size_params(args))


def mtu_arg(text: str) -> int | str:
    """--mtu: a number of bytes or `auto` (the MTU rule of zcube_lab.core.fabric.queues)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or 'auto'") from None


def add_link_arguments(group: argparse._ArgumentGroup) -> None:
    """--mtu, --buffer-model, --switch-chip, --queue-packets and --host-queue-packets: packet
    size and queue limits of every shaped link."""
    group.add_argument(
        "--mtu",
        type=mtu_arg,
        default=MAX_MTU,
        help=f"MTU of every fabric interface (default {MAX_MTU}); auto: the largest whose "
        "per-hop serialization on the slowest link stays within 2%% of a 50 ms transfer",
    )
    group.add_argument(
        "--buffer-model",
        choices=BUFFER_MODELS,
        default=DEFAULT_BUFFER_MODEL,
        help=f"switch buffer model sizing every switch port's queue (default "
        f"{DEFAULT_BUFFER_MODEL}; docs/DOMAIN.md section 5, Switch buffer models)",
    )
    group.add_argument(
        "--switch-chip",
        choices=sorted(CHIPS),
        default=DEFAULT_CHIP,
        help=f"switch chip generation whose buffer the shared/bytes/time models share out "
        f"(default {DEFAULT_CHIP}, the same chip for every fabric)",
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


def add_datapath_arguments(group: argparse._ArgumentGroup) -> None:
    """--ovs-instances: how many ovs-vswitchd daemons of the lab's own carry the switches."""
    group.add_argument(
        "--ovs-instances",
        type=int,
        default=0,
        metavar="N",
        help="0 (default): every switch in the system Open vSwitch, whose one main thread "
        "serves every port; N: N private ovs-vswitchd instances, the switches dealt among them "
        "(userspace datapath; docs/BENCHMARKS.md, datapath levers)",
    )


def add_lossless_argument(group: argparse._ArgumentGroup) -> None:
    """--lossless: PFC-like pauses instead of drops at switch ports."""
    group.add_argument(
        "--lossless",
        action="store_true",
        help="lossless switch ports (PFC-like): a queue past XOFF (the buffer model's limit) "
        "pauses the ports feeding it until XON, hop by hop, instead of dropping; an agent "
        "process does it (docs/LOSSLESS.md)",
    )


def add_transport_arguments(group: argparse._ArgumentGroup) -> None:
    """--cc: TCP congestion control of every host namespace."""
    group.add_argument(
        "--cc",
        choices=CONGESTION_CONTROLS,
        default=DEFAULT_CONGESTION_CONTROL,
        help=f"TCP congestion control in every host namespace (default "
        f"{DEFAULT_CONGESTION_CONTROL}: the kernel's own, which hosts inherited before; "
        "docs/DOMAIN.md section 5)",
    )


def add_kv_transport_argument(group: argparse._ArgumentGroup) -> None:
    """--kv-transport: how decode pulls KV (TCP lanes, or the MRC-style datagrams)."""
    group.add_argument(
        "--kv-transport",
        choices=("tcp", "mrc"),
        default="tcp",
        help="how decode pulls KV: tcp (lanes of TCP connections, the default) or mrc "
        "(MRC-style UDP datagrams sprayed over entropy values that name their paths; the "
        "controller installs the EV rules; docs/FAILURES.md)",
    )


def link_options_from_args(
    args: argparse.Namespace, fabric: Fabric, scale: Scale
) -> tuple[int, QueueModel]:
    """The MTU and queue model the link options describe."""
    mtu = fabric_mtu(fabric, scale) if args.mtu == "auto" else args.mtu
    return mtu, QueueModel(
        packets=args.queue_packets,
        host_packets=args.host_queue_packets,
        buffer_model=args.buffer_model,
        chip=args.switch_chip,
    )
