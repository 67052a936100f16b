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
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.generated import rewrite_blocks
from zcube_lab.core.replay.losses import LOCATION_TEXT, LOCATIONS
from zcube_lab.core.replay.timescale import LADDER_US, derive
from zcube_lab.core.replay.trials import spread
from zcube_lab.core.replay.trials import text as spread_text

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


def grouped(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[list[dict[str, Any]]]:
    """The rows' trials (rows alike but for `repeat`) together, in the rows' order."""
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return list(out.values())


def med(values: Sequence[float | None], fmt: str = ",.0f", scale: float = 1.0) -> str:
    """`median [min-max]` over trials (the value alone for one trial or when they agree)."""
    return spread_text(spread(values), fmt, scale)


def trusted(rows: Sequence[dict[str, Any]]) -> str:
    """`k/N` trials trusted; `-` for rows from before replays judged themselves."""
    vs = [r.get("verdict") for r in rows]
    if any(v is None for v in vs):
        return "-"
    ok = f"{sum(1 for v in vs if v and v['trusted'])}/{len(vs)}"
    why = sorted({why_not(v["reasons"][0]) for v in vs if v and not v["trusted"]})
    return ok + (f" ({', '.join(why)})" if why else "")


def why_not(reason: str) -> str:
    """A first reason in a word or two, for a table cell."""
    for start, short in (
        ("the machine's CPUs", "CPU busy"),
        ("CPU steal", "steal"),
        ("lossless agent", "agent"),
    ):
        if reason.startswith(start):
            return short
    if "datagrams lost" in reason or "still queued" in reason:
        return "lost"
    if "incomplete" in reason:
        return "incomplete"
    return "unchecked" if "not read" in reason else reason


SHORT_PLACE = {
    "host_send_queue": "send queue",
    "switch_queue": "switch queue",
    "port": "port",
    "receiver": "receiver",
    "unlocated": "unlocated",
}


def lost(rows: Sequence[dict[str, Any]]) -> str:
    """Datagrams lost per trial (median [min-max]) and where, each place's median; `-` for rows
    from before replays counted them."""
    ls = [r.get("losses") for r in rows]
    if any(x is None for x in ls):
        return "-"
    total = med([x["lost_datagrams"] for x in ls])
    places = []
    for where, label in SHORT_PLACE.items():
        vs = [(x["datagrams"].get(where) if where != "unlocated" else x["unlocated"]) for x in ls]
        if any(vs):
            places.append(f"{label} {med(vs)}")
    return total + (f" ({', '.join(places)})" if places else "")


# whether the agent also paused at ingress (rows from before it could record none)
INGRESS_WORDS = {
    True: ", pausing at ingress too (ovs-vswitchd's receive socket on a port past XOFF)",
    False: ", pausing on egress queues only",
}


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
                + f", polling every {lab['lossless_poll_s'] * 1e3:g} ms of wall time"
                + INGRESS_WORDS.get(lab.get("lossless_ingress"), "")
                + "."
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
    n = data.get("trials", 1)
    out = [
        "| fabric | KV load | EP exchange p99 alone / beside KV (µs) | ratio | KV p99 alone / "
        "beside EP (µs) | ratio | pauses (mixed) | incomplete (mixed) | trusted (mixed) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cases = grouped(data["contention"], ("fabric", "kv_load"))
    for cs in cases:
        f, load_ = cs[0]["fabric"], cs[0]["kv_load"]
        of = {
            k: [
                r for r in rows if r["fabric"] == f and r["kv_load"] == load_ and r["replayed"] == k
            ]
            for k in ("mixed", "ep", "kv")
        }

        def p99(k: str, cls: str, key: str, of: dict[str, Any] = of) -> str:
            return med([r["classes"][cls][key]["p99"] for r in of[k]], ",.0f", 1e6)

        inc = [sum(x["incomplete"] for x in r["classes"].values()) for r in of["mixed"]]
        out.append(
            f"| {LABEL.get(f, f)} | {load_:.0%} | {p99('ep', 'ep', 'exchange_s')} / "
            f"{p99('mixed', 'ep', 'exchange_s')} | "
            f"{med([c['ep'].get('exchange_p99_ratio') for c in cs], '.2f')}x | "
            f"{p99('kv', 'kv', 'fct_s')} / {p99('mixed', 'kv', 'fct_s')} | "
            f"{med([c['kv'].get('fct_p99_ratio') for c in cs], '.2f')}x | "
            f"{med([r['pauses']['pause_frames'] for r in of['mixed']])} | {med(inc)} | "
            f"{trusted(of['mixed'])} |"
        )
    out += ["", per_trials(n)]
    out += settings(rows)
    return out


# The §7.4 mix at 50% load paced two ways: k from the per-port budget (mix.json, and mix-port.json
# re-run beside the other) and k
# from the datapath load (`bench.replay_draft mix --dilation load --tag load`).
PACE_RUNS = ("mix", "mix-port", "mix-load")


def mix_pace_table(folder: Path = DATA) -> list[str]:
    """The §7.4 mix's mixed replays at each pace: k, the datapath load each fabric was paced
    for (`-` for rows from before replays recorded it), trusted, lost datagrams and where, CPU,
    the EP and KV contention ratios, the replays' wall time (lab bring-up not counted)."""
    out = [
        "| run | fabric | k | datapath load, mixed (of the ceiling) | trusted (mixed) | "
        "datagrams lost, mixed (where) | CPU busy (mixed) | EP exchange p99 ratio | "
        "KV p99 ratio | wall s (9 replays) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in PACE_RUNS:
        if not (folder / f"{name}.json").exists():
            continue
        data = load(name, folder)
        low = min(c["kv_load"] for c in data["contention"])
        for f in dict.fromkeys(r["fabric"] for r in data["rows"]):
            rows = [r for r in data["rows"] if r["fabric"] == f and r["kv_load"] == low]
            mixed = [r for r in rows if r["replayed"] == "mixed"]
            cs = [c for c in data["contention"] if c["fabric"] == f and c["kv_load"] == low]
            loads = [r.get("load") for r in mixed]
            planned = "-" if None in loads else med([x["of_ceiling"] for x in loads], ".0%")
            out.append(
                f"| {name}.json | {LABEL.get(f, f)} | "
                f"{med([r['resolution']['dilation'] for r in mixed], 'g')} | {planned} | "
                f"{trusted(mixed)} | {lost(mixed)} | "
                f"{med([(r.get('cpu') or {}).get('busy') for r in mixed], '.0%')} | "
                f"{med([c['ep'].get('exchange_p99_ratio') for c in cs], '.2f')}x | "
                f"{med([c['kv'].get('fct_p99_ratio') for c in cs], '.2f')}x | "
                f"{sum(r['wall_s'] for r in rows):,.0f} |"
            )
    return out


def per_trials(n: int) -> str:
    if n == 1:
        return "One trial per row."
    return f"Each figure: the median of {n} trials on the same lab, [min-max] when they differ."


def mix_losses_table(folder: Path = DATA, name: str = "mix") -> list[str]:
    """Where each §7.4 replay (of `name`.json) lost datagrams, its CPU and its verdict."""
    data = load(name, folder)
    out = [
        "| fabric | KV load | replayed | incomplete | datagrams lost (where) | host rx drops | "
        "CPU busy | trusted | first reason (first untrusted trial) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rs in grouped(data["rows"], ("fabric", "kv_load", "replayed")):
        r0 = rs[0]
        if r0.get("losses") is None:
            continue
        reasons = [r["verdict"]["reasons"][0] for r in rs if not r["verdict"]["trusted"]]
        out.append(
            f"| {LABEL.get(r0['fabric'], r0['fabric'])} | {r0['kv_load']:.0%} | "
            f"{r0['replayed']} | "
            f"{med([sum(x['incomplete'] for x in r['classes'].values()) for r in rs])} | "
            f"{lost(rs)} | {med([r['losses']['host_rx_dropped'] for r in rs])} | "
            f"{med([r['cpu']['busy'] for r in rs], '.0%')} | {trusted(rs)} | "
            f"{reasons[0] if reasons else '-'} |"
        )
    return out


def pfc_table(folder: Path = DATA) -> list[str]:
    data = load("pfc", folder)
    n = data.get("trials", 1)
    out = [
        "| fabric | XOFF (real B) | N_burst | within (µs) | pauses | paused, all ports (µs) | "
        "KV completion p50 / max (µs) | incomplete | datagrams lost (where) | trusted |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rs in grouped(data["rows"], ("fabric", "xoff_bytes", "n_burst", "within_us")):
        r = rs[0]
        kv = [x["classes"]["kv"] for x in rs]
        out.append(
            f"| {LABEL.get(r['fabric'], r['fabric'])} | {r['xoff_bytes']:,.0f} | {r['n_burst']} | "
            f"{r['within_us']:g} | {med([x['pauses']['pause_frames'] for x in rs])} | "
            f"{med([x['pauses']['pause_total_us'] for x in rs])} | "
            f"{med([k['fct_s']['p50'] for k in kv], ',.0f', 1e6)} / "
            f"{med([k['fct_s']['max'] for k in kv], ',.0f', 1e6)} | "
            f"{med([k['incomplete'] for k in kv])} | {lost(rs)} | {trusted(rs)} |"
        )
    out += ["", per_trials(n)]
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
        "added to ITL_fabric, p99 of an exchange (µs) | EP exchanges | TTFT_fabric: KV p99 "
        "beside EP / alone | pauses (mixed) | pause reaction p99 (µs) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f, e in data["fabrics"].items():
        mixed = e["mixed"]["classes"]
        iso = e.get("isolated", {})
        ep_alone = (iso.get("ep") or {}).get("exchange_s", {}).get("p99")
        ep_mixed = (mixed.get("ep") or {}).get("exchange_s", {}).get("p99")
        exchanges = (mixed.get("ep") or {}).get("exchange_s", {}).get("n")
        kv_max = (mixed.get("kv") or {}).get("fct_s", {}).get("max")
        ep_c = e.get("contention", {}).get("ep") or {}
        kv_r = (e.get("contention", {}).get("kv") or {}).get("fct_p99_ratio")
        added = ep_c.get("exchange_p99_added_s")
        out.append(
            f"| {LABEL.get(f, f)} | {s_us(kv_max)} | {s_us(ep_alone)} / {s_us(ep_mixed)} | "
            f"{ratio(ep_c.get('exchange_p99_ratio'))} | {s_us(added)} | "
            f"{'-' if exchanges is None else exchanges} | {ratio(kv_r)} | "
            f"{e['mixed']['pauses']['pause_frames']:,} | "
            f"{us(e['mixed']['pause_reaction_p99_us'])} |"
        )
    out += settings([e["mixed"] for e in data["fabrics"].values()])
    return out


def production_victims_table(folder: Path = DATA) -> list[str]:
    """Production's busiest window replayed in trials, each mixed replay's victims as a live
    run counts them, with the replay's own verdict and the machine's busy share."""
    data = load("production-busiest-trials", folder)
    out = [
        "| fabric | trial | EP exchanges behind a KV-raised pause | EP time behind pauses (µs) "
        "| pause episodes (raised by KV / EP / unknown) | CPU busy | trusted |",
        "|---|---|---|---|---|---|---|",
    ]
    for f, e in data["fabrics"].items():
        for i, t in enumerate(e["trials"], 1):
            m = t["mixed"]
            v = m["victims"]
            c = v["classes"]
            kv, ep = (c.get(k, {}).get("pauses_raised", 0) for k in ("kv", "ep"))
            first = m["verdict"]["reasons"][0] if m["verdict"]["reasons"] else ""
            out.append(
                f"| {LABEL.get(f, f)} | {i} | {v['ep_victims']} of {v['ep_exchanges']} | "
                f"{s_us(c['ep']['seconds_behind'])} | {v['pauses']:,} ({kv:,} / {ep:,} / "
                f"{v['pauses_unattributed']:,}) | {m['cpu']['busy']:.0%} | "
                f"{'yes' if m['verdict']['trusted'] else 'no: ' + first} |"
            )
    return out


# The 16-GPU fabrics' host NIC: ZCube's two 200 Gb/s ports, ROFT's and Clos's one 400 Gb/s port
HOST_NIC_GBPS = 400.0
INCAST = re.compile(r"incast(\d+)x([\d.]+)MB(?:-(\d+)gpus)?")


def incast_shape(scenario: str) -> tuple[int, float, int]:
    """An incast ladder's senders, bytes each and GPUs (16 unless named) from its scenario name
    (`bench.replay_ladder`'s `incast{senders}x{MB}MB`, a re-run's `-{gpus}gpus` after it)."""
    m = INCAST.match(scenario)
    if m is None:
        raise ValueError(f"scenario {scenario!r} is not an incast{{N}}x{{MB}}MB ladder")
    return int(m.group(1)), float(m.group(2)) * 1e6, int(m.group(3) or 16)


def where_lost(losses: dict[str, Any]) -> str:
    """Where a replay's counters put its lost datagrams, each place with its count."""
    parts = [
        f"{losses['datagrams'][k]:,} at {SHORT_PLACE[k]}s"
        for k in LOCATIONS
        if losses["datagrams"].get(k)
    ]
    if losses.get("unlocated"):
        parts.append(f"{losses['unlocated']:,} where no counter saw them")
    queued = sum((losses.get("still_queued") or {}).values())
    if queued:
        parts.append(f"{queued:,} still queued at the end (not lost)")
    return ", ".join(parts) or "none placed by a counter"


def long_incast(ladder: dict[str, Any], rerun: dict[str, Any]) -> dict[str, str]:
    """The figures the fine-scale page quotes on the long incast (its 16-GPU ladder) and on the
    re-run of one rung with the loss accounting (one row)."""
    n, nbytes, _ = incast_shape(ladder["scenario"])
    rows = ladder["rows"]
    out = {
        "senders": str(n),
        "mb": f"{nbytes / 1e6:g}",
        "line_ms": f"{n * nbytes * 8 / (HOST_NIC_GBPS * 1e9) * 1e3:g}",
        "rungs": ",".join(f"{f:g}" for f in dict.fromkeys(r["frame_us"] for r in rows)),
        "short_rows": f"{sum(1 for r in rows if r.get('incomplete'))} of {len(rows)}",
    }
    counted = [r["losses"]["lost_datagrams"] for r in rows if r.get("losses") is not None]
    if counted and len(counted) < len(rows):
        raise ValueError(f"{ladder['scenario']}: some rows counted lost datagrams, some not")
    out["counted_span"] = span_text(counted, ",d") if counted else ""
    if len(rerun["rows"]) != 1:
        raise ValueError(f"{rerun['scenario']}: one re-run row, got {len(rerun['rows'])}")
    r = rerun["rows"][0]
    rn, _, gpus = incast_shape(rerun["scenario"])
    done = rn - r["incomplete"]
    out |= {
        "rerun_gpus": str(gpus),
        "rerun_fabric": LABEL.get(r["fabric"], r["fabric"]),
        "rerun_frame": f"{r['frame_us']:g}",
        "rerun_lost": f"{r['losses']['lost_datagrams']:,}",
        "rerun_where": where_lost(r["losses"]),
        "rerun_done": f"none of its {rn} transfers" if done == 0 else f"{done} of its {rn}",
    }
    return out


def long_incast_text(folder: Path = DATA) -> list[str]:
    """The page's paragraph on the long incast, its figures from the committed JSON."""
    ladder = load("ladder-incast15x100MB", folder)
    rerun_name = "ladder-incast15x100MB-64gpus-2us"
    f = long_incast(ladder, load(rerun_name, folder))
    head = (
        f"And a long one, {f['senders']} transfers of {f['mb']} MB into one host "
        f"({f['line_ms']} ms at line rate), at the two finest rungs (`--senders {f['senders']} "
        f"--bytes {f['mb']}e6 --rungs {f['rungs']}`). {f['short_rows']} rows have incomplete "
        "transfers: those ran into the replay's deadline."
    )
    if f["counted_span"]:
        return wrap(head + f" These rows lost {f['counted_span']} datagrams a replay.")
    rerun = (
        f" These rows ran before replays counted lost datagrams (no `losses` in their JSON): the "
        f"{f['rerun_gpus']}-GPU {f['rerun_fabric']}'s {f['rerun_frame']} µs rung, re-run with "
        f"that accounting (`{rerun_name}.json`, docs/BENCHMARKS.md), lost {f['rerun_lost']} "
        f"datagrams ({f['rerun_where']}) and {f['rerun_done']} completed, since the replay's "
        "sender does not retransmit. So lost datagrams, the lab's, may hold these rows too; "
        "they are not re-run yet:"
    )
    return wrap(head + rerun)


SUB2US = "ladder-incast8x16MB-sub2us"


def finer_rungs(ladder: dict[str, Any], below_us: float = 2.0) -> dict[str, str]:
    """What the rungs finer than `below_us` gave: how many replays, how many trusted, and the
    untrusted ones' lost datagrams and incomplete transfers (each as a range over them)."""
    rows = [r for r in ladder["rows"] if r["frame_us"] < below_us]
    if not rows:
        raise ValueError(f"{ladder['scenario']}: no rung finer than {below_us:g} µs")
    bad = [r for r in rows if not r["verdict"]["trusted"]]
    good = [
        f"{LABEL.get(r['fabric'], r['fabric'])} at {r['frame_us']:g} µs"
        for r in rows
        if r["verdict"]["trusted"]
    ]
    ks = sorted({r["dilation"] for r in rows})
    out = {
        "rungs": " and ".join(
            f"{r:g}" for r in sorted({r["frame_us"] for r in rows}, reverse=True)
        ),
        "ks": " and ".join(f"{k:g}" for k in ks),
        "replays": str(len(rows)),
        "untrusted": str(len(bad)),
        "trusted": ", ".join(good) or "none",
        "lost": "",
        "switch": "",
        "incomplete": "",
        "finest_all": "none",
    }
    fabrics = {r["fabric"] for r in ladder["rows"]}
    for frame in sorted({r["frame_us"] for r in ladder["rows"]}):
        at = [r for r in ladder["rows"] if r["frame_us"] == frame]
        if {r["fabric"] for r in at} == fabrics and all(r["verdict"]["trusted"] for r in at):
            out["finest_all"] = f"{frame:g} µs"
            break
    if bad:
        out["lost"] = span_text([r["losses"]["lost_datagrams"] for r in bad], ",.0f")
        out["switch"] = span_text([r["losses"]["datagrams"]["switch_queue"] for r in bad], ",.0f")
        out["incomplete"] = span_text([r["incomplete"] for r in bad], ".0f")
    return out


def finer_rungs_text(folder: Path = DATA) -> list[str]:
    """The page's paragraph on the rungs below 2 µs, its figures from the committed JSON."""
    f = finer_rungs(load(SUB2US, folder))
    text = (
        f"Below 2 µs (`--rungs 2,1,0.5`, frames of {f['rungs']} µs at k = {f['ks']}), "
        f"{f['untrusted']} of {f['replays']} replays were not trusted"
    )
    if f["lost"]:
        text += (
            f": each lost {f['lost']} datagrams ({f['switch']} of them at switch queues under "
            f"PFC, the rest where no counter saw them) and left {f['incomplete']} transfers "
            "incomplete. A lossless replay loses nothing on the modelled fabric, so these losses "
            "are the lab's"
        )
    text += (
        f". Trusted: {f['trusted']}. The finest rung every fabric carried trusted is "
        f"{f['finest_all']}, so the convergence rows below are printed, not read as an answer:"
    )
    return wrap(text)


def wrap(text: str, width: int = 96) -> list[str]:
    """`text` as the page's lines of at most `width`, never breaking inside `code`."""
    spans = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", "\0"), text)
    lines = textwrap.wrap(spans, width, break_long_words=False, break_on_hyphens=False)
    return [ln.replace("\0", " ") for ln in lines]


def table(name: str, folder: Path = DATA) -> list[str]:
    if name == "resolution":
        return resolution_table()
    if name == "long-incast":
        return long_incast_text(folder)
    if name == "finer-rungs":
        return finer_rungs_text(folder)
    if name.startswith("ladder-"):
        return ladder_table(name, folder)
    tables = {
        "victim": victim_table,
        "mix": mix_table,
        "mix-losses": mix_losses_table,
        "mix-pace": mix_pace_table,
        "mix-load-losses": lambda folder: mix_losses_table(folder, "mix-load"),
        "mix-port-losses": lambda folder: mix_losses_table(folder, "mix-port"),
        "pfc": pfc_table,
        "production": production_table,
        "production-victims": production_victims_table,
    }
    if name not in tables:
        raise ValueError(
            f"no table {name!r}: resolution, ladder-NAME, long-incast, finer-rungs, "
            f"{', '.join(tables)}"
        )
    return tables[name](folder)


def rewrite(doc: str, folder: Path = DATA) -> str:
    """`doc` with every generated block replaced by its table."""
    return rewrite_blocks(doc, BEGIN, lambda name: table(name, folder))


def span_text(values: Sequence[float], fmt: str) -> str:
    """`a-b` of the values' range in `fmt` (one value when they agree in that format)."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def times(values: Sequence[float | None]) -> str:
    """A ratio over trials: `2.9x`, or `2.9x [2.5-3.1]` when the trials differ."""
    sp = spread(values)
    if sp["median"] is None:
        return "-"
    m, lo, hi = (f"{sp[k]:.1f}" for k in ("median", "min", "max"))
    return f"{m}x" if lo == hi else f"{m}x [{lo}-{hi}]"


def mix_paced(folder: Path = DATA, name: str = "mix-load") -> str:
    """The answer's words on the §7.4 mix paced to the datapath's load (`name`.json): its k, the
    lost datagrams per mixed replay by fabric, and the mixed replays trusted; empty without it."""
    if not (folder / f"{name}.json").exists():
        return ""
    data = load(name, folder)
    mixed = [r for r in data["rows"] if r["replayed"] == "mixed"]
    ks = sorted({float(r["resolution"]["dilation"]) for r in mixed})
    parts = []
    for f in ("zcube", "roft", "clos"):
        lost = [int(r["losses"]["lost_datagrams"]) for r in mixed if r["fabric"] == f]
        if lost:
            lo, hi = min(lost), max(lost)
            parts.append(f"{LABEL[f]} {lo:,}" if lo == hi else f"{LABEL[f]} {lo:,}-{hi:,}")
    ok = sum(1 for r in mixed if (r.get("verdict") or {}).get("trusted"))
    k = " and ".join(f"{x:g}" for x in ks)
    return (
        f"; paced to the datapath's load (k = {k}), datagrams lost a mixed replay "
        f"{' / '.join(parts)}, {ok} of {len(mixed)} trusted"
    )


def mix_lost(rows: Sequence[dict[str, Any]], order: Sequence[str], then: str = "") -> str:
    """The answer's words on the §7.4 mixed replays' losses: on which fabrics, where the
    counters put most of the lost datagrams (each place with at least a twentieth), and how many
    of the replays were trusted (rows from before replays counted them: incomplete transfers
    only); `then` goes after them, before the page's link."""
    counted = all(r.get("losses") is not None for r in rows)
    if counted:
        hit = [f for f in order if any(r["fabric"] == f and r["losses"]["lost_datagrams"]
                                       for r in rows)]  # fmt: skip
    else:
        hit = [f for f in order
               if any(r["fabric"] == f and c["incomplete"] for r in rows
                      for c in r["classes"].values())]  # fmt: skip
    page = "[the page](results/fine-scale.md)"
    if not counted:
        return (
            f", with transfers lost on {' and '.join(LABEL[f] for f in hit)}{then} ({page})"
            if hit
            else then
        )
    ok = sum(1 for r in rows if (r.get("verdict") or {}).get("trusted"))
    trust = f"{ok} of {len(rows)} replays trusted"
    if not hit:
        return f", no datagram lost, {trust}{then} ({page})"
    sums: dict[str, int] = {}
    sockets = 0
    for r in rows:
        if r["fabric"] in hit:
            for k, v in r["losses"]["datagrams"].items():
                sums[k] = sums.get(k, 0) + v
            sums["unlocated"] = sums.get("unlocated", 0) + r["losses"].get("unlocated", 0)
            port = r["losses"]["detail"]["port"]
            sockets += sum(v for k, v in port.items() if k.endswith("socket drops"))
    total = sum(sums.values()) or 1
    words = dict(LOCATION_TEXT)
    if sums.get("port") and sockets == sums["port"]:
        words["port"] = "the datapath's receive sockets (the emulator's loss)"
    places = sorted((k for k, v in sums.items() if v / total >= 0.05), key=lambda k: -sums[k])
    where = ", ".join(f"{sums[k] / total:.0%} at {words[k]}" for k in places)
    where = where.replace("at no counter saw where", "where no counter saw")
    names = " and ".join(LABEL[f] for f in hit)
    return f", datagrams lost on {names}: {where}; {trust}{then} ({page})"


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
    by = {
        f: [c for c in mix["contention"] if c["fabric"] == f and c["kv_load"] == low] for f in order
    }
    by = {f: cs for f, cs in by.items() if cs}
    out["mix_load"] = f"{low:.0%}"
    out["mix_fabrics"] = " / ".join(LABEL[f] for f in order if f in by)
    mixed_low = [r for r in mix["rows"] if r["kv_load"] == low and r["replayed"] == "mixed"]
    out["mix_lost"] = mix_lost(mixed_low, order, mix_paced(folder))
    out["mix_ep"] = " / ".join(
        times([c["ep"].get("exchange_p99_ratio") for c in by[f]]) for f in order if f in by
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
    out["prod_victims"] = production_victims(load("production-busiest-trials", folder), order)
    return out


def production_victims(data: dict[str, Any], order: Sequence[str]) -> str:
    """What the trials of production's busiest window say of EP victims, as the answer puts it:
    one figure when every trial on every fabric agrees, else each fabric's range."""
    per = {
        f: [t["mixed"]["victims"] for t in data["fabrics"][f]["trials"]]
        for f in order
        if f in data["fabrics"]
    }
    runs = [v for vs in per.values() for v in vs]
    trusted = sum(
        t["mixed"]["verdict"]["trusted"] for e in data["fabrics"].values() for t in e["trials"]
    )
    counts = {(v["ep_victims"], v["ep_exchanges"]) for v in runs}
    trials = {len(vs) for vs in per.values()}
    each = f"each of {trials.pop()} trials" if len(trials) == 1 else "every trial"
    if len(counts) == 1:
        (victims, exchanges) = counts.pop()
        head = (
            f"{victims} of its {exchanges} EP exchanges waited behind a KV-raised pause in "
            f"{each} on every fabric"
        )
    else:
        head = (
            "EP exchanges behind a KV-raised pause "
            + " / ".join(span_text([v["ep_victims"] for v in per[f]], "d") for f in per)
            + f" ({' / '.join(LABEL[f] for f in per)})"
        )
    return f"{head} ({trusted} of {len(runs)} replays trusted)"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--table",
        help="resolution, ladder-NAME, long-incast, finer-rungs, victim, mix, mix-losses, pfc, "
        "production",
    )
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
