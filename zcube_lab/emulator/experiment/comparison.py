"""Comparison of variants: the same workload on several fabrics and run policies, repeated, with
the runs interleaved so machine noise spreads evenly over the variants. Used by `zcube-lab
compare` and by the benchmarks in `bench/`.

Names: a *variant* is one fabric with one run policy; its *label* is the one its run plan gives
its runs (`zcube`, `zcube/spray`, `roft-2planes/ff`), which the report groups by. A *planned run*
is one repeat of one variant, its config tagged `r<repeat>` (or `<policy>-r<repeat>` when the
policies differ); both are defined beside the shared run loop (`runloop`). Planning is pure:
building each variant's run plan once validates the fabric, placement, policy and faults before
the first run starts (fail in seconds, not after a run); running needs root.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import BUILDERS, build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.fabric.scaledown import scaled_sizes
from zcube_lab.emulator.experiment.launcher import RunResult
from zcube_lab.emulator.experiment.plan import RunConfig, plan_run
from zcube_lab.emulator.experiment.runloop import (
    Execute,
    LoopConfig,
    PlannedRun,
    RunLoop,
    Variant,
    check_retries,
)
from zcube_lab.emulator.results.fabric.linkstats import port_capacity_bps


def fabric_specs(
    kinds: Sequence[str],
    gpus: int,
    spines: int,
    planes: int = 1,
    oversubscription: float = 1,
    sizes: Mapping[str, object] | None = None,
) -> dict[str, FabricSpec]:
    """Same-size fabrics: the same GPU hosts (gid -> server, rank) on each, sized by the
    scale-down rule (`zcube_lab.core.fabric.scaledown`: structure-keeping unless `sizes`, the
    size options given, say otherwise); ROFT and Clos leaves `oversubscription`:1 (ZCube has
    no tier to oversubscribe)."""
    over = int(oversubscription) if float(oversubscription).is_integer() else oversubscription
    over_kw = {"oversubscription": over} if oversubscription != 1 else {}
    specs = {}
    for k in kinds:
        if k.startswith("file:"):  # a fabric file (docs/FABRIC_FILES.md), at its own size
            from zcube_lab.core.fabric.files import file_spec

            specs[k] = file_spec(k.removeprefix("file:"), gpus)
            continue
        if k not in BUILDERS:
            raise ConfigError("fabrics", k, f"comma-separated from {list(BUILDERS)}")
        size = scaled_sizes(k, gpus, sizes, spines, oversubscription)
        if k == "zcube":
            specs[k] = FabricSpec.of("zcube", **size)
        else:
            specs[k] = FabricSpec.of(
                k,
                **size,
                spines=spines,
                planes=planes if planes != 1 and k == "roft" else None,
                **over_kw,
            )
    return specs


def check_fault_prefixes(faults: Sequence[str], kinds: Sequence[str]) -> None:
    """A `<fabric>:` prefix on a --fail spec must name one of the compared fabrics."""
    for text in faults:
        head, sep, _ = text.partition(":")
        if sep and head.strip().lower() in BUILDERS and head.strip().lower() not in kinds:
            raise ConfigError("fail", text, f"a prefix among the compared fabrics {list(kinds)}")


def plan_variants(
    base: RunConfig,
    specs: Mapping[str, FabricSpec],
    policies: Sequence[str],
    faults: Mapping[str, tuple[str, ...]] | None = None,
) -> list[Variant]:
    """Every fabric with every policy (fabric-major), each validated by building its
    Experiment; `faults` replaces the base config's faults on the fabrics it names."""
    out = []
    for kind, spec in specs.items():
        for policy in policies:
            cfg = replace(
                base, fabric=spec, policy=policy, faults=(faults or {}).get(kind, base.faults)
            )
            out.append(Variant(kind, policy, plan_run(cfg).label, cfg))
    return out


def interleave(
    variants: Sequence[Variant], repeat: int, tag_policy: bool | None = None
) -> list[PlannedRun]:
    """Every variant `repeat` times, repeat-major (all variants once, then again), each config
    tagged with its repeat, and with its policy when `tag_policy` (default: when the variants'
    policies differ)."""
    if repeat < 1:
        raise ConfigError("repeat", repeat, "at least 1")
    if tag_policy is None:
        tag_policy = len({v.policy for v in variants}) > 1
    total = len(variants) * repeat
    runs = []
    for rep in range(1, repeat + 1):
        for v in variants:
            tag = f"{v.policy}-r{rep}" if tag_policy else f"r{rep}"
            cfg = replace(v.config, tag=tag)
            runs.append(PlannedRun(len(runs) + 1, total, rep, repeat, v, cfg))
    return runs


def resolve_baseline(baseline: str | None, labels: Sequence[str]) -> str:
    """The label the differences are taken against: `baseline` itself, or the first label of
    that fabric (`roft` -> `roft/ff` when only policies label the runs), or of that fabric kind
    (`roft` -> `roft-2planes` when a size option labels it). None (not given): ROFT's when ROFT
    is compared, else the first fabric's, so one fabric alone needs no --baseline."""
    if baseline is None:
        has_roft = any(lb.split("/")[0].split("-")[0] == "roft" for lb in labels)
        baseline = "roft" if has_roft or not labels else labels[0]
    if baseline in labels:
        return baseline
    matches = [lb for lb in labels if lb.split("/")[0] == baseline]
    matches = matches or [lb for lb in labels if lb.split("/")[0].split("-")[0] == baseline]
    if not matches:
        raise ConfigError("baseline", baseline, f"one of the compared fabrics {list(labels)}")
    return matches[0]


def run_planned(
    plan: Sequence[PlannedRun],
    progress: Callable[[str], None] | None = None,
    starting: Callable[[PlannedRun], None] | None = None,
    retries: int | str = 0,
    execute: Execute | None = None,
) -> Iterator[tuple[PlannedRun, RunResult]]:
    """Run the plan in order through the shared run loop (`zcube_lab.emulator.experiment.runloop`: a
    run the machine alone spoiled runs again, up to `retries` times), yielding each run's last
    attempt as it completes (a caller that stops on an error keeps the results before it).
    Every run tears itself down. `retries` is checked before the first run; `compare` passes
    its --retries (default 2), a benchmark that passes none keeps each run as it ran."""
    loop = RunLoop(
        execute, config=LoopConfig(check_retries(retries)), progress=progress, starting=starting
    )
    return ((o.planned, o.result) for o in loop.over(plan))


def port_capacities(
    specs: Mapping[str, FabricSpec], nic_mbps: float, dilation: float = 1.0
) -> dict[str, dict[str, float]]:
    """fabric kind -> `switch:port` -> emulated (shaped) capacity in bit/s (the heatmaps'
    scale)."""
    scale = Scale(nic_mbps=nic_mbps, dilation=dilation)
    return {
        kind: {f"{s}:{p}": v for (s, p), v in port_capacity_bps(build_fabric(spec), scale).items()}
        for kind, spec in specs.items()
    }
