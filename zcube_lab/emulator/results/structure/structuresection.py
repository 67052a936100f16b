"""The structure table in the reports (pure but for reading each run's config.json): the scaled
fabric of each variant beside the full size it stands for, for the scenario's pairs (PD pulls,
EP exchanges, from the run's placement options) and all pairs
(`zcube_lab.core.fabric.fullsize.compare_structure`, rendered by `structuretable`).

Every run writes `structure.txt` beside its `config.json` (`write_run_structure`);
`report.html` (`structure_html_section`) and the sweep's report (`structure_text_section`,
also `structure.txt` in the sweep's folder) carry one table per variant, from the first of its
runs. A file fabric (`--fabric file:PATH`) has no full size beside it: its own structure
(`zcube_lab.core.fabric.files.report.own_structure_text`) stands in for the table. A run whose
config.json predates the placement options, or whose scenario has no full-size mapping, gets a
line that says so instead of a table.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.fullsize import StructureComparison, compare_structure
from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.emulator.results.structure.structuretable import structure_html, structure_text

STRUCTURE_FILE = "structure.txt"


def config_structure(config: Mapping[str, Any]) -> StructureComparison:
    """The structure table of a run from its config.json (`RunConfig.to_dict`)."""
    if "fabric" not in config or "layout" not in config:
        raise ConfigError("config", sorted(config), "a run's config.json with fabric and layout")
    spec = FabricSpec.from_json(json.dumps(config["fabric"]))
    layout = LayoutSpec(**config["layout"])
    return compare_structure(spec, layout, Path(str(config.get("workload", ""))).stem)


def file_structure(config: Mapping[str, Any]) -> str | None:
    """A file fabric's own structure from a run's config.json; None for a built-in fabric."""
    fabric = config.get("fabric")
    if not isinstance(fabric, Mapping) or fabric.get("kind") != "file":
        return None
    from zcube_lab.core.fabric.files import FabricFileError, load_fabric
    from zcube_lab.core.fabric.files.report import own_structure_text

    path = str(dict(fabric.get("params") or {}).get("path", ""))
    try:
        return own_structure_text(load_fabric(path))
    except (OSError, FabricFileError) as exc:
        return f"no structure table: the fabric file {path} cannot be read now ({exc})"


def _read(run_dir: Path) -> StructureComparison | str:
    """A run folder's structure table, a file fabric's own structure, or why there is none."""
    try:
        config = json.loads((run_dir / "config.json").read_text())
        own = file_structure(config)
        return own if own is not None else config_structure(config)
    except (OSError, ValueError, TypeError) as exc:  # ConfigError is a ValueError
        return f"no structure table for {run_dir.name}: {exc}"


def write_run_structure(run_dir: Path, config: Mapping[str, Any]) -> str:
    """Write the run's structure table to `structure.txt`; returns its verdict line."""
    try:
        own = file_structure(config)
        text = own if own is not None else structure_text(config_structure(config))
    except ConfigError as exc:
        text = f"no structure table: {exc}"
    (run_dir / STRUCTURE_FILE).write_text(text + "\n")
    return text.splitlines()[-1]


def _by_variant(runs: Sequence[tuple[str, Path]]) -> dict[str, StructureComparison | str]:
    """One table per variant, from the first of its runs (every run of a variant has one
    fabric and placement)."""
    out: dict[str, StructureComparison | str] = {}
    for variant, run_dir in runs:
        if variant not in out:
            out[variant] = _read(run_dir)
    return out


def structure_html_section(runs: Sequence[tuple[str, Path]]) -> list[str]:
    """report.html's structure section: per variant (label, run folder) a table or a line."""
    parts = ["<h2>Structure: scaled vs full size</h2>"]
    for variant, cmp in _by_variant(runs).items():
        parts.append(f"<h3>{html.escape(variant)}</h3>")
        if isinstance(cmp, str):
            tag = "pre" if "\n" in cmp else "p"
            parts.append(f"<{tag}>{html.escape(cmp)}</{tag}>")
        else:
            parts.append(structure_html(cmp))
    return parts


def structure_text_section(runs: Sequence[tuple[str, Path]]) -> str:
    """The structure tables as plain text, per variant (the sweep's report)."""
    blocks = []
    for variant, cmp in _by_variant(runs).items():
        body = cmp if isinstance(cmp, str) else structure_text(cmp)
        blocks.append(f"{variant}\n{body}")
    return "\n\n".join(blocks)
