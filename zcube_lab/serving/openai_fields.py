"""The request fields the mock serves, one entry per field: its schema and what the mock does.

`FIELDS` is the one home for the request fields of `/v1/completions` and
`/v1/chat/completions`: the OpenAPI document (`zcube_lab.serving.openapi`) is built from it, the
parser checks every field not `parsed` by hand against its schema (`field_problem`), and
docs/SERVING.md's field table gives each one's decision. A decision is one of:

- `honoured`: the mock does what the field asks;
- `no effect`: checked (type and range) and accepted, but it changes nothing a client can see
  (sampling knobs on synthetic text, metadata);
- `narrowed`: only the values the mock can honour are accepted (the schema says which); any
  other value is a 400 naming the field, so no client is told it got what it did not.

A schema is written from OpenAI's and vLLM's documented fields and narrowed to what we accept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zcube_lab.serving.jsonschema_lite import problem

COMPLETION = "completion"
CHAT = "chat"
BOTH = frozenset({COMPLETION, CHAT})
HONOURED = "honoured"
NO_EFFECT = "no effect"
NARROWED = "narrowed"
MAX_SEED = 2**63 - 1
CHAT_ROLES = ("system", "user", "assistant", "tool", "developer")
# OpenAI's limit on the number of stop strings (vLLM sets none; the stricter one is kept).
MAX_STOP_STRINGS = 4
STOP_STRING = {"type": "string", "minLength": 1}


@dataclass(frozen=True)
class Field:
    """One request field: the routes it belongs to, the values accepted, the decision."""

    name: str
    kinds: frozenset[str]
    schema: dict[str, Any]
    decision: str
    note: str
    parsed: bool = False  # checked by `openai_api.parse_request` itself, not by its schema


def _opt(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` or null (a field left at its default)."""
    t = schema["type"]
    return {**schema, "type": [*([t] if isinstance(t, str) else t), "null"]}


NULL = {"type": "null"}
TEXT_PART = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
}
CONTENT = {"anyOf": [{"type": "string"}, {"type": "array", "items": TEXT_PART}]}
MESSAGE = {
    "anyOf": [
        {
            "type": "object",
            "required": ["role", "content"],
            "properties": {
                "role": {"enum": [r for r in CHAT_ROLES if r != "assistant"]},
                "content": CONTENT,
                "name": {"type": "string"},
            },
        },
        {
            "type": "object",
            "required": ["role"],
            "properties": {
                "role": {"const": "assistant"},
                "content": {"anyOf": [*CONTENT["anyOf"], NULL]},
                "name": {"type": "string"},
            },
        },
    ]
}
PROMPT = {
    "anyOf": [
        {"type": "string", "pattern": r"\S"},
        {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {"type": "string", "pattern": r"\S"},
        },
        {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
    ]
}
STREAM_OPTIONS = {
    "type": ["object", "null"],
    "properties": {
        "include_usage": {"type": ["boolean", "null"]},
        "continuous_usage_stats": {"type": ["boolean", "null"]},
    },
}
TOOL = {
    "type": "object",
    "required": ["type", "function"],
    "properties": {
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "description": {"type": "string"}},
        },
    },
}
_C, _H = frozenset({COMPLETION}), frozenset({CHAT})
_SAMPLING = "sampling knob: the text is synthetic, so no client can see its effect"
_META = "metadata: changes nothing in the answer"
_NO_IDS = "the mock has no tokenizer ids"

FIELDS: tuple[Field, ...] = (
    Field("model", BOTH, {"type": "string"}, HONOURED,
          "must name the served model (else 404)", True),
    Field("prompt", _C, PROMPT, HONOURED,
          "one prompt: text, a one-string list, or token ids", True),
    Field("messages", _H, {"type": "array", "minItems": 1, "items": MESSAGE}, HONOURED,
          "text content only (string or text parts)", True),
    Field("max_tokens", _C, _opt({"type": "integer", "minimum": 0}), HONOURED,
          "default context - prompt; 0 with `echo` returns the prompt only, 0 without it is a "
          "400, as vLLM", True),
    Field("max_tokens", _H, _opt({"type": "integer", "minimum": 1}), HONOURED,
          "default context - prompt; 0 is a 400, as vLLM", True),
    Field("max_completion_tokens", _H, _opt({"type": "integer", "minimum": 1}), HONOURED,
          "wins over `max_tokens`", True),
    Field("min_tokens", BOTH, _opt({"type": "integer", "minimum": 0}), HONOURED,
          "vLLM's: no EOS before it (at most `max_tokens`)", True),
    Field("ignore_eos", BOTH, _opt({"type": "boolean"}), HONOURED,
          "vLLM's: exactly `max_tokens` tokens", True),
    Field("stream", BOTH, _opt({"type": "boolean"}), HONOURED, "SSE, one token per chunk", True),
    Field("stream_options", BOTH, STREAM_OPTIONS, HONOURED,
          "`include_usage` honoured (only with `stream`); vLLM's `continuous_usage_stats` "
          "too (with `include_usage`: every chunk carries the usage so far)", True),
    Field("seed", BOTH, _opt({"type": "integer", "minimum": -MAX_SEED - 1, "maximum": MAX_SEED}),
          HONOURED, "same seed, same text", True),
    Field("n", BOTH, _opt({"type": "integer", "minimum": 1, "maximum": 1}), NARROWED,
          "n > 1 refused: the engines model one sequence per request", True),
    Field("echo", _C, _opt({"type": "boolean"}), HONOURED,
          "text prompts: the prompt precedes the completion (streamed: in the first chunk); "
          "refused with token-id prompts (no detokenizer)", True),
    Field("kv_transfer_params", BOTH, _opt({"type": "object"}), HONOURED,
          "vLLM's PD hand-off (docs above)", True),
    Field("echo", _H, {"enum": [False, None]}, NARROWED,
          "vLLM's chat `echo` (prepend the last message) is not served"),
    Field("best_of", _C, _opt({"type": "integer", "minimum": 1, "maximum": 1}), NARROWED,
          "best_of > 1 refused, as n > 1"),
    Field("suffix", _C, _opt({"type": "string", "maxLength": 0}), NARROWED,
          "insertion is not served; empty or null only"),
    Field("logprobs", _C, NULL, NARROWED,
          "the mock has no token probabilities; inventing them would mislead a client that "
          "scores with them"),
    Field("logprobs", _H, {"enum": [False, None]}, NARROWED, "as completions' `logprobs`"),
    Field("top_logprobs", _H, _opt({"type": "integer", "minimum": 0, "maximum": 0}), NARROWED,
          "as `logprobs`"),
    Field("prompt_logprobs", BOTH, NULL, NARROWED, "vLLM's; as `logprobs`"),
    Field("logit_bias", BOTH, _opt({"type": "object", "maxProperties": 0}), NARROWED,
          f"empty or null only: {_NO_IDS}, so no bias could be applied"),
    Field("stop", BOTH,
          {"anyOf": [STOP_STRING,
                     {"type": "array", "maxItems": MAX_STOP_STRINGS, "items": STOP_STRING},
                     NULL]},
          HONOURED,
          f"a string or up to {MAX_STOP_STRINGS}: the text ends before the first one it "
          "would contain, `finish_reason` `stop`, `stop_reason` the string (vLLM's); a "
          "streamed answer holds back what may start one; empty strings refused"),
    Field("stop_token_ids", BOTH, _opt({"type": "array", "maxItems": 0}), NARROWED,
          f"vLLM's; empty or null only: {_NO_IDS}"),
    Field("bad_words", BOTH, _opt({"type": "array", "maxItems": 0}), NARROWED,
          "vLLM's; empty or null only"),
    Field("allowed_token_ids", BOTH, NULL, NARROWED, f"vLLM's; {_NO_IDS}"),
    Field("use_beam_search", BOTH, {"enum": [False, None]}, NARROWED, "vLLM's; not served"),
    Field("response_format", BOTH,
          _opt({"type": "object", "required": ["type"],
                "properties": {"type": {"const": "text"}}}),
          NARROWED, "`text` only: `json_object` and `json_schema` would promise structured "
          "output the synthetic text does not keep"),
    Field("structured_outputs", BOTH, NULL, NARROWED, "vLLM's; as `response_format`"),
    Field("guided_json", BOTH, NULL, NARROWED, "older vLLM's; as `response_format`"),
    Field("guided_regex", BOTH, NULL, NARROWED, "older vLLM's; as `response_format`"),
    Field("guided_choice", BOTH, NULL, NARROWED, "older vLLM's; as `response_format`"),
    Field("guided_grammar", BOTH, NULL, NARROWED, "older vLLM's; as `response_format`"),
    Field("tools", _H, _opt({"type": "array", "items": TOOL}), NARROWED,
          "accepted with `tool_choice` auto or none: a model may always answer without a "
          "call, and the mock always does"),
    Field("tool_choice", _H, {"enum": ["none", "auto", None]}, NARROWED,
          "`required` or a named function refused: the mock never calls a tool"),
    Field("functions", _H, _opt({"type": "array", "items": TOOL["properties"]["function"]}),
          NARROWED, "deprecated form of `tools`; same rule"),
    Field("function_call", _H, {"enum": ["none", "auto", None]}, NARROWED,
          "deprecated form of `tool_choice`; same rule"),
    Field("parallel_tool_calls", _H, _opt({"type": "boolean"}), NO_EFFECT,
          "no tool is ever called"),
    Field("modalities", _H, _opt({"type": "array", "items": {"const": "text"}}), NARROWED,
          "text only"),
    Field("audio", _H, NULL, NARROWED, "no audio output"),
    Field("web_search_options", _H, NULL, NARROWED, "no web search"),
    Field("temperature", BOTH, _opt({"type": "number", "minimum": 0, "maximum": 2}),
          NO_EFFECT, _SAMPLING),
    Field("top_p", BOTH, _opt({"type": "number", "minimum": 0, "maximum": 1}), NO_EFFECT,
          _SAMPLING),
    Field("frequency_penalty", BOTH, _opt({"type": "number", "minimum": -2, "maximum": 2}),
          NO_EFFECT, _SAMPLING),
    Field("presence_penalty", BOTH, _opt({"type": "number", "minimum": -2, "maximum": 2}),
          NO_EFFECT, _SAMPLING),
    Field("top_k", BOTH, _opt({"type": "integer", "minimum": -1}), NO_EFFECT, _SAMPLING),
    Field("min_p", BOTH, _opt({"type": "number", "minimum": 0, "maximum": 1}), NO_EFFECT,
          _SAMPLING),
    Field("repetition_penalty", BOTH, _opt({"type": "number", "minimum": 0}), NO_EFFECT,
          _SAMPLING),
    Field("include_stop_str_in_output", BOTH, _opt({"type": "boolean"}), HONOURED,
          "vLLM's: the text ends right after the stop string instead of before it"),
    Field("skip_special_tokens", BOTH, _opt({"type": "boolean"}), NO_EFFECT,
          "vLLM's; the output has no special tokens"),
    Field("spaces_between_special_tokens", BOTH, _opt({"type": "boolean"}), NO_EFFECT,
          "vLLM's; as `skip_special_tokens`"),
    Field("user", BOTH, _opt({"type": "string"}), NO_EFFECT, _META),
    Field("metadata", _H, _opt({"type": "object"}), NO_EFFECT, _META),
    Field("store", _H, _opt({"type": "boolean"}), NO_EFFECT, _META),
    Field("service_tier", _H, _opt({"type": "string"}), NO_EFFECT, _META),
    Field("prompt_cache_key", _H, _opt({"type": "string"}), NO_EFFECT, _META),
    Field("safety_identifier", _H, _opt({"type": "string"}), NO_EFFECT, _META),
    Field("reasoning_effort", _H, _opt({"type": "string"}), NO_EFFECT,
          "the mock is no reasoning model and returns no reasoning either way"),
    Field("verbosity", _H, _opt({"type": "string"}), NO_EFFECT, _SAMPLING),
    Field("prediction", _H, _opt({"type": "object"}), NO_EFFECT,
          "a latency hint: the answer is the same without it"),
)  # fmt: skip

_BY_KIND: dict[str, dict[str, Field]] = {
    kind: {f.name: f for f in FIELDS if kind in f.kinds} for kind in (COMPLETION, CHAT)
}


def fields_of(kind: str) -> Mapping[str, Field]:
    """The fields of one route kind, by name."""
    return _BY_KIND[kind]


def field_problem(body: Mapping[str, Any], kind: str) -> tuple[str, str] | None:
    """`(field, message)` for the first field of `body` (not `parsed`) outside its schema."""
    known = _BY_KIND[kind]
    for key, value in body.items():
        f = known.get(key)
        if f is None or f.parsed:
            continue
        why = problem(value, f.schema)
        if why is None:
            continue
        if f.decision == NARROWED:
            return key, f"'{key}' is not supported with this value ({f.note}); {why}"
        return key, f"'{key}' {why}"
    return None
