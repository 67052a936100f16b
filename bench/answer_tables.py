"""docs/RESULTS.md's current answer, generated from the committed JSON (issue 44 item 7).

    .venv/bin/python -m bench.map_tables --table answer          # the answer (prose and table)
    .venv/bin/python -m bench.map_tables --table status-ROW      # a cell page's status block
    .venv/bin/python -m bench.map_tables --write                 # rewrite every generated block

The answer is prose written as templates (`ANSWER`): every figure in it is a `{field}` that
`figures()` fills from `bench/results/` (the map's sweep and cell JSON, the kept comparisons,
the victim-flow bench) or from the library's own arithmetic (`zcube-lab cost`'s pricing, the
time resolution). A template holds no figure of its own: tests/unit/test_answer_tables.py fails
on a digit in a template's text, and the production claim's figures are checked against
docs/DOMAIN.md, where they are quoted from the deployment's report.

Each answer row (`ANSWER_ROWS`) unites the sweeps of one cell on the structure-keeping sizes
(the same seeds, the same dilation k) and judges them by
`zcube_lab.emulator.results.sweep.capacity`, as the sweep does. The row's word is one of the results
words of docs/GLOSSARY.md ("Results words"): `word()` is the rule that picks it.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.map_data import COMPARES, MAP, VICTIM_FLOW, capacity_text, knee, load_cell, load_runs
from bench.replay_tables import fine_figures
from bench.victim_flow import mbps
from zcube_lab.core.fabric.cost import compare
from zcube_lab.core.fabric.pricing import CostInputs
from zcube_lab.core.fabric.resolution import MTUS, NIC_MBPS, real_shares_s, resolution
from zcube_lab.emulator.results.sweep.capacity import Capacity, capacity
from zcube_lab.emulator.results.sweep.sweeppoints import RunPoint

# The deployment's report, as docs/DOMAIN.md quotes it (a test checks each there).
CLAIM_THROUGHPUT_PCT = 15.0  # mean inference throughput per GPU, higher
CLAIM_TTFT_P99_PCT = 40.6  # TTFT p99, lower
CLAIM_CAPEX_PCT = 33.0  # switches and optics, lower
CLAIM_GPUS = 1000  # "~1000-GPU"
COST_INPUTS = CostInputs(gpus=1024, nic_gbps=400, switch_ports=64, port_gbps=400)

# The results words (docs/GLOSSARY.md, "Results words"), defined once.
TIE = "measured tie"
DIFFERENCE = "measured difference"
CENSORED = "censored"
UNTRUSTED = "untrusted"
OUT_OF_REACH = "out of reach at this time scale"
WORDS = (TIE, DIFFERENCE, CENSORED, UNTRUSTED, OUT_OF_REACH)
GLOSSARY = "GLOSSARY.md#results-words"
LABEL = {"zcube": "ZCube", "roft": "ROFT", "clos": "Clos", "roft-2planes": "2-plane ROFT"}


@dataclass(frozen=True)
class AnswerRow:
    """One cell of the answer: the sweeps it unites, the rate its TTFT is compared at, its page."""

    key: str
    label: str
    cells: tuple[str, ...]
    rate: float  # the common rate of its first cell: every run of every fabric trusted there
    page: str

    def runs(self, folder: Path = MAP) -> list[RunPoint]:
        """Every run point of the row's sweeps."""
        return [r for c in self.cells for r in load_runs(c, folder)]

    def variants(self, folder: Path = MAP) -> list[str]:
        """The fabrics, in the first cell's order."""
        seen: dict[str, None] = {}
        for c in self.cells:
            seen.update(dict.fromkeys(load_cell(c, folder)["fabrics"]))
        return list(seen)


ANSWER_ROWS = (
    AnswerRow("kv-heavy", "kv-heavy (lossless, k=4)", ("kv-heavy-structure",
              "kv-heavy-structure-fine"), 32.0, "results/kv-heavy.md"),
    AnswerRow("hotspot", "hotspot, the shifting incast (lossless, k=4)",
              ("hotspot-structure-fine", "hotspot-structure-k4"), 21.0, "results/hotspot.md"),
    AnswerRow("production", "production: EP and KV under PFC (lossless, k=2)",
              ("production-low", "production"), 0.5, "results/production.md"),
    AnswerRow("ep", "expert parallelism on both NIC ports (lossy, k=1)",
              ("ep-ports-all", "ep-ports-clos"), 0.5, "results/ep.md"),
)  # fmt: skip

PAGES = (
    ("the default comparison, what `scripts/main.sh` runs", "results/default.md"),
    ("production", "results/production.md"),
    ("expert parallelism and the EP wire's choices", "results/ep.md"),
    ("kv-heavy", "results/kv-heavy.md"),
    ("hotspot", "results/hotspot.md"),
    ("the victim flow beside an incast", "results/victim-flow.md"),
    ("2-plane ROFT with the MRC-style transport", "results/mrc-2plane.md"),
    ("the verdict's KV-pull rule re-read", "results/kv-pull-rule.md"),
    ("the time scale a pause lives on", "results/time-scale.md"),
    ("sensitivity to the congestion model", "results/sensitivity.md"),
    ("failures", "results/failures.md"),
    ("known limits", "results/limits.md"),
)


ALLOWED = ("p99", "p50")  # names that hold a digit and are no figure


def literal_figures(template: str) -> list[str]:
    """The figures a template writes in its own text, outside its `{fields}`: there must be
    none, every figure comes from the data."""
    text = re.sub(r"\{[a-z_0-9]+\}", " ", template)
    for name in ALLOWED:
        text = text.replace(name, " ")
    return re.findall(r"\d+(?:[.,]\d+)*", text)


def pct(x: float) -> str:
    """A signed percentage, whole: `+24%`, `-2%`, `0%`."""
    text = f"{x:+.0%}"
    return "0%" if text in ("+0%", "-0%") else text


def num(x: float) -> str:
    """A figure as the tables print it: `0.94`, `32`, `22.5`."""
    return f"{x:g}"


def span(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """`a` when all equal, else `lo to hi` (lo, hi as `fmt` prints them)."""
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def dash(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """`a` when all equal, else `lo-hi`."""
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def capacities(row: AnswerRow, folder: Path = MAP) -> dict[str, Capacity]:
    """Each fabric's capacity over the row's sweeps united, by the sweep's rule."""
    runs = row.runs(folder)
    return {v: capacity([r for r in runs if r.variant == v]) for v in row.variants(folder)}


def word(caps: Sequence[Capacity], trusted: int) -> str:
    """The results word a comparison of capacities earns (docs/GLOSSARY.md)."""
    if trusted == 0:
        return UNTRUSTED
    if any(c.censored for c in caps):
        return CENSORED
    return TIE if len({c.rate for c in caps}) == 1 else DIFFERENCE


def seed_gaps(row: AnswerRow, folder: Path = MAP) -> list[float]:
    """Per seed at the row's rate, how far apart the fabrics' TTFT p99 are (highest over lowest,
    less one), over seeds where every fabric's run is trusted."""
    runs = [r for r in row.runs(folder) if r.rate == row.rate]
    fabrics = row.variants(folder)
    gaps = []
    for seed in sorted({r.repeat for r in runs}):
        got = [r for r in runs if r.repeat == seed]
        if {r.variant for r in got} != set(fabrics) or not all(r.trustworthy for r in got):
            continue
        p99 = [r.ttft_p99_s for r in got if r.ttft_p99_s]
        gaps.append(max(p99) / min(p99) - 1)
    return gaps


def odd_seeds(caps: dict[str, Capacity]) -> list[str]:
    """The seeds whose knee interval is not the same on every fabric: `ROFT's seed 3 (34.5-37
    against 32-34.5)`, naming the fabric whose interval differs from the others'."""
    out = []
    by_seed: dict[int, dict[str, str]] = {}
    for v, c in caps.items():
        for r in c.repeats:
            by_seed.setdefault(r.repeat, {})[v] = knee(r)
    for seed, knees in sorted(by_seed.items()):
        if len(set(knees.values())) == 1:
            continue
        common = statistics.mode(knees.values())
        for v, k in knees.items():
            if k != common:
                out.append(f"{LABEL.get(v, v)}'s seed {seed} ({k} against {common})")
    return out


def ahead(caps: dict[str, Capacity]) -> list[str]:
    """The fabrics whose capacity is above every other fabric's in every seed."""
    seeds = [{r.repeat: r.rate for r in c.repeats} for c in caps.values()]
    out = []
    for i, v in enumerate(caps):
        others = [s for j, s in enumerate(seeds) if j != i]
        if seeds[i] and all(
            all(rate > o.get(seed, float("inf")) for o in others) for seed, rate in seeds[i].items()
        ):
            out.append(LABEL.get(v, v))
    return out


def steps(row: AnswerRow, folder: Path = MAP) -> float:
    """The ladder's largest step between consecutive rates of the row's sweeps (a share)."""
    rates = sorted({r.rate for r in row.runs(folder)})
    return max(b / a - 1 for a, b in itertools.pairwise(rates))


# A latency differs (a measured difference) when the same fabric is ahead in every seed, the
# same requests on each, by more than this share; otherwise the fabrics tie on it.
SAME_WITHIN = 0.05
FINE_REACTION_SHARE = 0.1  # of a buffer share's drain time: a pause later than this is the lab's


def latency_word(ratios: Sequence[float]) -> str:
    """The results word of one fabric's TTFT p99 against another's, seed by seed (ratio - 1)."""
    if not ratios:
        return UNTRUSTED
    if all(r > SAME_WITHIN for r in ratios) or all(r < -SAME_WITHIN for r in ratios):
        return DIFFERENCE
    return TIE


def pair_ratios(
    cells: str | Sequence[str], folder: Path = MAP, rate: float = 0.5
) -> tuple[list[float], int]:
    """ZCube's TTFT p99 over ROFT's (less one) per seed at `rate`, trusted pairs only; and how
    many seeds were left out for an untrusted run."""
    names = [cells] if isinstance(cells, str) else cells
    runs = [r for c in names for r in load_runs(c, folder) if r.rate == rate]
    z = {r.repeat: r for r in runs if r.variant == "zcube"}
    o = {r.repeat: r for r in runs if r.variant == "roft"}
    ratios, left = [], 0
    for seed in sorted(set(z) & set(o)):
        a, b = z[seed], o[seed]
        if not (a.trustworthy and b.trustworthy):
            left += 1
            continue
        if a.ttft_p99_s and b.ttft_p99_s:
            ratios.append(a.ttft_p99_s / b.ttft_p99_s - 1)
    return ratios, left


def _compare_runs(name: str) -> list[dict[str, Any]]:
    return json.loads((COMPARES / f"{name}.json").read_text())["runs"]


def production_pauses(folder: Path = MAP) -> tuple[int, float, list[float]]:
    """Over every lossless run of the production cell (its two sweeps and the kept lossless
    comparisons at 1 req/s): the runs, their pauses, and each run's highest 1 s peak of any
    link (the draft's `Link_utilization` peak; `link util peak max` in a comparison)."""
    runs = [r for c in ("production-low", "production") for r in load_runs(c, folder)]
    pauses = sum(float(r.bmwg["PFC_frame_count"]) for r in runs)
    peaks = [r.bmwg["Link_utilization"]["peak"] / 100 for r in runs]
    count = len(runs)
    for name in ("production-1rps-lossless", "production-1rps-kvoff"):
        for run in _compare_runs(name):
            count += 1
            pauses += float(run["figures"]["lossless pauses"])
            peaks.append(run["figures"]["link util peak max"])
    return count, pauses, peaks


def victim_kept(path: Path = VICTIM_FLOW) -> tuple[dict[str, list[float]], int]:
    """Lossless, per fabric, each transport's median share of its rate the victim flow kept;
    and how many senders the incast had."""
    out: dict[str, list[float]] = {}
    raw = json.loads(path.read_text())
    senders = {len(lab["incast"]) for entry in raw for lab in entry["labs"]}
    if len(senders) != 1:
        raise ValueError(f"{path}: incasts of {sorted(senders)} senders in one bench")
    for entry in raw:
        fabric, _transport, mode = entry["key"]
        if mode != "lossless":
            continue
        kept = [d / s for lab in entry["labs"] if (d := mbps(lab["victim"])) and
                (s := mbps(lab["solo"]))]  # fmt: skip
        out.setdefault(fabric, []).append(statistics.median(kept))
    return out, senders.pop()


def row_line(
    row: AnswerRow, folder: Path = MAP, glossary: str = GLOSSARY, link: bool = True
) -> str:
    """The answer table's row for one cell (its label linked to its page when `link`)."""
    caps = capacities(row, folder)
    runs = row.runs(folder)
    trusted = sum(r.trustworthy for r in runs)
    gaps = seed_gaps(row, folder)
    within = f"within {max(gaps):.0%} ({len(gaps)} seeds)" if gaps else "-"
    cap = " / ".join(f"{LABEL.get(v, v)} {capacity_text(c)}" for v, c in caps.items())
    return (
        f"| {f'[{row.label}]({row.page})' if link else row.label} | {cap} | {trusted} of "
        f"{len(runs)} | {within} at {num(row.rate)} | "
        f"[{word(list(caps.values()), trusted)}]({glossary}) |"
    )


def figures(folder: Path = MAP) -> dict[str, str]:
    """Every figure the answer's templates name, from the committed data."""
    f: dict[str, str] = {
        "claim_gpus": f"{CLAIM_GPUS:,}",
        "claim_tput": f"+{CLAIM_THROUGHPUT_PCT:g}%",
        "claim_ttft": f"-{CLAIM_TTFT_P99_PCT:g}%",
        "claim_capex": f"-{CLAIM_CAPEX_PCT:g}%",
        "tie": TIE,
        "diff": DIFFERENCE,
        "censored": CENSORED,
        "untrusted": UNTRUSTED,
        "reach": OUT_OF_REACH,
    }
    rows = {r.key: r for r in ANSWER_ROWS}
    leaders: list[str] = []
    f["same_within"] = f"{SAME_WITHIN:.0%}"
    latency = []
    for row in ANSWER_ROWS[:3]:
        ratios, _ = pair_ratios(row.cells, folder, row.rate)
        f[f"{row.key.replace('-', '_')}_zr".replace("production", "prod")] = span(ratios, pct)
        latency.append(latency_word(ratios))
    f["ttft_word"] = TIE if set(latency) == {TIE} else DIFFERENCE
    words = set()
    for row in ANSWER_ROWS[:2]:
        caps = list(capacities(row, folder).values())
        words.add(word(caps, sum(r.trustworthy for r in row.runs(folder))))
    f["tput_word"] = words.pop() if len(words) == 1 else " and ".join(sorted(words))
    for key in ("kv-heavy", "hotspot"):
        row = rows[key]
        caps = capacities(row, folder)
        k = key.replace("-", "_")
        f[f"{k}_step"] = f"{steps(row, folder):.0%}"
        f[f"{k}_cap"] = dash([c.rate for c in caps.values()], num)
        odd = odd_seeds(caps)
        f[f"{k}_odd"] = "; ".join(odd) if odd else "none"
        leaders += ahead(caps)
        f[f"{k}_pairs"] = f"{sum(len(c.repeats) for c in caps.values()) - len(odd)}"
        f[f"{k}_all"] = f"{sum(len(c.repeats) for c in caps.values())}"
        gaps = seed_gaps(row, folder)
        f[f"{k}_gap"] = f"{max(gaps):.0%}"
        f[f"{k}_rate"] = num(row.rate)
    f["ahead"] = (
        f"{' and '.join(leaders)} a step ahead in every seed"
        if leaders
        else "No fabric is a step ahead in every seed"
    )
    # production: seed 1 bounded, the others censored at the ladder's top
    prod = capacities(rows["production"], folder)
    z = prod["zcube"]
    bounded = [r for r in z.repeats if r.censored is None]
    censored = [r for r in z.repeats if r.censored is not None]
    f["prod_bounded"] = ", ".join(f"{r.repeat}" for r in bounded)
    f["prod_bounded_knee"] = "; ".join(knee(r) for r in bounded)
    f["prod_censored"] = dash([r.repeat for r in censored], lambda x: f"{x:g}")
    f["prod_top"] = num(max(r.rate for r in censored))
    same = all(
        [knee(r) for r in c.repeats] == [knee(r) for r in z.repeats]
        for v, c in prod.items()
        if v in ("zcube", "roft")
    )
    f["prod_same"] = "the same on ZCube and ROFT" if same else "not the same on ZCube and ROFT"
    cell = load_cell("production", folder)
    tps = [cell["fabrics"][v]["at_common_rate"]["decode_tps_per_gpu"]["median"]
           for v in cell["fabrics"]]  # fmt: skip
    f["prod_tps"] = dash(tps, lambda x: f"{x:.2f}")
    f["prod_rate"] = num(cell["common_rate"])
    f["prod_gap"] = f"{max(seed_gaps(rows['production'], folder)):.0%}"
    f["prod_low_rate"] = num(rows["production"].rate)
    count, pauses, peaks = production_pauses(folder)
    f["prod_runs"] = f"{count}"
    f["prod_pauses"] = f"{pauses:,.0f}"
    f["formed"] = "did not form" if pauses == 0 else "formed"
    f["prod_peak"] = f"{max(peaks):.0%}"
    # expert parallelism: both ports against one
    both, left = pair_ratios("ep-ports-all", folder)
    one, _ = pair_ratios("ep-ports-one", folder)
    f["ep_both"] = span(both, pct)
    f["ep_both_seeds"] = f"{len(both)}"
    f["ep_both_left"] = f"{left}"
    f["ep_one"] = span(one, pct)
    f["ep_one_word"] = latency_word(one)
    f["ep_both_word"] = latency_word(both)
    f["ep_one_seeds"] = f"{len(one)}"
    f["ep_gap"] = f"{max(seed_gaps(rows['ep'], folder)):.0%}"
    # the victim flow
    kept, senders = victim_kept()
    f["incast"] = f"{senders}-to-1"
    f["roft2"] = LABEL["roft-2planes"]
    f["victim_zcube"] = dash(kept["zcube"], lambda x: f"{x:.2f}")
    f["victim_roft"] = dash(kept["roft-2planes"], lambda x: f"{x:.2f}")
    worse = max(kept["zcube"]) < min(kept["roft-2planes"])
    f["way"] = "the other way" if worse else "no one way"
    # the fine time scale's replays (bench/replay_tables.py)
    f.update(fine_figures())
    shares = list(real_shares_s().values())
    reactions = [float(x.replace(",", "")) for x in f["fine_reaction"].split("-")]
    # A pause that comes later than a tenth of the time a buffer share takes to drain lets the
    # queue overshoot XOFF by more than a tenth of the buffer, where a switch (about 1 µs) does
    # not: the pauses' magnitudes are then the lab's. Otherwise the replays are single runs,
    # with no spread to call a difference by.
    late = max(reactions) * 1e-6 > FINE_REACTION_SHARE * min(shares)
    f["fine_word"] = OUT_OF_REACH if late else "not yet measured with a spread (single runs)"
    f["fine_late"] = "over" if late else "under"
    # the time scale: one lab frame at a NIC's rate against a real chip's buffer share
    frames = [resolution(NIC_MBPS, mtu).frame_s * 1e6 for mtu in MTUS]
    f["frame_us"] = dash(frames, lambda x: f"{x:.0f}")
    f["share_us"] = dash(list(real_shares_s().values()), lambda x: f"{x * 1e6:.3g}")
    # CapEx, as `zcube-lab cost` prices it
    cost = compare(COST_INPUTS)
    f["cost_gpus"] = f"{COST_INPUTS.gpus:,}"
    f["cost_z_switches"] = f"{cost.zcube.switches}"
    f["cost_r_switches"] = f"{cost.roft.switches}"
    f["cost_switches_pct"] = f"{cost.diff_pct(cost.zcube, 'switches'):+.1f}%"
    f["cost_optics_pct"] = f"{cost.diff_pct(cost.zcube, 'transceiver_ends_400g'):+.1f}%"
    # the default comparison (scripts/main.sh)
    default = json.loads((MAP.parent / "default" / "default.json").read_text())
    f.update(_default_figures(default))
    f["rows"] = "\n".join(row_line(r, folder) for r in ANSWER_ROWS)
    f["pages"] = "; ".join(f"[{name}]({page})" for name, page in PAGES)
    return f


def _default_figures(data: dict[str, Any]) -> dict[str, str]:
    """ZCube against ROFT in the default comparison: TTFT p99's medians, and whether the
    repeats' [min-max] ranges overlap (a measured tie when they do)."""
    by = {
        fabric: [r["figures"]["TTFT p99 client (s)"] for r in data["runs"]
                 if r["fabric"] == fabric and r["trustworthy"]]
        for fabric in ("zcube", "roft")
    }  # fmt: skip
    z, r = by["zcube"], by["roft"]
    overlap = min(max(z), max(r)) >= max(min(z), min(r))
    return {
        "default_diff": f"{statistics.median(z) / statistics.median(r) - 1:+.1%}",
        "default_word": TIE if overlap else DIFFERENCE,
        "default_runs": f"{len(z)} and {len(r)}",
    }


ANSWER = """\
Production (~{claim_gpus} GPUs, coding traffic, only the network changed from ROFT to ZCube)
reports **{claim_tput} GPU throughput, {claim_ttft} TTFT p99 and {claim_capex} switch and optics
CapEx**. The lab's answer, on fabrics that keep the full-size structure at small size, each
sentence filled from the committed JSON; its words ({tie}, {censored}, {untrusted}, {reach}) are
defined once in [the glossary]({glossary}).

{head}
{rows}

- **Throughput ({claim_tput}): a {tput_word} wherever the lab resolves the knee.**
  kv-heavy, in steps of at most {kv_heavy_step}: capacity {kv_heavy_cap} req/s on every fabric,
  {kv_heavy_pairs} of {kv_heavy_all} seed-fabric knees in the same interval (the exception:
  {kv_heavy_odd}). Hotspot, in steps of at most {hotspot_step}: {hotspot_cap} req/s on every
  fabric, {hotspot_pairs} of {hotspot_all} alike (the exception: {hotspot_odd}). {ahead}.
- **Production's own cell is {censored}.** Seed {prod_bounded}'s knee is in {prod_bounded_knee}
  req/s, {prod_same}; seeds {prod_censored} met every rate to {prod_top} req/s, the ladder's
  top, so only one seed of the ladder could show a capacity difference. Tokens per GPU-second do
  not decide it: below the knee the offered rate fixes them ({prod_tps} decode tokens/s per GPU
  on every fabric at {prod_rate} req/s).
- **TTFT p99 ({claim_ttft}): a {ttft_word} in every cell.** ZCube against ROFT at the
  common rate, seed by seed (both runs trusted): {kv_heavy_zr} on kv-heavy (at {kv_heavy_rate}
  req/s), {hotspot_zr} on hotspot (at {hotspot_rate}), {prod_zr} on production (at
  {prod_low_rate}); neither fabric ahead by over {same_within} in every seed. All fabrics in a
  seed: within {kv_heavy_gap}, {hotspot_gap} and {prod_gap}; {untrusted} runs are shown on the
  pages, never counted.
- **Expert parallelism**: on both NIC ports ZCube's TTFT p99 differs from ROFT's by
  {ep_both} in the {ep_both_seeds} seeds with both runs trusted ({ep_both_left} left out,
  {untrusted}), a {ep_both_word}; pinned to one port, the lab's old wire, by {ep_one} in the
  {ep_one_seeds} seeds, a {ep_one_word} of the lab's own making.
- **Production's mechanism, a pause raised by KV that stalls EP, {formed} in the live lab**
  ({prod_pauses} pauses in {prod_runs} lossless runs, no link above {prod_peak} busy for a second;
  a frame of {frame_us} µs against a buffer share's {share_us} µs). [Replayed at a {fine_frame} µs
  frame](results/fine-scale.md), pauses form on {fine_paused}: EP beside KV at {mix_load} of its
  NICs took {mix_ep} its time alone ({mix_fabrics}{mix_lost}), in production's
  busiest {prod_window} s {prod_ep} ({prod_fabrics}), where {prod_victims}; a victim
  beside a {incast} incast keeps {fine_victim} of its rate, {fine_victim_way} (live: {victim_zcube}
  on ZCube, {victim_roft} on {roft2}, {way}). The lab's pause reaction ({fine_reaction} µs) is
  {fine_late} a tenth of a share's drain: which fabric the mechanism favours is {fine_word}.
- **CapEx ({claim_capex}): reproduced as arithmetic**: `zcube-lab cost` at {cost_gpus} GPUs
  prices {cost_z_switches} switches against {cost_r_switches} ({cost_switches_pct}), optics
  {cost_optics_pct}.
- **The default comparison** (`scripts/main.sh`, coding-agent): ZCube's TTFT p99 differs
  from ROFT's by {default_diff} over {default_runs} trusted repeats, a {default_word}.

Each cell's detail, generated tables and commentary: {pages}. The map of the old sizes and the
answers it superseded are under [History](#history); the IETF draft's tests: [BMWG](BMWG.md)."""


HEAD = (
    "| cell | capacity req/s, seeds' met-missed (sweeps united) | runs trusted of held | "
    "TTFT p99, fabrics apart in a seed | word |",
    "|---|---|---|---|---|",
)


def answer(folder: Path = MAP) -> list[str]:
    """The current answer's lines, every figure filled from the data."""
    fields = figures(folder)
    return ANSWER.format(glossary=GLOSSARY, head="\n".join(HEAD), **fields).split("\n")


def status(key: str, folder: Path = MAP) -> list[str]:
    """A cell page's status block: its row of the answer's table."""
    row = next((r for r in ANSWER_ROWS if r.key == key), None)
    if row is None:
        raise ValueError(f"no answer row {key!r}: {', '.join(r.key for r in ANSWER_ROWS)}")
    line = row_line(row, folder, glossary="../" + GLOSSARY, link=False)
    return [
        *HEAD,
        line,
        "",
        f"Sweeps united: {', '.join(f'`bench/results/map/{c}-sweep.json`' for c in row.cells)}; "
        "the row of [the current answer](../RESULTS.md).",
    ]
