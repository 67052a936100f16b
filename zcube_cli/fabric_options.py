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
from zcube_lab.core.fabric.queues import (
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
    kept = "the scale-down that keeps the full size's structure (docs/DOMAIN.md)"
    group.add_argument(
        "--servers",
        type=int,
        help=f"roft/clos: servers (default {'--gpus / --gpus-per-server' if from_gpus else 4})",
    )
    group.add_argument(
        "--gpus-per-server",
        type=int,
        help="GPUs per server (= rails on roft; default "
        + (f"{kept}: 2 at 16 and 64 GPUs; 4 at 16 is the old size" if from_gpus else "4")
        + ")",
    )
    group.add_argument("--spines", type=int, help="roft/clos: spine switches (default 2)")
    group.add_argument(
        "--oversubscription", type=float, help="roft/clos: leaf down:up ratio (default 1)"
    )
    leaf = (
        "roft: several, with several leaves per rail (2 at 16 GPUs, 4 at 64); clos: 2, or 1 "
        "when the servers are odd"
        if from_gpus
        else "all on roft, 2 on clos"
    )
    group.add_argument(
        "--servers-per-leaf",
        type=int,
        help=f"servers under one roft rail leaf or clos leaf (default: {leaf})",
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


def add_run_flags(group: argparse._ArgumentGroup, names: tuple[str, ...]) -> None:
    """The flags of these `RunConfig` fields, declared there once."""
    from emulator.experiment.runconfig import RunConfig
    from zcube_lab.core.options import add_flags

    add_flags(group, RunConfig, names)


def add_link_arguments(group: argparse._ArgumentGroup) -> None:
    """--mtu, --buffer-model, --switch-chip, --queue-packets and --host-queue-packets: packet
    size and queue limits of every shaped link."""
    from emulator.experiment.runconfig import LINK_FIELDS

    add_run_flags(group, LINK_FIELDS)


def add_datapath_arguments(group: argparse._ArgumentGroup) -> None:
    """--ovs-instances: how many ovs-vswitchd daemons of the lab's own carry the switches."""
    add_run_flags(group, ("ovs_instances",))


def add_lossless_argument(group: argparse._ArgumentGroup) -> None:
    """--lossless: PFC-like pauses instead of drops at switch ports."""
    add_run_flags(group, ("lossless",))


def add_transport_arguments(group: argparse._ArgumentGroup) -> None:
    """--cc: TCP congestion control of every host namespace."""
    add_run_flags(group, ("congestion_control",))


def add_kv_transport_argument(group: argparse._ArgumentGroup) -> None:
    """--kv-transport: how decode pulls KV (TCP lanes, or the MRC-style datagrams)."""
    add_run_flags(group, ("kv_transport",))


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
