"""What a `bmwg run` will do, worked out before any lab (pure; issue 46 item 3): its cases (one
configuration of a test: §8.2's N_burst, window and threshold; §7.4's KV load), the recordings
each trial replays, the thresholds the time scale cannot hold, and the estimated wall time.

§8.2: a trial is N_burst transfers of 16 MB into one host, their starts spread over the window,
repeated every `burst_period_s` for the trial's modelled seconds (at least once).
§5.3: a trial is N disjoint pairs each sending 16 MB messages back to back at line rate.
§7.4: a trial is the EP group (the first half of the hosts) exchanging layer by layer for the
trial's modelled seconds, KV pulls of 16 MB from the other half into its members at the load;
replayed mixed, then each class alone (the draft's isolated cases).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.scaling import check_counts, lab_counts
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.replay import synthetic
from zcube_lab.core.replay.recording import Recording, Transfer
from zcube_lab.core.replay.timescale import DRAFT_THRESHOLDS_BYTES, TimeScale

KV_BYTES = 16e6
VICTIM_BYTES = 1e6
DRAFT_WINDOWS_US = (100.0, 1000.0, 10000.0)
DRAFT_KV_LOADS = (0.5, 0.75)
NIC_GBPS = 400.0
# A burst's period: its window plus this many times its drain at the receiver's line rate.
DRAIN_SLACK = 1.5
# Wall cost model (docs/BENCHMARKS.md, "bmwg"): a lab's bring-up and teardown, a replay's fixed
# cost (agents' start, the common start, the lossless agent's report), and wall seconds per
# modelled second over k, per section, fitted to the quick run's trials on ZCube (§8.2: 0.9-2.2
# wall s a trial for 3-17 modelled ms; §7.4: 12 s a trial, its 1,200 chained EP transfers
# slower than their bytes; §5.3: 1.3-4.1 s a trial for 1-8 pairs, so per pair).
LAB_WALL_S = 5.0
REPLAY_FIXED_WALL_S = 0.8
SLOWDOWN = {"8.2": 0.7, "7.4": 5.5, "5.3": 0.6}


@dataclass(frozen=True)
class Case:
    """One configuration of a test on every fabric: its parameters, XOFF, and its replays."""

    section: str
    params: Mapping[str, Any]
    xoff_bytes: float
    xoff_source: str
    replays: tuple[str, ...]  # "burst"; or "mixed", "ep", "kv"

    @property
    def label(self) -> str:
        return ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.params.items()
        )


@dataclass(frozen=True)
class Refused:
    """A configuration the time scale cannot represent, and why."""

    section: str
    params: Mapping[str, Any]
    why: str


def burst_period_s(n_burst: int, within_s: float, nbytes: float = KV_BYTES) -> float:
    """Modelled seconds between bursts: the window plus the receiver's drain, with slack."""
    return within_s + DRAIN_SLACK * n_burst * nbytes * 8 / (NIC_GBPS * 1e9)


def victim_pair(hosts: Sequence[str], n_burst: int) -> tuple[str, str] | None:
    """§8.2's other-class flow: from the first host after the senders to the host before the
    receiver (a neighbour, so it crosses the links the incast congests), None when the
    senders leave no such pair."""
    r = len(hosts) // 3
    if n_burst > len(hosts) - 3:
        return None
    return hosts[(r + n_burst + 1) % len(hosts)], hosts[r - 1]


def bursts(
    hosts: Sequence[str], n_burst: int, within_s: float, trial_s: float, seed: int
) -> Recording:
    """§8.2's trial: N_burst x 16 MB into one host (a third into the host list, as
    `zcube-lab replay --incast`), within the window, repeated every period for `trial_s`; and
    per burst one VICTIM_BYTES transfer of class "other" (`victim_pair`), started once every
    burst transfer has: the head-of-line delay the pauses impose on other traffic."""
    receiver = hosts[len(hosts) // 3]
    period = burst_period_s(n_burst, within_s)
    count = max(1, math.floor(trial_s / period + 1e-9))
    pair = victim_pair(hosts, n_burst)
    out: list[Transfer] = []
    for b in range(count):
        one = synthetic.incast(hosts, receiver, n_burst, KV_BYTES, within_s, seed * 1000 + b)
        for t in one.transfers:
            out.append(replace(t, id=len(out), start_s=t.start_s + b * period))
        if pair is not None:
            start = b * period + max(t.start_s for t in one.transfers)
            out.append(Transfer(len(out), "other", start, pair[0], pair[1], VICTIM_BYTES))
    meta = {
        "synthetic": "bmwg 8.2 bursts",
        "bursts": count,
        "period_s": period,
        "within_s": within_s,
        "n_burst": n_burst,
        "receiver": receiver,
        "victim": list(pair) if pair else None,
    }
    return Recording(tuple(out), tuple(hosts), meta)


def ep_layers(hosts: Sequence[str], trial_s: float) -> int:
    """EP layers filling `trial_s` uncontended (at least 2)."""
    g = len(hosts) // 2
    one = synthetic.ep_kv_mix(hosts, hosts[:g], hosts[g:], 0.0, layers=1)
    return max(2, round(trial_s / float(one.meta["layer_s"])))


def mix(hosts: Sequence[str], kv_load: float, trial_s: float, seed: int) -> dict[str, Recording]:
    """§7.4's trial: the mixed recording and each class alone."""
    g = len(hosts) // 2
    full = synthetic.ep_kv_mix(
        hosts, hosts[:g], hosts[g:], kv_load, ep_layers(hosts, trial_s), seed=seed
    )
    return {"mixed": full, "ep": full.of_class(["ep"]), "kv": full.of_class(["kv"])}


def pairs(hosts: Sequence[str], n_pairs: int, trial_s: float, seed: int) -> Recording:
    """§5.3's trial: `n_pairs` disjoint pairs (host i to host i + half), each sending 16 MB
    messages back to back at its NIC's line rate for `trial_s` (at least one each); the start
    of each pair's train jittered by up to one message time (`seed`)."""
    import random

    half = len(hosts) // 2
    msg_s = KV_BYTES * 8 / (NIC_GBPS * 1e9)
    count = max(1, math.floor(trial_s / msg_s + 1e-9))
    rng = random.Random(seed)
    out: list[Transfer] = []
    for i in range(n_pairs):
        offset = rng.uniform(0, msg_s)
        for m in range(count):
            out.append(Transfer(len(out), "kv", offset + m * msg_s, hosts[i], hosts[i + half],
                                KV_BYTES, exchange=f"pair{i}"))  # fmt: skip
    meta = {"synthetic": "bmwg 5.3 pairs", "pairs": n_pairs, "messages": count}
    return Recording(tuple(out), tuple(hosts), meta)


def trial_recordings(
    case: Case, hosts: Sequence[str], trial_s: float, seed: int
) -> dict[str, Recording]:
    """The recordings one trial of `case` replays, by replay name."""
    p = case.params
    if case.section == "8.2":
        return {"burst": bursts(hosts, int(p["n_burst"]), p["within_us"] * 1e-6, trial_s, seed)}
    if case.section == "7.4":
        return mix(hosts, float(p["kv_load"]), trial_s, seed)
    if case.section == "5.3":
        return {"pairs": pairs(hosts, int(p["pairs"]), trial_s, seed)}
    raise ConfigError("section", case.section, f"one of {', '.join(cat.RUNNERS)}")


def cases(
    cfg: BmwgConfig, tests: Sequence[cat.BmwgTest], hosts: int, ts: TimeScale, chip_share: float
) -> tuple[list[Case], list[Refused]]:
    """Every case of `tests` the config asks for, and those the time scale refuses.
    ConfigError for a count the fabric cannot carry."""
    out: list[Case] = []
    refused: list[Refused] = []
    for t in tests:
        if t.section == "8.2":
            if cfg.bursts is None:
                ns = lab_counts(cat.SENDERS, (4, 8, 16, 32), hosts)
            else:
                ns = cfg.bursts
                check_counts(cat.SENDERS, "n_burst", ns, hosts)
            for xoff in cfg.thresholds or DRAFT_THRESHOLDS_BYTES:
                try:
                    ts.threshold_frames(xoff, "xoff")
                except ConfigError as e:
                    refused.append(Refused("8.2", {"xoff_bytes": xoff}, str(e)))
                    continue
                for n in ns:
                    for w in cfg.windows_us or DRAFT_WINDOWS_US:
                        params = {"n_burst": n, "within_us": w, "xoff_bytes": xoff}
                        out.append(
                            Case("8.2", params, xoff, f"{xoff:,.0f} B (draft's)", ("burst",))
                        )
        elif t.section == "5.3":
            if cfg.pair_counts is None:
                ps = lab_counts(cat.PAIRS, (1, 2, 4, 8, 16, 32, 64, 128), hosts)
            else:
                ps = cfg.pair_counts
                check_counts(cat.PAIRS, "pairs", ps, hosts)
            for n in ps:
                out.append(Case("5.3", {"pairs": n}, chip_share,
                                f"51.2T chip's per-port share ({chip_share:,.0f} B)",
                                ("pairs",)))  # fmt: skip
        elif t.section == "7.4":
            for load in cfg.kv_loads or DRAFT_KV_LOADS:
                out.append(
                    Case(
                        "7.4",
                        {"kv_load": load},
                        chip_share,
                        f"51.2T chip's per-port share ({chip_share:,.0f} B)",
                        ("mixed", "ep", "kv"),
                    )
                )
    return out, refused


# A trial's recording is held whole by the planner and each host's agent: past this many
# transfers a trial is refused before any lab (about 100 MB of plans).
MAX_TRANSFERS = 200_000


def trial_size(case: Case, hosts: Sequence[str], trial_s: float) -> tuple[int, float]:
    """(transfers, modelled seconds) of one trial's replays of `case`, without building them."""
    p = case.params
    if case.section == "8.2":
        n, w = int(p["n_burst"]), float(p["within_us"]) * 1e-6
        period = burst_period_s(n, w)
        count = max(1, math.floor(trial_s / period + 1e-9))
        return count * (n + 1), count * period
    if case.section == "5.3":
        count = max(1, math.floor(trial_s / (KV_BYTES * 8 / (NIC_GBPS * 1e9)) + 1e-9))
        return count * int(p["pairs"]), trial_s
    g = len(hosts) // 2
    layer_s = float(synthetic.ep_kv_mix(hosts, hosts[:g], hosts[g:], 0.0, 1).meta["layer_s"])
    span = max(2, round(trial_s / layer_s)) * layer_s
    kv = float(p["kv_load"]) * g * NIC_GBPS * 1e9 / 8 / KV_BYTES * span
    transfers = round(span / layer_s) * g * (g - 1) * 2 + round(kv)
    # mixed, then EP alone, then KV alone
    return 2 * transfers, 3 * span


def check_size(plan_cases: Sequence[Case], hosts: Sequence[str], trial_s: float) -> None:
    """A ConfigError when a trial is too large to hold, naming the longest trial that fits."""
    for c in plan_cases:
        n, _ = trial_size(c, hosts, trial_s)
        if n > MAX_TRANSFERS:
            fits = trial_s * MAX_TRANSFERS / n
            raise ConfigError(
                "trial_seconds",
                trial_s,
                f"at most {fits:.3g} modelled s for section {c.section} ({c.label}): a trial "
                f"of {trial_s:g} s is {n:,} transfers, past the {MAX_TRANSFERS:,} a replay's "
                f"plans hold",
            )


def estimate_wall_s(
    plan_cases: Sequence[Case], hosts: Sequence[str], fabrics: int, trials: int,
    trial_s: float, ts: TimeScale,
) -> float:  # fmt: skip
    """Wall seconds the run should take (the cost model above)."""
    labs = len({c.xoff_bytes for c in plan_cases}) * fabrics
    per_fabric = 0.0
    for c in plan_cases:
        _, modelled = trial_size(c, hosts, trial_s)
        per_fabric += trials * (
            len(c.replays) * REPLAY_FIXED_WALL_S
            + ts.clock.wall(modelled) * SLOWDOWN[c.section] * int(c.params.get("pairs", 1))
        )
    return labs * LAB_WALL_S + fabrics * per_fabric
