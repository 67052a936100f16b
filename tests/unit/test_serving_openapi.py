"""The gateway against its own OpenAPI document (`GET /openapi.json`), property-based.

Request bodies are drawn from the served document's request schemas with schemathesis (the
served model name substituted, `max_tokens` given and at most 16 so a case takes milliseconds),
then sent as they are ("valid") or with one node replaced by any JSON value or
removed ("mutated": the shapes a careless client or a fuzzer sends, such as a role that is an
object). Every answer must be JSON in the document's shapes: 200 with a response (or SSE chunks)
that validates, or a 4xx Error; never a 5xx. A valid body may only be refused for a documented
cross-field rule. A fixed seed and a bounded count keep it deterministic and under ~30 s.
"""

from __future__ import annotations

import http.client
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fuzz_requests import engine, gateway
from serving_fixtures import threaded_apps

from zcube_lab.serving.openapi import OPENAPI_PATH, inline

MODEL = "tiny"
MAX_TOKENS = 16
ROUTES = {
    "/v1/completions": ("CompletionRequest", "CompletionResponse", "CompletionChunk"),
    "/v1/chat/completions":
        ("ChatCompletionRequest", "ChatCompletionResponse", "ChatCompletionChunk"),
}  # fmt: skip
# Rules between fields that one field's schema cannot say (docs/SERVING.md): a body valid by
# the schemas may still get a 400 naming one of these.
LENGTH_PATHS = {("max_tokens",), ("max_completion_tokens",)}
CROSS_FIELD = {"stream_options", "min_tokens", "max_tokens", "echo"}
SETTINGS = settings(
    deadline=None,
    derandomize=True,  # a fixed seed: the same cases on every run
    suppress_health_check=list(HealthCheck),
    database=None,
)
ODD = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids),
    max_leaves=6,
)  # fmt: skip


@pytest.fixture(scope="module")
def served():
    with threaded_apps(engine("prefill"), engine("decode"), gateway) as urls:
        u = urlsplit(urls[2])
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("GET", OPENAPI_PATH)
        resp = conn.getresponse()
        assert resp.status == 200
        yield conn, json.loads(resp.read())
        conn.close()


def _bounded(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """A request schema with the served model and a small `max_tokens` (always given)."""
    schema = doc["components"]["schemas"][name]
    props = dict(schema["properties"])
    props["model"] = {"const": MODEL}
    for key in ("max_tokens", "max_completion_tokens", "min_tokens"):
        if key in props:
            props[key] = {**props[key], "maximum": MAX_TOKENS}
    props["max_tokens"] = {**props["max_tokens"], "type": "integer"}
    return {**schema, "properties": props, "required": [*schema["required"], "max_tokens"]}


_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {}


def _bodies(doc: dict[str, Any], route: str) -> st.SearchStrategy[Any]:
    """Bodies for `route` drawn by schemathesis from the document, bounded as `_bounded` says."""
    if route not in _STRATEGIES:
        schemas = dict(doc["components"]["schemas"])
        for name, *_ in ROUTES.values():
            schemas[name] = _bounded(doc, name)
        bounded = {**doc, "components": {**doc["components"], "schemas": schemas}}
        op = schemathesis.openapi.from_dict(bounded)[route]["POST"]
        _STRATEGIES[route] = op.as_strategy().map(lambda case: case.body)
    return _STRATEGIES[route]


def _paths(node: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place below the root of a decoded JSON value."""
    out: list[tuple[Any, ...]] = []
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for k, v in items:
        out.append((*here, k))
        out.extend(_paths(v, (*here, k)))
    return out  # fmt: skip


def _mutate(data: st.DataObject, body: dict[str, Any]) -> dict[str, Any]:
    body = json.loads(json.dumps(body))
    # The length bounds stay: without them an `ignore_eos` request generates the whole context.
    paths = [p for p in _paths(body) if p not in LENGTH_PATHS]
    path = data.draw(st.sampled_from(paths), label="path")
    parent = body
    for k in path[:-1]:
        parent = parent[k]
    if data.draw(st.booleans(), label="remove") and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(ODD, label="value")
    return body


def _validate(doc: dict[str, Any], name: str, obj: Any) -> None:
    jsonschema.validate(obj, inline(doc, doc["components"]["schemas"][name]))


def _check_reply(
    doc: dict[str, Any], route: str, status: int, ctype: str, raw: bytes
) -> dict[str, Any] | None:
    """Assert the reply is JSON in the document's shapes; return the error object of a 4xx."""
    assert status < 500, (status, raw[:300])
    _, response, chunk = ROUTES[route]
    if status != 200:
        assert ctype.startswith("application/json"), (status, ctype, raw[:300])
        obj = json.loads(raw)
        _validate(doc, "Error", obj)
        return obj["error"]
    if ctype.startswith("text/event-stream"):
        events = [e for e in raw.decode().split("\n\n") if e]
        assert events and events[-1] == "data: [DONE]", raw[-200:]
        for event in events[:-1]:
            assert event.startswith("data: "), event
            obj = json.loads(event[6:])
            _validate(doc, "Error" if "error" in obj else chunk, obj)
        return None
    assert ctype.startswith("application/json"), ctype
    _validate(doc, response, json.loads(raw))
    return None


def _post(conn: http.client.HTTPConnection, route: str, body: Any) -> tuple[int, str, bytes]:
    conn.request("POST", route, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, resp.headers.get("Content-Type", ""), resp.read()


@settings(SETTINGS, max_examples=160)
@given(data=st.data(), route=st.sampled_from(sorted(ROUTES)))
def test_valid_requests_get_answers_in_the_documented_shapes(served, data, route) -> None:
    conn, doc = served
    body = data.draw(_bodies(doc, route), label="body")
    status, ctype, raw = _post(conn, route, body)
    err = _check_reply(doc, route, status, ctype, raw)
    if err is not None:
        assert status == 400 and err["param"] in CROSS_FIELD, (status, err)


@settings(SETTINGS, max_examples=300)
@given(data=st.data(), route=st.sampled_from(sorted(ROUTES)))
def test_mutated_requests_get_json_4xx_never_5xx(served, data, route) -> None:
    conn, doc = served
    body = _mutate(data, data.draw(_bodies(doc, route), label="body"))
    status, ctype, raw = _post(conn, route, body)
    err = _check_reply(doc, route, status, ctype, raw)
    if err is not None:
        fields = doc["components"]["schemas"][ROUTES[route][0]]["properties"]
        assert err["param"] is None or err["param"] in fields, err


def test_models_and_the_document_itself(served) -> None:
    conn, doc = served
    conn.request("GET", "/v1/models")
    resp = conn.getresponse()
    assert resp.status == 200
    _validate(doc, "ModelList", json.loads(resp.read()))
    assert set(doc["paths"]) == {*ROUTES, "/v1/models"}
    for name, schema in doc["components"]["schemas"].items():
        jsonschema.Draft202012Validator.check_schema(inline(doc, schema)), name
