"""The OpenAI-compatible surface: request parsing, error bodies and response/chunk shapes.

`parse_request(body, kind, profile, served_model_name)` turns a decoded JSON body into a frozen
`ApiRequest` or raises `ApiError` (status 4xx, OpenAI's `{"error": {message, type, param,
code}}`). Shapes follow vLLM's OpenAI server: one token per SSE chunk, a usage-only final chunk
when `stream_options.include_usage` (and the usage so far on every chunk when also
`continuous_usage_stats`), then `data: [DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zcube_lab.serving.jsonschema_lite import is_integer, json_type
from zcube_lab.serving.models import ModelProfile
from zcube_lab.serving.openai_fields import CHAT, CHAT_ROLES, COMPLETION, MAX_SEED, field_problem
from zcube_lab.serving.textgen import count_chat_tokens, count_prompt_tokens

SSE_DONE = b"data: [DONE]\n\n"


class ApiError(Exception):
    """A request the server refuses; `status` is 4xx for bad input, 429/503 for overload."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        err_type: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.err_type = err_type or _default_type(status)
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error object."""
        return error_body(self.message, self.err_type, self.param, self.code)


def _default_type(status: int) -> str:
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def error_body(
    message: str, err_type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """`{"error": {...}}` as OpenAI's API returns it."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


@dataclass(frozen=True)
class ApiRequest:
    """A validated completions or chat request, reduced to what the mock engine uses."""

    kind: str
    model: str
    prompt_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    seed: int | None
    kv_transfer_params: Mapping[str, Any] | None
    echo: str | None = None  # the prompt text to echo before the completion (completions)
    prompt_only: bool = False  # `max_tokens: 0` with `echo`: the prompt is the whole text
    stop: tuple[str, ...] = ()  # stop strings (`zcube_lab.serving.textgen.StopStrings`)
    include_stop_str_in_output: bool = False
    continuous_usage: bool = False  # vLLM's `continuous_usage_stats`: usage on every chunk


def _bad(message: str, param: str | None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _opt_int(body: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
    """An optional integer field; whole floats (`2.0`) count, as JSON Schema counts them."""
    v = body.get(key)
    if v is None:
        return None
    if not is_integer(v):
        raise _bad(f"'{key}' must be an integer, got {json_type(v)}", key)
    if not lo <= v <= hi:
        raise _bad(f"'{key}' must be between {lo} and {hi}, got {v}", key)
    return int(v)


def _opt_bool(body: Mapping[str, Any], key: str, default: bool, within: str = "") -> bool:
    """An optional boolean; `within` names the object holding it (the error's `param`)."""
    v = body.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        name = f"{within}.{key}" if within else key
        raise _bad(f"'{name}' must be a boolean, got {json_type(v)}", within or key)
    return v


def plain_token_ids(prompt: list[Any]) -> bool:
    """Whether every item is a non-negative `int` (no bool, no float): a prompt of token ids
    as clients send it, checked in C (a prompt holds tens of thousands of ids, and a check
    per item in Python cost each role milliseconds per request)."""
    return set(map(type, prompt)) == {int} and min(prompt) >= 0


def _prompt(body: Mapping[str, Any]) -> str | list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        if plain_token_ids(prompt):
            return prompt
        if all(is_integer(t) and t >= 0 for t in prompt):
            return [int(t) for t in prompt]
    if prompt is None:
        raise _bad("'prompt' is required", "prompt")
    raise _bad(
        "'prompt' must be a string, a one-string list, or a non-empty list of token ids",
        "prompt",
    )


def _message_text(i: int, msg: object) -> str:
    if not isinstance(msg, dict):
        raise _bad(f"messages[{i}] must be an object", "messages")
    role = msg.get("role")
    # Type first: an unhashable role (an object, a list) cannot be looked up in a set.
    if not isinstance(role, str) or role not in CHAT_ROLES:
        raise _bad(f"messages[{i}].role must be one of {list(CHAT_ROLES)}", "messages")
    content = msg.get("content")
    if content is None and role == "assistant":
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise _bad(f"messages[{i}].content parts must be text parts", "messages")
            parts.append(part["text"])
        return " ".join(parts)
    raise _bad(f"messages[{i}].content must be a string or a list of text parts", "messages")


def _chat_tokens(body: Mapping[str, Any]) -> int:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list", "messages")
    return count_chat_tokens([_message_text(i, m) for i, m in enumerate(messages)])


def _echo(body: Mapping[str, Any], kind: str, prompt: str | list[int] | None) -> str | None:
    """The text to echo, or None; only completions with a text prompt can echo."""
    if kind != COMPLETION or not _opt_bool(body, "echo", False):
        return None
    if not isinstance(prompt, str):
        raise _bad("'echo' needs a text prompt: the mock has no detokenizer for token ids", "echo")
    return prompt


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    """`stop` as a tuple of distinct strings, in order (its schema has checked the type)."""
    v = body.get("stop")
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
        raise _bad("'stop' must be a non-empty string or a list of them", "stop")
    return tuple(dict.fromkeys(v))


def _max_tokens(body: Mapping[str, Any], kind: str, ctx: int, echo: bool) -> int | None:
    """`max_tokens` (chat: `max_completion_tokens` wins); 0 only with `echo`, as in vLLM."""
    max_tokens = _opt_int(body, "max_tokens", 0, ctx)
    key = "max_tokens"
    if kind == CHAT:
        mct = _opt_int(body, "max_completion_tokens", 0, ctx)
        if mct is not None:
            max_tokens, key = mct, "max_completion_tokens"
    if max_tokens == 0 and not echo:
        raise _bad(f"'{key}' must be at least 1, got 0 (0 is allowed only with 'echo')", key)
    return max_tokens


def parse_request(
    body: object, kind: str, profile: ModelProfile, served_model_name: str
) -> ApiRequest:
    """Validate a decoded JSON body against the fields we serve (`zcube_lab.serving.openai_fields`)
    and the profile."""
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object", None)
    model = body.get("model")
    if not isinstance(model, str):
        raise _bad("'model' must be a string", "model")
    if model != served_model_name:
        raise ApiError(
            404,
            f"The model `{model[:200]}` does not exist.",
            param="model",
            code="model_not_found",
        )
    unsupported = field_problem(body, kind)
    if unsupported is not None:
        raise _bad(unsupported[1], unsupported[0])
    prompt = _prompt(body) if kind == COMPLETION else None
    prompt_tokens = _chat_tokens(body) if prompt is None else count_prompt_tokens(prompt)
    if prompt_tokens == 0:
        raise _bad("'prompt' must contain at least one token", "prompt")
    ctx = profile.context_length
    if prompt_tokens >= ctx:
        raise _bad(
            f"This model's maximum context length is {ctx} tokens; the prompt has "
            f"{prompt_tokens} tokens.",
            "prompt" if kind == COMPLETION else "messages",
            "context_length_exceeded",
        )
    echo = _echo(body, kind, prompt)
    max_tokens = _max_tokens(body, kind, ctx, echo is not None)
    prompt_only = max_tokens == 0
    if max_tokens is None:
        max_tokens = ctx - prompt_tokens
    # vLLM generates one token for an echo of the prompt alone, and counts it.
    max_tokens = max(max_tokens, 1)
    if prompt_tokens + max_tokens > ctx:
        raise _bad(
            f"This model's maximum context length is {ctx} tokens; you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, "
            f"{max_tokens} for the completion).",
            "max_tokens",
            "context_length_exceeded",
        )
    min_tokens = _opt_int(body, "min_tokens", 0, max_tokens) or 0
    n = _opt_int(body, "n", 1, 128)
    if n not in (None, 1):
        raise _bad("only n=1 is supported", "n")
    seed = _opt_int(body, "seed", -MAX_SEED - 1, MAX_SEED)
    stream = _opt_bool(body, "stream", False)
    ignore_eos = _opt_bool(body, "ignore_eos", False)
    include_usage = continuous_usage = False
    opts = body.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise _bad("'stream_options' must be an object", "stream_options")
        if not stream:
            raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
        include_usage = _opt_bool(opts, "include_usage", False, "stream_options")
        # As vLLM: usage on every chunk only when the final usage chunk is asked for too.
        continuous = _opt_bool(opts, "continuous_usage_stats", False, "stream_options")
        continuous_usage = include_usage and continuous
    kvp = body.get("kv_transfer_params")
    if kvp is not None and not isinstance(kvp, dict):
        raise _bad("'kv_transfer_params' must be an object", "kv_transfer_params")
    return ApiRequest(
        kind=kind,
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=ignore_eos,
        stream=stream,
        include_usage=include_usage,
        seed=seed,
        kv_transfer_params=kvp,
        echo=echo,
        prompt_only=prompt_only,
        stop=_stop(body),
        include_stop_str_in_output=_opt_bool(body, "include_stop_str_in_output", False),
        continuous_usage=continuous_usage,
    )


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The `usage` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def response_id(kind: str, request_id: str) -> str:
    """`cmpl-...` or `chatcmpl-...` as vLLM names them."""
    return ("chatcmpl-" if kind == CHAT else "cmpl-") + request_id


def full_response(
    req: ApiRequest,
    request_id: str,
    created: int,
    text: str,
    finish_reason: str,
    completion_tokens: int,
    kv_transfer_params: Mapping[str, Any] | None = None,
    stop_reason: str | None = None,
) -> dict[str, Any]:
    """A non-streaming response body (every field OpenAI's spec requires, as vLLM sends it);
    `stop_reason` is the stop string that ended the text (None: EOS or the length)."""
    choice: dict[str, Any]
    if req.echo is not None:
        text = req.echo if req.prompt_only else req.echo + text
    if req.kind == CHAT:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": None, "tool_calls": []},
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
        }
        obj = "text_completion"
    return {
        "id": response_id(req.kind, request_id),
        "object": obj,
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": usage(req.prompt_tokens, completion_tokens),
        "kv_transfer_params": dict(kv_transfer_params) if kv_transfer_params else None,
    }


class ChunkWriter:
    """Formats SSE `data:` lines for one streaming request (one token per chunk)."""

    def __init__(self, req: ApiRequest, request_id: str, created: int) -> None:
        self._req = req
        self._chat = req.kind == CHAT
        head = {
            "id": response_id(req.kind, request_id),
            "object": "chat.completion.chunk" if self._chat else "text_completion",
            "created": created,
            "model": req.model,
        }
        # The constant head is rendered once; each chunk only renders its choice.
        self._prefix = b"data: " + json.dumps(head, separators=(",", ":"))[:-1].encode()
        self._sent_role = False
        self._echo = req.echo  # sent with the first token, then None
        self._tokens = 0  # tokens sent so far (for `continuous_usage`)

    def _line(self, rest: dict[str, Any]) -> bytes:
        return self._prefix + b"," + json.dumps(rest, separators=(",", ":"))[1:].encode() + b"\n\n"

    def token(self, text: str, finish_reason: str | None, stop_reason: str | None = None) -> bytes:
        """One chunk carrying one token (and the finish and stop reasons on the last one); with
        `echo` the first chunk carries the prompt before it (only the prompt if `prompt_only`).
        A token whose text is held back (it may start a stop string) is a chunk with empty
        text, as vLLM sends it. Chat chunks carry `stop_reason` on the last one only (vLLM
        leaves it unset before). With `continuous_usage` every chunk carries the usage so far."""
        self._tokens += 1
        if self._echo is not None:
            text = self._echo if self._req.prompt_only else self._echo + text
            self._echo = None
        if self._chat:
            delta: dict[str, Any] = {"content": text}
            if not self._sent_role:
                delta = {"role": "assistant", "content": text}
                self._sent_role = True
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            if finish_reason is not None:
                choice["stop_reason"] = stop_reason
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
            }
        if self._req.continuous_usage:
            return self._line(
                {"choices": [choice], "usage": usage(self._req.prompt_tokens, self._tokens)}
            )
        return self._line({"choices": [choice]})

    def usage(self, completion_tokens: int) -> bytes:
        """The usage-only final chunk (`choices: []`)."""
        return self._line(
            {"choices": [], "usage": usage(self._req.prompt_tokens, completion_tokens)}
        )


def sse_error(message: str, err_type: str, code: str | None) -> bytes:
    """An error event inside a stream (then the stream ends with [DONE])."""
    body = error_body(message, err_type, None, code)
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
