"""Fuzz the gateway over HTTP: thousands of malformed or odd requests, never a 5xx or a hang.

Backends are stubs that answer at once, so valid requests finish quickly too; the gateway's own
parsing, routing and relaying is what is under test. The requests and the check live in
tests/fuzz_requests.py; bench/fuzz_gateway.py runs the same property for 10,000 cases against a
gateway in front of real prefill and decode apps.
"""

from __future__ import annotations

import http.client
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fuzz_requests import (
    ENGINE_CASES,
    GATEWAY_CASES,
    PATHS,
    engine,
    gateway,
    post,
    reply_problem,
    stub_backend,
)
from serving_fixtures import threaded_apps


def _connect(url: str) -> http.client.HTTPConnection:
    u = urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=10)


@pytest.fixture(scope="module")
def gateway_conn():
    with threaded_apps(stub_backend("prefill"), stub_backend("decode"), gateway) as urls:
        conn = _connect(urls[2])
        yield conn
        conn.close()


@settings(
    max_examples=2500, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(case=GATEWAY_CASES, path=st.sampled_from(PATHS))
def test_gateway_answers_bad_input_with_openai_4xx(
    gateway_conn, case: tuple[str, bytes], path: str
) -> None:
    resp = post(gateway_conn, path, case[1])
    body = resp.read()
    assert reply_problem(resp.status, body) is None, (resp.status, body)


@pytest.fixture(scope="module")
def engine_conns():
    with threaded_apps(engine("prefill"), engine("decode")) as urls:
        conns = [_connect(url) for url in urls]
        yield conns
        for c in conns:
            c.close()


@settings(
    max_examples=800, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(case=ENGINE_CASES, which=st.sampled_from([0, 1]), path=st.sampled_from(PATHS))
def test_prefill_and_decode_never_500(
    engine_conns, case: tuple[str, bytes], which: int, path: str
) -> None:
    resp = post(engine_conns[which], path, case[1])
    body = resp.read()
    # 502 is decode's honest answer when well-formed KV params point at a dead prefill.
    allowed = frozenset({502}) if which == 1 else frozenset()
    assert reply_problem(resp.status, body, allowed) is None, (resp.status, body)
