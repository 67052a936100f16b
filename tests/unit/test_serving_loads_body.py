"""The roles' body parser gives what `json.loads` gives: the same value, or the same error."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zcube_lab.serving.httpapi import loads_body


def _outcome(parse, raw: bytes) -> tuple[str, str]:
    try:
        value = parse(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return type(exc).__name__, str(exc)  # the message goes into the 400's text
    return "ok", repr(value)  # repr keeps what == hides: 1 against 1.0, -0.0 against 0.0


@pytest.mark.parametrize(
    "raw",
    [
        b'{"prompt":[1,2,3],"max_tokens":4}',
        b'{"a":1,"a":2}',  # the last duplicate wins
        b'{"seed":18446744073709551616}',  # beyond 64 bits: an int, not a float
        b'{"seed":-9223372036854775809}',
        b'{"prompt":[1,18446744073709551615]}',
        b'{"x":"1234567890123456789012"}',  # a long digit run in a string
        b'{"t":1E400}',  # inf
        b'{"t":NaN,"u":-Infinity}',
        b'\xef\xbb\xbf{"a":1}',  # a byte-order mark
        b'{"s":"\\ud800"}',  # a lone surrogate
        b'{"x":-0.0,"y":-0,"z":0.1e-400,"w":2.50}',
        b'{"s":"caf\xc3\xa9"}',
        b'{"s":"\xff"}',  # not UTF-8
        b"[1,]",
        b'{"a":1}x',
        b"",
        b"[" * 3000 + b"]" * 3000,  # deeper than either parser goes
    ],
)
def test_loads_body_is_json_loads(raw: bytes) -> None:
    assert _outcome(loads_body, raw) == _outcome(json.loads, raw)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**80), max_value=2**80)
        | st.floats(allow_nan=False)
        | st.text(),
        lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(), kids, max_size=5),
        max_leaves=30,
    )
)
def test_loads_body_reads_any_json_as_json_loads_does(value: object) -> None:
    raw = json.dumps(value).encode()
    assert _outcome(loads_body, raw) == _outcome(json.loads, raw)
