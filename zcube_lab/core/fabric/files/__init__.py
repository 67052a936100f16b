"""Fabrics from files (docs/FABRIC_FILES.md): our own format zcube-fabric/1, importers of
SimAI/HPCC ns-3 text, GraphML/GML (NetworkX) and containerlab YAML, and export of any `Fabric`.

`load_fabric(path)` picks the reader by the file's name and content, returns a validated
`LoadedFabric` or raises `FabricFileError` (one line naming file, element and rule).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.fabric.files.errors import RULES, FabricFileError
from zcube_lab.core.fabric.files.export import fabric_document, write_fabric
from zcube_lab.core.fabric.files.native import FORMAT, KIND, LoadedFabric, Roles, load_document

# format name -> what it is
FORMATS: dict[str, str] = {
    "zcube": f"{FORMAT} (YAML or JSON): .yaml .yml .json",
    "simai": "SimAI / HPCC ns-3 topology text: .txt .topo, or any name with --format simai",
    "graphml": "GraphML through NetworkX: .graphml",
    "gml": "GML through NetworkX (Topology Zoo): .gml",
    "clab": "containerlab topology: .clab.yml .clab.yaml",
}

__all__ = [
    "FORMAT",
    "FORMATS",
    "KIND",
    "RULES",
    "FabricFileError",
    "LoadedFabric",
    "Roles",
    "detect_format",
    "fabric_document",
    "fabric_from_path",
    "file_spec",
    "load_fabric",
    "write_fabric",
]


def detect_format(path: str | Path) -> str:
    """The format a file's name says (FabricFileError `format` when none does)."""
    name = Path(path).name.lower()
    if name.endswith((".clab.yml", ".clab.yaml")):
        return "clab"
    suffix = Path(name).suffix
    by_suffix = {
        ".yaml": "zcube",
        ".yml": "zcube",
        ".json": "zcube",
        ".txt": "simai",
        ".topo": "simai",
        ".graphml": "graphml",
        ".gml": "gml",
    }
    if suffix in by_suffix:
        return by_suffix[suffix]
    raise FabricFileError(
        path,
        None,
        "file",
        "format",
        f"unsupported format {suffix or '(no extension)'}: one of " + "; ".join(FORMATS.values()),
    )


def load_fabric(path: str | Path, fmt: str | None = None) -> LoadedFabric:
    """Read, convert and validate a fabric file; `fmt` overrides the name's format."""
    from zcube_lab.core.fabric.files import importers
    from zcube_lab.core.fabric.files.errors import read_yaml

    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise FabricFileError(
            path, None, "file", "format", f"unsupported format {fmt!r}: one of {sorted(FORMATS)}"
        )
    if fmt == "zcube":
        doc = read_yaml(path)
        if isinstance(doc, dict) and "topology" in doc and "format" not in doc:
            return importers.load_clab(path, doc)
        return load_document(doc, path)
    if fmt == "clab":
        return importers.load_clab(path, read_yaml(path))
    if fmt == "simai":
        return importers.load_simai(path)
    return importers.load_graph(path, fmt)


def file_spec(path: str | Path, gpus: int | None = None) -> FabricSpec:
    """The spec of a file fabric (`file` with the file's absolute path), loaded once to check
    it; with `gpus`, refused unless it holds that many GPU hosts (compared fabrics hold the
    same GPUs)."""
    spec = FabricSpec.of(KIND, path=str(Path(path).resolve()))
    fabric = fabric_from_path(dict(spec.params)["path"])
    if gpus is not None and len(fabric.hosts) != gpus:
        raise ConfigError(
            "fabrics",
            f"file:{path}",
            f"a fabric of {gpus} GPUs like the others compared; the file has {len(fabric.hosts)}",
        )
    return spec


def fabric_from_path(path: str | Path | None) -> Fabric:
    """The `Fabric` of a file, for `build_fabric(FabricSpec('file', path=...))`: the lab, the
    controller and the planner all build from the spec. Read once per file version."""
    if not path:
        raise ConfigError("path", path, "a fabric file: " + "; ".join(FORMATS.values()))
    p = Path(path)
    try:
        stamp = p.stat().st_mtime_ns
    except OSError:
        stamp = 0
    return _cached(str(p), stamp)


@lru_cache(maxsize=16)
def _cached(path: str, stamp: int) -> Fabric:
    del stamp  # part of the cache key only
    return load_fabric(path).fabric
