"""The one error of a fabric file, and YAML read with the line of every mapping and list.

`FabricFileError` is a `ConfigError`, so the CLI prints it as one line and builds nothing; its
text is `FILE:LINE: ELEMENT: what is wrong [rule]`, the rule one of `RULES`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from zcube_lab.core.errors import ConfigError

# rule -> what it checks (docs/FABRIC_FILES.md lists the same)
RULES: dict[str, str] = {
    "format": "the file is in a format the lab reads",
    "syntax": "the file parses (YAML, JSON, text of the named format)",
    "schema": "the file matches the JSON Schema of zcube-fabric/1",
    "unknown-node": "every link end and host port names a declared switch",
    "duplicate-node": "names and dpids are declared once",
    "host-without-link": "every GPU has at least one NIC port linked to a switch",
    "uneven-ports": "every GPU has the same number of NIC ports (one address plane each)",
    "radix": "no switch has more links than its radix",
    "port-taken": "a switch port carries one link",
    "duplicate-link": "a switch pair is listed once (parallel links: count)",
    "self-link": "a link joins two different switches",
    "name-length": "interface names <switch>-eth<port> fit Linux's 15 characters",
    "plane": "a NIC port k plugs into a switch of plane k when planes are given",
    "address": "addresses and routes are valid and unique in the lab's fabric range",
    "disconnected": "every two GPUs have a path (and every switch reaches a GPU)",
    "roles": "the GPUs the roles ask for exist and fit",
}


class FabricFileError(ConfigError):
    """A fabric file breaks `rule` at `element` (line `line` of `file`, when known)."""

    def __init__(
        self, file: str | Path, line: int | None, element: str, rule: str, detail: str
    ) -> None:
        self.file = str(file)
        self.line = line
        self.element = element
        self.rule = rule
        self.detail = detail
        super().__init__("file", self.file, detail)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.element}: {self.detail} [{self.rule}]"


class LineMap(dict):
    """A mapping read from a file, with the line it starts on (1-based; 0 unknown)."""

    line: int = 0


class LineList(list):
    """A list read from a file, with the line it starts on."""

    line: int = 0


def line_of(value: Any, default: int | None = None) -> int | None:
    """The line `value` started on in its file, or `default`."""
    line = getattr(value, "line", 0)
    return line or default


def at_line(data: dict, line: int) -> LineMap:
    """`data` as a `LineMap` of line `line` (importers carry the source's lines this way)."""
    out = LineMap(data)
    out.line = line
    return out


# libyaml's parser when PyYAML has it (10x faster); its nodes carry marks all the same.
_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    pass


def _map(loader: _Loader, node: yaml.MappingNode) -> LineMap:
    out = LineMap(loader.construct_mapping(node, deep=True))
    out.line = node.start_mark.line + 1
    return out


def _seq(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_sequence(node, deep=True))
    out.line = node.start_mark.line + 1
    return out


_Loader.add_constructor("tag:yaml.org,2002:map", _map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _seq)


def read_yaml(path: str | Path, text: str | None = None) -> Any:
    """Parse YAML (or JSON, a subset) keeping lines; a parse error is one `syntax` line."""
    if text is None:
        text = read_text(path)
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise FabricFileError(path, line, "file", "syntax", f"not valid YAML: {problem}") from None


def read_text(path: str | Path) -> str:
    """The file's text; a missing or unreadable file is one `format` line."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise FabricFileError(path, None, "file", "format", f"cannot read it: {reason}") from None
