"""docs/RESULTS.md's answer and its pages' tables regenerate from the committed JSON (issue 33
item 5, issue 44 item 7): every generated block of RESULTS.md, docs/results/*.md and
docs/history/*.md equals what bench/map_tables.py prints, counts included, and every run the
text names is in a committed sweep."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.map_data import COMPARES, MAP, cell_names, knee
from bench.map_tables import (
    RESULTS,
    Entry,
    blocks,
    cell_table,
    fabric,
    generated_pages,
    missing_runs,
    rewrite,
    table,
)
from zcube_lab.emulator.results.sweep.capacity import RepeatCapacity

PAGES = {p.relative_to(RESULTS.parents[1]).as_posix(): p.read_text() for p in generated_pages()}
DOC = "\n".join(PAGES.values())
BLOCKS = [(page, name, text) for page, doc in PAGES.items() for name, text in blocks(doc)]


@pytest.mark.parametrize("page,name,text", BLOCKS, ids=[f"{p}:{n}" for p, n, _ in BLOCKS])
def test_each_generated_block_regenerates(page: str, name: str, text: str) -> None:
    assert text == "\n".join(table(name)), f"run: python -m bench.map_tables --write ({name})"


def test_the_pages_with_blocks_are_found() -> None:
    assert {"docs/RESULTS.md", "docs/results/production.md"} <= set(PAGES)
    assert "docs/history/2026-12-04-map-old-sizes.md" in PAGES


def test_every_map_table_is_generated() -> None:
    names = {n for n, _ in blocks(DOC)}
    kept = {f"compare-{p.stem}" for p in COMPARES.glob("*.json")}
    assert {"answer", "default", "summary", "map", "victim-flow", *kept} <= names
    # every cell, by its table or its production table (tokens per GPU, EP exchange, victims)
    assert [c for c in cell_names() if not {c, f"gpu-{c}"} & names] == []


@pytest.mark.parametrize("page", sorted(PAGES))
def test_rewrite_is_a_fixed_point(page: str) -> None:
    assert rewrite(PAGES[page]) == PAGES[page]


def test_counts_are_the_saved_runs() -> None:
    ep = "\n".join(table("ep-decode"))
    assert ep.count("2 of 2") == 1 and ep.count("3 of 3") == 2  # 8 runs, all trusted
    summary = "\n".join(table("summary"))
    assert "| 8 of 8 |" in summary and "| 7 of 11 |" in summary


def test_every_run_named_in_results_is_committed() -> None:
    assert missing_runs(DOC) == []


def test_a_run_the_json_lacks_is_named() -> None:
    doc = "as run 20261204-181352-zcube-rail-aligned-0.5rps-r1 and 20991231-000000-roft-x-1rps-r9"
    assert missing_runs(doc) == ["20991231-000000-roft-x-1rps-r9"]


def test_a_cell_json_that_disagrees_with_its_sweep_is_refused(tmp_path: Path) -> None:
    for f in ("ep-decode.json", "ep-decode-sweep.json"):
        shutil.copy(MAP / f, tmp_path / f)
    data = json.loads((tmp_path / "ep-decode.json").read_text())
    data["fabrics"]["roft"]["runs"] = 5
    (tmp_path / "ep-decode.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="ep-decode roft"):
        fabric(Entry("ROFT", "ep-decode", "roft"), tmp_path)


@pytest.mark.parametrize(
    "rep,expected",
    [
        (RepeatCapacity(1, 32.0, None, 40.0), "32-40"),
        (RepeatCapacity(1, 0.0, None, 0.5), "< 0.5"),
        (RepeatCapacity(1, 20.0, "met at every rate tried (up to 20)", None), ">= 20"),
        (RepeatCapacity(1, 16.0, "not trustworthy at 24 (missed)", 24.0), ">= 16, 24 untrusted"),
    ],
)
def test_an_exact_capacity_is_an_interval(rep: RepeatCapacity, expected: str) -> None:
    assert knee(rep) == expected


def test_an_unknown_table_is_refused() -> None:
    with pytest.raises(ValueError, match="no table"):
        table("nonsense")


def test_a_cell_without_a_common_rate_says_so(tmp_path: Path) -> None:
    """A cell none of whose rates was trusted on every run still prints, naming the lack."""
    for suffix in ("", "-sweep"):
        shutil.copy(MAP / f"mrc-2plane-k2{suffix}.json", tmp_path / f"cell{suffix}.json")
    cell = json.loads((tmp_path / "cell.json").read_text())
    cell["common_rate"] = None
    (tmp_path / "cell.json").write_text(json.dumps(cell))
    last = cell_table("cell", tmp_path)[-1]
    assert last.startswith("No common rate")
    assert "rates run 16, 20" in last


def test_the_ep_choices_pair_each_seed_and_mark_what_the_verdict_rejected() -> None:
    """The choices table pairs ZCube and ROFT by seed: ep-ports-one's seed 1 is 2.36 s against
    1.91 s (+24%); every dual-batch-overlap run of its first cell was rejected, so every figure
    of that row carries the mark, and ep-ports-all's seed-2 ROFT run too."""
    rows = {line.split(" | ")[-1]: line for line in table("ep-choices") if "`ep-" in line}
    one = rows["`ep-ports-one` |"].split(" | ")
    assert one[2].startswith("2.36, ") and one[3].startswith("1.91, ") and one[4].startswith("+24%")
    dbo = rows["`ep-wire-dbo` |"].split(" | ")
    assert all(v.endswith("*") for v in dbo[2].split(", ") + dbo[4].split(", "))
    assert dbo[5] == "0 of 3, 0 of 3"
    assert rows["`ep-ports-all` |"].split(" | ")[3] == "1.91, 0.82*, 1.25"
