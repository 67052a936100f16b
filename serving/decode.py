"""The decode role: pulls KV from prefill over the fabric, continuous batching, token streaming.

`make_decode_app(cfg, registry)` builds the aiohttp app; the step loop lives in `cleanup_ctx`.
A request must carry prefill's `kv_transfer_params` (`do_remote_prefill`); decode pulls the KV
over every prefill KV address (its `--prefill-kv` table wins over the advertised ones) with
`kv_streams` TCP streams each, verifies bytes and checksum, tells prefill to release it, then
joins the running batch. With `kv_stall_timeout_s`, a pull retires a lane that stalls and moves
its chunks to a new connection (a new path id; `serving/kvwire.py`), and the engine remembers
the addresses whose lanes stalled (`PathHealth`, shared by all pulls): later pulls keep their
lanes off them and only probe them until they answer again. A failed pull is retried
`kv_retries` times, then the client gets an error event in the stream. `kv_log` gets one JSON
line per pull attempt. A client that goes away frees its sequence and KV at the next token.
Run: `python -m serving.decode --host MGMT --port 8200 --prefill-kv ID=FABRIC1:7100,FABRIC2:7100`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from aiohttp import web
from prometheus_client import CollectorRegistry

from serving import httpapi
from serving.alltoall import AllToAll, engine_alltoall
from serving.batching import admit_count
from serving.config import (
    Address,
    DecodeConfig,
    add_common_arguments,
    common_kwargs,
    parse_address,
    parse_kv_sources,
    parse_prefill_kv,
)
from serving.engine_step import run_step
from serving.kvwire import (
    PATH_HOLD_STALLS,
    KVTransferError,
    PathHealth,
    PullResult,
    pull_kv,
    release_kv,
)
from serving.metrics import EngineMetrics
from serving.models import alltoall_bytes_per_peer, decode_step_seconds
from serving.openai_api import (
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
from serving.textgen import OutputPlan, plan_output, request_rng, token_text
from zcube_lab.errors import ConfigError

log = logging.getLogger(__name__)
RETRY_BACKOFF_S = 0.05


@dataclass(frozen=True)
class KVHandle:
    """Where and what to pull, read from `kv_transfer_params`."""

    engine_id: str
    request_id: str
    addresses: tuple[Address, ...]
    num_bytes: int
    checksum: int


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


@dataclass(eq=False)
class DecodeSeq:
    """One request in the decode engine."""

    request_id: str
    req: ApiRequest
    plan: OutputPlan
    rng: random.Random
    arrival: float
    kv: bytearray | None
    out: asyncio.Queue[tuple[str, str | None]] = field(default_factory=asyncio.Queue)
    generated: int = 0
    admitted_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished: bool = False

    @property
    def kv_tokens(self) -> int:
        """KV tokens this sequence holds: its prompt and what it generated."""
        return self.req.prompt_tokens + self.generated


@dataclass
class DecodeEngine:
    """Continuous batching over running sequences; one token per sequence per step."""

    cfg: DecodeConfig
    metrics: EngineMetrics
    a2a: AllToAll
    waiting: deque[DecodeSeq] = field(default_factory=deque)
    running: list[DecodeSeq] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    pulling: int = 0
    background: set[asyncio.Task] = field(default_factory=set)
    kv_log: TextIO | None = None
    # What every pull learnt about the KV addresses (with a stall timeout; None: off).
    health: PathHealth | None = None

    @property
    def kv_used(self) -> int:
        """KV tokens held by running sequences."""
        return sum(s.kv_tokens for s in self.running)

    def check_capacity(self) -> None:
        """Refuse with 503 when the waiting queue (including pulls in flight) is full."""
        if len(self.waiting) + self.pulling >= self.cfg.max_waiting:
            self.metrics.rejected.inc()
            raise ApiError(503, "decode queue is full", code="overloaded", retry_after=1)

    def add(self, seq: DecodeSeq) -> None:
        """Queue a sequence whose KV has arrived."""
        self.waiting.append(seq)
        self.wake.set()
        self._gauges()

    def abort(self, seq: DecodeSeq) -> None:
        """Drop a sequence (client gone); free its slot and KV."""
        if seq.finished:
            return
        seq.finished = True
        seq.kv = None
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.metrics.request_success["abort"].inc()
        self._gauges()

    def _gauges(self) -> None:
        m = self.metrics
        m.running.set(len(self.running))
        m.waiting.set(len(self.waiting))
        m.kv_usage.set(self.kv_used / self.cfg.profile.kv_capacity_tokens)

    def _admit(self, now: float) -> None:
        n = admit_count(
            [s.req.prompt_tokens + 1 for s in self.waiting],
            len(self.running),
            self.cfg.seq_limit,
            self.kv_used,
            self.cfg.profile.kv_capacity_tokens,
        )
        for _ in range(n):
            seq = self.waiting.popleft()
            seq.admitted_at = now
            self.metrics.queue_time.observe(now - seq.arrival)
            self.running.append(seq)

    async def run(self) -> None:
        """The step loop."""
        loop = asyncio.get_running_loop()
        profile = self.cfg.profile
        while True:
            self._admit(loop.time())
            self._gauges()
            if not self.running:
                self.wake.clear()
                await self.wake.wait()
                continue
            batch = list(self.running)
            compute_s = decode_step_seconds(profile, len(batch))
            a2a = alltoall_bytes_per_peer(
                profile, len(batch), self.cfg.ep_size, self.cfg.bandwidth_scale
            )
            await run_step(compute_s, self.a2a, a2a, self.metrics)
            now = loop.time()
            emitted = 0
            for seq in batch:
                if seq.finished:
                    continue  # aborted during the step
                self._emit(seq, now)
                emitted += 1
            self.metrics.generation_tokens.inc(emitted)

    def _emit(self, seq: DecodeSeq, now: float) -> None:
        m = self.metrics
        text = token_text(seq.rng, seq.generated, seq.plan)
        seq.generated += 1
        if seq.first_token_at is None:
            seq.first_token_at = now
            m.ttft.observe(now - seq.arrival)
        else:
            m.itl.observe(now - (seq.last_token_at or now))
        seq.last_token_at = now
        done = seq.generated >= seq.plan.num_tokens
        seq.out.put_nowait((text, seq.plan.finish_reason if done else None))
        if done:
            seq.finished = True
            seq.kv = None
            self.running.remove(seq)
            m.request_success[seq.plan.finish_reason].inc()
            m.finished(seq.req.prompt_tokens, seq.generated, seq.req.max_tokens)
            m.e2e.observe(now - seq.arrival)
            m.decode_time.observe(now - (seq.admitted_at or now))
            if seq.generated > 1:
                m.tpot.observe((now - seq.first_token_at) / (seq.generated - 1))

    async def pull(self, handle: KVHandle, request_id: str = "") -> bytearray:
        """Pull KV with bounded retries; every failed attempt counts as a failed transfer, and
        every attempt is one line of the KV log."""
        cfg = self.cfg
        loop = asyncio.get_running_loop()
        last: KVTransferError | None = None
        self.pulling += 1
        try:
            for attempt in range(cfg.kv_retries + 1):
                if attempt:
                    await asyncio.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))
                    self.metrics.kv_pull_retries.inc()
                start, wall_start = loop.time(), time.time()
                suspect = self._suspect_paths(handle.addresses)
                try:
                    buf, result = await pull_kv(
                        handle.request_id,
                        handle.addresses,
                        handle.num_bytes,
                        handle.checksum,
                        chunk_bytes=cfg.kv_chunk_bytes,
                        streams=cfg.kv_streams,
                        timeout_s=cfg.kv_timeout_s,
                        source_map=cfg.kv_source_map,
                        stall_timeout_s=cfg.kv_stall_timeout_s,
                        max_retired=cfg.kv_max_retired,
                        health=self.health,
                    )
                except asyncio.CancelledError:
                    # The client went away mid-pull: still one line for this attempt.
                    gone = KVTransferError("cancelled: the request went away during the pull")
                    self._log_attempt(handle, request_id, attempt, wall_start, gone, suspect)
                    raise
                except KVTransferError as exc:
                    last = exc
                    self.metrics.failed_transfers.inc()
                    self.metrics.kv_lanes_retired.inc(exc.retired_lanes)
                    self._log_attempt(handle, request_id, attempt, wall_start, exc, suspect)
                    log.warning("KV pull %s attempt %d failed: %s", handle.request_id, attempt, exc)
                    continue
                self.metrics.xfer_time.observe(loop.time() - start)
                self.metrics.bytes_transferred.observe(result.num_bytes)
                self.metrics.kv_lanes_retired.inc(result.retired_lanes)
                self._log_attempt(handle, request_id, attempt, wall_start, result, suspect)
                task = asyncio.create_task(self._release(handle, result))
                self.background.add(task)
                task.add_done_callback(self.background.discard)
                return buf
        finally:
            self.pulling -= 1
            self._suspect_paths(())
        raise KVTransferError(
            f"KV transfer from {handle.engine_id} failed after {cfg.kv_retries + 1} "
            f"attempts: {last}"
        )

    def _suspect_paths(self, addrs: Sequence[Address]) -> int:
        """How many of `addrs` are suspect now; refreshes the engine-wide gauge."""
        if self.health is None:
            return 0
        suspects = self.health.suspects()
        self.metrics.kv_paths_suspect.set(len(suspects))
        return len({str(a) for a in addrs} & suspects)

    def _log_attempt(
        self,
        handle: KVHandle,
        request_id: str,
        attempt: int,
        start: float,
        outcome: PullResult | KVTransferError,
        suspect_paths: int = 0,
    ) -> None:
        if self.kv_log is None:
            return
        if isinstance(outcome, PullResult):
            got, checksum_ok, error = outcome.num_bytes, True, None
        else:
            got, checksum_ok, error = outcome.received, outcome.checksum_ok, str(outcome)
        record = {
            "request_id": request_id,
            "kv_request_id": handle.request_id,
            "engine_id": handle.engine_id,
            "start": start,
            "end": time.time(),
            "ok": error is None,
            "bytes": got,
            "expected_bytes": handle.num_bytes,
            "checksum_ok": checksum_ok,
            "attempt": attempt,
            "lanes": outcome.lanes,
            "retired_lanes": outcome.retired_lanes,
            "paths_used": outcome.paths_used,
            "suspect_paths": suspect_paths,
            "error": error,
        }
        self.kv_log.write(json.dumps(record) + "\n")
        self.kv_log.flush()

    async def _release(self, handle: KVHandle, result: PullResult) -> None:
        # Over the address that carried the most bytes: the first one may be a dead path.
        moved = result.bytes_by_address
        addr = max(handle.addresses, key=lambda a: moved.get(str(a), 0))
        try:
            await release_kv(handle.request_id, addr)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.info("KV release of %s not acknowledged: %s", handle.request_id, exc)


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
        seq = DecodeSeq(request_id, req, plan, rng, arrival, kv)
        engine.add(seq)
        try:
            if resp is None:
                return await _collect(seq, req, request_id, created)
            writer = ChunkWriter(req, request_id, created)
            while True:
                text, finish = await seq.out.get()
                await resp.write(writer.token(text, finish))
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
    return httpapi.json_response(
        full_response(req, request_id, created, "".join(parts), finish, seq.generated)
    )


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


async def _engine_ctx(app: web.Application) -> AsyncIterator[None]:
    engine = app[ENGINE_KEY]
    task = asyncio.create_task(engine.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for t in list(engine.background):
            t.cancel()
        if engine.health is not None:
            await engine.health.aclose()
        await engine.a2a.close()


def path_health(cfg: DecodeConfig) -> PathHealth | None:
    """The engine's path memory: only with a stall timeout and a hold above 0. The default hold,
    `PATH_HOLD_STALLS` stall timeouts, only has to bridge gaps without pulls (every pull probes
    the suspect addresses, renewing or clearing the suspicion within one stall timeout)."""
    stall = cfg.kv_stall_timeout_s
    if stall is None:
        return None
    hold = PATH_HOLD_STALLS * stall if cfg.kv_path_hold_s is None else cfg.kv_path_hold_s
    return PathHealth(hold) if hold > 0 else None


def make_decode_app(
    cfg: DecodeConfig, registry: CollectorRegistry | None = None
) -> web.Application:
    """The decode app: OpenAI routes fed by prefill's KV, plus health and metrics."""
    registry = registry if registry is not None else CollectorRegistry()
    app = httpapi.new_app(registry, cfg.model_name)
    app[CONFIG_KEY] = cfg
    metrics = EngineMetrics(registry, cfg.model_name, cfg.engine_index, cfg.profile.context_length)
    app[ENGINE_KEY] = DecodeEngine(
        cfg=cfg,
        metrics=metrics,
        a2a=engine_alltoall(cfg, metrics),
        health=path_health(cfg),
    )
    app.router.add_post("/v1/completions", _handler(COMPLETION))
    app.router.add_post("/v1/chat/completions", _handler(CHAT))
    app.cleanup_ctx.append(_kv_log_ctx)
    app.cleanup_ctx.append(_engine_ctx)
    return app


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Decode flags."""
    add_common_arguments(parser, default_port=8200)
    parser.add_argument(
        "--prefill-kv",
        action="append",
        default=None,
        help="ENGINE_ID=host:port[,host:port]: a prefill's KV (fabric) addresses; repeatable",
    )
    parser.add_argument("--kv-streams", type=int, default=2, help="TCP streams per KV address")
    parser.add_argument(
        "--kv-source",
        action="append",
        default=None,
        help="CIDR=LOCAL: pull KV from addresses in CIDR with local source address LOCAL "
        "(repeatable; picks the NIC port, e.g. on ZCube)",
    )
    parser.add_argument("--kv-chunk-bytes", type=int, default=256 * 1024)
    parser.add_argument("--kv-retries", type=int, default=3)
    parser.add_argument("--kv-timeout-s", type=float, default=10.0)
    parser.add_argument(
        "--kv-stall-timeout-s",
        type=float,
        default=None,
        help="retire a KV lane (TCP connection, i.e. path id) that receives no byte for this "
        "long, move its chunks to the other lanes and open a new one (default: off)",
    )
    parser.add_argument(
        "--kv-max-retired",
        type=int,
        default=None,
        help="retired lanes one pull may replace (default: 4 x its lanes)",
    )
    parser.add_argument(
        "--kv-path-hold-s",
        type=float,
        default=None,
        help="with --kv-stall-timeout-s: how long later pulls avoid (and only probe) a KV "
        f"address whose lane stalled (default: {PATH_HOLD_STALLS} x the stall timeout; 0: off)",
    )
    parser.add_argument(
        "--kv-log", default="", help="append one JSON line per KV pull attempt to this file"
    )
    parser.add_argument("--max-num-seqs", type=int, default=0, help="0: the profile's")
    parser.add_argument("--eos-probability", type=float, default=0.02)


def config_from_args(args: argparse.Namespace) -> DecodeConfig:
    """DecodeConfig from parsed flags."""
    return DecodeConfig(
        **common_kwargs(args),
        prefill_kv=parse_prefill_kv(args.prefill_kv),
        kv_streams=args.kv_streams,
        kv_chunk_bytes=args.kv_chunk_bytes,
        kv_retries=args.kv_retries,
        kv_timeout_s=args.kv_timeout_s,
        max_num_seqs=args.max_num_seqs,
        eos_probability=args.eos_probability,
        kv_source_map=parse_kv_sources(args.kv_source),
        kv_stall_timeout_s=args.kv_stall_timeout_s,
        kv_max_retired=args.kv_max_retired,
        kv_path_hold_s=args.kv_path_hold_s,
        kv_log=args.kv_log,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one decode instance until interrupted."""
    return httpapi.run_role(
        "python -m serving.decode", __doc__, add_arguments, config_from_args, make_decode_app, argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
