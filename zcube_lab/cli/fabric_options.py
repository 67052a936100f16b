"""Command-line options that choose a fabric and its size, shared by `fabric`, `up`, `run`,
`compare` and `sweep` (one declaration: `add_size_arguments`). One size vocabulary: `--gpus N`
(a square, 16 by default) sizes every fabric by the scale-down rule that keeps the full size's
structure (`zcube_lab.core.fabric.scaledown`); the size options given win over the rule (the
lab's old sizes: `--gpus-per-server 4 --servers-per-leaf 4` at 16). Options that do not apply
to the chosen fabric are rejected by name; `compare` and `sweep` apply each to the compared
fabrics that take it (`sized_specs`)."""

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
from zcube_lab.core.fabric.scaledown import scaled_sizes

# GPU hosts of a fabric when neither --gpus nor the size options say (every command's).
DEFAULT_GPUS = 16

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


FILE_PREFIX = "file:"


def fabric_kind(text: str) -> str:
    """A --fabric value: a built-in kind, or `file:PATH` (a fabric file, docs/FABRIC_FILES.md)."""
    kinds = sorted(k for k in BUILDERS if k != "file")
    if text in kinds or (text.startswith(FILE_PREFIX) and len(text) > len(FILE_PREFIX)):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: one of {kinds} or file:PATH")


def add_fabric_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --fabric, --gpus and the size options."""
    group = parser.add_argument_group("fabric")
    group.add_argument(
        "--fabric",
        type=fabric_kind,
        default="zcube",
        metavar="KIND",
        help="fabric kind: zcube, roft, clos, or file:PATH, a fabric file of your own "
        "(docs/FABRIC_FILES.md; the file sets its size)",
    )
    add_size_arguments(group)


def add_size_arguments(group: argparse._ArgumentGroup, compared: bool = False) -> None:
    """--gpus and the size options, unset unless given (`compared`: the help of `compare` and
    `sweep`, whose fabrics all take the one --gpus)."""
    kept = (
        "the scale-down that keeps the full size's structure (zcube_lab/core/fabric/scaledown.py)"
    )
    group.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help=f"GPU hosts, a square (default {DEFAULT_GPUS}, or n*n with --n, or --servers x "
        f"--gpus-per-server), sized by {kept}: at 16, 8 servers of 2 GPUs, 2 per ZCube A switch "
        "and per ROFT rail leaf; the size options below win over the rule ("
        + (
            "each changes the compared fabrics that take it, as long as every fabric keeps one "
            "number of GPU hosts; "
            if compared
            else ""
        )
        + "the old sizes: --gpus-per-server 4 --servers-per-leaf 4)",
    )
    square = "from --gpus: its square root"
    group.add_argument(
        "--n", type=int, help=f"zcube: switches per group (n*n GPUs; default {square})"
    )
    group.add_argument("--m", type=int, help="zcube: parallel links per A-B pair (default 1)")
    group.add_argument(
        "--servers",
        type=int,
        help="roft/clos: servers (default --gpus / --gpus-per-server)",
    )
    group.add_argument(
        "--gpus-per-server",
        type=int,
        help="GPUs per server (= rails on roft; default from --gpus by the scale-down: 2 at 16 "
        "and 64 GPUs; 4 at 16 is the old size)",
    )
    group.add_argument("--spines", type=int, help="roft/clos: spine switches (default 2)")
    group.add_argument(
        "--oversubscription", type=float, help="roft/clos: leaf down:up ratio (default 1)"
    )
    group.add_argument(
        "--servers-per-leaf",
        type=int,
        help="servers under one roft rail leaf or clos leaf (default: roft: several, with "
        "several leaves per rail (2 at 16 GPUs, 4 at 64); clos: 2, or 1 when the servers are "
        "odd)",
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


def gpus_of(kind: str, params: Mapping[str, object]) -> int | None:
    """The GPU hosts the size options `params` fix for a `kind` fabric (None: they do not)."""
    if kind == "zcube" and "n" in params:
        return int(params["n"]) ** 2  # type: ignore[call-overload]
    if kind != "zcube" and "servers" in params and "gpus_per_server" in params:
        return int(params["servers"]) * int(params["gpus_per_server"])  # type: ignore[call-overload]
    return None


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
        if not any(key in PARAMETERS[spec.kind] for spec in specs.values()):
            takers = sorted(k for k, names in PARAMETERS.items() if key in names)
            raise ConfigError(
                key, value, f"a size option of {', '.join(takers)}, none of them compared"
            )
    out = {}
    for kind, spec in specs.items():
        mine = {k: v for k, v in params.items() if k in PARAMETERS[spec.kind]}
        out[kind] = FabricSpec.of(spec.kind, **{**dict(spec.params), **mine}) if mine else spec
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


def sized_spec(kind: str, gpus: int | None, params: Mapping[str, object]) -> FabricSpec:
    """A `kind` fabric of `gpus` GPU hosts (None: what the size options fix, else
    `DEFAULT_GPUS`) by the structure-keeping scale-down, the size options `params` winning;
    a ConfigError when they leave it with another number of GPU hosts."""
    if kind not in BUILDERS:
        raise ConfigError("fabric", kind, f"one of {sorted(BUILDERS)}")
    wanted = gpus if gpus is not None else gpus_of(kind, params) or DEFAULT_GPUS
    spines = int(params.get("spines", 2))  # type: ignore[call-overload]
    over = float(params.get("oversubscription", 1))  # type: ignore[arg-type]
    sizes = scaled_sizes(kind, wanted, params, spines, over)
    spec = FabricSpec.of(kind, **{**sizes, **params})
    hosts = len(build_fabric(spec).hosts)
    if hosts != wanted:
        given = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in params.items())
        raise ConfigError(
            "gpus",
            wanted,
            f"the {hosts} GPU hosts that {given} make: give --gpus {hosts} if it is a square, "
            "or the size options that fix the count (zcube --n; roft/clos --servers and "
            "--gpus-per-server)",
        )
    return spec


def spec_from_args(args: argparse.Namespace) -> FabricSpec:
    """The fabric spec the options describe: --gpus (or what the size options fix) by the
    structure-keeping scale-down, the size options given winning over it."""
    if args.fabric.startswith(FILE_PREFIX):
        from zcube_lab.core.fabric.files import file_spec

        given = size_params(args)
        if given:
            name = next(iter(given))
            raise ConfigError(name, given[name], "no size option with a fabric file: it has one")
        return file_spec(args.fabric.removeprefix(FILE_PREFIX), getattr(args, "gpus", None))
    return sized_spec(args.fabric, getattr(args, "gpus", None), size_params(args))


def add_run_flags(group: argparse._ArgumentGroup, names: tuple[str, ...]) -> None:
    """The flags of these `RunConfig` fields, declared there once."""
    from zcube_lab.core.options import add_flags
    from zcube_lab.emulator.experiment.runconfig import RunConfig

    add_flags(group, RunConfig, names)


def add_link_arguments(group: argparse._ArgumentGroup) -> None:
    """--mtu, --buffer-model, --switch-chip, --queue-packets and --host-queue-packets: packet
    size and queue limits of every shaped link."""
    from zcube_lab.emulator.experiment.runconfig import LINK_FIELDS

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
