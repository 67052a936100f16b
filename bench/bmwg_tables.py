"""docs/BMWG.md, generated whole from the committed results of `zcube-lab bmwg run` in
bench/results/bmwg/*.json and the catalogue (`zcube_lab.core.bmwg`; issue 46).

    python -m bench.bmwg_tables --write     rewrite docs/BMWG.md
    python -m bench.bmwg_tables             print it

At the top, the answer to "in which of the draft's tests does ZCube differ from ROFT and Clos by
more than the trials' spread, and in which direction", from the data; then one row per test
case and fabric, what ran, the parameters (draft vs lab) and the tests the lab cannot represent.
tests/unit/test_bmwg_tables.py regenerates the page and compares.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.bmwg.catalogue import DRAFT, NOT, RUNNERS, TESTS, test_of
from zcube_lab.core.bmwg.plan import relabel
from zcube_lab.core.bmwg.report import HEADLINE, HIGHER_IS_BETTER
from zcube_lab.core.bmwg.scaling import parameter_rows
from zcube_lab.core.bmwg.trials import HIGHER, LOWER, NO_SPREAD, OUT_OF_REACH, WITHIN

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "results" / "bmwg"
PAGE = ROOT / "docs" / "BMWG.md"
LABEL = {"zcube": "ZCube", "roft": "ROFT", "clos": "Clos"}
ORDER = (LOWER, HIGHER, WITHIN, NO_SPREAD, OUT_OF_REACH)


def load(folder: Path = DATA) -> list[dict[str, Any]]:
    """Every committed run, by file name."""
    return [{**json.loads(p.read_text()), "source": p.name} for p in sorted(folder.glob("*.json"))]


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _cell(fig: Mapping[str, Any] | None) -> str:
    """mean ± half of the 95% interval (the mean alone for one trial)."""
    if fig is None:
        return "-"
    if fig["ci95_high"] is None:
        return _num(fig["mean"])
    return f"{_num(fig['mean'])} ± {_num(fig['ci95_high'] - fig['mean'])}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in rows]
    return out


def _src(doc: Mapping[str, Any]) -> str:
    return f"`{doc['source']}`" if "source" in doc else "unsaved"


def answer(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per test and headline figure: against each other fabric, the cases where ZCube is
    lower or higher than it beyond the 95% intervals, within them, or out of reach."""
    lines = []
    for doc in docs:
        for section in doc["sections"]:
            t = test_of(section)
            lines.append(f"**§{section} {t.name}** ({doc['trials']} trials of "
                         f"{doc['trial_seconds']:g} modelled s, {_src(doc)}):")  # fmt: skip
            for fig in HEADLINE[section]:
                for other in [f for f in doc["fabrics"] if f != "zcube"]:
                    cs = [c for c in doc["comparison"]
                          if c["section"] == section and c["figure"] == fig
                          and c["versus"] == other]  # fmt: skip
                    if not cs:
                        continue
                    counts = {v: [c for c in cs if c["verdict"] == v] for v in ORDER}
                    parts = [f"{v} in {len(counts[v])}" for v in ORDER if counts[v]]
                    better = "higher" if fig in HIGHER_IS_BETTER else "lower"
                    line = f"- {fig} ({better} is better), ZCube vs {LABEL.get(other, other)}: "
                    line += ", ".join(parts)
                    line += f" of {len(cs)} cases"
                    differ = counts[LOWER] + counts[HIGHER]
                    if differ:
                        line += " (" + "; ".join(f"{c['verdict']}: {relabel(c['case'])}"
                                                 for c in differ) + ")"  # fmt: skip
                    lines.append(line)
            lines.append("")
    if not lines:
        lines = ["No committed run yet.", ""]
    return lines


def what_ran(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = []
    for d in docs:
        r, sw = d["resolution"], d["software"]
        draft = "; ".join(f"§{s}: {n} x {t:g} s" for s, (n, t) in d["draft_trials"].items())
        rows.append([_src(d), ", ".join(f"§{s}" for s in d["sections"]), ", ".join(d["fabrics"]),
                     f"{d['trials']} x {d['trial_seconds']:g} s", draft,
                     f"{r['frame_us']:g} µs, S = {r['bandwidth_scale']:g}, k = {r['dilation']:g}",
                     f"{d['wall_s'] / 60:.1f} min (estimated {d['estimate_wall_s'] / 60:.1f})",
                     f"{sw['kernel']}, {sw['ovs']}"])  # fmt: skip
    return _table(["file", "tests", "fabrics", "trials here", "draft's trials", "resolution",
                   "wall", "software"], rows)  # fmt: skip


def result_rows(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for d in docs:
        for section in d["sections"]:
            figs = [*HEADLINE[section], "incomplete"]
            rows = [[f"§{section}", relabel(s["case"]), LABEL.get(s["fabric"], s["fabric"]),
                     str(s["trials"]), *(_cell(s["figures"].get(f)) for f in figs)]
                    for s in d["summary"] if s["section"] == section]  # fmt: skip
            out += [f"### §{section} {test_of(section).name} ({_src(d)})", ""]
            out += [*_table(["test", "case", "fabric", "trials", *figs], rows), ""]
            if section == "5.1":
                out += qp_tables(d)
            if section == "5.2":
                out += load_table(d)
            if section == "6.1":
                out += ttft_table(d)
    return out


def ttft_table(d: Mapping[str, Any]) -> list[str]:
    """§6.1's TTFT per prompt length and fabric, split into its parts (modelled ms, p50 over
    the requests of a trial, mean over trials), each part's share of the median request, and
    the runs the lab's verdict trusted."""
    from zcube_lab.core.bmwg.ttft import PARTS, shares

    rows = []
    for s in d["summary"]:
        if s["section"] != "6.1":
            continue
        trials = [r for r in d["rows"] if (r["section"], r["case"], r["fabric"]) ==
                  ("6.1", s["case"], s["fabric"])]  # fmt: skip
        share = shares(trials)
        f = s["figures"]
        trusted = sum(1 for r in trials if not r["figures"].get("untrusted"))
        rows.append([f"{s['params']['prompt_tokens']:,}", LABEL.get(s["fabric"], s["fabric"]),
                     *(_cell(f.get(f"{p}_p50_ms")) for p in PARTS),
                     " / ".join("-" if share[p] is None else f"{share[p]:.0%}"
                                for p in PARTS[1:]),
                     _cell(f.get("T_transfer_p99_ms")), f"{trusted} of {len(trials)}"])  # fmt: skip
    head = ["prompt tokens", "fabric", *(f"{p} p50 ms" for p in PARTS),
            "prefill / transfer / decode init", "T_transfer p99 ms", "runs trusted"]  # fmt: skip
    return ["§6.1 TTFT and its parts per prompt length:", "", *_table(head, rows), ""]


def _mb(real: float) -> str:
    return f"{real / 1e6:g} MB" if real >= 1e6 else f"{real / 1e3:g} KB"


def qp_tables(d: Mapping[str, Any]) -> list[str]:
    """§5.1's throughput against message size, one table per QP count: each fabric's
    KV_xfer_bandwidth (GB/s, real) by the draft's size and the lab's bytes."""
    from zcube_lab.core.bmwg.scaling import fine_scale

    ts = fine_scale()
    s51 = [s for s in d["summary"] if s["section"] == "5.1"]
    out = []
    for q in sorted({s["params"]["qps"] for s in s51}):
        rows = []
        for size in sorted({s["params"]["size_bytes"] for s in s51 if s["params"]["qps"] == q}):
            cells = {s["fabric"]: _cell(s["figures"].get("KV_xfer_bandwidth_GBps"))
                     for s in s51 if s["params"] == {"size_bytes": size, "qps": q}}  # fmt: skip
            rows.append([_mb(size), f"{ts.lab_bytes(size):,.0f} B",
                         *(cells.get(f, "-") for f in d["fabrics"])])  # fmt: skip
        out += [f"§5.1 throughput against message size, {q} QP{'s' if q > 1 else ''} "
                "(KV_xfer_bandwidth_GBps, real; a 400 Gb/s NIC is 50 GB/s):", ""]  # fmt: skip
        out += [*_table(["message (draft)", "lab bytes",
                         *(LABEL.get(f, f) for f in d["fabrics"])], rows), ""]  # fmt: skip
    return out


def load_table(d: Mapping[str, Any]) -> list[str]:
    """§5.2's KV latency per background level and fabric, and the background the lab carried
    against what it offered (GB/s, real)."""
    rows = []
    for s in d["summary"]:
        if s["section"] != "5.2":
            continue
        f = s["figures"]
        offered = (f.get("background_offered_GBps") or {}).get("mean")
        rows.append([_mb(s["params"]["size_bytes"]), f"{s['params']['bg_load']:.0%}",
                     LABEL.get(s["fabric"], s["fabric"]),
                     *(_cell(f.get(k)) for k in HEADLINE["5.2"]),
                     f"{_cell(f.get('background_GBps'))} of {_num(offered)}",
                     _cell(f.get("load_short"))])  # fmt: skip
    head = ["KV message", "background", "fabric", "p50 µs", "p99 µs", "p99.9 µs",
            "background carried of offered GB/s", "share of trials short of the level"]  # fmt: skip
    return ["§5.2 KV latency per background level:", "", *_table(head, rows), ""]


def refused(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = [[f"§{r['section']}", json.dumps(r["params"]), r["why"]]
            for d in docs for r in d["refused"]]  # fmt: skip
    if not rows:
        return ["None."]
    return _table(["test", "configuration", "why (out of reach at this time scale)"], rows)


def _span(values: Sequence[float], digits: int = 0) -> str:
    """`lo-hi` of `values` rounded (one figure when they round alike); `?` when there are none."""
    if not values:
        return "?"
    lo, hi = round(min(values), digits), round(max(values), digits)
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def kv_spans(docs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The §5.1 and §5.2 figures the page's prose quotes, from the summaries: §5.1's mean
    throughput (GB/s) at 16 MB and more and at 4 MB (any fabric, any QP count); §5.2's
    background carried and offered (GB/s) at every level above 0."""
    rows = [s for d in docs for s in d.get("summary", [])]

    def means(section: str, fig: str, keep: Any) -> list[float]:
        out = []
        for s in rows:
            f = s["figures"].get(fig)
            if s["section"] == section and f and f.get("mean") is not None and keep(s["params"]):
                out.append(float(f["mean"]))
        return out

    bw = "KV_xfer_bandwidth_GBps"
    loaded = lambda p: p.get("bg_load", 0) > 0  # noqa: E731
    return {
        "big": _span(means("5.1", bw, lambda p: p["size_bytes"] >= 16e6)),
        "mid": _span(means("5.1", bw, lambda p: p["size_bytes"] == 4e6)),
        "carried": _span(means("5.2", "background_GBps", loaded)),
        "offered": _span(means("5.2", "background_offered_GBps", loaded), 1),
    }


def render(docs: Sequence[Mapping[str, Any]]) -> str:
    """The whole page."""
    kv = kv_spans(docs)
    lines = [
        f"# The IETF draft's tests on the lab ({DRAFT})",
        "",
        "<!-- generated by python -m bench.bmwg_tables --write from bench/results/bmwg/*.json:"
        " do not edit -->",
        "",
        "Issue 46. `zcube-lab bmwg list` names every test of the draft's §5-§13 and what the lab",
        "can do with it; `zcube-lab bmwg run SECTION...` runs the ones built (below). Figures are",
        "modelled µs at the replay's fine time scale (docs/REPLAY.md); each is the mean over the",
        "trials ± half its 95% confidence interval (Student's t). A difference counts only where",
        "the two fabrics' intervals do not overlap; with the few, short trials of a quick run most",
        "do, and more trials narrow them. \"Out of reach at this time scale\": either fabric lost",
        "transfers in a trial (never completed: the replay's sender does not retransmit, and",
        "the lab lost datagrams) or had no figure, so the lab does not judge it. A",
        "`-` in the results: the figure was not measured in that run (HOL_delay_us came after",
        "the first quick run) or has no value for that case.",
        "",
        "Built into `bmwg run` so far: " + ", ".join(f"§{r}" for r in RUNNERS) + ".",
        "",
        "Known limits of these runs: on ROFT and Clos (one NIC port a host) §7.4's all-to-all",
        "beside KV loses datagrams, the replays' own accounting puts most of them at",
        "ovs-vswitchd's receive sockets (the lab's datapath, not the modelled fabric:",
        "docs/results/fine-scale.md), so its comparisons are out of reach; in",
        "§5.3 eight pairs move far less than eight times one pair on every fabric, and whether",
        "the fabrics' shared links or this 2-core machine's datapath bounds them is not yet",
        "separated; the lab's pause reaction (tens of modelled µs, docs/REPLAY.md) is slower than",
        "a switch's, so pause counts and durations are the lab's, larger than a real fabric's.",
        "In §5.1 (one pair, rounds of 1, 4 or 8 parallel transfers) every fabric carries "
        f"{kv['big']}",
        f"GB/s of the NIC's 50 at 16 MB and more ({kv['mid']} at 4 MB); below that the "
        "throughput falls",
        "and its intervals widen (a 64 KB message is 1.3 frames here), which the lab does not",
        "separate from the replay agents' cost per transfer. In §5.2 the lab carried "
        f"{kv['carried']}",
        f"GB/s of background on every fabric against the {kv['offered']} GB/s each level "
        "offers (every",
        "other pair at the level of its NIC), so no trial under load reached its level: those",
        "comparisons are out of reach at this time scale, and only the unloaded KV latency is",
        "compared.",
        "",
        "## The answer: where ZCube differs from ROFT and Clos by more than the trials' spread",
        "",
        *answer(docs),
        "## What ran",
        "",
        *what_ran(docs),
        "",
        "## Results: one row per test case and fabric",
        "",
        *result_rows(docs),
        "## Configurations not run",
        "",
        *refused(docs),
        "",
        "## Parameters: the draft's and the lab's",
        "",
        "The lab's bytes are real bytes over the byte scale S of the test's time scale (the",
        "fine scale for fine-scale tests, the live lab's default otherwise); thresholds become",
        "whole frames of 1,500 B; host counts are capped to what 16 GPU hosts carry.",
        "",
        *_table(["test", "parameter", "draft", "lab", "scale"], parameter_rows(TESTS)),
        "",
        "## Tests the lab cannot represent",
        "",
        *_table(["test", "name", "why"],
                [[t.section, t.name, t.reason] for t in TESTS if t.status == NOT]),
        "",
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="rewrite docs/BMWG.md")
    args = p.parse_args(argv)
    page = render(load())
    if args.write:
        PAGE.write_text(page)
    else:
        print(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
