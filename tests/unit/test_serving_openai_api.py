"""Request parsing: every bad input is a 4xx ApiError naming the problem (fuzzed)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.models import get_profile
from serving.openai_api import CHAT, COMPLETION, ApiError, ChunkWriter, parse_request

TINY = get_profile("tiny")


def _parse(body: object, kind: str = COMPLETION):
    return parse_request(body, kind, TINY, "tiny")


def test_valid_completion_defaults() -> None:
    req = _parse({"model": "tiny", "prompt": "one two three"})
    assert req.prompt_tokens == 3 and req.max_tokens == TINY.context_length - 3
    assert not req.stream and not req.include_usage


@pytest.mark.parametrize(
    ("body", "status", "param", "needle"),
    [
        ([], 400, None, "JSON object"),
        ({"prompt": "x"}, 400, "model", "model"),
        ({"model": "gpt-4", "prompt": "x"}, 404, "model", "does not exist"),
        ({"model": "tiny"}, 400, "prompt", "required"),
        ({"model": "tiny", "prompt": 5}, 400, "prompt", "must be"),
        ({"model": "tiny", "prompt": ""}, 400, "prompt", "at least one token"),
        ({"model": "tiny", "prompt": "x", "max_tokens": -1}, 400, "max_tokens", "between"),
        ({"model": "tiny", "prompt": "x", "max_tokens": 10**30}, 400, "max_tokens", "between"),
        ({"model": "tiny", "prompt": "x", "max_tokens": "5"}, 400, "max_tokens", "integer"),
        ({"model": "tiny", "prompt": "x", "max_tokens": True}, 400, "max_tokens", "integer"),
        ({"model": "tiny", "prompt": "x", "max_tokens": 8192}, 400, "max_tokens", "context"),
        ({"model": "tiny", "prompt": "x " * 9000}, 400, "prompt", "context length"),
        ({"model": "tiny", "prompt": "x", "stream": "yes"}, 400, "stream", "boolean"),
        (
            {"model": "tiny", "prompt": "x", "stream_options": {"include_usage": True}},
            400,
            "stream_options",
            "only allowed",
        ),
        ({"model": "tiny", "prompt": "x", "n": 2}, 400, "n", "n=1"),
        ({"model": "tiny", "prompt": "x", "min_tokens": 9, "max_tokens": 3}, 400, "min_tokens", ""),
        ({"model": "tiny", "prompt": "x", "temperature": 9}, 400, "temperature", "between"),
    ],
)
def test_bad_completion_requests(body: object, status: int, param: str | None, needle: str) -> None:
    with pytest.raises(ApiError) as exc:
        _parse(body)
    assert exc.value.status == status and exc.value.param == param
    assert needle in exc.value.message
    err = exc.value.body()["error"]
    assert set(err) == {"message", "type", "param", "code"}


def test_chat_validation() -> None:
    ok = _parse({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}, CHAT)
    assert ok.prompt_tokens == 4 + 1 + 3
    for messages in ([], [{"role": "robot", "content": "x"}], [{"role": "user", "content": 3}]):
        with pytest.raises(ApiError) as exc:
            _parse({"model": "tiny", "messages": messages}, CHAT)
        assert exc.value.status == 400 and exc.value.param == "messages"


def test_chunks_are_one_token_each_and_parse_as_json() -> None:
    req = _parse({"model": "tiny", "prompt": "x", "stream": True}, COMPLETION)
    w = ChunkWriter(req, "abc", 1)
    line = w.token(" hi", None)
    assert line.startswith(b"data: ") and line.endswith(b"\n\n")
    obj = json.loads(line[6:])
    assert obj["id"] == "cmpl-abc" and obj["choices"][0]["text"] == " hi"
    usage = json.loads(w.usage(4)[6:])
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 5


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=12,
)
KEYS = ["model", "prompt", "messages", "max_tokens", "min_tokens", "stream", "stream_options",
        "seed", "n", "ignore_eos", "temperature", "max_completion_tokens",
        "kv_transfer_params"]  # fmt: skip
FIELD_VALUES = st.one_of(
    JSON,
    st.just("tiny"),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.lists(st.integers(min_value=-5, max_value=10), max_size=5),
    st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "x"]), "content": JSON})),
)
BODIES = st.one_of(
    JSON,
    st.dictionaries(st.sampled_from(KEYS), FIELD_VALUES, max_size=8),
    st.fixed_dictionaries(
        {"model": st.just("tiny"), "prompt": st.text(max_size=50)},
        optional={k: FIELD_VALUES for k in KEYS[2:]},
    ),
)


@settings(
    max_examples=3000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(body=BODIES, kind=st.sampled_from([COMPLETION, CHAT]))
def test_fuzz_parse_never_fails_otherwise(body: object, kind: str) -> None:
    try:
        req = _parse(body, kind)
    except ApiError as err:
        assert 400 <= err.status < 500
        assert err.message
    else:
        assert 1 <= req.prompt_tokens < TINY.context_length
        assert req.prompt_tokens + req.max_tokens <= TINY.context_length
        assert 0 <= req.min_tokens <= req.max_tokens
