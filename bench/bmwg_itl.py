"""docs/BMWG.md's §10.2 part (ITL characterization and tail latency), from a committed
`bmwg run 10.2` (`zcube_lab.core.bmwg.itl`): its parameters beside the draft's, one row per
load and fabric (each figure's mean ± half its 95% interval over the trials), what sets the
gaps, and the comparison in words; the page's sentence on §10.2; the ITL CDF graph (one line a
fabric, every trial's gaps). `bench.bmwg_tables` puts them in place."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.bmwg_common import LABEL, comparison_words, trials_of, trusted
from zcube_lab.core.bmwg import itl as i102
from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg.trials import OUT_OF_REACH, WITHIN

COLUMNS = (
    ("ITL_p50_ms", "ITL p50"), ("ITL_p90_ms", "p90"), ("ITL_p99_ms", "p99"),
    ("ITL_p999_ms", "p99.9"), ("ITL_max_ms", "max"), ("ITL_stdev_ms", "stdev"),
    ("ITL_p99_over_p50", "p99/p50"), ("TPOT_p50_ms", "TPOT p50"),
    ("stall_share", "share > 2x p50"), ("stall_events", "gaps > 100 ms"),
    ("itl_samples", "gaps a trial"),
)  # fmt: skip
CAUSE = (
    "At the lab's default time scale a gap is one decode step of the engine (~30 modelled ms "
    "for GLM-5.1 at these batches), not the fabric: the fabric enters only when a KV pull or "
    "an EP exchange delays a step, and these runs have neither background load nor EP "
    "dispatches, so the fabrics are expected to tie; a tie here is a measured tie."
)


def parameter_table(d: Mapping[str, Any], table: Callable[..., list[str]]) -> list[str]:
    """The draft's §10.2 parameters beside the run's."""
    t = d["draft_trials"]["10.2"]
    rows = [list(r) for r in i102.parameter_rows(d["trials"], d["trial_seconds"], t[0], t[1],
                                                  d["rates"][0])]  # fmt: skip
    return [*table(["parameter", "draft", "this run"], rows), ""]


def fabric_rows(d: Mapping[str, Any], cell: Callable[[Any], str]) -> list[list[str]]:
    """One row per rate and fabric."""
    order = {f: i for i, f in enumerate(d["fabrics"])}
    summary = [s for s in d["summary"] if s["section"] == "10.2"]
    out = []
    for s in sorted(summary, key=lambda s: (s["params"]["rate"], order.get(s["fabric"], 9))):
        trials = trials_of(d, "10.2", s["case"], s["fabric"])
        out.append([f"{s['params']['rate']:g} req/s", LABEL.get(s["fabric"], s["fabric"]),
                    *(cell(s["figures"].get(k)) for k, _ in COLUMNS),
                    trusted(trials)])  # fmt: skip
    return out


def raw_comparison(d: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The comparison over every trial's figures as if the lab's verdict had trusted each run:
    what the figures say, shown beside the verdict when a run was not trusted (not a
    verdict itself)."""
    rows = [{**r, "figures": {**r["figures"], "untrusted": 0}} for r in d["rows"]
            if r["section"] == "10.2"]  # fmt: skip
    return report.compare(report.summarize(rows))


def untrusted_kinds(d: Mapping[str, Any]) -> dict[str, int]:
    """The lab verdict's reasons of the untrusted §10.2 trials, by kind (the reason's text
    before its first ":" or number), as the count of trials carrying each."""
    out: dict[str, int] = {}
    for r in d["rows"]:
        if r["section"] != "10.2" or not r["figures"].get("untrusted"):
            continue
        kinds = {re.split(r"[:0-9]", x, maxsplit=1)[0].strip() for x in r.get("reasons") or []}
        for k in kinds:
            out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


def verdict_words(d: Mapping[str, Any]) -> str:
    """The fabric comparison of a §10.2 run in a sentence."""
    text = comparison_words(
        d, "10.2",
        "All {n} comparisons (ITL p50, p99, p99.9 and the stall share, ZCube "
        "against each other fabric) are within the trials' spread: a measured tie.",
        at_case=False,
    )  # fmt: skip
    if any(c["verdict"] == OUT_OF_REACH for c in d["comparison"] if c["section"] == "10.2"):
        kinds = "; ".join(
            f"{k} ({n} trial{'' if n == 1 else 's'})" for k, n in untrusted_kinds(d).items()
        )
        raw = raw_comparison(d)
        same = sum(1 for c in raw if c["verdict"] == WITHIN)
        text += (
            f" The verdict's reasons: {kinds}. Taking every trial's figures as they are (not "
            f"a verdict), {same} of {len(raw)} comparisons are within the trials' spread."
        )
    return text


def itl_section(d: Mapping[str, Any], table: Callable[..., list[str]],
                cell: Callable[[Any], str]) -> list[str]:  # fmt: skip
    """The §10.2 part of a committed run's results."""
    head = ["load", "fabric", *(name for _, name in COLUMNS), "runs trusted"]
    return [
        "§10.2 parameters, the draft's and this run's:",
        "",
        *parameter_table(d, table),
        "§10.2 per fabric: quantiles of the pool of every gap between consecutive tokens of "
        "every completed request of a trial (modelled ms), the gaps' standard deviation and "
        "p99/p50 (jitter), TPOT's median over requests, the share of gaps above twice the "
        "trial's own p50 and the draft's stall events (gaps above 100 ms), each the mean over "
        "the trials ± half its 95% interval:",
        "",
        *table(head, fabric_rows(d, cell)),
        "",
        CAUSE + " " + verdict_words(d),
        "",
    ]


def itl_sentences(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's §10.2 sentence: the span of ITL p50 and p99.9 over every fabric's mean and
    the comparison's count."""
    ds = [d for d in docs if "10.2" in d.get("sections", ())]
    sums = [s for d in ds for s in d["summary"] if s["section"] == "10.2"]
    if not sums:
        return []

    def span(fig: str) -> str:
        vals = [s["figures"][fig]["mean"] for s in sums if s["figures"].get(fig)]
        return "-" if not vals else f"{min(vals):.1f}-{max(vals):.1f}"

    cs = [c for d in ds for c in d["comparison"] if c["section"] == "10.2"]
    within = sum(1 for c in cs if c["verdict"] == WITHIN)
    reach = sum(1 for c in cs if c["verdict"] == OUT_OF_REACH)
    raw = [c for d in ds for c in raw_comparison(d)]
    raw_within = sum(1 for c in raw if c["verdict"] == WITHIN)
    text = (
        f"In §10.2 (long-output requests, every token stamped) the fabrics' mean ITL p50 spans "
        f"{span('ITL_p50_ms')} ms and p99.9 {span('ITL_p999_ms')} ms; {within} of {len(cs)} "
        "comparisons are within the trials' spread"
    )
    if reach:
        text += (
            f" and {reach} out of reach (runs the lab's verdict did not trust), while every "
            f"trial's figures taken as they are put {raw_within} of {len(raw)} within it"
        )
    return [
        text + ": at this time scale the decode step, not the fabric, sets the gaps (no "
        "background load or EP dispatches ran beside them)."
    ]


def draw_cdf(ax: Any, d: Mapping[str, Any]) -> None:
    """Each fabric's ITL distribution on `ax` as its complement (the share of gaps above a
    gap, log scale: the tail visible): every trial's compact CDF (`itl.cdf_points`), one line
    a trial, one colour a fabric."""
    colours: dict[str, Any] = {}
    for r in d["rows"]:
        pts = [(ms, 1 - share) for ms, share in r.get("itl_cdf_ms") or [] if share < 1]
        if r["section"] != "10.2" or not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        fab = r["fabric"]
        label = None if fab in colours else LABEL.get(fab, fab)
        (line,) = ax.step(xs, ys, where="post", color=colours.get(fab), alpha=0.8, label=label)
        colours.setdefault(fab, line.get_color())
    ax.set(yscale="log", xlabel="inter-token gap (modelled ms)", ylabel="share of gaps above")
    ax.set_title("ITL complementary CDF, one line a trial")
