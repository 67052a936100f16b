"""The HTTP surface every role shares: reading a JSON body, OpenAI error responses, and the
`/health`, `/metrics` and `/v1/models` handlers."""

from __future__ import annotations

import argparse
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.options import parse_with_file
from zcube_lab.serving.exposition import Exposition
from zcube_lab.serving.gcpause import GC_PAUSES, GcPauseCollector, freeze_on_startup
from zcube_lab.serving.openai_api import ApiError

REGISTRY_KEY = web.AppKey("registry", CollectorRegistry)
MODEL_NAME_KEY = web.AppKey("model_name", str)
EXPOSITION_KEY = web.AppKey("exposition", Exposition)
MAX_BODY_BYTES = 64 * 2**20
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# Every digit written as 0, so a run of 19 digits is one substring search away.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGIT_RUN = b"0" * 19  # the shortest integer beyond orjson's 64 bits has 19 digits


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def json_response(
    obj: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """A compact JSON response."""
    return web.json_response(obj, status=status, headers=headers, dumps=_dumps)


def error_response(err: ApiError) -> web.Response:
    """An ApiError as an OpenAI-style JSON error (with Retry-After on overload)."""
    headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else None
    return json_response(err.body(), status=err.status, headers=headers)


async def read_json(request: web.Request) -> object:
    """The decoded body, or an ApiError(400) naming what is wrong with it."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, "request body too large", code="body_too_large") from None
    try:
        return loads_body(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}"[:300]) from None


def loads_body(raw: bytes) -> object:
    """`json.loads(raw)`, the same value or the same error, parsed by orjson where that is
    sure to be so (a prompt of tens of thousands of token ids costs `json` milliseconds).
    `json` parses what orjson refuses (NaN, a byte-order mark, lone surrogates, numbers beyond
    a float) or reads otherwise: orjson makes an integer beyond 64 bits a float, so a body with
    a run of 19 or more digits anywhere goes to `json` whole."""
    if _LONG_DIGIT_RUN in raw.translate(_DIGITS_AS_ZERO):
        return json.loads(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def request_id(request: web.Request) -> str:
    """The caller's `X-Request-Id` if it is a short safe token, else a fresh one."""
    rid = request.headers.get("X-Request-Id", "")
    return rid if _REQUEST_ID_RE.fullmatch(rid) else uuid.uuid4().hex


async def health(request: web.Request) -> web.Response:
    """Liveness."""
    return json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus exposition of this process's registry (rendered again only when a metric
    changed, for a `VersionedRegistry`)."""
    body = request.app[EXPOSITION_KEY].body()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def models(request: web.Request) -> web.Response:
    """`/v1/models` listing the one served model."""
    name = request.app[MODEL_NAME_KEY]
    return json_response(
        {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "zcube-lab",
                }
            ],
        }
    )


@web.middleware
async def errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    """Turn ApiError and aiohttp's own HTTP errors into OpenAI-style JSON errors."""
    try:
        return await handler(request)
    except ApiError as err:
        return error_response(err)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        err = ApiError(exc.status, exc.reason or "error")
        return error_response(err)


def add_common_routes(app: web.Application) -> None:
    """Register /health, /metrics and /v1/models."""
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)


def new_app(registry: CollectorRegistry, model_name: str) -> web.Application:
    """An Application with the shared middleware, state and routes."""
    app = web.Application(middlewares=[errors_as_json], client_max_size=MAX_BODY_BYTES)
    app[REGISTRY_KEY] = registry
    app[MODEL_NAME_KEY] = model_name
    add_common_routes(app)
    pauses = GcPauseCollector()
    registry.register(pauses)  # first: `Exposition` renders it on every scrape, in its place
    app[EXPOSITION_KEY] = Exposition(registry, fresh=(pauses,))
    return app


def run_role(
    prog: str,
    doc: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    config_from_args: Callable[[argparse.Namespace], Any],
    make_app: Callable[[Any], web.Application],
    argv: Sequence[str] | None,
) -> int:
    """A role process's `main`: parse flags (and a --config file), then serve until
    interrupted; a bad option is a usage error naming the field."""
    parser = argparse.ArgumentParser(prog=prog, description=doc)
    add_arguments(parser)
    try:
        cfg = config_from_args(parse_with_file(parser, argv))
    except ConfigError as exc:
        parser.error(str(exc))
    setup_logging()
    GC_PAUSES.install()
    app = make_app(cfg)
    app.on_startup.append(freeze_on_startup)
    web.run_app(app, host=cfg.host, port=cfg.port, access_log=None, print=None)
    return 0


def setup_logging() -> None:
    """One-line log format for the role processes."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
