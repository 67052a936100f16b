"""The gateway (router): OpenAI API in front, the PD flow behind, decode's stream relayed.

For each request it validates (same rules and profile as the engines), picks a prefill and a
decode instance with the configured balancing policy, asks prefill for the KV (`max_tokens=1`,
`kv_transfer_params.do_remote_decode`), passes prefill's `kv_transfer_params` to decode and
relays decode's answer byte for byte. It refuses with 429 + Retry-After above `max_outstanding`.
With `request_log`, one JSON line per request records its exact timings
(`zcube_lab.serving.requestlog`). Every `LOOP_LAG_INTERVAL_S` a timer records how late it fired
(`zcube:gateway_loop_lag_seconds`): every request and streamed token crosses this one loop, so its
lag is the gateway's own delay. Run: `python -m zcube_lab.serving.gateway --host MGMT --port 8000
--prefill-url http://P:8100 --decode-url http://D:8200`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from zcube_lab.core.options import add_flags, from_args
from zcube_lab.serving import httpapi
from zcube_lab.serving.config import GatewayConfig
from zcube_lab.serving.openai_api import (
    CHAT,
    COMPLETION,
    SSE_DONE,
    ApiError,
    parse_request,
    plain_token_ids,
    sse_error,
)
from zcube_lab.serving.openapi import OPENAPI_PATH, document
from zcube_lab.serving.requestlog import (
    RequestTiming,
    TokenCounter,
    completion_tokens,
    write_record,
)
from zcube_lab.serving.routing import (
    DOWN_HOLD_S,
    Backend,
    Balancer,
    HotSet,
    make_balancer,
    same_group,
    usable,
)
from zcube_lab.serving.vllm_metrics import GatewayMetrics

log = logging.getLogger(__name__)
GROUP_KEY = "_zcube_group"
ROUTES = {COMPLETION: "/v1/completions", CHAT: "/v1/chat/completions"}
_PASS_HEADERS = ("Content-Type", "Retry-After", "Cache-Control")
CLIENT_CLOSED = 499  # nginx's "client closed request": counted, never sent
ACTIVITY_PATH = "/activity"
LOOP_LAG_INTERVAL_S = 0.1  # wall seconds: about 20-50 us of CPU per wake-up
SOCK_CONNECT_S = 5.0  # modelled seconds to connect to an engine
KEEPALIVE_S = 60.0  # modelled seconds an idle upstream connection is kept


@dataclass
class GatewayState:
    """Backends, their balancers, the upstream session and counters."""

    cfg: GatewayConfig
    metrics: GatewayMetrics
    prefills: list[Backend]
    decodes: list[Backend]
    prefill_balancer: Balancer
    decode_balancer: Balancer
    session: aiohttp.ClientSession | None = None
    outstanding: int = 0
    received: int = 0  # API requests that reached a handler, refused ones too (`/activity`)
    background: set[asyncio.Task] = field(default_factory=set)
    request_log: TextIO | None = None
    hot_decodes: HotSet | None = None  # the shifting incast (--decode-hotspot)


STATE_KEY = web.AppKey("gateway_state", GatewayState)


def _prefill_body(body: dict[str, Any], kind: str) -> bytes:
    b = dict(body)
    b["stream"] = False
    b.pop("stream_options", None)
    b["max_tokens"] = 1
    b.pop("min_tokens", None)
    if kind == CHAT:
        b.pop("max_completion_tokens", None)
    b["kv_transfer_params"] = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    return body_bytes(b)


def body_bytes(body: dict[str, Any]) -> bytes:
    """`body` as compact JSON for an engine. A prompt of token ids (plain ints), the bulk of a
    long request (tens of thousands of them), is written by orjson and placed last; the rest,
    and any other prompt (text, whole floats, integers beyond 64 bits), by `json`. The engine
    reads the same object either way."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and plain_token_ids(prompt):
        try:
            ids = orjson.dumps(prompt)
        except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits
            pass
        else:
            rest = {k: v for k, v in body.items() if k != "prompt"}
            head = json.dumps(rest, separators=(",", ":")).encode()
            return head[:-1] + (b',"prompt":' if rest else b'"prompt":') + ids + b"}"
    return json.dumps(body, separators=(",", ":")).encode()


def _relay_headers(resp: aiohttp.ClientResponse) -> dict[str, str]:
    return {h: resp.headers[h] for h in _PASS_HEADERS if h in resp.headers}


def _client_gone(timing: RequestTiming, when: str) -> web.Response:
    """The answer to a client that closed its connection (nginx's 499; never sent)."""
    log.info("client of %s went away %s", timing.request_id, when)
    return web.Response(status=CLIENT_CLOSED)


def _upstream_failed(state: GatewayState, role: str, exc: BaseException) -> ApiError:
    state.metrics.upstream_error(role)
    log.warning("%s unreachable: %s", role, exc)
    return ApiError(
        502, f"{role} instance unreachable: {type(exc).__name__}", code="upstream_error"
    )


def _refused(
    state: GatewayState, role: str, backend: Backend, left: Sequence[Backend], exc: BaseException
) -> None:
    """A backend refused the connection (its engine is gone): leave it out for a while, and
    fail at once unless another one is `left` to try."""
    backend.down_until = time.monotonic() + DOWN_HOLD_S
    if not left:
        raise _upstream_failed(state, role, exc) from None
    state.metrics.upstream_error(role)
    log.warning("%s %s refused (%s): trying another", role, backend.url, exc)


async def _prefill(
    state: GatewayState, body: dict[str, Any], kind: str, prompt_tokens: int, rid: str
) -> dict[str, Any] | web.Response:
    tried: set[str] = set()
    while True:
        backends = usable(state.prefills, time.monotonic(), tried)
        backend = state.prefill_balancer.pick(backends)
        tried.add(backend.url)
        try:
            return await _prefill_on(state, backend, body, kind, prompt_tokens, rid)
        except aiohttp.ClientConnectorError as exc:
            _refused(state, "prefill", backend, usable(state.prefills, 0.0, tried), exc)


async def _prefill_on(
    state: GatewayState,
    backend: Backend,
    body: dict[str, Any],
    kind: str,
    prompt_tokens: int,
    rid: str,
) -> dict[str, Any] | web.Response:
    assert state.session is not None
    backend.load += prompt_tokens
    backend.in_flight += 1
    try:
        async with state.session.post(
            backend.url + ROUTES[kind],
            data=_prefill_body(body, kind),
            headers={"Content-Type": "application/json", "X-Request-Id": rid},
        ) as resp:
            raw = await resp.read()
            if resp.status != 200:
                return web.Response(body=raw, status=resp.status, headers=_relay_headers(resp))
            reply = json.loads(raw)
            params = reply.get("kv_transfer_params") if isinstance(reply, dict) else None
            if not isinstance(params, dict):
                raise ApiError(502, "prefill returned no kv_transfer_params", code="upstream_error")
            # Not sent on: the decode handler pops it to pick a decode of the same group.
            params[GROUP_KEY] = backend.group
            return params
    except aiohttp.ClientConnectorError:
        raise  # nothing was sent: the caller may try another prefill
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise _upstream_failed(state, "prefill", exc) from None
    finally:
        backend.load -= prompt_tokens
        backend.in_flight -= 1


async def _decode(
    state: GatewayState,
    request: web.Request,
    body: dict[str, Any],
    kind: str,
    params: dict[str, Any],
    timing: RequestTiming,
) -> web.StreamResponse:
    params = dict(params)
    candidates = same_group(state.decodes, params.pop(GROUP_KEY, ""))
    if state.hot_decodes is not None:
        candidates = state.hot_decodes.members(candidates, time.monotonic())
    tried: set[str] = set()
    while True:
        backend = state.decode_balancer.pick(usable(candidates, time.monotonic(), tried))
        tried.add(backend.url)
        try:
            return await _decode_on(state, backend, request, body, kind, params, timing)
        except aiohttp.ClientConnectorError as exc:
            _refused(state, "decode", backend, usable(candidates, 0.0, tried), exc)


async def _decode_on(
    state: GatewayState,
    backend: Backend,
    request: web.Request,
    body: dict[str, Any],
    kind: str,
    params: dict[str, Any],
    timing: RequestTiming,
) -> web.StreamResponse:
    assert state.session is not None
    backend.load += 1
    backend.in_flight += 1
    b = dict(body)
    b["kv_transfer_params"] = params
    loop = asyncio.get_running_loop()
    try:
        async with state.session.post(
            backend.url + ROUTES[kind],
            data=body_bytes(b),
            headers={"Content-Type": "application/json", "X-Request-Id": timing.request_id},
        ) as dresp:
            ctype = dresp.headers.get("Content-Type", "")
            if dresp.status != 200 or not ctype.startswith("text/event-stream"):
                raw = await dresp.read()
                timing.first_token = loop.time()
                state.metrics.ttft.observe(timing.first_token - timing.arrival)
                if dresp.status == 200:
                    timing.output_tokens = completion_tokens(raw)
                else:
                    timing.first_token = None  # an error is no token
                return web.Response(body=raw, status=dresp.status, headers=_relay_headers(dresp))
            out = web.StreamResponse(headers=_relay_headers(dresp))
            # Writes to our client are kept apart from reads from decode: a client that left
            # makes the write raise ConnectionResetError (aiohttp's ClientConnectionResetError
            # is also a ClientError), which is no failure of decode's.
            try:
                await out.prepare(request)
            except ConnectionError:
                return _client_gone(timing, "before the first byte")
            tokens = timing.tokens = TokenCounter() if state.request_log is not None else None
            try:
                async for data in dresp.content.iter_any():
                    if timing.first_token is None:
                        timing.first_token = loop.time()
                        state.metrics.ttft.observe(timing.first_token - timing.arrival)
                    if tokens is not None:
                        tokens.feed(data)
                    try:
                        await out.write(data)
                    except ConnectionError:
                        # Leaving the `async with` closes decode's stream: decode frees the
                        # sequence.
                        return _client_gone(timing, "mid-stream")
            except (aiohttp.ClientError, TimeoutError) as exc:
                # Decode failed after our 200 went out: the stream ends with an error event.
                _upstream_failed(state, "decode", exc)
                message = f"decode instance failed mid-stream: {type(exc).__name__}"
                with contextlib.suppress(ConnectionError):
                    await out.write(sse_error(message, "server_error", "upstream_error"))
                    await out.write(SSE_DONE)
            return out
    except aiohttp.ClientConnectorError:
        raise  # nothing was sent: the caller may try another decode
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise _upstream_failed(state, "decode", exc) from None
    finally:
        backend.load -= 1
        backend.in_flight -= 1


def _handler(kind: str):
    async def handle(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE_KEY]
        cfg = state.cfg
        loop = asyncio.get_running_loop()
        timing = RequestTiming(ROUTES[kind], time.time(), loop.time())
        timing.request_id = rid = httpapi.request_id(request)
        state.received += 1
        status = 500
        try:
            body = await httpapi.read_json(request)
            req = parse_request(body, kind, cfg.profile, cfg.model_name)
            assert isinstance(body, dict)
            timing.prompt_tokens, timing.stream = req.prompt_tokens, req.stream
            if state.outstanding >= cfg.max_outstanding:
                state.metrics.rejected("gateway_full")
                raise ApiError(
                    429, "gateway is at max_outstanding", code="overloaded", retry_after=1
                )
            state.outstanding += 1
            state.metrics.outstanding.set(state.outstanding)
            try:
                got = await _prefill(state, body, kind, req.prompt_tokens, rid)
                if isinstance(got, web.Response):
                    status = got.status
                    return got
                resp = await _decode(state, request, body, kind, got, timing)
                status = resp.status
                return resp
            finally:
                state.outstanding -= 1
                state.metrics.outstanding.set(state.outstanding)
        except ApiError as err:
            status = err.status
            raise
        except asyncio.CancelledError:
            # A server that cancels handlers whose client left (aiohttp's handler_cancellation;
            # `run_app`'s default does not) stops us at any await: that client is a 499 too.
            if request.transport is None or request.transport.is_closing():
                status = CLIENT_CLOSED
            raise
        finally:
            state.metrics.request(ROUTES[kind], status)
            if state.request_log is not None:
                write_record(state.request_log, timing.record(status, loop.time()))

    return handle


async def _session_ctx(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE_KEY]
    # Connect and keep-alive times are the management network's, dilated all the same (the
    # engines answer k times slower, so an idle connection lives k times longer in wall time).
    wall = state.cfg.wall_s
    timeout = aiohttp.ClientTimeout(
        total=wall(state.cfg.upstream_timeout_s), sock_connect=wall(SOCK_CONNECT_S)
    )
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=wall(KEEPALIVE_S))
    state.session = aiohttp.ClientSession(
        connector=connector, timeout=timeout, auto_decompress=False
    )
    try:
        if not state.cfg.request_log:
            yield
            return
        # Appended to, line by line: a run reads it afterwards.
        with open(state.cfg.request_log, "a", encoding="utf-8") as f:
            state.request_log = f
            try:
                yield
            finally:
                state.request_log = None
    finally:
        await state.session.close()


async def sample_loop_lag(observe: Callable[[float], None], interval_s: float) -> None:
    """Forever: sleep `interval_s` and observe how much later than that the loop woke."""
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(interval_s)
        observe(max(0.0, loop.time() - start - interval_s))


async def _loop_lag_ctx(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(
        sample_loop_lag(app[STATE_KEY].metrics.loop_lag.observe, LOOP_LAG_INTERVAL_S)
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def activity(request: web.Request) -> web.Response:
    """Whether load flows, cheaply (no metrics rendered): API requests received so far and in
    flight now. The live lab polls it to tighten its scrapes the moment a load starts."""
    state = request.app[STATE_KEY]
    return httpapi.json_response({"received": state.received, "outstanding": state.outstanding})


def make_gateway_app(
    cfg: GatewayConfig, registry: CollectorRegistry | None = None
) -> web.Application:
    """The gateway app: OpenAI routes running the PD flow, plus health, models, metrics and
    its OpenAPI document (`/openapi.json`)."""
    registry = registry if registry is not None else CollectorRegistry()
    app = httpapi.new_app(registry, cfg.model_name)
    app[STATE_KEY] = GatewayState(
        cfg=cfg,
        metrics=GatewayMetrics(registry, cfg.model_name, cfg.clock),
        prefills=[Backend.parse(u) for u in cfg.prefill_urls],
        decodes=[Backend.parse(u) for u in cfg.decode_urls],
        prefill_balancer=make_balancer(cfg.policy),
        decode_balancer=make_balancer(cfg.policy),
        hot_decodes=(
            HotSet(cfg.decode_hotspot, cfg.wall_s(cfg.hotspot_period_s))
            if cfg.decode_hotspot
            else None
        ),
    )
    app.router.add_post("/v1/completions", _handler(COMPLETION))
    app.router.add_post("/v1/chat/completions", _handler(CHAT))
    api_doc = document(cfg.model_name, cfg.profile.context_length)

    async def openapi_json(request: web.Request) -> web.Response:
        return httpapi.json_response(api_doc)

    app.router.add_get(OPENAPI_PATH, openapi_json)
    app.router.add_get(ACTIVITY_PATH, activity)
    app.cleanup_ctx.append(_session_ctx)
    app.cleanup_ctx.append(_loop_lag_ctx)
    return app


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Gateway flags (declared on `GatewayConfig`)."""
    add_flags(parser, GatewayConfig, config_file=True)


def config_from_args(args: argparse.Namespace) -> GatewayConfig:
    """GatewayConfig from parsed flags."""
    return from_args(GatewayConfig, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gateway until interrupted."""
    return httpapi.run_role(
        "python -m zcube_lab.serving.gateway",
        __doc__,
        add_arguments,
        config_from_args,
        make_gateway_app,
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
