"""The structure table in the reports: every run's folder gets `structure.txt`, `report.html` a
table per variant and the sweep's report one per variant, each the scaled fabric beside the
full size for the run's own placement (its PD and EP pairs) and for all pairs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.emulator.experiment.comparison import fabric_specs
from zcube_lab.emulator.experiment.runconfig import RunConfig
from zcube_lab.emulator.results.compare.report import write_report
from zcube_lab.emulator.results.run.summary import RunSummary
from zcube_lab.emulator.results.structure.structuresection import (
    STRUCTURE_FILE,
    config_structure,
    structure_html_section,
    structure_text_section,
    write_run_structure,
)
from zcube_lab.emulator.results.sweep.sweepreport import structure_report

DATA = Path(__file__).parent / "data"
SPECS = fabric_specs(["zcube", "roft"], 16, 2)
EP_CELL = LayoutSpec(prefill_servers=4, ep_servers=2, layout="rail-aligned")


def _config(kind: str, layout: LayoutSpec = EP_CELL) -> dict:
    """A run's config.json as the launcher writes it (its RunConfig's fields and more)."""
    cfg = RunConfig(fabric=SPECS[kind], workload="rail-aligned", layout=layout).to_dict()
    cfg["fabric_summary"] = {"hosts": 16}
    return cfg


def _run_folder(tmp_path: Path, name: str, config: dict | None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_runs_config_gives_the_table_of_its_own_pairs() -> None:
    cmp = config_structure(_config("zcube"))
    assert cmp.scenario == "rail-aligned"
    # every engine (prefill and decode) in a 2-server instance, rank to rank: 1 peer each
    assert cmp.scaled.pair_set("ep").pairs == 16
    assert cmp.scaled.pair_set("pd").pairs > 0 and cmp.scaled.pair_set("all").pairs == 16 * 15
    assert cmp.share_gaps()["ep"] == 0  # 2 servers per A switch: EP pairs meet as at full size


def test_every_run_folder_gets_structure_txt(tmp_path: Path) -> None:
    verdict = write_run_structure(tmp_path, _config("roft"))
    text = (tmp_path / STRUCTURE_FILE).read_text()
    assert text.startswith("Structure for rail-aligned: roft")
    assert "EP exchanges" in text and "all GPU pairs" in text and "full size" in text
    assert verdict == "every share within 5 points of full size" == text.splitlines()[-1]
    # a zcube of 16: 1/4 of all pairs on one B switch against 1/32 at full size
    assert write_run_structure(tmp_path, _config("zcube")).startswith("shares beyond 5 points")
    # a config without the placement: a line, not a failure
    assert write_run_structure(tmp_path, {"workload": "chat"}).startswith("no structure table")


def test_report_html_carries_a_table_per_variant(tmp_path: Path) -> None:
    base = RunSummary.from_dict(json.loads((DATA / "summary-zcube.json").read_text()))
    runs = []
    for kind in ("zcube", "roft"):
        for r in (1, 2):
            folder = _run_folder(tmp_path, f"{kind}-r{r}", _config(kind))
            runs.append(replace(base, run=folder.name, label=kind, dir=folder))
    page = write_report(runs, tmp_path / "report", "roft", {}).read_text()
    assert page.count("<h2>Structure for rail-aligned:") == 2  # one per variant, not per run
    assert "<h3>zcube</h3>" in page and "<h3>roft</h3>" in page
    assert "<th colspan='4'>EP exchanges</th>" in page


def test_the_sections_say_why_a_run_has_no_table(tmp_path: Path) -> None:
    old = _run_folder(tmp_path, "old", {"fabric_summary": {"hosts": 16}})
    missing = tmp_path / "gone"
    html = "\n".join(structure_html_section([("zcube", old), ("roft", missing)]))
    assert "no structure table for old" in html and "no structure table for gone" in html


def test_the_sweep_report_prints_and_writes_a_table_per_variant(tmp_path: Path) -> None:
    for kind in ("zcube", "roft"):
        for rate in (1, 2):
            _run_folder(tmp_path, f"{kind}-{rate}", _config(kind))
    points = [
        SimpleNamespace(variant=k, run=f"{k}-{rate}") for rate in (1, 2) for k in ("zcube", "roft")
    ]
    text = structure_report(SimpleNamespace(runs=points), tmp_path)  # type: ignore[arg-type]
    assert (tmp_path / STRUCTURE_FILE).read_text() == text + "\n"
    assert text.startswith("zcube\nStructure for rail-aligned: zcube")
    assert text.count("Structure for") == 2
    assert text == structure_text_section([(p.variant, tmp_path / p.run) for p in points])


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "fabrics"


def _file_config(path: Path) -> dict:
    """A file fabric's run config: the spec names the file (`--fabric file:PATH`)."""
    cfg = _config("roft")
    cfg["fabric"] = {"kind": "file", "params": {"path": str(path)}}
    return cfg


def test_a_file_fabric_run_gets_its_own_structure(tmp_path: Path) -> None:
    """Issue 47's leftover: a file fabric's run printed "no structure table"; it now carries the
    file's own shares (all pairs by hops sum to 100%) and says there is no full size beside it."""
    last = write_run_structure(tmp_path, _file_config(EXAMPLES / "roft-16.yaml"))
    text = (tmp_path / STRUCTURE_FILE).read_text()
    assert text.startswith("Structure of ") and "16 GPUs" in text.splitlines()[0]
    hops = [float(line.rsplit(maxsplit=1)[1]) for line in text.splitlines() if " at " in line]
    pairs = [line for line in text.splitlines() if "GPU pairs at" in line]
    assert pairs and abs(sum(float(p.rsplit(maxsplit=1)[1]) for p in pairs) - 100) < 0.2
    assert hops and "bisection per GPU" in text
    assert last.startswith("no full size beside it") and "--full-file" in last
    folder = _run_folder(tmp_path, "file-run", _file_config(EXAMPLES / "roft-16.yaml"))
    html_parts = "\n".join(structure_html_section([("file-roft-16", folder)]))
    assert "<pre>Structure of " in html_parts and "no structure table" not in html_parts


def test_a_file_fabric_whose_file_is_gone_gets_a_line(tmp_path: Path) -> None:
    last = write_run_structure(tmp_path, _file_config(tmp_path / "moved.yaml"))
    assert last.startswith("no structure table: the fabric file") and "moved.yaml" in last
