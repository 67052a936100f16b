"""The fine time scale's tables (issue 45), generated from the committed JSON in
bench/results/replay/ into docs/results/fine-scale.md's generated blocks.

    python -m bench.replay_tables --write          rewrite the page's blocks
    python -m bench.replay_tables --table ladder   print one table

Every figure comes from the JSON the benchmarks wrote (`bench.replay_ladder`,
`bench.replay_draft`, and `zcube-lab replay`'s replay.json of production's busiest window);
tests/unit/test_replay_tables.py regenerates the page and compares.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.generated import rewrite_blocks
from zcube_lab.core.replay.timescale import LADDER_US, derive

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "results" / "replay"
PAGE = ROOT / "docs" / "results" / "fine-scale.md"
BEGIN = re.compile(r"<!-- generated: python -m bench\.replay_tables --table (\S+) -->")
LABEL = {"zcube": "ZCube", "roft": "ROFT", "roft2": "2-plane ROFT", "clos": "Clos"}


def load(name: str, folder: Path = DATA) -> dict[str, Any]:
    return json.loads((folder / f"{name}.json").read_text())


def us(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def s_us(x: float | None) -> str:
    """Seconds shown as modelled µs."""
    return "-" if x is None else f"{x * 1e6:,.0f}"


def ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def settings(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The lab settings the rows ran with, or what they were before replays recorded them."""
    seen = {json.dumps(r.get("lab"), sort_keys=True) for r in rows}
    out = []
    for text in sorted(seen):
        lab = json.loads(text)
        if lab is None:
            out.append(
                "Lab settings not recorded: these rows ran before replays set them (every HTB "
                "burst Mininet's 15 KB, the lossless agent at normal priority)."
            )
        else:
            prio = lab["lossless_priority"]
            out.append(
                f"Lab settings: every HTB burst {lab['htb_burst_bytes']:,} B, the lossless agent "
                + (f"at real-time priority {prio}" if prio else "at normal priority")
                + f", polling every {lab['lossless_poll_s'] * 1e3:g} ms of wall time."
            )
    return ["", *out]


def resolution_table() -> list[str]:
    """The rungs on the 16-GPU fabrics: what a frame time asks of the lab (pure arithmetic)."""
    out = [
        "| frame on a 200 Gb/s port (µs) | on a 400 Gb/s port (µs) | byte scale | modelled NIC "
        "(Mb/s) | k | wall s per modelled s |",
        "|---|---|---|---|---|---|",
    ]
    for f in LADDER_US:
        ts = derive(f, 400.0, 200.0)
        out.append(
            f"| {f:g} | {ts.frame_us_at(400):g} | {ts.bandwidth_scale:,.1f} | "
            f"{ts.nic_mbps:,.0f} | {ts.dilation:g} | {ts.dilation:g} |"
        )
    return out


def ladder_table(name: str, folder: Path = DATA) -> list[str]:
    data = load(name, folder)
    out = [
        "| fabric | frame (µs) | k | XOFF as run (real B) | KV completion p50 / max (µs) | "
        "incomplete | pauses | paused, all ports (µs) | pause reaction p99 (µs) | "
        "wall s per modelled s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        xoff = f"{r['xoff_real_bytes']:,}" + (" (raised to 2 frames)" if r["xoff_note"] else "")
        out.append(
            f"| {LABEL.get(r['fabric'], r['fabric'])} | {r['frame_us']:g} | {r['dilation']:g} | "
            f"{xoff} | {us(r['kv_fct_p50_us'])} / {us(r['kv_fct_max_us'])} | "
            f"{r.get('incomplete', 0)} | {r['pauses']:g} | {us(r['paused_us'])} | "
            f"{us(r['reaction_p99_us'])} | "
            f"{us(r['wall_per_modelled_s'])} |"
        )
    out += ["", "Change between the last two rungs (converged: under 10%):", ""]
    out += [
        "| fabric | figure | rungs (µs) | values | change | converged |",
        "|---|---|---|---|---|---|",
    ]
    for fabric, figs in data["convergence"].items():
        for key, c in figs.items():
            if key in ("frame_us",):
                continue
            a, b = c["at"]
            va, vb = c["values"]
            change = "-" if c["change"] is None else f"{c['change']:+.0%}"
            out.append(
                f"| {LABEL.get(fabric, fabric)} | {key} | {a:g} -> {b:g} | {us(va)} -> {us(vb)} "
                f"| {change} | {'yes' if c['converged'] else 'no'} |"
            )
    out += settings(data["rows"])
    return out


def victim_table(folder: Path = DATA) -> list[str]:
    data = load("victim", folder)
    rows = data["rows"]
    out = [
        "| fabric | victim alone (µs) | beside the incast (µs) | keeps of its rate | pauses "
        "alone / beside | incast completion max (µs) |",
        "|---|---|---|---|---|---|",
    ]
    for v in data["victim"]:
        f = v["fabric"]
        alone = next(r for r in rows if r["fabric"] == f and r["case"] == "victim alone")
        both = next(r for r in rows if r["fabric"] == f and r["case"] == "incast+victim")
        out.append(
            f"| {LABEL.get(f, f)} | {s_us(alone['classes']['other']['fct_s']['max'])} | "
            f"{s_us(both['classes']['other']['fct_s']['max'])} | {v['keeps_of_its_rate']:.2f} | "
            f"{alone['pauses']['pause_frames']} / {both['pauses']['pause_frames']} | "
            f"{s_us(both['classes']['kv']['fct_s']['max'])} |"
        )
    out += settings(rows)
    return out


def mix_table(folder: Path = DATA) -> list[str]:
    data = load("mix", folder)
    rows = data["rows"]
    out = [
        "| fabric | KV load | EP exchange p99 alone / beside KV (µs) | ratio | KV p99 alone / "
        "beside EP (µs) | ratio | pauses (mixed) | incomplete (mixed) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in data["contention"]:
        f, load_, rep = c["fabric"], c["kv_load"], c["repeat"]
        of = {
            r["replayed"]: r
            for r in rows
            if r["fabric"] == f and r["kv_load"] == load_ and r["repeat"] == rep
        }
        ep_alone = of["ep"]["classes"]["ep"]["exchange_s"]["p99"]
        ep_mixed = of["mixed"]["classes"]["ep"]["exchange_s"]["p99"]
        kv_alone = of["kv"]["classes"]["kv"]["fct_s"]["p99"]
        kv_mixed = of["mixed"]["classes"]["kv"]["fct_s"]["p99"]
        inc = sum(x["incomplete"] for x in of["mixed"]["classes"].values())
        out.append(
            f"| {LABEL.get(f, f)} | {load_:.0%} | {s_us(ep_alone)} / {s_us(ep_mixed)} | "
            f"{ratio(c['ep'].get('exchange_p99_ratio'))} | {s_us(kv_alone)} / {s_us(kv_mixed)} | "
            f"{ratio(c['kv'].get('fct_p99_ratio'))} | {of['mixed']['pauses']['pause_frames']:,} "
            f"| {inc} |"
        )
    out += settings(rows)
    return out


def pfc_table(folder: Path = DATA) -> list[str]:
    data = load("pfc", folder)
    out = [
        "| fabric | XOFF (real B) | N_burst | within (µs) | pauses | paused, all ports (µs) | "
        "KV completion p50 / max (µs) | incomplete |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        kv = r["classes"]["kv"]
        out.append(
            f"| {LABEL.get(r['fabric'], r['fabric'])} | {r['xoff_bytes']:,.0f} | {r['n_burst']} | "
            f"{r['within_us']:g} | {r['pauses']['pause_frames']:,} | "
            f"{us(r['pauses']['pause_total_us'])} | {s_us(kv['fct_s']['p50'])} / "
            f"{s_us(kv['fct_s']['max'])} | {kv['incomplete']} |"
        )
    out += settings(data["rows"])
    for ref in data.get("refused", []):
        out += [
            "",
            f"XOFF {ref['xoff_bytes']:,.0f} B: out of reach at this time scale: {ref['why']}",
        ]
    return out


def production_table(folder: Path = DATA) -> list[str]:
    data = load("production-busiest", folder)
    out = [
        "| fabric | KV completion max (µs) | EP exchange p99 alone / beside KV (µs) | ratio | "
        "pauses (mixed) | pause reaction p99 (µs) |",
        "|---|---|---|---|---|---|",
    ]
    for f, e in data["fabrics"].items():
        mixed = e["mixed"]["classes"]
        iso = e.get("isolated", {})
        ep_alone = (iso.get("ep") or {}).get("exchange_s", {}).get("p99")
        ep_mixed = (mixed.get("ep") or {}).get("exchange_s", {}).get("p99")
        kv_max = (mixed.get("kv") or {}).get("fct_s", {}).get("max")
        r = (e.get("contention", {}).get("ep") or {}).get("exchange_p99_ratio")
        out.append(
            f"| {LABEL.get(f, f)} | {s_us(kv_max)} | {s_us(ep_alone)} / {s_us(ep_mixed)} | "
            f"{ratio(r)} | {e['mixed']['pauses']['pause_frames']:,} | "
            f"{us(e['mixed']['pause_reaction_p99_us'])} |"
        )
    out += settings([e["mixed"] for e in data["fabrics"].values()])
    return out


def table(name: str, folder: Path = DATA) -> list[str]:
    if name == "resolution":
        return resolution_table()
    if name.startswith("ladder-"):
        return ladder_table(name, folder)
    tables = {
        "victim": victim_table,
        "mix": mix_table,
        "pfc": pfc_table,
        "production": production_table,
    }
    if name not in tables:
        raise ValueError(f"no table {name!r}: resolution, ladder-NAME, {', '.join(tables)}")
    return tables[name](folder)


def rewrite(doc: str, folder: Path = DATA) -> str:
    """`doc` with every generated block replaced by its table."""
    return rewrite_blocks(doc, BEGIN, lambda name: table(name, folder))


def span_text(values: Sequence[float], fmt: str) -> str:
    """`a-b` of the values' range in `fmt` (one value when they agree in that format)."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def fine_figures(folder: Path = DATA) -> dict[str, str]:
    """The answer's fine-scale figures (bench/answer_tables.py's template fields)."""
    victim, mix = load("victim", folder), load("mix", folder)
    prod = load("production-busiest", folder)
    rows = victim["rows"] + mix["rows"]
    order = ("zcube", "roft", "roft2", "clos")
    out: dict[str, str] = {}
    out["fine_frame"] = f"{victim['frame_us']:g}"
    paused = {r["fabric"] for r in rows if r["pauses"]["pause_frames"] > 0}
    fabrics = {r["fabric"] for r in rows}
    out["fine_paused"] = "every fabric" if paused == fabrics else ", ".join(sorted(paused))
    reactions = [r["reaction_p99_us"] for r in rows if r["reaction_p99_us"] is not None]
    out["fine_reaction"] = span_text(reactions, ",.0f")
    alone = [r["pauses"]["pause_frames"] for r in victim["rows"] if r["case"] == "victim alone"]
    out["fine_alone_pauses"] = span_text(alone, "d")
    keeps = [v["keeps_of_its_rate"] for v in victim["victim"]]
    out["fine_victim"] = span_text(keeps, ".2f")
    # alike: every fabric's victim within 0.05 of its rate of the others'
    out["fine_victim_way"] = (
        "alike on every fabric" if max(keeps) - min(keeps) <= 0.05 else "differing by fabric"
    )
    low = min(c["kv_load"] for c in mix["contention"])
    by = {c["fabric"]: c for c in mix["contention"] if c["kv_load"] == low}
    out["mix_load"] = f"{low:.0%}"
    out["mix_fabrics"] = " / ".join(LABEL[f] for f in order if f in by)
    lost = [
        LABEL[f]
        for f in order
        if any(
            r["fabric"] == f and r["kv_load"] == low and c["incomplete"]
            for r in mix["rows"]
            for c in r["classes"].values()
        )
    ]
    out["mix_lost"] = (
        f", with transfers lost on {' and '.join(lost)} ([the page](results/fine-scale.md))"
        if lost
        else ""
    )
    out["mix_ep"] = " / ".join(
        f"{by[f]['ep']['exchange_p99_ratio']:.1f}x" for f in order if f in by
    )
    p = prod["fabrics"]
    a, b = next(iter(p.values()))["mixed"]["recording"]["window_s"]
    out["prod_window"] = f"{b - a:.2g}"
    out["prod_fabrics"] = " / ".join(LABEL[f] for f in order if f in p)
    out["prod_ep"] = " / ".join(
        ratio((p[f].get("contention", {}).get("ep") or {}).get("exchange_p99_ratio"))
        for f in order
        if f in p
    )
    out["prod_fine_pauses"] = " / ".join(
        f"{p[f]['mixed']['pauses']['pause_frames']:,}" for f in order if f in p
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table", help="resolution, ladder-NAME, victim, mix, pfc, production")
    p.add_argument("--write", action="store_true", help="rewrite docs/results/fine-scale.md")
    args = p.parse_args(argv)
    if args.write:
        PAGE.write_text(rewrite(PAGE.read_text()))
        return 0
    if not args.table:
        p.error("--table or --write")
    print("\n".join(table(args.table)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
