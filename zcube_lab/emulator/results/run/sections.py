"""The flat sections of `summary.json` (pure): a section is a dataclass whose field names are
its keys, in order, and a key missing in an older run reads as None. The helpers every section
module uses (`zcube_lab.emulator.results.run.summary`, `fabricfigures`, `faultfigures`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

Span = tuple[float, float]
_T = TypeVar("_T")


def flat(obj: Any) -> dict[str, Any]:
    """A flat section's keys: its fields, in order."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def from_flat(cls: type[_T], data: Mapping[str, Any], **nested: Any) -> _T:
    """A flat section from its keys; a missing key reads as None (a run from an older version)."""
    values = {f.name: data.get(f.name) for f in fields(cls)}  # type: ignore[arg-type]
    values.update(nested)
    return cls(**values)


def pairs(rows: Any) -> tuple[Span, ...]:
    """JSON's lists of [a, b] as the tuples the producers build."""
    return tuple((a, b) for a, b in rows or ())
