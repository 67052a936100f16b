"""The gateway's upstream bodies: the same JSON object however the prompt is written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from zcube_lab.serving.gateway import body_bytes


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "prompt": [1, 2, 3], "max_tokens": 4, "stream": True},
        {"prompt": [7]},  # no other field
        {"model": "m", "prompt": [1, 2**64 + 5]},  # beyond orjson's 64 bits: json writes it
        {"model": "m", "prompt": [1, 2.0]},  # a whole float stays a float
        {"model": "m", "prompt": "caf\u00e9 \ud83d", "temperature": float("nan")},
        {"model": "m", "prompt": ["text"], "kv_transfer_params": {"a": [None, 1.5e300]}},
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ],
)
def test_body_bytes_reads_back_as_the_same_object(body: dict[str, Any]) -> None:
    got = json.loads(body_bytes(body))
    assert json.dumps(got, sort_keys=True) == json.dumps(body, sort_keys=True)
    assert [type(v) for v in got.get("prompt", [])] == [type(v) for v in body.get("prompt", [])]
