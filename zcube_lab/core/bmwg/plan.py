"""What a `bmwg run` will do, worked out before any lab (pure; issue 46 item 3): its cases (one
configuration of a test: §8.2's N_burst, window and threshold; §7.4's KV load), the recordings
each trial replays, the thresholds the time scale cannot hold, and the estimated wall time.

§8.2: a trial is N_burst transfers of 16 MB into one host, their starts spread over the window,
repeated every `burst_period_s` for the trial's modelled seconds (at least once).
§5.1: a trial is rounds of Q parallel transfers (the draft's QPs) of one message size between
one pair of hosts on different servers (the first host and the one half the list on), each
round as the previous one would end at line rate, at most ROUNDS_MAX rounds and as many as
fill the trial; a (size, QPs) whose one round is longer than the trial is refused.
§5.2: a trial is the same pair's KV messages, one every KV_SPACING line-rate times of a
message (at most KV_MAX of them, as many as fill the trial), while every other host pair
(host i to host i + half) sends BG_BYTES messages of class "other" at the background load of
its NIC, crossing the same switches.
§10.4: §5.2's trial with one KV message size (SIZE_104 unless `--sizes`) at each background
level from 0 to 0.95 in steps of 0.05 (`--levels` for fewer); the inflection point comes from
the p99 over the levels (`zcube_lab.core.bmwg.report.inflection_point`).
§5.3: a trial is N disjoint pairs each sending 16 MB messages back to back at line rate.
§7.4: a trial is the EP group (the first half of the hosts) exchanging layer by layer for the
trial's modelled seconds, KV pulls of 16 MB from the other half into its members at the load;
replayed mixed, then each class alone (the draft's isolated cases).
§8.4: a trial is `zcube_lab.core.bmwg.pfcstorm.storm_trial` (a stuck receiver's window in KV
traffic on every path it can reach), one case.

Before any lab, a background level or pair count the lab cannot carry is refused: a level
outside 0-0.95, or one whose offered wall rate (every sender at its share of a NIC's shaped
wall rate) is past the datapath's measured ceiling (`check_level`, `check_pairs`). A value the
run was asked for is a ConfigError naming the field and the allowed range; one of the draft's
defaults is reported as not run. That bound is necessary, not sufficient: a background that
fits it can still fall short of its level, which the results say (`load_short`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from zcube_lab.core.bmwg import alltoall as a2a
from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import pfcstorm
from zcube_lab.core.bmwg.config import MAX_LEVEL, BmwgConfig
from zcube_lab.core.bmwg.scaling import check_counts, lab_counts, lab_qps
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
# §5.1 and §5.2 are not fitted yet: §5.3's one-pair figure, §5.2's per pair of hosts.
SLOWDOWN = {"8.2": 0.7, "7.4": 5.5, "5.3": 0.6, "5.1": 0.6, "5.2": 0.6, "10.4": 0.6}
# §7.1 and §7.3 (EP alone): §7.4's chained EP figure until fitted
SLOWDOWN.update({s: 5.5 for s in a2a.SECTIONS})
SLOWDOWN["8.4"] = 0.7  # §8.2's figure until fitted
ROUNDS_MAX = 16
KV_SPACING = 4.0
KV_MAX = 64
BG_BYTES = 1e6
DRAFT_SIZES_51 = cat.BY_SECTION["5.1"].params[0].draft
DRAFT_SIZES_52 = cat.BY_SECTION["5.2"].params[0].draft
DRAFT_BG_LOADS = cat.BY_SECTION["5.2"].params[1].draft
DRAFT_LEVELS_104 = cat.BY_SECTION["10.4"].params[0].draft
SIZE_104 = 1e6
LOADED = ("5.2", "10.4")  # the sections whose trial is `loaded`


def value_text(v: Any) -> str:
    """A parameter's value in a case label, one way for every run: a whole number as its
    digits (1e6 and 1000000 both "1000000"), another number by `g`, anything else as is."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:g}"


def label_of(params: Mapping[str, Any]) -> str:
    """A case's label: "name=value, ..." in the params' order (`value_text`)."""
    return ", ".join(f"{k}={value_text(v)}" for k, v in params.items())


def relabel(label: str) -> str:
    """A label written by an older run (where 1e6 printed as "1e+06") as `label_of` writes it
    now; parts that are not "name=number" kept as they are."""
    out = []
    for part in label.split(", "):
        k, eq, v = part.partition("=")
        try:
            out.append(f"{k}={value_text(float(v))}" if eq else part)
        except ValueError:
            out.append(part)
    return ", ".join(out)


@dataclass(frozen=True)
class Case:
    """One configuration of a test on every fabric: its parameters, XOFF, and its replays."""

    section: str
    params: Mapping[str, Any]
    xoff_bytes: float
    xoff_source: str
    replays: tuple[str, ...]  # "burst"; or "mixed", "ep", "kv"
    # k the case replays at on every fabric (the runner's pace, `...emulator.bmwg.runner.paced`);
    # 0: the plan's time scale's own
    dilation: float = 0.0

    @property
    def label(self) -> str:
        return label_of(self.params)


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


def line_s(nbytes: float) -> float:
    """Modelled seconds of `nbytes` real bytes at one NIC's line rate."""
    return nbytes * 8 / (NIC_GBPS * 1e9)


def xfer_pair(hosts: Sequence[str]) -> tuple[str, str]:
    """§5.1's and §5.2's pair: the first host and the one half the list on (different servers
    on the fabrics here: two GPU hosts a server)."""
    return hosts[0], hosts[len(hosts) // 2]


def qp_rounds(size: float, qps: int, trial_s: float) -> int:
    """§5.1's rounds in a trial: as many line-rate rounds as fill it, 1 to ROUNDS_MAX."""
    return max(1, min(ROUNDS_MAX, math.floor(trial_s / line_s(qps * size) + 1e-9)))


def qp_trains(hosts: Sequence[str], size: float, qps: int, trial_s: float) -> Recording:
    """§5.1's trial (module docstring): `qp_rounds` rounds of `qps` transfers of `size` real
    bytes from the pair's first host to its second, all of a round starting together; each
    transfer's `exchange` names its QP."""
    src, dst = xfer_pair(hosts)
    step = line_s(qps * size)
    out = [Transfer(r * qps + q, "kv", r * step, src, dst, size, exchange=f"qp{q}")
           for r in range(qp_rounds(size, qps, trial_s)) for q in range(qps)]  # fmt: skip
    meta = {"synthetic": "bmwg 5.1 QPs", "rounds": len(out) // qps, "period_s": step}
    return Recording(tuple(out), tuple(hosts), meta)


def kv_count(size: float, trial_s: float) -> int:
    """§5.2's KV messages in a trial: one every KV_SPACING line-rate times, 1 to KV_MAX."""
    return max(1, min(KV_MAX, math.floor(trial_s / (KV_SPACING * line_s(size)) + 1e-9)))


def loaded(hosts: Sequence[str], size: float, load: float, trial_s: float, seed: int) -> Recording:
    """§5.2's trial (module docstring): the pair's `kv_count` KV messages of `size`, and for
    the span they cover every other pair (host i to host i + half, i > 0) sending BG_BYTES
    messages of class "other" every BG_BYTES / (load x line rate), the first at a random
    phase within one period (`seed`); no background at load 0."""
    import random

    src, dst = xfer_pair(hosts)
    period = KV_SPACING * line_s(size)
    n = kv_count(size, trial_s)
    span = n * period
    out = [Transfer(i, "kv", i * period, src, dst, size) for i in range(n)]
    rng = random.Random(seed)
    half = len(hosts) // 2
    if load > 0:
        bg = line_s(BG_BYTES) / load
        for i in range(1, half):
            start = rng.uniform(0, bg)
            while start < span:
                out.append(Transfer(len(out), "other", start, hosts[i], hosts[i + half],
                                    BG_BYTES, exchange=f"bg{i}"))  # fmt: skip
                start += bg
    meta = {"synthetic": "bmwg 5.2 loaded", "kv_messages": n, "period_s": period,
            "bg_load": load, "span_s": span}  # fmt: skip
    return Recording(tuple(out), tuple(hosts), meta)


def bg_offered_gbps(hosts: Sequence[str], load: float) -> float:
    """§5.2's background as offered (real GB/s): every other pair at `load` of its NIC."""
    return (len(hosts) // 2 - 1) * load * NIC_GBPS / 8


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
    if case.section == "5.1":
        return {"qps": qp_trains(hosts, float(p["size_bytes"]), int(p["qps"]), trial_s)}
    if case.section in a2a.SECTIONS:
        return {"ep": a2a.exchanges(hosts, int(p["tokens"]), int(p["ep_size"]), trial_s)}
    if case.section in LOADED:
        return {"loaded": loaded(hosts, float(p["size_bytes"]), float(p["bg_load"]), trial_s,
                                 seed)}  # fmt: skip
    if case.section == "8.4":
        return {"storm": pfcstorm.storm_trial(hosts, trial_s, seed)}
    raise ConfigError("section", case.section, f"one of {', '.join(cat.RUNNERS)}")


def max_level(hosts: int, ts: TimeScale, ceiling_mbps: float) -> float:
    """The highest background level (`loaded`) whose offered wall rate fits the datapath's
    ceiling: the KV pair at a NIC's shaped wall rate and the other hosts // 2 - 1 pairs at the
    level of it, so (ceiling / wall rate - 1) / (pairs), at most MAX_LEVEL; -1 when not even
    the KV pair fits."""
    bg_pairs = hosts // 2 - 1
    room = ceiling_mbps / ts.wall_nic_mbps - 1
    if room < 0:
        return -1.0
    return MAX_LEVEL if bg_pairs < 1 else min(MAX_LEVEL, room / bg_pairs)


def check_level(
    name: str, level: float, hosts: int, ts: TimeScale, ceiling_mbps: float | None
) -> None:
    """A ConfigError naming `name` when the lab cannot carry background `level` (module
    docstring): outside 0-MAX_LEVEL, or past `max_level` (unchecked when `ceiling_mbps` is
    None)."""
    if not 0 <= level <= MAX_LEVEL:
        raise ConfigError(name, level, f"a fraction from 0 to {MAX_LEVEL:g}")
    if ceiling_mbps is None:
        return
    top = max_level(hosts, ts, ceiling_mbps)
    if level > top + 1e-9:
        bg = hosts // 2 - 1
        offered = ts.wall_nic_mbps * (1 + bg * level)
        allowed = f"0 to {top:.2f}" if top >= 0 else "none (not even the KV pair fits)"
        why = (
            f"{allowed} on {hosts} GPU hosts: the KV pair and {bg} background pairs at "
            f"{level:.0%} of a NIC's {ts.wall_nic_mbps:g} Mb/s wall rate offer "
            f"{offered:,.0f} Mb/s, past the datapath's ceiling of {ceiling_mbps:,.0f} Mb/s"
        )
        raise ConfigError(name, level, why)


def check_pairs(n: int, ts: TimeScale, ceiling_mbps: float | None) -> None:
    """A ConfigError naming "pairs" when `n` pairs at a NIC's shaped wall rate each (§5.3's
    trains) offer more than the datapath's `ceiling_mbps` (unchecked when None)."""
    if ceiling_mbps is None:
        return
    most = math.floor(ceiling_mbps / ts.wall_nic_mbps + 1e-9)
    if n > most:
        why = (
            f"1 to {most}: {n} pairs at a NIC's {ts.wall_nic_mbps:g} Mb/s wall rate offer "
            f"{n * ts.wall_nic_mbps:,.0f} Mb/s, past the datapath's ceiling of "
            f"{ceiling_mbps:,.0f} Mb/s"
        )
        raise ConfigError("pairs", n, why)


def _carried(
    section: str,
    params: Mapping[str, Any],
    check: Callable[[], None],
    asked: bool,
    refused: list[Refused],
) -> bool:
    """Run `check`; a ConfigError raises for a value the run asked for and is recorded as
    refused (False) for one of the draft's defaults."""
    try:
        check()
    except ConfigError as e:
        if asked:
            raise
        refused.append(Refused(section, params, str(e)))
        return False
    return True


def cases(
    cfg: BmwgConfig,
    tests: Sequence[cat.BmwgTest],
    hosts: int,
    ts: TimeScale,
    chip_share: float,
    ceiling_mbps: float | None = None,
) -> tuple[list[Case], list[Refused]]:
    """Every case of `tests` the config asks for, and those the time scale refuses.
    ConfigError for a count the fabric cannot carry, or a background level or pair count the
    datapath's `ceiling_mbps` (Mb/s of wall rate in all; None: not checked) cannot carry
    (module docstring)."""
    out: list[Case] = []
    refused: list[Refused] = []
    share = f"51.2T chip's per-port share ({chip_share:,.0f} B)"  # where XOFF comes from
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
                check = lambda n=n: check_pairs(n, ts, ceiling_mbps)  # noqa: E731
                if not _carried("5.3", {"pairs": n}, check, cfg.pair_counts is not None,
                                refused):  # fmt: skip
                    continue
                out.append(Case("5.3", {"pairs": n}, chip_share,
                                share,
                                ("pairs",)))  # fmt: skip
        elif t.section == "5.1":
            qs = lab_qps(cfg.qp_counts or cat.BY_SECTION["5.1"].params[1].draft)
            if (cfg.qp_counts and max(cfg.qp_counts) > cat.MAX_QPS) or min(qs) < 1:
                raise ConfigError("qps", cfg.qp_counts, f"1 to {cat.MAX_QPS}")
            for q in qs:
                for size in cfg.message_sizes or DRAFT_SIZES_51:
                    params = {"size_bytes": size, "qps": q}
                    if line_s(q * size) > cfg.trial_seconds:
                        refused.append(Refused("5.1", params, (
                            f"one round of {q} x {size:,.0f} B takes "
                            f"{line_s(q * size) * 1e3:.3g} modelled ms at line rate, longer "
                            f"than the trial's {cfg.trial_seconds * 1e3:g} ms")))  # fmt: skip
                        continue
                    out.append(Case("5.1", params, chip_share,
                                    share,
                                    ("qps",)))  # fmt: skip
        elif t.section in LOADED:
            if t.section == "5.2":
                sizes, asked = cfg.message_sizes or DRAFT_SIZES_52, cfg.bg_loads
                levels, field = cfg.bg_loads or DRAFT_BG_LOADS, "loads"
            else:
                sizes, asked = cfg.message_sizes or (SIZE_104,), cfg.bg_levels
                levels, field = cfg.bg_levels or DRAFT_LEVELS_104, "levels"
            for size in sizes:
                for load in levels:
                    params = {"size_bytes": size, "bg_load": load}
                    if KV_SPACING * line_s(size) > cfg.trial_seconds:
                        refused.append(Refused(t.section, params, (
                            f"one {size:,.0f} B message and its spacing take "
                            f"{KV_SPACING * line_s(size) * 1e3:.3g} modelled ms, longer than "
                            f"the trial's {cfg.trial_seconds * 1e3:g} ms")))  # fmt: skip
                        continue
                    check = lambda f=field, v=load: check_level(f, v, hosts, ts, ceiling_mbps)  # noqa: E731
                    if not _carried(t.section, params, check, asked is not None, refused):
                        continue
                    out.append(Case(t.section, params, chip_share,
                                    share,
                                    ("loaded",)))  # fmt: skip
        elif t.section in a2a.SECTIONS:
            ok, no = a2a.case_params(t.section, hosts, ts, cfg.ep_tokens, cfg.ep_group_sizes)
            refused += [Refused(t.section, params, why) for params, why in no]
            out += [Case(t.section, params, chip_share, share, ("ep",)) for params in ok]
        elif t.section == "8.4":
            pfcstorm.check_trial(cfg.trial_seconds)
            params = {"stuck_share": pfcstorm.STUCK_SHARE, "in_load": pfcstorm.IN_LOAD,
                      "victim_load": pfcstorm.VICTIM_LOAD,
                      "msg_bytes": pfcstorm.MSG_BYTES}  # fmt: skip
            out.append(Case("8.4", params, chip_share, share, ("storm",)))
        elif t.section == "7.4":
            for load in cfg.kv_loads or DRAFT_KV_LOADS:
                out.append(
                    Case(
                        "7.4",
                        {"kv_load": load},
                        chip_share,
                        share,
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
    if case.section == "5.1":
        size, q = float(p["size_bytes"]), int(p["qps"])
        rounds = qp_rounds(size, q, trial_s)
        return rounds * q, rounds * line_s(q * size)
    if case.section in a2a.SECTIONS:
        return a2a.trial_size(int(p["tokens"]), int(p["ep_size"]), trial_s)
    if case.section == "8.4":
        return pfcstorm.trial_size(hosts, trial_s), trial_s
    if case.section in LOADED:
        size, load = float(p["size_bytes"]), float(p["bg_load"])
        n = kv_count(size, trial_s)
        span = n * KV_SPACING * line_s(size)
        bg = 0 if load <= 0 else math.ceil(span * load / line_s(BG_BYTES))
        return n + (len(hosts) // 2 - 1) * bg, span
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


def _pairs(c: Case, hosts: Sequence[str]) -> int:
    """Host pairs a case's trial keeps busy (the cost model's multiplier)."""
    if c.section in LOADED:
        return len(hosts) // 2 if float(c.params["bg_load"]) > 0 else 1
    return int(c.params.get("pairs", 1))


def estimate_wall_s(
    plan_cases: Sequence[Case], hosts: Sequence[str], fabrics: int, trials: int,
    trial_s: float, ts: TimeScale,
) -> float:  # fmt: skip
    """Wall seconds the run should take (the cost model above); a case at its own k (its
    `dilation`) costs its modelled time at that k, and each (XOFF, k) is a lab."""
    labs = len({(c.xoff_bytes, c.dilation) for c in plan_cases}) * fabrics
    per_fabric = 0.0
    for c in plan_cases:
        _, modelled = trial_size(c, hosts, trial_s)
        clock = ts.at_dilation(c.dilation).clock if c.dilation else ts.clock
        per_fabric += trials * (
            len(c.replays) * REPLAY_FIXED_WALL_S
            + clock.wall(modelled) * SLOWDOWN[c.section] * _pairs(c, hosts)
        )
    return labs * LAB_WALL_S + fabrics * per_fabric
