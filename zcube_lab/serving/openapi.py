"""The gateway's OpenAPI document: the operations and fields we serve, as `GET /openapi.json`.

Written by us from the documented fields (OpenAI's API reference and vLLM's extensions),
narrowed to what the mock serves: request schemas come from `zcube_lab.serving.openai_fields.FIELDS`
(the same schemas the parser checks), response schemas describe exactly what
`zcube_lab.serving.openai_api` and `zcube_lab.serving.httpapi` send, with every field OpenAI's spec
requires. Schemas are JSON Schema (OpenAPI 3.1) in the subset `zcube_lab.serving.jsonschema_lite`
reads; `inline(doc, schema)` resolves the local `$ref`s for a validator or a generator. Pure:
`document(model, context_length)` builds it.
"""

from __future__ import annotations

from typing import Any

from zcube_lab.serving.openai_fields import CHAT, COMPLETION, fields_of

OPENAPI_PATH = "/openapi.json"
ERROR_STATUSES = {
    "400": "invalid request: the message says what is wrong and `param` names the field",
    "404": "unknown model (`model_not_found`)",
    "413": "body over 64 MiB",
    "429": "gateway above `--max-outstanding` (Retry-After)",
    "502": "an engine unreachable, or the KV transfer failed (`upstream_error`, "
    "`kv_transfer_failed`)",
    "503": "an engine's waiting queue full (Retry-After)",
}
_NULLABLE_STRING = {"type": ["string", "null"]}
NULL_SCHEMA = {"type": "null"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": props}


def _request_schema(kind: str, context_length: int) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for name, f in fields_of(kind).items():
        schema = dict(f.schema)
        if name in ("max_tokens", "max_completion_tokens"):
            schema["maximum"] = context_length
        props[name] = {**schema, "description": f"{f.decision}: {f.note}"}
    required = ["model", "prompt" if kind == COMPLETION else "messages"]
    return {"type": "object", "required": required, "properties": props}


def _response_schemas() -> dict[str, Any]:
    usage = _object(
        ["prompt_tokens", "completion_tokens", "total_tokens"],
        prompt_tokens={"type": "integer", "minimum": 0},
        completion_tokens={"type": "integer", "minimum": 0},
        total_tokens={"type": "integer", "minimum": 0},
    )
    head = {
        "id": {"type": "string"},
        "created": {"type": "integer"},
        "model": {"type": "string"},
    }
    finish = {"enum": ["stop", "length"]}
    completion_choice = _object(
        ["index", "text", "logprobs", "finish_reason"],
        index={"type": "integer"},
        text={"type": "string"},
        logprobs=NULL_SCHEMA,
        finish_reason=finish,
        stop_reason={"type": ["string", "integer", "null"]},
    )
    message = _object(
        ["role", "content", "refusal"],
        role={"const": "assistant"},
        content=_NULLABLE_STRING,
        refusal=_NULLABLE_STRING,
        tool_calls={"type": "array", "maxItems": 0},
    )
    chat_choice = _object(
        ["index", "message", "logprobs", "finish_reason"],
        index={"type": "integer"},
        message=_ref("ChatMessage"),
        logprobs=NULL_SCHEMA,
        finish_reason=finish,
        stop_reason={"type": ["string", "integer", "null"]},
    )
    delta = {
        "type": "object",
        "properties": {"role": {"const": "assistant"}, "content": {"type": "string"}},
    }
    chunk_choice = _object(
        ["index", "delta", "finish_reason"],
        index={"type": "integer"},
        delta=delta,
        logprobs=NULL_SCHEMA,
        finish_reason={"enum": ["stop", "length", None]},
        stop_reason={"type": ["string", "integer", "null"]},
    )
    completion_chunk_choice = {
        **completion_choice,
        "properties": {
            **completion_choice["properties"],
            "finish_reason": {"enum": ["stop", "length", None]},
        },
    }
    kvp = {"type": ["object", "null"]}
    return {
        "Error": _object(
            ["error"],
            error={
                **_object(
                    ["message", "type", "param", "code"],
                    message={"type": "string", "minLength": 1},
                    type={"type": "string"},
                    param=_NULLABLE_STRING,
                    code=_NULLABLE_STRING,
                ),
                "additionalProperties": False,
            },
        ),
        "Usage": usage,
        "CompletionResponse": _object(
            ["id", "object", "created", "model", "choices", "usage"],
            **head,
            object={"const": "text_completion"},
            choices={"type": "array", "minItems": 1, "maxItems": 1, "items": completion_choice},
            usage=_ref("Usage"),
            kv_transfer_params=kvp,
        ),
        "ChatMessage": message,
        "ChatCompletionResponse": _object(
            ["id", "object", "created", "model", "choices", "usage"],
            **head,
            object={"const": "chat.completion"},
            choices={"type": "array", "minItems": 1, "maxItems": 1, "items": chat_choice},
            usage=_ref("Usage"),
            kv_transfer_params=kvp,
        ),
        "CompletionChunk": _object(
            ["id", "object", "created", "model", "choices"],
            **head,
            object={"const": "text_completion"},
            choices={"type": "array", "maxItems": 1, "items": completion_chunk_choice},
            usage=_ref("Usage"),
        ),
        "ChatCompletionChunk": _object(
            ["id", "object", "created", "model", "choices"],
            **head,
            object={"const": "chat.completion.chunk"},
            choices={"type": "array", "maxItems": 1, "items": chunk_choice},
            usage=_ref("Usage"),
        ),
        "Model": _object(
            ["id", "object", "created", "owned_by"],
            id={"type": "string"},
            object={"const": "model"},
            created={"type": "integer"},
            owned_by={"type": "string"},
        ),
        "ModelList": _object(
            ["object", "data"],
            object={"const": "list"},
            data={"type": "array", "items": _ref("Model")},
        ),
    }


def _errors() -> dict[str, Any]:
    return {
        status: {
            "description": text,
            "content": {"application/json": {"schema": _ref("Error")}},
        }
        for status, text in ERROR_STATUSES.items()
    }


def _generate_op(kind: str, summary: str, body: str, response: str, chunk: str) -> dict[str, Any]:
    return {
        "post": {
            "operationId": f"create_{kind}",
            "summary": summary,
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(body)}},
            },
            "responses": {
                "200": {
                    "description": (
                        "the completion; with `stream: true` an SSE stream whose `data:` lines "
                        f"are {chunk} objects (an Error object if the engines fail after the "
                        "200), ending with `data: [DONE]`"
                    ),
                    "content": {
                        "application/json": {"schema": _ref(response)},
                        "text/event-stream": {
                            "schema": {"type": "string"},
                            "x-sse-data": _ref(chunk),
                        },
                    },
                },
                **_errors(),
            },
        }
    }


def document(model: str, context_length: int) -> dict[str, Any]:
    """The OpenAPI 3.1 document for a gateway serving `model`."""
    schemas = _response_schemas()
    schemas["CompletionRequest"] = _request_schema(COMPLETION, context_length)
    schemas["ChatCompletionRequest"] = _request_schema(CHAT, context_length)
    json_ok = {"content": {"application/json": {"schema": _ref("ModelList")}}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "zcube-lab gateway (OpenAI-compatible mock of a vLLM PD deployment)",
            "version": "1",
            "description": (
                f"Serves one model, `{model}`, with a context of {context_length} tokens. "
                "Field decisions: docs/SERVING.md."
            ),
        },
        "paths": {
            "/v1/completions": _generate_op(
                COMPLETION,
                "Text completion",
                "CompletionRequest",
                "CompletionResponse",
                "CompletionChunk",
            ),
            "/v1/chat/completions": _generate_op(
                CHAT,
                "Chat completion",
                "ChatCompletionRequest",
                "ChatCompletionResponse",
                "ChatCompletionChunk",
            ),
            "/v1/models": {
                "get": {
                    "operationId": "list_models",
                    "summary": "The served model",
                    "responses": {"200": {"description": "one model", **json_ok}},
                }
            },
        },
        "components": {"schemas": schemas},
    }


def inline(doc: dict[str, Any], schema: Any) -> Any:
    """`schema` with every `#/components/schemas/...` reference replaced by its target."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            return inline(doc, doc["components"]["schemas"][ref.rsplit("/", 1)[1]])
        return {k: inline(doc, v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [inline(doc, v) for v in schema]
    return schema
