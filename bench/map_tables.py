"""Benchmark report: docs/RESULTS.md's map tables, regenerated from the committed JSON
(issue 33 item 5).

    .venv/bin/python -m bench.map_tables --table answer       # RESULTS.md's current answer
    .venv/bin/python -m bench.map_tables --table status-ROW   # a cell page's status row
    .venv/bin/python -m bench.map_tables --table default      # the default comparison's table
    .venv/bin/python -m bench.map_tables --table summary      # the old map's summary table
    .venv/bin/python -m bench.map_tables --table map          # the old map's table
    .venv/bin/python -m bench.map_tables --table kv-heavy     # one cell's table, per fabric
    .venv/bin/python -m bench.map_tables --table gpu-production  # tokens per GPU, EP, victims
    .venv/bin/python -m bench.map_tables --table compare-NAME # bench/results/compare/NAME.json
    .venv/bin/python -m bench.map_tables --table victim-flow  # issue 36's victim-flow bench
    .venv/bin/python -m bench.map_tables --table ep-choices   # the EP wire's modelling choices
    .venv/bin/python -m bench.map_tables --table kv-seen      # the KV-pull rule re-read
    .venv/bin/python -m bench.map_tables --write              # rewrite every generated block
                                  # of RESULTS.md, docs/results/*.md and docs/history/*.md

Reads `bench/results/victim-flow/victim-flow.json` (what `bench/victim_flow.py --out` wrote)
for the victim-flow table, `bench/results/compare/NAME.json` (`bench/default_cell.py`) for a
kept comparison's, and otherwise only `bench/results/map/`: each cell's `NAME-sweep.json`
(every run point the sweep judged: the runs held and trusted, and the capacity, recomputed
here by the sweep's rule, `zcube_lab.emulator.results.sweep.capacity`) and `NAME.json` (what
`bench/map_cell.py` took from the runs' summaries at the common rate: TTFT, KV pulls, the
busiest link, drops, pauses, timeouts).
A capacity the rule calls exact is printed with its interval per seed, `met-missed`: the last
rate met and the first missed (`< r` when the lowest rate missed; `>= r` when censored).
The JSON is read by bench/map_data.py; the answer's prose is bench/answer_tables.py's.
In docs/RESULTS.md and its pages every generated block sits between `<!-- generated: COMMAND
-->` and `<!-- end generated -->`; tests/unit/test_map_tables.py regenerates each and compares.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from bench.answer_tables import answer, status  # noqa: E402
from bench.default_table import default_table  # noqa: E402
from bench.generated import END, rewrite_blocks  # noqa: E402
from bench.map_cell import rows as cell_rows  # noqa: E402
from bench.map_cell import text  # noqa: E402
from bench.map_data import (  # noqa: E402
    COMPARES,
    KV_SEEN,
    MAP,
    VICTIM_FLOW,
    capacity_text,
    cell_names,
    load_cell,
    load_runs,
)
from zcube_lab.emulator.results.sweep.capacity import (  # noqa: E402
    Capacity,
    capacity,
    fabric_capacities,
)
from zcube_lab.emulator.results.sweep.sweeppoints import RunPoint  # noqa: E402

RESULTS = ROOT / "docs" / "RESULTS.md"
COMMAND = "python -m bench.map_tables --table"
BEGIN = re.compile(r"<!-- generated: python -m bench\.map_tables --table (\S+) -->")

RUN_NAME = re.compile(r"\b\d{8}-\d{6}-[a-z0-9-]+-[0-9.]+rps-r\d+\b")


@dataclass(frozen=True)
class Entry:
    """One fabric of a row: its label, the cell JSON it comes from, its variant there."""

    label: str
    cell: str | None  # None: not run
    variant: str = ""


@dataclass(frozen=True)
class Row:
    """One row of the summary and map tables."""

    key: str
    label: str
    model: str
    entries: tuple[Entry, ...]
    command: str


def _three(cell: str, zcube: str | None = None) -> tuple[Entry, ...]:
    return (
        Entry("ZCube", zcube or cell, "zcube"),
        Entry("ROFT", cell, "roft"),
        Entry("Clos", cell, "clos"),
    )


ROWS = (
    Row("coding-agent", "coding-agent, 4 : 12 GPUs", "lossy, k=1", _three("coding-agent"),
        "`$Z --fabrics zcube,roft --workload coding-agent $S`; `$Z --fabrics clos --baseline clos "
        "--workload coding-agent $S`"),
    Row("kv-heavy", "kv-heavy, 12 : 4 (ZCube from its re-run)", "lossless, k=2",
        _three("kv-heavy", "kv-heavy-zcube-rerun"),
        "`$Z --fabrics zcube,roft,clos --workload kv-heavy --rates 24,32,40,48 $L $S`"),
    Row("hotspot", "hotspot, the shifting incast, 8 : 8", "lossless, k=2", _three("hotspot"),
        "`$Z --fabrics zcube,roft,clos --workload hotspot --rates 12,16,20 $L $S`"),
    Row("hotspot-22", "hotspot at 22 req/s, the knee's edge", "lossless, k=2",
        _three("hotspot-22"), "`$Z --fabrics zcube,roft,clos --workload hotspot --rates 22 $L $S`"),
    Row("hotspot-first", "hotspot's first ladder, 16 and 24 req/s", "lossless, k=2",
        _three("hotspot-first"),
        "`$Z --fabrics zcube,roft,clos --workload hotspot --rates 16,24,32 --refine 1 $L $S`"),
    Row("roft-variants", "hotspot on ROFT 4:1 / 2:1 / 2-plane MRC-style / 1:1", "lossless, k=2",
        (Entry("4:1", "roft-4to1", "roft"), Entry("2:1", "roft-2to1", "roft"),
         Entry("2-plane", "roft-2planes", "roft-2planes"), Entry("1:1", "hotspot", "roft")),
        "`$Z --fabrics roft --oversubscription 4 --spines 1 --workload hotspot --rates 12,16,20 "
        "$L $S`; `--oversubscription 2`; `--planes 2 --kv-transport mrc`"),
    Row("ep-decode", "expert-parallel across servers, rail-aligned", "lossy, k=1",
        _three("ep-decode"),
        "`$Z --fabrics zcube,roft,clos --workload rail-aligned --prefill-servers 2 --ep-servers 2 "
        "--alltoall rail --rates 0.5,1,2 --repeat 2 $S`"),
    Row("kv-heavy-64", "64 GPUs, kv-heavy 48 : 16", "lossless, k=16, `--kv-warm 4`",
        (Entry("ZCube", "kv-heavy-64", "zcube"), Entry("ROFT", "kv-heavy-64", "roft"),
         Entry("Clos", None)),
        "`$Z --gpus 64 --fabrics zcube,roft --workload kv-heavy --prefill-servers 6 --rates "
        "128,160 --repeat 2 --lossless --dilation 16 --kv-warm 4 $S`"),
)  # fmt: skip


@dataclass(frozen=True)
class Fabric:
    """One fabric's figures: from the sweep JSON (runs, capacity) and the cell JSON."""

    label: str
    runs: int
    trusted: int
    capacity: Capacity | None
    figures: dict[str, Any] | None  # the cell JSON's `at_common_rate`
    common_rate: float | None
    data: dict[str, Any] | None  # the cell JSON's fabric entry


def fabric(entry: Entry, folder: Path = MAP) -> Fabric:
    """One entry's figures; a run the cell JSON counts that its sweep lacks fails here."""
    if entry.cell is None:
        return Fabric(entry.label, 0, 0, None, None, None, None)
    runs = [r for r in load_runs(entry.cell, folder) if r.variant == entry.variant]
    cell = load_cell(entry.cell, folder)
    data = cell["fabrics"][entry.variant]
    if data["runs"] != len(runs) or data["trusted"] != sum(r.trustworthy for r in runs):
        raise ValueError(
            f"{entry.cell} {entry.variant}: the cell JSON counts {data['trusted']} "
            f"of {data['runs']}, its sweep holds {len(runs)}"
        )
    return Fabric(
        entry.label,
        len(runs),
        sum(r.trustworthy for r in runs),
        capacity(runs),
        data["at_common_rate"],
        cell["common_rate"],
        data,
    )


def _join(fabrics: Sequence[Fabric], each: Any, sep: str = " / ") -> str:
    return sep.join("not run" if f.capacity is None else each(f) for f in fabrics)


def _counts(fabrics: Sequence[Fabric]) -> str:
    return f"{sum(f.trusted for f in fabrics)} of {sum(f.runs for f in fabrics)}"


def _rates(fabrics: Sequence[Fabric]) -> str:
    rates = dict.fromkeys(f"{f.common_rate:g}" for f in fabrics if f.capacity is not None)
    return " / ".join(rates)


def _p99(f: Fabric) -> str:
    return text(f.figures["ttft_p99_s"], ".2f") if f.figures else "-"


def _labels(row: Row) -> str:
    return " / ".join(e.label for e in row.entries)


def summary_table(folder: Path = MAP) -> list[str]:
    """The first screen's table: capacity with each seed's interval, runs, TTFT p99, command."""
    out = [
        "| cell (congestion model) | fabrics | capacity req/s, seeds' met-missed | runs "
        "trusted of held | TTFT p99 s at the common rate (req/s) | command |",
        "|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        fs = [fabric(e, folder) for e in row.entries]
        out.append(
            f"| {row.label} ({row.model}) | {_labels(row)} | "
            f"{_join(fs, lambda f: capacity_text(f.capacity))} | {_counts(fs)} | "
            f"{_join(fs, _p99)} ({_rates(fs)}) | {row.command} |"
        )
    return out


def map_table(folder: Path = MAP) -> list[str]:
    """The map's table: the summary's columns and the figures at the common rate."""
    out = [
        "| scenario | congestion model, k | fabrics | capacity req/s, seeds' met-missed | runs "
        "trusted of held | common rate | TTFT p99 s | KV share of TTFT p50 | busiest link, "
        "1 s peak | drops/pauses/RTOs a run, per fabric |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        fs = [fabric(e, folder) for e in row.entries]

        def share(f: Fabric) -> str:
            return text(f.figures["kv_share_of_ttft_p50"], ".0%") if f.figures else "-"

        def peak(f: Fabric) -> str:
            a = f.figures or {}
            return f"{text(a.get('peak_link_util'), '.0%')} ({a.get('peak_link')})"

        def losses(f: Fabric) -> str:
            a = f.figures or {}
            return "/".join(text(a.get(k), ",.0f") for k in ("switch_drops", "pauses", "rto"))

        out.append(
            f"| {row.label} | {row.model} | {_labels(row)} | "
            f"{_join(fs, lambda f: capacity_text(f.capacity))} | {_counts(fs)} | "
            f"{_rates(fs)} | {_join(fs, _p99)} | {_join(fs, share)} | {_join(fs, peak)} | "
            f"{_join(fs, losses, '; ')} |"
        )
    return out


def cell_table(name: str, folder: Path = MAP) -> list[str]:
    """One cell's table per fabric (bench/map_cell.py's columns; runs and capacity from the
    sweep JSON, the capacity with each seed's interval)."""
    cell = load_cell(name, folder)
    out = [
        "| fabric | capacity req/s, seeds' met-missed | vs baseline | trusted of held | runs at "
        "the rate | TTFT p99 s | TTFT p50 s | KV p50 ms | KV share | busiest link peak | drops "
        "| pauses | RTO |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = next((v for v, d in cell["fabrics"].items() if d["ratio"] == "baseline"), None)
    ratios = {c.variant: c.ratio for c in fabric_capacities(load_runs(name, folder), base or "")}
    for variant, row in zip(cell["fabrics"], cell_rows(cell), strict=True):
        f = fabric(Entry(variant, name, variant), folder)
        row[1] = capacity_text(f.capacity) if f.capacity else "-"
        # The ratio as the knee brackets allow it (zcube_lab.emulator.results.sweep.capacity), not
        # as stored.
        mine = ratios.get(variant)
        row[2] = "baseline" if variant == base else (mine.text() if mine else row[2])
        row[3] = f"{f.trusted} of {f.runs}"
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    for r in load_runs(name, folder):
        if not r.trustworthy:
            why = f"{r.variant} at {r.rate:g} req/s, seed {r.repeat}: {r.reason}"
            out.append(f"- untrusted: {why}")
    out.append(f"{common_rate_text(cell, 'Common rate')}, {sources_text(name, cell)}")
    return out


def common_rate_text(cell: dict[str, Any], lead: str) -> str:
    """`<lead> 20 req/s`, or that the cell has none (no rate where every run was trusted)."""
    rate = cell["common_rate"]
    if rate is None:
        return "No common rate (no rate where every run of every fabric was trusted)"
    return f"{lead} {rate:g} req/s"


def sources_text(name: str, cell: dict[str, Any]) -> str:
    """The rates a cell ran and the committed files its table comes from."""
    rates = ", ".join(f"{r:g}" for r in cell["rates"])
    return f"rates run {rates}; `bench/results/map/{name}.json` and `{name}-sweep.json`."


def production_table(name: str, folder: Path = MAP) -> list[str]:
    """A production cell's table: per fabric its capacity, runs, and at the common rate the
    figures production's story is about: decode and prefill tokens per GPU-second, TTFT p99,
    the EP exchange's p50/p99, the share of EP exchanges delayed by a pause KV raised, pauses."""
    cell = load_cell(name, folder)
    out = [
        "| fabric | capacity req/s, seeds' met-missed | trusted of held | decode tokens/s per "
        "GPU | prefill tokens/s per GPU | TTFT p99 s | EP exchange p50 / p99 ms | EP exchanges "
        "behind a KV-raised pause | pauses a run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for variant in cell["fabrics"]:
        f = fabric(Entry(variant, name, variant), folder)
        a = f.figures or {}
        out.append(
            f"| {variant} | {capacity_text(f.capacity) if f.capacity else '-'} | "
            f"{f.trusted} of {f.runs} | {text(a.get('decode_tps_per_gpu'), '.2f')} | "
            f"{text(a.get('prefill_tps_per_gpu'), ',.0f')} | {text(a.get('ttft_p99_s'), '.2f')} | "
            f"{text(a.get('ep_p50_ms'), '.1f')} / {text(a.get('ep_p99_ms'), '.1f')} | "
            f"{text(a.get('ep_victim_share'), '.1%')} | {text(a.get('pauses'), ',.0f')} |"
        )
    out.append("")
    at = common_rate_text(cell, "At the common rate")
    only = " (trustworthy runs only)" if cell["common_rate"] is not None else ""
    out.append(f"{at}{only}; {sources_text(name, cell)}")
    return out


@dataclass(frozen=True)
class Choice:
    """One modelling choice of the EP wire, as a committed cell ran it (issue 32 item 3-4)."""

    choice: str
    setting: str
    cell: str


EP_CHOICES = (
    Choice("NIC ports an EP exchange uses", "both (`--ep-ports all`, default)", "ep-ports-all"),
    Choice("NIC ports an EP exchange uses", "one (`--ep-ports one`, the old lab)", "ep-ports-one"),
    Choice("node-limited routing", "each token to 1 node (`--ep-node-limit 1`)", "ep-wire-nl1"),
    Choice("dual-batch overlap", "on, before the frame rule held per micro-batch", "ep-wire-dbo"),
    Choice("dual-batch overlap", "on (`--ep-dbo on`)", "ep-wire-dbo-frames"),
)
CHOICE_RATE = 0.5  # req/s: the rate every EP choice cell ran


def _seeds(points: Sequence[RunPoint], variant: str) -> dict[int, RunPoint]:
    return {p.repeat: p for p in points if p.variant == variant and p.rate == CHOICE_RATE}


def choices_table(folder: Path = MAP) -> list[str]:
    """The EP wire's modelling choices side by side: per seed, ZCube's and ROFT's TTFT p99 at
    0.5 req/s and ZCube against ROFT in the same seed (`*`: a run the verdict did not trust,
    shown, not counted as a result)."""
    out = [
        "| modelling choice | setting | ZCube TTFT p99 s, seeds 1-3 | ROFT TTFT p99 s | ZCube vs "
        "ROFT, per seed | trusted (ZCube, ROFT) | cell |",
        "|---|---|---|---|---|---|---|",
    ]

    def p99(p: RunPoint | None) -> str:
        if p is None or p.ttft_p99_s is None:
            return "-"
        return f"{p.ttft_p99_s:.2f}{'' if p.trustworthy else '*'}"

    for c in EP_CHOICES:
        points = load_runs(c.cell, folder)
        z, r = _seeds(points, "zcube"), _seeds(points, "roft")
        seeds = sorted(set(z) | set(r))
        ratios = []
        for s in seeds:
            a, b = z.get(s), r.get(s)
            if a is None or b is None or not a.ttft_p99_s or not b.ttft_p99_s:
                ratios.append("-")
                continue
            mark = "" if a.trustworthy and b.trustworthy else "*"
            ratios.append(f"{a.ttft_p99_s / b.ttft_p99_s - 1:+.0%}{mark}")
        trusted = (
            f"{sum(p.trustworthy for p in z.values())} of {len(z)}, "
            f"{sum(p.trustworthy for p in r.values())} of {len(r)}"
        )
        out.append(
            f"| {c.choice} | {c.setting} | {', '.join(p99(z.get(s)) for s in seeds)} | "
            f"{', '.join(p99(r.get(s)) for s in seeds)} | {', '.join(ratios)} | {trusted} | "
            f"`{c.cell}` |"
        )
    out.append("")
    out.append(
        f"At {CHOICE_RATE:g} req/s, seeds 1-3 (the same requests on both fabrics); `*`: untrusted, "
        "the verdict rejected it; from `bench/results/map/<cell>-sweep.json`."
    )
    return out


def victim_flow_table(path: Path = VICTIM_FLOW) -> list[str]:
    """The victim-flow bench's table, from the labs its `--out` saved."""
    from bench.victim_flow import table_lines

    return table_lines(json.loads(path.read_text()))


def table(name: str, folder: Path = MAP) -> list[str]:
    """The table `--table name` prints."""
    if name == "default":
        return default_table()
    if name.startswith("victim-flow") and (VICTIM_FLOW.parent / f"{name}.json").exists():
        return victim_flow_table(VICTIM_FLOW.parent / f"{name}.json")  # -time: --buffer-model
    if name.startswith("compare-") and (COMPARES / f"{name[8:]}.json").exists():
        return default_table(COMPARES / f"{name[8:]}.json")
    if name.startswith("gpu-") and name[4:] in cell_names(folder):
        return production_table(name[4:], folder)
    if name == "summary":
        return summary_table(folder)
    if name == "ep-choices":
        return choices_table(folder)
    if name == "kv-seen":
        from bench.kv_seen import table_lines

        return table_lines(json.loads(KV_SEEN.read_text()))
    if name == "map":
        return map_table(folder)
    if name == "answer" or name.startswith("status-"):
        return answer(folder) if name == "answer" else status(name[7:], folder)
    if name in cell_names(folder):
        return cell_table(name, folder)
    raise ValueError(
        f"no table {name!r}: answer, status-ROW, default, summary, map, ep-choices, kv-seen, "
        "victim-flow, "
        f"compare-NAME or one of {', '.join(cell_names(folder))}"
    )


def blocks(doc: str) -> list[tuple[str, str]]:
    """Every generated block of `doc`: (table name, the text between the markers)."""
    out = []
    for m in BEGIN.finditer(doc):
        end = doc.index(END, m.end())
        out.append((m.group(1), doc[m.end() : end].strip("\n")))
    return out


def rewrite(doc: str, folder: Path = MAP) -> str:
    """`doc` with every generated block replaced by its table."""
    return rewrite_blocks(doc, BEGIN, lambda name: table(name, folder))


def missing_runs(doc: str, folder: Path = MAP) -> list[str]:
    """Run names `doc` cites that no committed sweep JSON holds."""
    held = {r.run for name in cell_names(folder) for r in load_runs(name, folder)}
    return sorted({m.group(0) for m in RUN_NAME.finditer(doc)} - held)


def generated_pages() -> list[Path]:
    """RESULTS.md and every page under docs/results/ and docs/history/ with a generated block."""
    files = [RESULTS, *sorted((ROOT / "docs" / "results").glob("*.md"))]
    files += sorted((ROOT / "docs" / "history").glob("*.md"))
    return [f for f in files if BEGIN.search(f.read_text())]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--table",
        help="default, summary, map, victim-flow, compare-NAME, a cell's name or gpu-CELL",
    )
    parser.add_argument("--write", action="store_true", help="rewrite docs/RESULTS.md's blocks")
    args = parser.parse_args(argv)
    if args.write:
        for page in generated_pages():
            page.write_text(rewrite(page.read_text()))
        return 0
    if not args.table:
        parser.error("--table or --write")
    print("\n".join(table(args.table)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
