"""docs/BMWG.md, generated whole from the committed results of `zcube-lab bmwg run` in
bench/results/bmwg/*.json and the catalogue (`zcube_lab.core.bmwg`; issue 46).

    python -m bench.bmwg_tables --write     rewrite docs/BMWG.md and its graphs, docs/bmwg/*.png
    python -m bench.bmwg_tables             print it

At the top, the answer to "in which of the draft's tests does ZCube differ from ROFT and Clos by
more than the trials' spread, and in which direction", from the data: first one paragraph over
every committed run (`summary`: the comparisons within the spread, beyond it and which, and out of
reach by cause), then per test, figure and fabric pair (`answer`); then one row per test
case and fabric, what ran, the parameters (draft vs lab) and the tests the lab cannot represent;
one graph per committed run of a test whose report the draft draws (§5.1 throughput against
message size per QP count; §5.3 aggregate throughput and JFI against concurrent pairs; §5.2
and §10.4 p99 against background level with the inflection point), linked from the page.
tests/unit/test_bmwg_tables.py regenerates the page and compares (the graphs: that each linked
one exists, not their bytes).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.bmwg_common import LABEL, trials_of, trusted
from bench.bmwg_itl import itl_sentences
from bench.bmwg_ttftlen import config_lines, ttftlen_sentences
from zcube_lab.core.bmwg.catalogue import DRAFT, NOT, RUNNERS, TESTS, test_of
from zcube_lab.core.bmwg.plan import relabel
from zcube_lab.core.bmwg.report import (
    FIGURE_UNRESOLVED,
    HEADLINE,
    HIGHER_IS_BETTER,
    INFLECTION_RISE,
    LOAD_REACHED,
    REFERENCE,
    UNRESOLVED,
    inflection_point,
)
from zcube_lab.core.bmwg.scaling import parameter_rows
from zcube_lab.core.bmwg.trials import HIGHER, LOWER, NO_SPREAD, OUT_OF_REACH, WITHIN
from zcube_lab.emulator.bmwg.live import SECTIONS as LIVE_SECTIONS

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "results" / "bmwg"
PAGE = ROOT / "docs" / "BMWG.md"
GRAPHS = ROOT / "docs" / "bmwg"  # the page links them as bmwg/<name>.png
ORDER = (LOWER, HIGHER, WITHIN, NO_SPREAD, OUT_OF_REACH)


# Committed runs a later run of the same tests replaced, and by which: kept on the page (its
# tables, its answer lines), left out of the summary's counts, which would otherwise count the
# same cases twice with data a fix has since changed.
# Keyed by (file, section): a file may hold a replaced section beside one still current.
SUPERSEDED = {
    ("quick-5.3.json", "5.3"): "quick-5.3-7.4-ingress.json",
    ("quick-5.3-7.4-paced.json", "5.3"): "quick-5.3-7.4-ingress.json",
    ("quick-5.3-7.4-paced.json", "7.4"): "quick-5.3-7.4-ingress.json",
    ("quick-8.2-7.4.json", "7.4"): "quick-5.3-7.4-ingress.json",
}


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


def _section_key(section: str) -> tuple[int, ...]:
    return tuple(int(x) for x in section.split("."))


def _and(items: Sequence[str]) -> str:
    """ "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _src(doc: Mapping[str, Any]) -> str:
    return f"`{doc['source']}`" if "source" in doc else "unsaved"


def _pairs(doc: Mapping[str, Any], section: str, fig: str, other: str) -> list[dict[str, Any]]:
    """The comparisons of one section's headline figure, ZCube against `other`."""
    return [c for c in doc["comparison"] if c["section"] == section and c["figure"] == fig
            and c["versus"] == other]  # fmt: skip


def shown(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every comparison the answer lists for a run: per section, headline figure and other
    fabric, in the answer's order."""
    return [c for section in doc["sections"] for fig in HEADLINE[section]
            for other in doc["fabrics"] if other != "zcube"
            for c in _pairs(doc, section, fig, other)]  # fmt: skip


# Why a comparison is out of reach, from the two fabrics' summaries, first cause first
# (`zcube_lab.core.bmwg.report.compare` puts it out of reach for any of them): the figures whose
# mean above 0 says so, then a figure without a value.
REACH_CAUSES: Mapping[str, str] = {
    "untrusted": "the lab's verdict did not trust a run",
    "incomplete": "a trial's transfers did not all complete",
    "load_short": "a trial's background fell short of its level",
    "overlapped": "requests overlapped",
    "unrecovered": "a trial never recovered",
    "PFC_deadlock": "a trial deadlocked (no recovery time)",
    "missing": "a figure had no value",
}


def reach_cause(doc: Mapping[str, Any], c: Mapping[str, Any]) -> str:
    """The first of `REACH_CAUSES` that put comparison `c` out of reach."""
    by = {(s["section"], s["case"], s["fabric"]): s["figures"] for s in doc["summary"]}
    sides = [by.get((c["section"], c["case"], f)) or {} for f in (REFERENCE, c["versus"])]
    own = (*UNRESOLVED, *FIGURE_UNRESOLVED.get(c["figure"], ()))
    for cause in (k for k in REACH_CAUSES if k in own):
        if any(((f.get(cause) or {}).get("mean") or 0) > 0 for f in sides):
            return cause
    return "missing"


def _in(sections: Sequence[str]) -> str:
    """ "§5.2, §10.4": the sections named, once each, in order."""
    return ", ".join(f"§{x}" for x in sorted(set(sections), key=_section_key))


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"


def summary(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The answer in one paragraph and a list, over every committed run: how many comparisons
    are within the trials' spread, beyond it (one bullet per section and figure, by direction
    and fabric), single-trial, and out of reach at this time scale (by cause, `reach_cause`)."""
    old = sorted(k for k in SUPERSEDED if k[0] in {d.get("source") for d in docs})
    cs = [(d, c) for d in docs for c in shown(d) if (d.get("source"), c["section"]) not in old]
    docs = [d for d in docs if any((d.get("source"), s) not in old for s in d["sections"])]
    if not cs:
        return []
    count = {v: sum(1 for _, c in cs if c["verdict"] == v) for v in ORDER}
    causes: dict[str, list[str]] = {}  # cause -> the section of each comparison it explains
    for d, c in cs:
        if c["verdict"] == OUT_OF_REACH:
            causes.setdefault(reach_cause(d, c), []).append(c["section"])
    lone = [c["section"] for _, c in cs if c["verdict"] == NO_SPREAD]
    beyond: dict[tuple[str, str], dict[tuple[str, str], int]] = {}
    for _, c in cs:
        if c["verdict"] in (HIGHER, LOWER):
            group = beyond.setdefault((c["section"], c["figure"]), {})
            key = (c["verdict"], c["versus"])
            group[key] = group.get(key, 0) + 1
    sections = sorted({s for d in docs for s in d["sections"]}, key=_section_key)
    later = ""
    if old:
        later = (
            " (not counted: "
            + "; ".join(f"§{x} of `{src}`, replaced by `{SUPERSEDED[src, x]}`" for src, x in old)
            + ")"
        )
    text = (
        f"**In short**, counted from the {len(docs)} committed runs of {len(sections)} tests "
        f"below{later} (a test with more than one committed run counts in each): of "
        f"{_n(len(cs), 'comparison')} (one headline figure in one case, ZCube against ROFT or "
        f"Clos), {count[WITHIN]} are within the trials' spread, "
        f"{count[HIGHER] + count[LOWER]} beyond it (ZCube lower in {count[LOWER]}, higher in "
        f"{count[HIGHER]}), {count[NO_SPREAD]} have one trial (no spread to judge by"
        f"{': ' + _in(lone) if lone else ''}) and "
        f"{count[OUT_OF_REACH]} are out of reach at this time scale"
    )
    if causes:
        text += " (" + "; ".join(f"{len(causes[k])} where {v}, in {_in(causes[k])}"
                                 for k, v in REACH_CAUSES.items() if k in causes) + ")"  # fmt: skip
    text += "."
    if beyond:
        parts = []
        for (section, fig), group in sorted(
            beyond.items(), key=lambda kv: (_section_key(kv[0][0]), kv[0][1])
        ):
            better = "higher" if fig in HIGHER_IS_BETTER else "lower"
            ways = ", ".join(f"{way} than {LABEL.get(o, o)} in {_n(k, 'case')}"
                             for (way, o), k in sorted(group.items()))  # fmt: skip
            parts.append(f"- §{section} {fig} ({better} is better): ZCube {ways}")
        return [text + " Beyond the spread:", "", *parts, ""]
    return [text, ""]


def answer(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per test and headline figure: against each other fabric, the cases where ZCube is
    lower or higher than it beyond the 95% intervals, within them, or out of reach."""
    lines = []
    for doc in docs:
        for section in doc["sections"]:
            t = test_of(section)
            lines.append(f"**§{section} {t.name}** ({doc['trials']} trials of "
                         f"{doc['trial_seconds']:g} modelled s, {_src(doc)}):")  # fmt: skip
            if not [f for f in doc["fabrics"] if f != "zcube"]:
                lines += ["- ZCube alone in this run: nothing to compare", ""]
                continue
            for fig in HEADLINE[section]:
                for other in [f for f in doc["fabrics"] if f != "zcube"]:
                    cs = _pairs(doc, section, fig, other)
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


def _ks(d: Mapping[str, Any]) -> str:
    """The k a run's replays ran at: its cases' own (rows from the datapath-load pace on), a
    range when they differ; else the run's one k."""
    ks = sorted({float(r["dilation"]) for r in d.get("rows", []) if r.get("dilation")})
    if not ks:
        return f"{d['resolution']['dilation']:g}"
    return f"{ks[0]:g}" if len(ks) == 1 else f"{ks[0]:g}-{ks[-1]:g} by case"


def what_ran(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = []
    for d in docs:
        r, sw = d["resolution"], d["software"]
        # the draft's trials as the catalogue states them now (a run records them too, but as
        # the catalogue stated them then: §10.1's "100 x 60 s" until corrected)
        draft = "; ".join(f"§{s}: {test_of(s).trials_text}" for s in d["draft_trials"])
        rows.append([_src(d), ", ".join(f"§{s}" for s in d["sections"]), ", ".join(d["fabrics"]),
                     f"{d['trials']} x {d['trial_seconds']:g} s", draft,
                     f"{r['frame_us']:g} µs, S = {r['bandwidth_scale']:g}, k = {_ks(d)}",
                     f"{d['wall_s'] / 60:.1f} min (estimated {d['estimate_wall_s'] / 60:.1f})",
                     f"{sw['kernel']}, {sw['ovs']}"])  # fmt: skip
    return _table(["file", "tests", "fabrics", "trials here", "draft's trials", "resolution",
                   "wall", "software"], rows)  # fmt: skip


# Sections whose own part of the page lives in a module of its own: section -> (module, function
# taking the run's document, the table and the cell formatters).
SECTION_PARTS: Mapping[str, tuple[str, str]] = {
    "6.2": ("bench.bmwg_xpyd", "xpyd_section"),
    "8.4": ("bench.bmwg_pfcstorm", "storm_section"),
    "9.3": ("bench.bmwg_balance", "balance_section"),
    "9.4": ("bench.bmwg_jfi", "fairness_section"),
    "10.1": ("bench.bmwg_ttftlen", "ttftlen_section"),
    "10.2": ("bench.bmwg_itl", "itl_section"),
    "11.1": ("bench.bmwg_tps", "tps_section"),
    "13.3": ("bench.bmwg_soak", "soak_section"),
}


def result_rows(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for d in docs:
        for section in d["sections"]:
            figs = [*HEADLINE[section], "incomplete"]
            rows = [[f"§{section}", relabel(s["case"]), LABEL.get(s["fabric"], s["fabric"]),
                     str(s["trials"]), *(_cell(s["figures"].get(f)) for f in figs)]
                    for s in d["summary"] if s["section"] == section]  # fmt: skip
            out += [f"### §{section} {test_of(section).name} ({_src(d)})", ""]
            if section != "10.4":  # its rows: one per fabric, `level_tables`
                out += [*_table(["test", "case", "fabric", "trials", *figs], rows), ""]
            if section == "5.1":
                out += qp_tables(d)
            if section == "5.2":
                out += load_table(d)
            if section == "10.4":
                out += level_tables(d)
            if section == "6.1":
                out += ttft_table(d)
            if section == "12.3":
                out += linkfail_table(d)
            if section in ("7.1", "7.3"):
                from bench.bmwg_alltoall import alltoall_section

                out += alltoall_section(d, section, _table, _cell)
            if section in SECTION_PARTS:
                module, func = SECTION_PARTS[section]
                out += getattr(importlib.import_module(module), func)(d, _table, _cell)
    return out


def linkfail_table(d: Mapping[str, Any]) -> list[str]:
    """§12.3 per fabric: the link it lost (why it is comparable: `linkfail.failed_link`), TTFT
    p50 and p99 before, during and after the failure (modelled ms, mean over trials), failed
    requests, recovery and disruption time, KV pulls retried and hit, the runs trusted; the
    link's load: its busier direction's mean utilization over the run, in %."""
    from zcube_lab.core.bmwg.linkfail import PHASES

    rows = []
    for s in d["summary"]:
        if s["section"] != "12.3":
            continue
        trials = [r for r in d["rows"] if (r["section"], r["fabric"]) == ("12.3", s["fabric"])]
        f = s["figures"]
        link = (d.get("failed_links") or {}).get(s["fabric"]) or {}
        rows.append([LABEL.get(s["fabric"], s["fabric"]), f"`{link.get('spec', '-')}`",
                     _cell(f.get("failed_link_util_pct")),
                     *(" / ".join(_cell(f.get(f"TTFT_{q}_{p}_ms")) for p in PHASES)
                       for q in ("p50", "p99")),
                     _cell(f.get("failed_requests")), _cell(f.get("recovery_time_s")),
                     _cell(f.get("disruption_time_s")), _cell(f.get("KV_pulls_retried")),
                     _cell(f.get("kv_hit_transfers")), trusted(trials)])  # fmt: skip
    head = ["fabric", "link failed", "its load %", "TTFT p50 ms before / during / after",
            "TTFT p99 ms before / during / after", "failed requests", "recovery s",
            "disruption s", "KV pulls retried", "KV pulls hit", "runs trusted"]  # fmt: skip
    why = [
        f"- {LABEL.get(k, k)} lost {v['why']}." for k, v in (d.get("failed_links") or {}).items()
    ]
    return [f"§12.3 one link failed at {d.get('fail_at_s', 0):g} s for {d.get('fail_for_s', 0):g} "
            f"s of each trial, routing policy `{d.get('policy')}`, {d.get('rate', 0):g} req/s of "
            f"{d.get('prompt_tokens', 0):,} prompt tokens:", "", *_table(head, rows), "", *why,
            "", *[f"- {n}" for n in d.get("notes", []) if n.startswith("12.3")], ""]  # fmt: skip


def linkfail_sentences(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's §12.3 sentence: over every committed §12.3 trial, the requests that failed,
    the KV pulls the failure met in flight and retried, and the disrupted seconds."""
    rows = [r for d in docs for r in d.get("rows", []) if r["section"] == "12.3"]
    if not rows:
        return []

    def total(name: str) -> int:
        return round(sum(r["figures"].get(name) or 0 for r in rows))

    return [
        f"In §12.3 ({len(rows)} trials over the fabrics, one link failed during serving under",
        f"fast failover) {total('failed_requests')} requests failed, the failure met "
        f"{total('kv_hit_transfers')} KV pulls in flight,",
        f"{total('KV_pulls_retried')} were retried and {total('disruption_time_s')} s were "
        "disrupted (a second out of the before window's TTFT range).",
    ]


def ttft_table(d: Mapping[str, Any]) -> list[str]:
    """§6.1's TTFT per prompt length and fabric, split into its parts (modelled ms, p50 over
    the requests of a trial, mean over trials), each part's share of the median request, and
    the runs the lab's verdict trusted."""
    from zcube_lab.core.bmwg.ttft import PARTS, shares

    rows = []
    for s in d["summary"]:
        if s["section"] != "6.1":
            continue
        trials = trials_of(d, "6.1", s["case"], s["fabric"])
        share = shares(trials)
        f = s["figures"]
        rows.append([f"{s['params']['prompt_tokens']:,}", LABEL.get(s["fabric"], s["fabric"]),
                     *(_cell(f.get(f"{p}_p50_ms")) for p in PARTS),
                     " / ".join("-" if share[p] is None else f"{share[p]:.0%}"
                                for p in PARTS[1:]),
                     _cell(f.get("T_transfer_p99_ms")), trusted(trials)])  # fmt: skip
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


def _pct(x: float) -> str:
    return f"{x * 100:.3g}%"


def inflection_text(fig: Mapping[str, Any] | None, none: Mapping[str, Any] | None,
                    top: float) -> str:  # fmt: skip
    """A §10.4 inflection cell: the level's mean ± half its interval, "none up to <top>" when
    no trial found one, and how many trials found none when some did."""
    share = None if none is None else none["mean"]
    if fig is None or share == 1:
        return f"none up to {_pct(top)}"
    text = _pct(fig["mean"])
    if fig["ci95_high"] is not None:
        text += f" ± {_pct(fig['ci95_high'] - fig['mean'])}"
    if share:
        text += f" (none in {share:.0%} of trials)"
    return text


def level_tables(d: Mapping[str, Any]) -> list[str]:
    """§10.4 per KV message size: one row per fabric with the KV p99 (µs) at each background
    level, the inflection point and the degradation factor; then the background each carried
    of what it offered, per level."""
    out = []
    s104 = [s for s in d["summary"] if s["section"] == "10.4"]
    for size in sorted({s["params"]["size_bytes"] for s in s104}):
        per_level = [s for s in s104 if "bg_load" in s["params"]
                     and s["params"]["size_bytes"] == size]  # fmt: skip
        levels = sorted({s["params"]["bg_load"] for s in per_level})
        p99_rows, carried_rows = [], []
        for fab in d["fabrics"]:
            at = {s["params"]["bg_load"]: s["figures"] for s in per_level if s["fabric"] == fab}
            if not at:
                continue
            infl = next((s["figures"] for s in s104 if s["fabric"] == fab
                         and s["params"] == {"size_bytes": size}), {})  # fmt: skip
            p99_rows.append([LABEL.get(fab, fab),
                             *(_cell(at.get(v, {}).get("KV_xfer_latency_p99_us")) for v in levels),
                             inflection_text(infl.get("inflection_point"),
                                             infl.get("no_inflection"), max(levels)),
                             _cell(infl.get("degradation_factor")),
                             _cell(infl.get("load_short"))])  # fmt: skip
            carried = []
            for v in levels:
                f = at.get(v, {})
                got, offered = f.get("background_GBps"), f.get("background_offered_GBps")
                if not got or not offered or not offered["mean"]:
                    carried.append("-")
                else:
                    carried.append(f"{got['mean'] / offered['mean']:.0%}")
            carried_rows.append([LABEL.get(fab, fab), *carried])
        heads = [_pct(v) for v in levels]
        out += [f"§10.4 KV p99 (µs) against background level, {_mb(size)} KV messages; the "
                f"inflection point is the lowest level from which the p99 stays above "
                f"{1 + INFLECTION_RISE:g} times its value at {_pct(levels[0])}, per trial, "
                f"its mean ± half the 95% interval; degradation is the p99 at {_pct(levels[-1])} "
                f"over the p99 at {_pct(levels[0])}:", ""]  # fmt: skip
        short = "share of trials short of the level at or below it"
        out += [*_table(["fabric", *heads, "inflection", "degradation", short], p99_rows), ""]
        out += ["§10.4 background carried of offered (mean over trials):", ""]
        out += [*_table(["fabric", *heads], carried_rows), ""]
    return out


def _stem(doc: Mapping[str, Any]) -> str:
    return Path(str(doc.get("source", "unsaved"))).stem


def graph_specs(docs: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(file name, caption, run) of every graph the page links: one per committed run of a
    section whose report the draft draws (5.1, 5.3, 5.2, 10.4)."""
    captions = {
        "5.1": "§5.1 KV_xfer_bandwidth against message size, one panel per QP count",
        "5.3": "§5.3 aggregate KV_xfer_bandwidth and JFI against concurrent pairs",
        "5.2": "§5.2 KV p99 against background level; dashed: the inflection of the mean p99",
        "10.4": "§10.4 KV p99 against background level; dashed: the trials' mean inflection point",
        "10.2": "§10.2 ITL complementary CDF per fabric, one line a trial",
        "11.1": "§11.1 TPS_output and goodput at the SLO against the offered rate, TTFT p99 "
        "beside; dotted: each fabric's SLO boundary",
        "10.1": "§10.1 TTFT p50 and p99 against prompt length, T_transfer shaded, per fabric",
    }
    return [(f"{section}-{_stem(d)}.png", f"{captions[section]} ({_src(d)})", d)
            for d in docs for section in d["sections"] if section in captions]  # fmt: skip


def graph_links(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    specs = graph_specs(docs)
    if not specs:
        return ["None yet.", ""]
    return [line for name, caption, _ in specs
            for line in (f"![{caption}](bmwg/{name})", "", caption, "")]  # fmt: skip


def _mean_half(fig: Mapping[str, Any] | None) -> tuple[float, float] | None:
    if not fig or fig.get("mean") is None:
        return None
    high = fig.get("ci95_high")
    return float(fig["mean"]), 0.0 if high is None else float(high) - float(fig["mean"])


def _series(d: Mapping[str, Any], section: str, x_key: str, fig: str,
            **fixed: Any) -> dict[str, list[tuple[float, float, float]]]:  # fmt: skip
    """Per fabric: (x, mean, half interval) of `fig` over the section's summaries whose params
    match `fixed`, by x."""
    out: dict[str, list[tuple[float, float, float]]] = {}
    for s in d["summary"]:
        p = s["params"]
        if s["section"] != section or x_key not in p:
            continue
        if any(p.get(k) != v for k, v in fixed.items()):
            continue
        mh = _mean_half(s["figures"].get(fig))
        if mh is not None:
            out.setdefault(s["fabric"], []).append((float(p[x_key]), *mh))
    return {f: sorted(v) for f, v in out.items()}


def _lines(ax: Any, series: Mapping[str, Sequence[tuple[float, float, float]]]) -> None:
    for fab, pts in series.items():
        xs, ys, hs = zip(*pts, strict=True)
        ax.errorbar(xs, ys, yerr=hs, marker="o", capsize=3, label=LABEL.get(fab, fab))


def _draw(section: str, d: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if section == "5.1":
        qps = sorted({s["params"]["qps"] for s in d["summary"] if s["section"] == "5.1"})
        fig, axes = plt.subplots(1, len(qps), figsize=(4.2 * len(qps), 3.6), squeeze=False)
        for ax, q in zip(axes[0], qps, strict=True):
            _lines(ax, _series(d, "5.1", "size_bytes", "KV_xfer_bandwidth_GBps", qps=q))
            ax.set(xscale="log", title=f"{q} QP{'s' if q > 1 else ''}",
                   xlabel="message size (real bytes)", ylabel="GB/s (real)")  # fmt: skip
    elif section == "5.3":
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), squeeze=False)
        panels = (("KV_xfer_bandwidth_GBps", "aggregate GB/s"), ("JFI", "JFI over pairs"))
        for ax, (name, label) in zip(axes[0], panels, strict=True):
            series = _series(d, "5.3", "pairs", name)
            _lines(ax, series)
            ticks = sorted({x for pts in series.values() for x, _, _ in pts})
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.set(xlabel="concurrent pairs", ylabel=label)
    elif section == "10.1":
        from bench.bmwg_ttftlen import draw

        n = len(d["fabrics"])
        fig = plt.figure(figsize=(4.2 * n, 3.8))
        draw(fig, d)
    elif section == "10.2":
        from bench.bmwg_itl import draw_cdf

        fig, axes = plt.subplots(1, 1, figsize=(7, 4.2), squeeze=False)
        draw_cdf(axes[0][0], d)
    elif section == "11.1":
        from bench.bmwg_tps import draw

        fig, axes = plt.subplots(1, 2, figsize=(10, 4), squeeze=False)
        draw(axes[0], d)
    else:
        sizes = sorted({s["params"]["size_bytes"] for s in d["summary"]
                        if s["section"] == section and "bg_load" in s["params"]})  # fmt: skip
        fig, axes = plt.subplots(1, len(sizes), figsize=(7 * len(sizes), 4.2), squeeze=False)
        for ax, size in zip(axes[0], sizes, strict=True):
            series = _series(d, section, "bg_load", "KV_xfer_latency_p99_us", size_bytes=size)
            shorts = _series(d, section, "bg_load", "load_short", size_bytes=size)
            for fab, pts in series.items():
                at = _inflection_of(d, section, fab, size, pts)
                label = f"{LABEL.get(fab, fab)}, inflection " + ("none" if at is None
                                                                 else _pct(at))  # fmt: skip
                xs, ys, hs = zip(*pts, strict=True)
                line = ax.errorbar(xs, ys, yerr=hs, marker="o", capsize=3, label=label)
                color = line.lines[0].get_color()
                short = {x for x, m, _ in shorts.get(fab, []) if m > 0}
                hollow = [(x, y) for x, y, _ in pts if x in short]
                if hollow:
                    ax.plot(*zip(*hollow, strict=True), "o", color=color, mfc="white", zorder=4)
                if at is not None:
                    ax.axvline(at, linestyle="--", color=color, alpha=0.6)
            ax.set(yscale="log", title=f"{_mb(size)} KV messages",
                   xlabel="background level offered (share of each NIC); hollow: carried "
                   f"under {LOAD_REACHED:.0%} of it", ylabel="KV p99 µs (modelled)")  # fmt: skip
    for ax in fig.axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{DRAFT} §{section}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _inflection_of(d: Mapping[str, Any], section: str, fabric: str, size: float,
                   pts: Sequence[tuple[float, float, float]]) -> float | None:  # fmt: skip
    """§10.4: the mean of the trials' inflection points (None when most trials found none);
    §5.2: the inflection of the mean p99 over the levels."""
    if section == "10.4":
        s = next((s for s in d["summary"] if s["section"] == "10.4" and s["fabric"] == fabric
                  and s["params"] == {"size_bytes": size}), None)  # fmt: skip
        fig = None if s is None else s["figures"].get("inflection_point")
        none = None if s is None else (s["figures"].get("no_inflection") or {}).get("mean")
        return None if fig is None or (none or 0) > 0.5 else float(fig["mean"])
    if len(pts) < 2 or pts[0][1] <= 0:
        return None
    return inflection_point([p[0] for p in pts], [p[1] for p in pts])


def write_graphs(docs: Sequence[Mapping[str, Any]], folder: Path = GRAPHS) -> list[Path]:
    """Draw every graph `graph_specs` names into `folder`; the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, _caption, d in graph_specs(docs):
        section = name.split("-", 1)[0]
        _draw(section, d, folder / name)
        out.append(folder / name)
    return out


def refused(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = [[f"§{r['section']}", json.dumps(r["params"]), r["why"]]
            for d in docs for r in d["refused"]]  # fmt: skip
    if not rows:
        return ["None."]
    return _table(["test", "configuration", "why"], rows)


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


def level_facts(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The §10.4 sentences the page's prose quotes, one per committed §10.4 run, from its rows:
    per fabric each trial's inflection point, and the highest level up to which every trial
    of every level carried its background (none short: `LOAD_REACHED` of what it offered)."""
    from zcube_lab.core.bmwg.report import inflection_rows

    out = []
    for d in docs:
        if "10.4" not in d["sections"]:
            continue
        parts = []
        every = sorted({s["params"]["bg_load"] for s in d["summary"]
                        if s["section"] == "10.4" and "bg_load" in s["params"]})  # fmt: skip
        for fab in d["fabrics"]:
            found = sorted(
                (r["trial"], r["figures"].get("inflection_point"))
                for r in inflection_rows(d.get("rows", []))
                if r["fabric"] == fab
            )
            if not found:
                continue
            levels = sorted(
                (s["params"]["bg_load"], (s["figures"].get("load_short") or {}).get("mean", 0))
                for s in d["summary"]
                if s["section"] == "10.4" and s["fabric"] == fab and "bg_load" in s["params"]
            )
            carried = None
            for level, short in levels:
                if short:
                    break
                carried = level
            trials = ", ".join("none" if v is None else _pct(v) for _, v in found)
            upto = "no level" if carried is None else f"{_pct(carried)}"
            parts.append(f"{LABEL.get(fab, fab)} {trials} (carried up to {upto})")
        if parts:
            head = f"{_src(d)} ({_pct(every[0])}-{_pct(every[-1])}, {d.get('trials', '?')} trials)"
            out.append(f"{head}: " + "; ".join(parts))
    return out


def ttft_split(docs: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, tuple[float, float]]]:
    """§6.1 per prompt length: each part's share of the median request's TTFT (`shares`) over
    the trusted trials, its lowest and highest across the fabrics."""
    from zcube_lab.core.bmwg.ttft import PARTS, shares

    out: dict[int, dict[str, tuple[float, float]]] = {}
    for d in docs:
        groups: dict[tuple[int, str], list[Mapping[str, Any]]] = {}
        for r in d.get("rows", []):
            if r["section"] == "6.1" and not r["figures"].get("untrusted"):
                groups.setdefault((r["params"]["prompt_tokens"], r["fabric"]), []).append(r)
        for (n, _), rows in sorted(groups.items()):
            for part, v in shares(rows).items():
                if v is None:
                    continue
                lo, hi = out.setdefault(n, {}).get(part, (v, v))
                out[n][part] = (min(lo, v), max(hi, v))
    return {n: {p: out[n][p] for p in PARTS[1:] if p in out[n]} for n in sorted(out)}


def ttft_sentences(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's §6.1 sentence, from `ttft_split`."""
    split = ttft_split(docs)
    if not split:
        return []

    def pct(lo: float, hi: float) -> str:
        a, b = round(100 * lo), round(100 * hi)
        return f"{a}%" if a == b else f"{a}-{b}%"

    parts = [f"at {n:,} prompt tokens " + " / ".join(pct(*split[n][p]) for p in split[n])
             for n in split]  # fmt: skip
    heads = untrusted_reasons(docs)
    why = []
    for h, ns in heads.items():
        lengths = ", ".join(f"{n:,}" for n in sorted(set(ns)))
        why.append(f"{h} ({len(ns)} run{'s' if len(ns) > 1 else ''}: {lengths} tokens)")
    frames = "; ".join(f"{n:,} tokens {b:,.0f} lab bytes, {math.ceil(b / 1500)} frames"
                       for n, b in pull_lab_bytes(docs).items())  # fmt: skip
    untrusted = [
        "Runs the lab's verdict did not trust, by the kind of their reasons (a run may have",
        "several): " + "; ".join(why) + ". The KV-pull reason is the verdict's end-host rule:",
        "pulls slower than 1.5x their ideal after a fixed cost while their links idled. A",
        f"request's KV pull at this scale: {frames}.",
    ] if why else []  # fmt: skip
    return [
        "In §6.1 the median request's TTFT splits into prefill / transfer / decode init as",
        "follows (trusted runs, the range across the fabrics): " + "; ".join(parts) + ".",
        *untrusted,
    ]


def pull_lab_bytes(docs: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """§6.1's KV bytes of one request in the lab, per prompt length: the model's KV bytes per
    token times the prompt over the run's byte scale."""
    from zcube_lab.core.bmwg.ttft import MODEL
    from zcube_lab.serving.models import get_profile

    per_token = get_profile(MODEL).kv_bytes_per_token
    out: dict[int, float] = {}
    for d in docs:
        if "6.1" in d.get("sections", ()):
            for n in d.get("prompts", ()):
                out[n] = n * per_token / d["resolution"]["bandwidth_scale"]
    return dict(sorted(out.items()))


def untrusted_reasons(docs: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """§6.1's untrusted runs by the kind of each reason (its text before the first ":" or
    " in <number>", the core number dropped): the prompt length of every run that had one."""
    import re

    out: dict[str, list[int]] = {}
    for d in docs:
        for r in d.get("rows", []):
            if r["section"] != "6.1" or not r["figures"].get("untrusted"):
                continue
            heads = {re.sub(r"^cpu\d+", "a core", re.split(r":| in \d", reason)[0])
                     for reason in r.get("reasons", [])}  # fmt: skip
            for h in sorted(heads):
                out.setdefault(h, []).append(r["params"]["prompt_tokens"])
    return dict(sorted(out.items(), key=lambda kv: -len(kv[1])))


def render(docs: Sequence[Mapping[str, Any]]) -> str:
    """The whole page."""
    kv = kv_spans(docs)
    facts = level_facts(docs)
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
        "the first quick run) or has no value for that case. "
        + _and([f"§{x}" for x in sorted(LIVE_SECTIONS, key=_section_key)]),
        "are the exception: live serving runs (`zcube-lab run`) at the live lab's default time",
        "scale, their times modelled ms, and their \"out of reach\" a run the lab's verdict did",
        "not trust.",
        "",
        "Built into `bmwg run` so far: " + ", ".join(f"§{r}" for r in RUNNERS) + ".",
        "",
        "Known limits of these runs: the first §5.3 and §7.4 runs (`quick-5.3.json`,",
        "`quick-8.2-7.4.json`, `quick-5.3-7.4-paced.json`) lost datagrams, and so transfers,",
        "in the lab's datapath",
        "(docs/results/fine-scale.md). Two causes were found and fixed (docs/REPLAY.md, \"Where",
        "the losses under PFC were\"): on ZCube the lossless agent did not pause a sender that",
        "pins its source port (every §5.3 pair's same-rail lane), and congestion waiting in",
        "ovs-vswitchd's receive sockets was invisible to the pause until the agent counted it",
        "at ingress, as PFC does. Re-run with both (`quick-5.3-7.4-ingress.json`, paced case by",
        "case to the datapath's load), every transfer of every trial completed on every fabric;",
        "the earlier runs' §5.3 and §7.4 stay below and are not counted in the summary. In",
        "that run",
        "ZCube's pairs together moved more than ROFT's and Clos's beyond the spread (the",
        "summary's §5.3 lines), and Clos's two pairs within its one pair's spread: whether",
        "that is the fabrics' shared links (two pairs hashed onto one link) or this 2-core",
        "machine's datapath is not yet separated. The lab's pause reaction (tens of modelled µs,",
        "docs/REPLAY.md) is slower than",
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
        *ttft_sentences(docs),
        *linkfail_sentences(docs),
        *itl_sentences(docs),
        *ttftlen_sentences(docs),
        *([] if not facts else [
            "In §10.4 (§5.2's trial at background levels in 5% steps), per run, each trial's",
            f"inflection point and the highest level up to which every trial carried at least "
            f"{LOAD_REACHED:.0%}",
            "of the background it offered.",
            *(f"{f}." for f in facts),
            "Above those levels the background fell short, so a fabric's inflection is judged",
            "only where no trial fell short at or below it.",
        ]),
        "",
        "## The answer: where ZCube differs from ROFT and Clos by more than the trials' spread",
        "",
        *summary(docs),
        "### Per test, headline figure and fabric pair",
        "",
        *answer(docs),
        "## What ran",
        "",
        *what_ran(docs),
        "",
        "## Graphs",
        "",
        *graph_links(docs),
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
        *config_lines(_table),
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
        write_graphs(load())
    else:
        print(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
