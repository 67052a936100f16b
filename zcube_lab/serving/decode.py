"""The decode role: pulls KV from prefill over the fabric, continuous batching, token streaming.

`make_decode_app(cfg, registry)` builds the aiohttp app; the step loop lives in `cleanup_ctx`.
A request must carry prefill's `kv_transfer_params` (`do_remote_prefill`); decode pulls the KV
over every prefill KV address (its `--prefill-kv` table wins over the advertised ones) with
`kv_streams` TCP streams each, verifies bytes and checksum, tells prefill to release it, then
joins the running batch. Its KV connections stay open between pulls and carry the RELEASEs
too (`zcube_lab.serving.kvwire.conns`): `kv_streams` per prefill KV address, so per prefill NIC
port. With `kv_stall_timeout_s`, a pull retires a lane that stalls and moves its chunks to a new
connection (a new path id; `zcube_lab.serving.kvwire`), and the engine remembers the addresses whose
lanes stalled (`PathHealth`, shared by all pulls): later pulls keep their lanes off them
and only probe them until they answer again. A failed pull is retried `kv_retries` times,
then the client gets an error event in the stream. `kv_log` gets one JSON
line per pull attempt. A client that goes away frees its sequence and KV at the next token.
The engine (batching, pulls) is `zcube_lab.serving.decode_engine`; this module is its HTTP side.
Run: `python -m zcube_lab.serving.decode --host MGMT --port 8200 --prefill-kv
ID=FABRIC1:7100,FABRIC2:7100`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.options import add_flags, from_args
from zcube_lab.serving import httpapi
from zcube_lab.serving.alltoall import engine_alltoall, exchange_log
from zcube_lab.serving.config import Address, DecodeConfig, parse_address
from zcube_lab.serving.decode_engine import (
    DecodeEngine,
    DecodeSeq,
    KVHandle,
    kv_connections,
    path_health,
)
from zcube_lab.serving.exposition import VersionedRegistry
from zcube_lab.serving.kvwire import KVConnections, KVTransferError, pick_source, warm
from zcube_lab.serving.openai_api import (
    CHAT,
    COMPLETION,
    SSE_DONE,
    ApiError,
    ApiRequest,
    ChunkWriter,
    full_response,
    parse_request,
    sse_error,
)
from zcube_lab.serving.textgen import StopStrings, plan_output, request_rng
from zcube_lab.serving.vllm_metrics import EngineMetrics

log = logging.getLogger(__name__)

# How long (wall s) a decode engine waits at start for prefills to accept its warm connections.
WARM_DEADLINE_S = 60.0


def kv_handle(
    params: Mapping[str, Any] | None,
    overrides: Mapping[str, tuple[Address, ...]],
    max_bytes: int,
) -> KVHandle:
    """Validate prefill's hand-off; an ApiError(400) names what is missing."""
    if not params or params.get("do_remote_prefill") is not True:
        raise ApiError(
            400,
            "decode needs kv_transfer_params from a prefill instance (do_remote_prefill=true); "
            "send requests through the gateway",
            param="kv_transfer_params",
        )

    def need(key: str, typ: type | tuple[type, ...]) -> Any:
        v = params.get(key)
        if not isinstance(v, typ) or isinstance(v, bool):
            raise ApiError(400, f"kv_transfer_params.{key} is missing or malformed", param=key)
        return v

    engine_id = need("remote_engine_id", str)
    rid = need("remote_request_id", str)
    num_bytes = need("num_bytes", int)
    checksum = need("checksum", int)
    if not 0 <= num_bytes <= max_bytes or not 0 <= checksum < 2**32 or len(rid) > 256:
        raise ApiError(
            400,
            f"kv_transfer_params out of range (num_bytes 0..{max_bytes}, checksum u32, "
            "remote_request_id up to 256 characters)",
            param="kv_transfer_params",
        )
    addrs = overrides.get(engine_id)
    if not addrs:
        try:
            raw = params.get("remote_addresses")
            if isinstance(raw, list) and raw:
                addrs = tuple(parse_address(str(a), "remote_addresses") for a in raw)
            else:
                addrs = (Address(need("remote_host", str), need("remote_port", int)),)
        except ConfigError as exc:
            raise ApiError(400, f"kv_transfer_params: {exc}", param="remote_addresses") from None
    return KVHandle(engine_id, rid, addrs, num_bytes, checksum)


ENGINE_KEY = web.AppKey("decode_engine", DecodeEngine)
CONFIG_KEY = web.AppKey("decode_config", DecodeConfig)
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _handler(kind: str):
    async def handle(request: web.Request) -> web.StreamResponse:
        cfg = request.app[CONFIG_KEY]
        engine = request.app[ENGINE_KEY]
        loop = asyncio.get_running_loop()
        arrival = loop.time()
        body = await httpapi.read_json(request)
        req = parse_request(body, kind, cfg.profile, cfg.model_name)
        # The most KV any prompt of this model can need (bounds a forged num_bytes).
        max_bytes = cfg.profile.kv_bytes_per_token * cfg.profile.context_length
        handle_ = kv_handle(req.kv_transfer_params, dict(cfg.prefill_kv), max_bytes)
        engine.check_capacity()
        request_id = httpapi.request_id(request)
        created = int(time.time())
        resp: web.StreamResponse | None = None
        if req.stream:
            resp = web.StreamResponse(headers=SSE_HEADERS)
            await resp.prepare(request)
        try:
            kv = await engine.pull(handle_, request_id)
        except KVTransferError as exc:
            message = f"KV cache transfer failed: {exc}"
            if resp is None:
                raise ApiError(502, message, code="kv_transfer_failed") from None
            with contextlib.suppress(ConnectionError):
                await resp.write(sse_error(message, "server_error", "kv_transfer_failed"))
                await resp.write(SSE_DONE)
            return resp
        rng = request_rng(req.seed, cfg.seed, request_id)
        plan = plan_output(rng, req.max_tokens, req.min_tokens, req.ignore_eos, cfg.eos_probability)
        seq = DecodeSeq(request_id, req, plan, rng, arrival, kv, stops=stop_strings(req))
        engine.add(seq)
        try:
            if resp is None:
                return await _collect(seq, req, request_id, created)
            writer = ChunkWriter(req, request_id, created)
            while True:
                text, finish = await seq.out.get()
                await resp.write(writer.token(text, finish, seq.stop_reason))
                if finish is not None:
                    break
            if req.include_usage:
                await resp.write(writer.usage(seq.generated))
            await resp.write(SSE_DONE)
            return resp
        except ConnectionError:
            log.info("client of %s went away; freeing its sequence", request_id)
            return resp if resp is not None else web.Response(status=499)
        finally:
            engine.abort(seq)

    return handle


async def _collect(seq: DecodeSeq, req: ApiRequest, request_id: str, created: int) -> web.Response:
    parts = []
    while True:
        text, finish = await seq.out.get()
        parts.append(text)
        if finish is not None:
            break
    text = "".join(parts)
    return httpapi.json_response(
        full_response(
            req, request_id, created, text, finish, seq.generated, stop_reason=seq.stop_reason
        )
    )


def stop_strings(req: ApiRequest) -> StopStrings | None:
    """The request's stop strings over its output (None: it has none)."""
    if not req.stop:
        return None
    return StopStrings(req.stop, req.include_stop_str_in_output, req.min_tokens)


async def _kv_log_ctx(app: web.Application) -> AsyncIterator[None]:
    path = app[CONFIG_KEY].kv_log
    if not path:
        yield
        return
    engine = app[ENGINE_KEY]
    # Appended to, line by line: a run reads it afterwards; each decode writes its own file.
    with open(path, "a", encoding="utf-8") as f:
        engine.kv_log = f
        try:
            yield
        finally:
            engine.kv_log = None


async def warm_kv(cfg: DecodeConfig, pool: KVConnections) -> None:
    """Open `cfg.kv_warm` connections to every `--prefill-kv` address (from the local address a
    pull would use), waiting at most `WARM_DEADLINE_S` for prefills still starting."""
    if not cfg.kv_warm or not cfg.prefill_kv:
        return
    if cfg.kv_transport != "tcp":
        log.warning("--kv-warm ignored: the %s transport opens no KV connection", cfg.kv_transport)
        return
    targets = [
        (addr, pick_source(addr.host, cfg.kv_source_map))
        for _, addrs in cfg.prefill_kv
        for addr in addrs
    ]
    want = cfg.kv_warm * len(targets)
    opened = await warm(pool, targets, cfg.kv_warm, WARM_DEADLINE_S)
    level = logging.WARNING if opened < want else logging.INFO
    log.log(level, "KV connections warmed: %d of %d (%d addresses)", opened, want, len(targets))


async def _engine_ctx(app: web.Application) -> AsyncIterator[None]:
    engine = app[ENGINE_KEY]
    if engine.connections is not None:
        # Before the app listens: the lab waits on /health, so no load meets a cold pool.
        await warm_kv(app[CONFIG_KEY], engine.connections)
    task = asyncio.create_task(engine.run())
    try:
        with exchange_log(engine.a2a, app[CONFIG_KEY].ep_log):
            yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for t in list(engine.background):
            t.cancel()
        if engine.health is not None:
            await engine.health.aclose()
        if engine.connections is not None:
            await engine.connections.aclose()
        await engine.a2a.close()


def make_decode_app(
    cfg: DecodeConfig, registry: CollectorRegistry | None = None
) -> web.Application:
    """The decode app: OpenAI routes fed by prefill's KV, plus health and metrics."""
    registry = registry if registry is not None else VersionedRegistry()
    app = httpapi.new_app(registry, cfg.model_name)
    app[CONFIG_KEY] = cfg
    metrics = EngineMetrics(
        registry, cfg.model_name, cfg.engine_index, cfg.profile.context_length, cfg.clock
    )
    app[ENGINE_KEY] = DecodeEngine(
        cfg=cfg,
        metrics=metrics,
        a2a=engine_alltoall(cfg, metrics),
        health=path_health(cfg),
        connections=kv_connections(cfg),
    )
    app.router.add_post("/v1/completions", _handler(COMPLETION))
    app.router.add_post("/v1/chat/completions", _handler(CHAT))
    app.cleanup_ctx.append(_kv_log_ctx)
    app.cleanup_ctx.append(_engine_ctx)
    return app


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Decode flags (declared on `DecodeConfig`)."""
    add_flags(parser, DecodeConfig, config_file=True)


def config_from_args(args: argparse.Namespace) -> DecodeConfig:
    """DecodeConfig from parsed flags."""
    return from_args(DecodeConfig, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one decode instance until interrupted."""
    return httpapi.run_role(
        "python -m zcube_lab.serving.decode",
        __doc__,
        add_arguments,
        config_from_args,
        make_decode_app,
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
