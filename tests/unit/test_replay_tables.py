"""The fine-scale page's tables and the answer's fine-scale figures regenerate from the
committed JSON (bench/results/replay/), and say what the data say."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench.replay_tables import BEGIN, DATA, PAGE, fine_figures, rewrite, table


def test_the_page_is_what_the_data_give():
    doc = PAGE.read_text()
    names = [m.group(1) for m in BEGIN.finditer(doc)]
    assert {"resolution", "victim", "mix", "pfc", "production"} <= set(names)
    assert rewrite(doc) == doc, "run: python -m bench.replay_tables --write"
    for name in names:
        assert len(table(name)) > 2, name


def test_the_victim_figures_follow_the_data(tmp_path: Path):
    for f in DATA.glob("*.json"):
        shutil.copy(f, tmp_path / f.name)
    before = fine_figures(tmp_path)
    victim = json.loads((tmp_path / "victim.json").read_text())
    victim["victim"][0]["keeps_of_its_rate"] = 0.9  # one fabric's victim now keeps far more
    (tmp_path / "victim.json").write_text(json.dumps(victim))
    after = fine_figures(tmp_path)
    assert after["fine_victim_way"] == "differing by fabric"
    assert after["fine_victim"].endswith("0.90") and after["fine_victim"] != before["fine_victim"]


def test_a_rung_that_could_not_hold_the_threshold_says_so():
    ladder = [n for n in (m.group(1) for m in BEGIN.finditer(PAGE.read_text()))
              if n.startswith("ladder-")]  # fmt: skip
    assert ladder
    rows = table(ladder[0])
    raised = [r for r in rows if "| 720 |" in r]
    assert raised and all("raised to 2 frames" in r for r in raised)
