"""Fuzz the gateway over HTTP: thousands of malformed or odd requests, never a 5xx or a hang.

Backends are stubs that answer at once, so valid requests finish quickly too; the gateway's own
parsing, routing and relaying is what is under test.
"""

from __future__ import annotations

import http.client
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.config import Address, DecodeConfig, GatewayConfig, PrefillConfig
from serving.decode import make_decode_app
from serving.gateway import make_gateway_app
from serving.prefill import make_prefill_app
from zcube_lab.ports import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving_fixtures import threaded_apps

PARAMS = {"do_remote_prefill": True, "remote_engine_id": "p", "remote_request_id": "r"}


def _stub(role: str):
    async def answer(request: web.Request) -> web.Response:
        if role == "prefill":
            return web.json_response({"kv_transfer_params": PARAMS})
        return web.json_response({"id": "cmpl-x", "choices": [], "usage": {}})

    def factory(_urls: list[str]) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", answer)
        app.router.add_post("/v1/chat/completions", answer)
        return app

    return factory


def _gateway(urls: list[str]) -> web.Application:
    return make_gateway_app(GatewayConfig(prefill_urls=(urls[0],), decode_urls=(urls[1],)))


@pytest.fixture(scope="module")
def gateway_conn():
    with threaded_apps(_stub("prefill"), _stub("decode"), _gateway) as urls:
        u = urlsplit(urls[2])
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        yield conn
        conn.close()


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
RAW = st.one_of(
    st.binary(max_size=64),
    JSON.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=8).map(
        lambda v: json.dumps(v).encode()
    ),
    st.fixed_dictionaries(
        {"model": st.just("tiny"), "prompt": st.text(max_size=40)},
        optional={k: VALUES for k in KEYS[2:]},
    ).map(lambda v: json.dumps(v).encode()),
)


@settings(
    max_examples=2500, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(raw=RAW, path=st.sampled_from(["/v1/completions", "/v1/chat/completions"]))
def test_gateway_answers_bad_input_with_openai_4xx(gateway_conn, raw: bytes, path: str) -> None:
    gateway_conn.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
    resp = gateway_conn.getresponse()
    body = resp.read()
    assert resp.status < 500, body
    if resp.status >= 400:
        err = json.loads(body)["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"]


def _engine(role: str):
    def factory(_urls: list[str]) -> web.Application:
        if role == "prefill":
            port = free_port()
            return make_prefill_app(PrefillConfig(kv_bind=(Address("127.0.0.1", port),)))
        return make_decode_app(DecodeConfig(kv_retries=0, kv_timeout_s=2.0))

    return factory


@pytest.fixture(scope="module")
def engine_conns():
    with threaded_apps(_engine("prefill"), _engine("decode")) as urls:
        conns = []
        for url in urls:
            u = urlsplit(url)
            conns.append(http.client.HTTPConnection(u.hostname, u.port, timeout=10))
        yield conns
        for c in conns:
            c.close()


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
ENGINE_RAW = st.one_of(
    RAW,
    st.fixed_dictionaries(
        {
            "model": st.just("tiny"),
            "prompt": st.text(min_size=1, max_size=30),
            "max_tokens": st.integers(-2, 3),
            "kv_transfer_params": st.one_of(KV_PARAMS, JSON),
        },
        optional={"stream": st.booleans(), "ignore_eos": st.booleans()},
    ).map(lambda v: json.dumps(v).encode()),
)


@settings(
    max_examples=800, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(raw=ENGINE_RAW, which=st.sampled_from([0, 1]), chat=st.booleans())
def test_prefill_and_decode_never_500(engine_conns, raw: bytes, which: int, chat: bool) -> None:
    conn = engine_conns[which]
    path = "/v1/chat/completions" if chat else "/v1/completions"
    conn.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = resp.read()
    # 502 is decode's honest answer when well-formed KV params point at a dead prefill.
    assert resp.status < 500 or (which == 1 and resp.status == 502), body
    if resp.status >= 400:
        err = json.loads(body)["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"]
