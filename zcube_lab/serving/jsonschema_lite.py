"""A small JSON Schema checker for request fields: the subset our OpenAPI document uses.

`problem(value, schema)` returns None when `value` (decoded JSON) satisfies `schema`, else one
line saying why. Keywords: `type` (one or a list; `integer` counts whole floats such as `1.0`,
as JSON Schema does; booleans are never numbers), `enum`, `const`, `minimum`, `maximum`,
`minLength`, `maxLength`, `pattern` (searched, not anchored), `minItems`, `maxItems`, `items`,
`properties`, `required`, `additionalProperties: false`, `maxProperties`, `anyOf`. Pure; used by
the request parser so the document and the server judge a field by the same schema.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any

_TYPE_NAMES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


def json_type(value: object) -> str:
    """The JSON type name of a decoded value (`integer` only for Python ints)."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def is_integer(value: object) -> bool:
    """True for ints and whole finite floats (`2.0`), never for booleans."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value) and value.is_integer()


def _has_type(value: object, name: str) -> bool:
    if name == "integer":
        return is_integer(value)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return json_type(value) == name


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _equal(a: object, b: object) -> bool:
    # JSON equality: `true` is not `1`.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def problem(value: Any, schema: dict[str, Any]) -> str | None:
    """Why `value` does not satisfy `schema`, or None."""
    if "anyOf" in schema:
        reasons = [problem(value, s) for s in schema["anyOf"]]
        if all(r is not None for r in reasons):
            return "matches none of the allowed forms: " + "; ".join(str(r) for r in reasons)
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_has_type(value, n) for n in names):
            return f"must be {' or '.join(names)}, got {json_type(value)}"
    if "const" in schema and not _equal(value, schema["const"]):
        return f"must be {schema['const']!r}"
    if "enum" in schema and not any(_equal(value, e) for e in schema["enum"]):
        return f"must be one of {schema['enum']!r}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _number_problem(value, schema)
    if isinstance(value, str):
        return _string_problem(value, schema)
    if isinstance(value, list):
        return _array_problem(value, schema)
    if isinstance(value, dict):
        return _object_problem(value, schema)
    return None


def _number_problem(value: float, schema: dict[str, Any]) -> str | None:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if (lo is not None and not value >= lo) or (hi is not None and not value <= hi):
        return f"must be between {lo} and {hi}, got {value}"
    return None


def _string_problem(value: str, schema: dict[str, Any]) -> str | None:
    if len(value) < schema.get("minLength", 0):
        return f"must have at least {schema['minLength']} characters"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"must have at most {schema['maxLength']} characters"
    if "pattern" in schema and not _regex(schema["pattern"]).search(value):
        return f"must match {schema['pattern']!r}"
    return None


def _array_problem(value: list[Any], schema: dict[str, Any]) -> str | None:
    if len(value) < schema.get("minItems", 0):
        return f"must have at least {schema['minItems']} items"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return f"must have at most {schema['maxItems']} items"
    items = schema.get("items")
    if items is not None:
        for i, item in enumerate(value):
            why = problem(item, items)
            if why is not None:
                return f"[{i}] {why}"
    return None


def _object_problem(value: dict[str, Any], schema: dict[str, Any]) -> str | None:
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        return f"must have at most {schema['maxProperties']} keys"
    for key in schema.get("required", ()):
        if key not in value:
            return f"needs '{key}'"
    props = schema.get("properties", {})
    if schema.get("additionalProperties") is False:
        extra = sorted(k for k in value if k not in props)
        if extra:
            return f"has unknown keys {extra[:5]}"
    for key, sub in props.items():
        if key in value:
            why = problem(value[key], sub)
            if why is not None:
                return f".{key} {why}"
    return None
