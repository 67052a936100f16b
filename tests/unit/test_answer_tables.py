"""RESULTS.md's current answer says only what its data say (issue 44 item 7): its prose is
templates filled from the committed JSON, a template holds no figure of its own, the answer in
the file is the one the data give, it fits one screen, its words are the glossary's, and the
pages it links resolve."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_docs_links import broken_links  # noqa: E402

from bench.answer_tables import (  # noqa: E402
    ANSWER,
    ANSWER_ROWS,
    CENSORED,
    CLAIM_CAPEX_PCT,
    CLAIM_THROUGHPUT_PCT,
    CLAIM_TTFT_P99_PCT,
    DIFFERENCE,
    PAGES,
    TIE,
    UNTRUSTED,
    WORDS,
    ahead,
    answer,
    capacities,
    figures,
    literal_figures,
    odd_seeds,
    word,
)
from bench.map_data import MAP  # noqa: E402
from bench.map_tables import RESULTS, blocks  # noqa: E402
from zcube_lab.emulator.results.sweep.capacity import capacity  # noqa: E402
from zcube_lab.emulator.results.sweep.sweeppoints import RunPoint  # noqa: E402

DOCS = ROOT / "docs"


def test_no_template_holds_a_figure_of_its_own() -> None:
    assert literal_figures(ANSWER) == []


def test_a_figure_written_into_a_template_is_caught() -> None:
    bad = "ZCube's TTFT p99 is within {gap} of ROFT's, and 3% better at 1.5 req/s"
    assert literal_figures(bad) == ["3", "1.5"]


def test_the_answer_in_results_is_the_one_the_data_give() -> None:
    found = dict(blocks(RESULTS.read_text()))
    assert found["answer"] == "\n".join(answer())


def test_the_answer_fits_one_screen() -> None:
    text = dict(blocks(RESULTS.read_text()))["answer"]
    assert len(text.split("\n")) <= 50
    # and it is the top of the file: nothing but the title and its heading before it
    head = RESULTS.read_text().split("<!-- generated:")[0]
    assert len([line for line in head.split("\n") if line.strip()]) <= 2


def test_every_field_is_filled_and_none_left_over() -> None:
    names = set(re.findall(r"\{([a-z_0-9]+)\}", ANSWER)) - {"glossary", "head"}
    assert names <= set(figures())
    assert "{" not in "\n".join(answer())


def test_the_production_claim_is_the_one_domain_quotes() -> None:
    domain = (DOCS / "DOMAIN.md").read_text()
    assert f"| {CLAIM_CAPEX_PCT:g}% lower |" in domain
    assert f"| {CLAIM_THROUGHPUT_PCT:g}% higher |" in domain
    assert f"| {CLAIM_TTFT_P99_PCT:g}% lower |" in domain


def test_a_changed_run_changes_the_answer(tmp_path: Path) -> None:
    """The prose follows the data: a ZCube run at the common rate made slower moves the TTFT
    figure of its sentence."""
    for p in MAP.glob("*.json"):
        shutil.copy(p, tmp_path / p.name)
    before = figures(tmp_path)["kv_heavy_gap"]
    sweep = tmp_path / "kv-heavy-structure-sweep.json"
    data = json.loads(sweep.read_text())
    for r in data["runs"]:
        if r["variant"] == "zcube" and r["rate"] == 32.0 and r["repeat"] == 1:
            r["ttft_p99_s"] *= 1.5
    sweep.write_text(json.dumps(data))
    after = figures(tmp_path)["kv_heavy_gap"]
    assert before == "7%" and after != before


def _runs(*points: tuple[str, float, int, bool, bool]) -> list[RunPoint]:
    base = json.loads((MAP / "kv-heavy-structure-sweep.json").read_text())["runs"][0]
    out = []
    for variant, rate, seed, met, trusted in points:
        d = dict(base, variant=variant, rate=rate, repeat=seed, slo_met=met, trustworthy=trusted)
        out.append(RunPoint.from_dict(d))
    return out


def test_the_words_follow_the_rule() -> None:
    exact = capacity(_runs(("z", 1, 1, True, True), ("z", 2, 1, False, True)))
    higher = capacity(_runs(("z", 1, 1, True, True), ("z", 2, 1, True, True),
                            ("z", 4, 1, False, True)))  # fmt: skip
    top = capacity(_runs(("z", 1, 1, True, True), ("z", 2, 1, True, True)))
    stopped = capacity(_runs(("z", 1, 1, True, True), ("z", 2, 1, False, False)))
    assert word([exact, exact], 4) == TIE
    assert word([exact, higher], 5) == DIFFERENCE
    assert word([exact, top], 4) == CENSORED
    assert word([exact, stopped], 3) == CENSORED
    assert word([stopped], 0) == UNTRUSTED


def test_the_odd_seed_is_named() -> None:
    row = next(r for r in ANSWER_ROWS if r.key == "kv-heavy")
    assert odd_seeds(capacities(row)) == ["ROFT's seed 3 (34.5-37 against 32-34.5)"]


def test_the_words_are_the_glossarys_and_never_not_reproduced() -> None:
    glossary = (DOCS / "GLOSSARY.md").read_text()
    section = glossary.split("## Results words")[1].split("\n## ")[0]
    for w in WORDS:
        assert f"| **{w}** |" in section
    for page in [RESULTS, *sorted((DOCS / "results").glob("*.md"))]:
        assert "not reproduced" not in page.read_text().lower(), page.name


@pytest.mark.parametrize("page", [p for _, p in PAGES])
def test_each_page_exists_and_its_links_resolve(page: str) -> None:
    path = DOCS / page
    assert path.exists()
    assert broken_links(path) == []


def test_a_fabric_ahead_in_every_seed_is_named() -> None:
    """The sentence "no fabric is a step ahead" is data too: a fabric whose knee is a step above
    the others' in every seed is named; one that is ahead in one seed only is not."""

    def walk(v: str, knees: dict[int, int]) -> list[RunPoint]:
        """Seed s meets 1, 2, 4 ... up to its knee and misses the next rate."""
        points = []
        for seed, top in knees.items():
            rate = 1
            while rate <= top:
                points.append((v, rate, seed, True, True))
                rate *= 2
            points.append((v, rate, seed, False, True))
        return _runs(*points)

    low = capacity(walk("z", {1: 1, 2: 1}))
    high = capacity(walk("r", {1: 2, 2: 2}))
    mixed = capacity(walk("c", {1: 2, 2: 1}))
    assert ahead({"zcube": low, "roft": high}) == ["ROFT"]
    assert ahead({"zcube": low, "clos": mixed}) == []
    row = next(r for r in ANSWER_ROWS if r.key == "hotspot")
    assert ahead(capacities(row)) == []
