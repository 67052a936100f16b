"""Request parsing: every bad input is a 4xx ApiError naming the problem (fuzzed)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zcube_lab.serving.models import get_profile
from zcube_lab.serving.openai_api import (
    CHAT,
    COMPLETION,
    ApiError,
    ChunkWriter,
    full_response,
    parse_request,
)

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


def test_an_unhashable_role_is_a_400_naming_messages() -> None:
    for role in ({}, [], ["user"]):
        with pytest.raises(ApiError) as exc:
            _parse({"model": "tiny", "messages": [{"role": role, "content": "x"}]}, CHAT)
        assert exc.value.status == 400 and exc.value.param == "messages"


def test_whole_floats_are_integers_as_in_json_schema() -> None:
    req = _parse(
        {"model": "tiny", "prompt": [1.0, 2], "n": 1.0, "seed": 37208.0, "max_tokens": 3.0}
    )
    assert (req.prompt_tokens, req.max_tokens, req.seed) == (2, 3, 37208)
    assert isinstance(req.seed, int) and isinstance(req.max_tokens, int)
    with pytest.raises(ApiError) as exc:
        _parse({"model": "tiny", "prompt": "x", "max_tokens": 2.5})
    assert exc.value.param == "max_tokens"


def test_max_tokens_zero_is_the_prompt_alone_with_echo_else_a_400_as_in_vllm() -> None:
    req = _parse({"model": "tiny", "prompt": "a b", "max_tokens": 0, "echo": True})
    assert req.prompt_only and req.max_tokens == 1 and req.echo == "a b"
    assert full_response(req, "r", 0, " the", "length", 1)["choices"][0]["text"] == "a b"
    w = ChunkWriter(req, "r", 0)
    assert json.loads(w.token(" the", "length")[6:])["choices"][0]["text"] == "a b"
    for body, kind, param in (
        ({"model": "tiny", "prompt": "x", "max_tokens": 0}, COMPLETION, "max_tokens"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "x"}],
          "max_completion_tokens": 0}, CHAT, "max_completion_tokens"),
    ):  # fmt: skip
        with pytest.raises(ApiError) as exc:
            _parse(body, kind)
        assert exc.value.status == 400 and exc.value.param == param


def test_echo_prepends_the_prompt_and_needs_text() -> None:
    req = _parse({"model": "tiny", "prompt": "hi", "max_tokens": 2, "echo": True, "stream": True})
    w = ChunkWriter(req, "r", 0)
    texts = [json.loads(w.token(t, None)[6:])["choices"][0]["text"] for t in (" a", " b")]
    assert texts == ["hi a", " b"]
    with pytest.raises(ApiError) as exc:
        _parse({"model": "tiny", "prompt": [5, 6], "echo": True})
    assert exc.value.param == "echo"


def test_chat_messages_carry_refusal_null() -> None:
    req = _parse({"model": "tiny", "messages": [{"role": "user", "content": "x"}]}, CHAT)
    msg = full_response(req, "r", 0, " a", "length", 1)["choices"][0]["message"]
    assert msg["refusal"] is None and msg["content"] == " a" and msg["role"] == "assistant"


CHAT_MSG = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    ("extra", "kind", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"},
         CHAT, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, CHAT, "tool_choice"),
        ({"logprobs": True, "top_logprobs": 2}, CHAT, "logprobs"),
        ({"logprobs": 1}, COMPLETION, "logprobs"),
        ({"echo": True}, CHAT, "echo"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, CHAT,
         "response_format"),
        ({"response_format": {"type": "json_object"}}, COMPLETION, "response_format"),
        ({"stop": ""}, COMPLETION, "stop"),
        ({"stop": ["a", "b", "c", "d", "e"]}, CHAT, "stop"),
        ({"stop": 5}, COMPLETION, "stop"),
        ({"stop": ["END", 7]}, CHAT, "stop"),
        ({"stop": {"END": 1}}, COMPLETION, "stop"),
        ({"stop": ["END", ""]}, COMPLETION, "stop"),
        ({"include_stop_str_in_output": "yes"}, CHAT, "include_stop_str_in_output"),
        ({"logit_bias": {"50256": -100}}, COMPLETION, "logit_bias"),
        ({"suffix": "end"}, COMPLETION, "suffix"),
        ({"best_of": 3}, COMPLETION, "best_of"),
        ({"user": 5}, CHAT, "user"),
        ({"stream": True, "stream_options": {"continuous_usage_stats": 1}}, CHAT,
         "stream_options"),
    ],
)  # fmt: skip
def test_fields_the_mock_cannot_honour_are_refused_by_name(extra, kind, param) -> None:
    base = {"model": "tiny", "max_tokens": 2}
    base.update({"messages": CHAT_MSG} if kind == CHAT else {"prompt": "x"})
    with pytest.raises(ApiError) as exc:
        _parse({**base, **extra}, kind)
    assert exc.value.status == 400 and exc.value.param == param, exc.value.message


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"},
        {"logprobs": False, "top_logprobs": 0},
        {"response_format": {"type": "text"}},
        {"stop": ["\n", "User:"]},
        {"stop": ["END", "the fabric", "a", " "], "include_stop_str_in_output": True},
        {"stop": "END"},
        {"stop": []},
        {"logit_bias": {}},
        {"temperature": 0.0, "top_p": 1, "user": "u", "metadata": {"a": "b"}},
    ],
)
def test_fields_the_mock_honours_or_that_change_nothing_are_accepted(extra) -> None:
    _parse({"model": "tiny", "messages": CHAT_MSG, "max_tokens": 2, **extra}, CHAT)


def test_every_field_has_a_row_in_serving_md() -> None:
    from pathlib import Path

    from zcube_lab.serving.openai_fields import FIELDS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "SERVING.md").read_text()
    missing = [f.name for f in FIELDS if f"| `{f.name}` |" not in doc]
    assert not missing


def test_stop_is_a_string_or_a_list_kept_in_order_without_repeats() -> None:
    base = {"model": "tiny", "prompt": "x", "max_tokens": 2}
    assert _parse(base).stop == () and not _parse(base).include_stop_str_in_output
    assert _parse({**base, "stop": "END"}).stop == ("END",)
    assert _parse({**base, "stop": None}).stop == ()
    req = _parse({**base, "stop": ["b a", "END", "b a"], "include_stop_str_in_output": True})
    assert req.stop == ("b a", "END") and req.include_stop_str_in_output


def test_stop_reason_is_on_the_last_chunk_and_in_the_full_response() -> None:
    for kind, extra in ((COMPLETION, {"prompt": "x"}), (CHAT, {"messages": CHAT_MSG})):
        req = _parse({"model": "tiny", "max_tokens": 3, "stream": True, "stop": "b", **extra}, kind)
        w = ChunkWriter(req, "r", 0)
        first = json.loads(w.token(" a", None)[6:])["choices"][0]
        last = json.loads(w.token(" ", "stop", "b")[6:])["choices"][0]
        # Chat leaves `stop_reason` out before the last chunk (vLLM's), completions send null.
        assert first.get("stop_reason") is None and first["finish_reason"] is None
        assert (last["finish_reason"], last["stop_reason"]) == ("stop", "b")
        choice = full_response(req, "r", 0, " a", "stop", 2, stop_reason="b")["choices"][0]
        assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", "b")
    chat = _parse({"model": "tiny", "messages": CHAT_MSG, "stream": True}, CHAT)
    w = ChunkWriter(chat, "r", 0)
    w.token(" a", None)
    assert "stop_reason" not in json.loads(w.token(" b", None)[6:])["choices"][0]
    assert json.loads(w.token(" c", "length")[6:])["choices"][0]["stop_reason"] is None


def test_continuous_usage_stats_puts_the_usage_so_far_on_every_chunk_as_vllm() -> None:
    """GuideLLM sends `{"include_usage": true, "continuous_usage_stats": true}` on every
    streamed request; vLLM then adds the usage so far to every chunk."""
    opts = {"include_usage": True, "continuous_usage_stats": True}
    req = _parse({"model": "tiny", "prompt": "a b", "stream": True, "stream_options": opts})
    assert req.continuous_usage and req.include_usage
    w = ChunkWriter(req, "r", 0)
    chunks = [json.loads(w.token(t, f)[6:]) for t, f in ((" x", None), (" y", "length"))]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2]
    assert chunks[1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    # Only with `include_usage` (vLLM's rule): alone it changes nothing.
    alone = {"stream": True, "stream_options": {"continuous_usage_stats": True}}
    req = _parse({"model": "tiny", "prompt": "a b", **alone})
    assert not req.continuous_usage
    assert "usage" not in json.loads(ChunkWriter(req, "r", 0).token(" x", None)[6:])


@pytest.mark.parametrize(
    ("prompt", "tokens"),
    [
        ([5, 0, 7], 3),  # plain ints: the fast check
        ([5, 2.0, 7], 3),  # a whole float: the per-item rule
        ([2**70, 3], 2),  # beyond 64 bits is still an integer
    ],
)
def test_token_id_prompts_count_one_token_per_id(prompt: list, tokens: int) -> None:
    assert _parse({"model": "tiny", "prompt": prompt, "max_tokens": 1}).prompt_tokens == tokens


@pytest.mark.parametrize(
    "prompt", [[1, -1], [1, True], [1, 2.5], [1, float("nan")], [1, "a"], [1, None], []]
)
def test_token_id_prompts_refuse_what_is_no_token_id(prompt: list) -> None:
    with pytest.raises(ApiError) as exc:
        _parse({"model": "tiny", "prompt": prompt, "max_tokens": 1})
    assert exc.value.status == 400 and exc.value.param == "prompt"
