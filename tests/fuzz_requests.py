"""Fuzzed OpenAI requests, the serving apps they are sent to, and the check every reply must pass.

One home for what the unit fuzz (tests/unit/test_serving_fuzz.py, a moderate count) and the long
run (bench/fuzz_gateway.py, 10,000 cases) share. Each strategy draws `(shape, body)`: `shape`
names the branch that made the body (`bytes`, `json`, `known-keys`, `prompt`, `messages`,
`near-valid`, `near-valid-chat`, `kv-params`), so a run can say which kinds of request it
covered. The check (`reply_problem`) is the property: no 5xx, and every 4xx is a JSON body in
OpenAI's error shape with a message. Imported explicitly (no conftest), like serving_fixtures.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from functools import partial
from typing import Any

from aiohttp import web
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from zcube_lab.adapters.ports import free_port
from zcube_lab.serving.config import Address, DecodeConfig, GatewayConfig, PrefillConfig
from zcube_lab.serving.decode import make_decode_app
from zcube_lab.serving.gateway import make_gateway_app
from zcube_lab.serving.prefill import make_prefill_app

PATHS = ("/v1/completions", "/v1/chat/completions")
ERROR_KEYS = {"message", "type", "param", "code"}
# What `reply_problem` reports (None: the reply is fine).
SERVER_ERROR = "server_error"
MALFORMED_ERROR = "malformed_error"

AppFactory = Callable[[list[str]], web.Application]


def _dump(value: Any) -> bytes:
    return json.dumps(value).encode()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=10,
)
VALUES = st.one_of(
    JSON, st.just("tiny"), st.integers(-(2**70), 2**70), st.lists(st.integers(-3, 9), max_size=4)
)
KEYS = ["model", "prompt", "messages", "max_tokens", "min_tokens", "stream", "stream_options",
        "seed", "n", "ignore_eos", "temperature", "max_completion_tokens"]  # fmt: skip

MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "", 5]),
     "content": st.one_of(st.text(max_size=30), JSON)},
)  # fmt: skip


def _mostly(good: SearchStrategy[Any]) -> SearchStrategy[Any]:
    """`good` seven times in eight, else any odd value."""
    return st.integers(0, 7).flatmap(lambda i: VALUES if i == 0 else good)


# Option values a server accepts, each mixed with odd ones: bodies that get past validation, so
# generation, streaming and relaying are fuzzed too. `max_tokens` is always given: without it an
# `ignore_eos` request generates the whole context (8,192 tokens of the tiny profile).
NEAR_VALID = {
    "max_tokens": st.integers(1, 48),
    "min_tokens": st.integers(0, 8),
    "stream": st.booleans(),
    "stream_options": st.sampled_from([None, {}, {"include_usage": True}, {"include_usage": 1}]),
    "seed": st.integers(0, 2**63),
    "n": st.just(1),
    "ignore_eos": st.booleans(),
    "temperature": st.floats(0, 2),
}
NEAR_VALID_OPTIONS = {k: _mostly(good) for k, good in NEAR_VALID.items()}
GOOD_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=30)}
)
# Bodies a client may send the gateway, by shape.
GATEWAY_SHAPES: dict[str, SearchStrategy[bytes]] = {
    "bytes": st.binary(max_size=64),
    "json": JSON.map(_dump),
    "known-keys": st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=8).map(_dump),
    "prompt": st.fixed_dictionaries(
        {"model": st.just("tiny"), "prompt": st.text(max_size=40)},
        optional={k: VALUES for k in KEYS[2:]},
    ).map(_dump),
    "messages": st.fixed_dictionaries(
        {"model": st.just("tiny"), "messages": st.lists(MESSAGE, max_size=3)},
        optional={k: VALUES for k in KEYS[3:]},
    ).map(_dump),
    "near-valid": st.fixed_dictionaries(
        {
            "model": _mostly(st.just("tiny")),
            "prompt": _mostly(
                st.one_of(st.text(min_size=1, max_size=40), st.lists(st.integers(0, 9), min_size=1))
            ),
            "max_tokens": NEAR_VALID_OPTIONS["max_tokens"],
        },
        optional={k: v for k, v in NEAR_VALID_OPTIONS.items() if k != "max_tokens"},
    ).map(_dump),
    "near-valid-chat": st.fixed_dictionaries(
        {
            "model": st.just("tiny"),
            "messages": st.lists(GOOD_MESSAGE, min_size=1, max_size=3),
            "max_tokens": NEAR_VALID_OPTIONS["max_tokens"],
        },
        optional={k: v for k, v in NEAR_VALID_OPTIONS.items() if k != "max_tokens"},
    ).map(_dump),
}

# A port nothing listens on: KV parameters that point at it make decode's pull fail.
DEAD_PORT = free_port()
KV_PARAMS = st.fixed_dictionaries(
    {"do_remote_prefill": st.sampled_from([True, False, 1, None])},
    optional={
        "remote_engine_id": st.one_of(st.text(max_size=8), st.integers()),
        "remote_request_id": st.one_of(st.text(max_size=300), st.none()),
        "num_bytes": st.one_of(st.integers(-5, 2**64), st.floats(allow_nan=False)),
        "checksum": st.integers(-5, 2**40),
        "remote_host": st.sampled_from(["127.0.0.1", "", 5, None]),
        "remote_port": st.one_of(st.just(DEAD_PORT), st.integers(-1, 70000), st.text(max_size=3)),
        "remote_addresses": st.lists(
            st.sampled_from([f"127.0.0.1:{DEAD_PORT}", "nope", "1:2:3", "127.0.0.1:99999", 7]),
            max_size=3,
        ),
    },
)
# Bodies an engine may receive (what the gateway forwards, and worse), by shape.
ENGINE_SHAPES: dict[str, SearchStrategy[bytes]] = {
    **GATEWAY_SHAPES,
    "kv-params": st.fixed_dictionaries(
        {
            "model": st.just("tiny"),
            "prompt": st.text(min_size=1, max_size=30),
            "max_tokens": st.integers(-2, 3),
            "kv_transfer_params": st.one_of(KV_PARAMS, JSON),
        },
        optional={"stream": st.booleans(), "ignore_eos": st.booleans()},
    ).map(_dump),
}


def _tagged(shape: str, body: bytes) -> tuple[str, bytes]:
    return shape, body


def shaped(shapes: dict[str, SearchStrategy[bytes]]) -> SearchStrategy[tuple[str, bytes]]:
    """One strategy drawing `(shape, body)` from any of `shapes`."""
    return st.one_of(*(s.map(partial(_tagged, name)) for name, s in shapes.items()))


GATEWAY_CASES = shaped(GATEWAY_SHAPES)
ENGINE_CASES = shaped(ENGINE_SHAPES)


def post(conn: http.client.HTTPConnection, path: str, body: bytes) -> http.client.HTTPResponse:
    """POST `body` as JSON on a kept-alive connection; the caller reads the response."""
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    return conn.getresponse()


def reply_problem(
    status: int, body: bytes, allowed_5xx: frozenset[int] = frozenset()
) -> str | None:
    """What is wrong with a reply to a fuzzed request (SERVER_ERROR, MALFORMED_ERROR), or None.

    A 5xx not in `allowed_5xx` is a server error; any error status must carry
    `{"error": {message, type, param, code}}` with a non-empty message.
    """
    if status >= 500 and status not in allowed_5xx:
        return SERVER_ERROR
    if status < 400:
        return None
    try:
        err = json.loads(body)["error"]
        well_formed = set(err) == ERROR_KEYS and isinstance(err["message"], str)
    except (ValueError, TypeError, KeyError):
        return MALFORMED_ERROR
    return None if well_formed and err["message"] else MALFORMED_ERROR


def stub_backend(role: str) -> AppFactory:
    """A prefill or decode stand-in that answers every request at once."""
    params = {"do_remote_prefill": True, "remote_engine_id": "p", "remote_request_id": "r"}

    async def answer(request: web.Request) -> web.Response:
        if role == "prefill":
            return web.json_response({"kv_transfer_params": params})
        return web.json_response({"id": "cmpl-x", "choices": [], "usage": {}})

    def factory(_urls: list[str]) -> web.Application:
        app = web.Application()
        for path in PATHS:
            app.router.add_post(path, answer)
        return app

    return factory


def engine(role: str) -> AppFactory:
    """A real prefill (KV served on a free loopback port) or decode app."""

    def factory(_urls: list[str]) -> web.Application:
        if role == "prefill":
            port = free_port()
            return make_prefill_app(PrefillConfig(kv_bind=(Address("127.0.0.1", port),)))
        return make_decode_app(DecodeConfig(kv_retries=0, kv_timeout_s=2.0))

    return factory


def gateway(urls: list[str]) -> web.Application:
    """A gateway in front of the first two apps started (prefill, then decode)."""
    return make_gateway_app(GatewayConfig(prefill_urls=(urls[0],), decode_urls=(urls[1],)))
