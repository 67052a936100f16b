"""§6.2 of the draft (xPyD ratio optimization), worked out before any lab (pure): a live-serving
test, like §6.1 and §9.4. A case is one split of the fabric's GPU hosts into x prefill and y
decode hosts (one engine per GPU host); a trial is one `zcube-lab run` of single-turn requests
of `PROMPT_TOKENS` prompt and `OUTPUT_TOKENS` output tokens (GLM-5.1, CFG-E), Poisson arrivals.

Splits: the placement gives whole servers to a role (`zcube_lab.core.fabric.placement`), so x
is a multiple of the GPUs a server has and leaves at least one decode server: on 16 GPU hosts in
8 servers of 2, x = 2, 4, ..., 14. The draft sweeps x over 12 nodes (1, 2, 3, 4, 6, 8, 10, 11
prefill); the lab keeps its prefill shares as far as whole servers allow.

Load: each split at the same share (`LOAD`, 0.8) of its own knee. Why not one rate for every
split: the question is which split carries the most tokens per GPU within the SLO, and at a
fixed rate every split that keeps up carries the same tokens, so the ratio would show only as
"keeps up or not". A split's knee is the lower of its prefill pool's (x engines over one
prompt's prefill step: 0.92 modelled s for 16,384 tokens) and its decode pool's (y engines of
`max_num_seqs` sequences, each request `OUTPUT_TOKENS` steps of a full batch): with short
outputs the prefill pool's comes first on every split, so the knee is prefill compute.

Figures per trial (modelled ms; the run's own KPIs, `zcube_lab.emulator.results.ietf`): TTFT
and ITL p50/p99, TPOT p50/p99 (the client's), T_transfer p50/p99 (a request's KV pulls, as
§6.1), TPS_output and per GPU (over all x + y GPUs), and Inference_Goodput at the SLO
(`SLO_TEXT`: output tokens a second of the requests that met every target) per GPU, whether the
run met the SLO, the requests, the offered load's prefill utilization (modelled: rate times step
over x; the mock engines keep no busy counter) and `untrusted`.

Best split per fabric (`best_split`): the highest mean goodput at the SLO per GPU among the
splits whose every trial met the SLO, the draft's measure (Inference_Goodput; TPS per GPU);
ties (within the trials' spread) are reported as such.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zcube_lab.core.bmwg import workload
from zcube_lab.core.bmwg.workload import single_turn
from zcube_lab.core.errors import ConfigError

SECTION = "6.2"
MODEL = workload.MODEL
PROMPT_TOKENS = 16384
OUTPUT_TOKENS = 32
LOAD = 0.8  # every split at this share of its own knee
# The SLO a request must meet for goodput: TTFT about twice one 16k prompt's prefill (the
# draft's 500 ms of §11.1 is below one such prefill on this model), TPOT the draft's 50 ms ITL.
SLO_TEXT = "ttft=2s,tpot=50ms"
SLO_ATTAINMENT = 0.9
DRAFT_NODES = 12
DRAFT_PREFILL = (1, 2, 3, 4, 6, 8, 10, 11)
# The quick form: a quarter, half and three quarters of the GPU hosts prefill.
QUICK_SHARES = (0.25, 0.5, 0.75)
# Figures of a trial, and the ones the mean and spread are taken of.
QUANTILES = ("TTFT", "ITL", "TPOT", "T_transfer")


@dataclass(frozen=True)
class Split:
    """x prefill and y decode GPU hosts, `per_server` GPUs to a server."""

    prefill: int
    decode: int
    per_server: int

    @property
    def label(self) -> str:
        return f"{self.prefill}P{self.decode}D"

    @property
    def prefill_servers(self) -> int:
        return self.prefill // self.per_server

    @property
    def gpus(self) -> int:
        return self.prefill + self.decode


def allowed(gpus: int, per_server: int) -> tuple[int, ...]:
    """The prefill GPU counts the placement allows: whole servers, one of each role at least."""
    if per_server < 1 or gpus % per_server or gpus // per_server < 2:
        raise ConfigError("gpus", gpus, f"at least two whole servers of {per_server} GPUs")
    return tuple(s * per_server for s in range(1, gpus // per_server))


def draft_splits(gpus: int, per_server: int) -> tuple[int, ...]:
    """The draft's prefill shares of 12 nodes, each to the nearest allowed prefill count (the
    same count once)."""
    ok = allowed(gpus, per_server)
    out: list[int] = []
    for n in DRAFT_PREFILL:
        want = n / DRAFT_NODES * gpus
        pick = min(ok, key=lambda x: (abs(x - want), x))
        if pick not in out:
            out.append(pick)
    return tuple(out)


def splits(text: str, gpus: int, per_server: int) -> tuple[Split, ...]:
    """Splits from "4,8,12" (prefill GPU hosts; empty: every allowed one, the draft's shares);
    a ConfigError naming the allowed counts for anything else."""
    ok = allowed(gpus, per_server)
    if not text.strip():
        xs: tuple[int, ...] = draft_splits(gpus, per_server)
    else:
        try:
            xs = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise ConfigError("xpyd", text, "comma-separated prefill GPU counts") from None
        bad = [x for x in xs if x not in ok]
        if bad or not xs:
            raise ConfigError(
                "xpyd", text, f"prefill GPU hosts of {gpus}, whole servers of {per_server}: "
                f"{', '.join(map(str, ok))}"
            )  # fmt: skip
    return tuple(Split(x, gpus - x, per_server) for x in dict.fromkeys(xs))


def quick(gpus: int, per_server: int) -> tuple[int, ...]:
    """The quick form's prefill counts: `QUICK_SHARES` of the hosts, to allowed counts."""
    ok = allowed(gpus, per_server)
    return tuple(dict.fromkeys(min(ok, key=lambda x: abs(x - s * gpus)) for s in QUICK_SHARES))


def knees(split: Split, prefill_step_s: float, decode_step_s: float,
          max_num_seqs: int) -> dict[str, float]:  # fmt: skip
    """Requests a modelled second each pool computes at most: `prefill` (x engines over one
    prompt's prefill step) and `decode` (y engines of `max_num_seqs` sequences, each request
    `OUTPUT_TOKENS` steps of `decode_step_s`, a full batch's step); `knee` the lower."""
    if not prefill_step_s > 0 or not decode_step_s > 0 or max_num_seqs < 1:
        raise ConfigError("step", (prefill_step_s, decode_step_s), "positive step times")
    pre = split.prefill / prefill_step_s
    dec = split.decode * max_num_seqs / (OUTPUT_TOKENS * decode_step_s)
    return {"prefill": pre, "decode": dec, "knee": min(pre, dec)}


def rate_of(knee: float, load: float = LOAD) -> float:
    """The offered rate (req/s, 3 decimals) at `load` of a split's `knee`."""
    return round(load * knee, 3)


def profile(split: Split, rate: float) -> dict[str, Any]:
    """The workload profile of one split: fixed prompt and output lengths, no prefix cache,
    Poisson arrivals at `rate` (the run's --prefill-servers sets the split)."""
    return single_turn(
        f"bmwg-6.2-{split.label}",
        f"BMWG §6.2: {split.label}, single-turn requests of {PROMPT_TOKENS} "
        f"prompt and {OUTPUT_TOKENS} output tokens at {rate:g} req/s, no prefix cache.",
        PROMPT_TOKENS, OUTPUT_TOKENS, rate,
    )  # fmt: skip


def case_label(split: Split) -> str:
    return f"xPyD={split.label}"


def trial_figures(summary: Mapping[str, Any], split: Split, good: Mapping[str, Any],
                  rate: float, prefill_step_s: float) -> dict[str, Any]:  # fmt: skip
    """A trial's figures from its run's summary.json and `good`, its requests against the SLO
    (`good_output_tokens`, `window_s`, `met`: the caller's goodput over requests.jsonl)."""
    kpis = summary.get("bmwg") or {}
    client = summary.get("client") or {}
    figs: dict[str, Any] = {}
    for name in ("TTFT", "ITL", "T_transfer"):
        q = kpis.get(name) or {}
        figs[f"{name}_p50_ms"] = q.get("p50")
        figs[f"{name}_p99_ms"] = q.get("p99")
    for p in ("p50", "p99"):
        v = client.get(f"tpot_{p}_s")
        figs[f"TPOT_{p}_ms"] = None if v is None else v * 1e3
    tps = kpis.get("TPS_output")
    figs["TPS_output"] = tps
    figs["TPS_per_GPU"] = None if tps is None else tps / split.gpus
    window = float(good.get("window_s") or 0)
    tokens = good.get("good_output_tokens")
    gp = None if tokens is None or window <= 0 else tokens / window
    figs["goodput_tokens_s"] = gp
    figs["goodput_per_GPU"] = None if gp is None else gp / split.gpus
    figs["slo_met"] = 1 if good.get("met") else 0
    figs["prefill_util"] = rate * prefill_step_s / split.prefill
    figs["requests"] = client.get("completed")
    figs["untrusted"] = 0 if summary.get("trustworthy") else 1
    return figs


def best_split(summary: Sequence[Mapping[str, Any]], fabric: str,
               figure: str = "goodput_per_GPU") -> dict[str, Any] | None:  # fmt: skip
    """The best split of one fabric from `report.summarize`'s rows of §6.2: the highest mean
    `figure` among the splits whose every trial met the SLO and was trusted; `ties` the other
    splits whose 95% interval overlaps the best's (`trials.versus`). None when none qualifies."""
    from zcube_lab.core.bmwg.trials import WITHIN, Interval, versus

    def interval(f: Mapping[str, Any] | None) -> Interval | None:
        if not f:
            return None
        return Interval(f["mean"], f.get("ci95_low"), f.get("ci95_high"), f.get("n", 1))

    ok = []
    for s in summary:
        if s["section"] != SECTION or s["fabric"] != fabric:
            continue
        f = s["figures"]
        met, untrusted = f.get("slo_met") or {}, f.get("untrusted") or {}
        if met.get("mean") != 1 or untrusted.get("mean", 0) > 0 or interval(f.get(figure)) is None:
            continue
        ok.append(s)
    if not ok:
        return None
    best = max(ok, key=lambda s: s["figures"][figure]["mean"])
    top = interval(best["figures"][figure])
    assert top is not None
    ties = [
        s["case"] for s in ok
        if s is not best and versus(top, interval(s["figures"][figure])) == WITHIN  # type: ignore[arg-type]
    ]  # fmt: skip
    return {"case": best["case"], "figure": figure, "mean": top.mean, "ties": ties}
