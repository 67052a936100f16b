"""The OpenAI-compatible surface: request parsing, error bodies and response/chunk shapes.

`parse_request(body, kind, profile, served_model_name)` turns a decoded JSON body into a frozen
`ApiRequest` or raises `ApiError` (status 4xx, OpenAI's `{"error": {message, type, param,
code}}`). Shapes follow vLLM's OpenAI server: one token per SSE chunk, a usage-only final chunk
when `stream_options.include_usage`, then `data: [DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serving.models import ModelProfile
from serving.textgen import count_chat_tokens, count_prompt_tokens

COMPLETION = "completion"
CHAT = "chat"
MAX_SEED = 2**63 - 1
CHAT_ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
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


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bad(message: str, param: str | None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _opt_int(body: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if not _is_int(v):
        raise _bad(f"'{key}' must be an integer, got {type(v).__name__}", key)
    if not lo <= v <= hi:
        raise _bad(f"'{key}' must be between {lo} and {hi}, got {v}", key)
    return v


def _opt_bool(body: Mapping[str, Any], key: str, default: bool) -> bool:
    v = body.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise _bad(f"'{key}' must be a boolean, got {type(v).__name__}", key)
    return v


def _opt_number(body: Mapping[str, Any], key: str, lo: float, hi: float) -> None:
    v = body.get(key)
    if v is None:
        return
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise _bad(f"'{key}' must be a number, got {type(v).__name__}", key)
    if not lo <= v <= hi:
        raise _bad(f"'{key}' must be between {lo} and {hi}, got {v}", key)


def _prompt_tokens(body: Mapping[str, Any]) -> int:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    token_ids = isinstance(prompt, list) and prompt and all(_is_int(t) and t >= 0 for t in prompt)
    if isinstance(prompt, str) or token_ids:
        n = count_prompt_tokens(prompt)
    elif prompt is None:
        raise _bad("'prompt' is required", "prompt")
    else:
        raise _bad(
            "'prompt' must be a string, a one-string list, or a non-empty list of token ids",
            "prompt",
        )
    if n == 0:
        raise _bad("'prompt' must contain at least one token", "prompt")
    return n


def _message_text(i: int, msg: object) -> str:
    if not isinstance(msg, dict):
        raise _bad(f"messages[{i}] must be an object", "messages")
    role = msg.get("role")
    if role not in CHAT_ROLES:
        raise _bad(f"messages[{i}].role must be one of {sorted(CHAT_ROLES)}", "messages")
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


def parse_request(
    body: object, kind: str, profile: ModelProfile, served_model_name: str
) -> ApiRequest:
    """Validate a decoded JSON body against the OpenAI schema subset and the profile."""
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
    prompt_tokens = _prompt_tokens(body) if kind == COMPLETION else _chat_tokens(body)
    ctx = profile.context_length
    if prompt_tokens >= ctx:
        raise _bad(
            f"This model's maximum context length is {ctx} tokens; the prompt has "
            f"{prompt_tokens} tokens.",
            "prompt" if kind == COMPLETION else "messages",
            "context_length_exceeded",
        )
    max_tokens = _opt_int(body, "max_tokens", 1, ctx)
    if kind == CHAT:
        mct = _opt_int(body, "max_completion_tokens", 1, ctx)
        max_tokens = mct if mct is not None else max_tokens
    if max_tokens is None:
        max_tokens = ctx - prompt_tokens
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
    _opt_number(body, "temperature", 0.0, 2.0)
    _opt_number(body, "top_p", 0.0, 1.0)
    stream = _opt_bool(body, "stream", False)
    ignore_eos = _opt_bool(body, "ignore_eos", False)
    include_usage = False
    opts = body.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise _bad("'stream_options' must be an object", "stream_options")
        if not stream:
            raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
        include_usage = _opt_bool(opts, "include_usage", False)
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
) -> dict[str, Any]:
    """A non-streaming response body."""
    choice: dict[str, Any]
    if req.kind == CHAT:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
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

    def _line(self, rest: dict[str, Any]) -> bytes:
        return self._prefix + b"," + json.dumps(rest, separators=(",", ":"))[1:].encode() + b"\n\n"

    def token(self, text: str, finish_reason: str | None) -> bytes:
        """One chunk carrying one token (and the finish reason on the last one)."""
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
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
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
