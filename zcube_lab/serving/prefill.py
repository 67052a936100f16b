"""The prefill role: a waiting queue, token-budget batching, the compute model, and held KV.

`make_prefill_app(cfg, registry)` builds the aiohttp app; its KV server(s), engine loop and
lease-expiry loop live in `cleanup_ctx`. The response to a completions request carries
`kv_transfer_params` shaped like vLLM's NIXL connector's (plus our `remote_addresses`,
`num_bytes`, `num_tokens` and `checksum`), which the gateway hands to decode.
Run: `python -m zcube_lab.serving.prefill --host MGMT --port 8100 --kv-bind FABRIC1:7100 --kv-bind
...`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry

from zcube_lab.core.fabric.evpaths import ev_ports
from zcube_lab.core.options import add_flags, from_args
from zcube_lab.serving import httpapi
from zcube_lab.serving.alltoall import AllToAll, engine_alltoall, exchange_log
from zcube_lab.serving.batching import PrefillJob, plan_prefill_step
from zcube_lab.serving.config import PrefillConfig
from zcube_lab.serving.engine_step import run_step
from zcube_lab.serving.exposition import VersionedRegistry
from zcube_lab.serving.kvstore import HeldKV, KVStore, kv_buffer_and_checksum
from zcube_lab.serving.kvwire import start_kv_server
from zcube_lab.serving.kvwire.mrc import MrcServer, start_mrc_server
from zcube_lab.serving.models import kv_transfer_bytes, prefill_step_seconds
from zcube_lab.serving.openai_api import CHAT, COMPLETION, ApiError, full_response, parse_request
from zcube_lab.serving.textgen import plan_output, request_rng, token_text
from zcube_lab.serving.vllm_metrics import EngineMetrics

log = logging.getLogger(__name__)
BLOCK_SIZE = 16
# Buffers above this size are generated in a thread so the event loop keeps serving.
_THREAD_BUFFER_BYTES = 4 * 2**20


@dataclass
class _Entry:
    job: PrefillJob
    arrival: float
    done: asyncio.Future[tuple[HeldKV, float, float]]
    started: float | None = None
    admitted: bool = False
    kv: asyncio.Task[tuple[bytes, int]] | None = None  # its KV buffer and CRC, being made


@dataclass
class PrefillEngine:
    """The prefill engine state: queue, held KV, metrics, optional EP exchange."""

    cfg: PrefillConfig
    metrics: EngineMetrics
    store: KVStore
    a2a: AllToAll
    queue: deque[_Entry] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    holding: asyncio.Event = field(default_factory=asyncio.Event)  # set when KV is put
    reserved_tokens: int = 0
    background: set[asyncio.Task] = field(default_factory=set)

    def submit(self, request_id: str, prompt_tokens: int, now: float) -> asyncio.Future:
        """Queue a prompt; the future resolves to (held KV, queue time, prefill time)."""
        if sum(1 for e in self.queue if not e.admitted) >= self.cfg.max_waiting:
            self.metrics.rejected.inc()
            raise ApiError(503, "prefill queue is full", code="overloaded", retry_after=1)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        # A prefix-cache hit skips the compute of that share of the prompt (at least one token
        # is always computed); the KV of the whole prompt is still held and transferred.
        cached = min(int(prompt_tokens * self.cfg.prefix_cache_hit_rate), prompt_tokens - 1)
        job = PrefillJob(request_id, prompt_tokens, cached_tokens=max(cached, 0))
        self.queue.append(_Entry(job, now, fut))
        self.wake.set()
        return fut

    def _admit(self) -> list[_Entry]:
        admitted = []
        for e in self.queue:
            if not e.admitted:
                need = e.job.prompt_tokens
                if (
                    self.store.used_tokens + self.reserved_tokens + need
                    > self.store.capacity_tokens
                ):
                    break  # FCFS: later prompts wait behind the one that does not fit
                e.admitted = True
                self.reserved_tokens += need
            admitted.append(e)
        return admitted

    def _update_gauges(self) -> None:
        admitted = sum(1 for e in self.queue if e.admitted)
        self.metrics.running.set(admitted)
        self.metrics.waiting.set(len(self.queue) - admitted)
        cap = self.store.capacity_tokens
        self.metrics.kv_usage.set((self.store.used_tokens + self.reserved_tokens) / cap)

    def _drop_cancelled(self) -> None:
        kept: deque[_Entry] = deque()
        for e in self.queue:
            if not e.done.cancelled():
                kept.append(e)
            else:
                if e.kv is not None:
                    e.kv.cancel()
                if e.admitted:
                    self.reserved_tokens -= e.job.prompt_tokens
        self.queue = kept

    async def run(self) -> None:
        """The engine loop: one prefill step per iteration while there is work."""
        loop = asyncio.get_running_loop()
        profile = self.cfg.profile
        while True:
            self._drop_cancelled()
            admitted = self._admit()
            self._update_gauges()
            if not admitted:
                self.wake.clear()
                await self.wake.wait()
                continue
            plan = plan_prefill_step([e.job for e in admitted], self.cfg.token_budget)
            tokens = sum(n for _, n in plan)
            step_start = loop.time()
            cached = 0  # prefix hits of the prompts starting now: their attention is paid once
            for e in admitted[: len(plan)]:
                if e.started is None:
                    e.started = step_start
                    # The KV buffer is emulator work, not modelled compute: it is made while
                    # the compute sleeps, so it is ready when the modelled time ends (a real
                    # engine's KV is in GPU memory by then).
                    e.kv = asyncio.create_task(self._make_kv(e.job))
                    cached += e.job.cached_tokens
                    # vLLM counts cached prompt tokens as prompt tokens too.
                    self.metrics.prompt_tokens.inc(e.job.cached_tokens)
            await run_step(
                self.cfg.wall_s(prefill_step_seconds(profile, tokens, cached)),
                self.a2a,
                self.cfg.ep_traffic.step(tokens),
                self.metrics,
            )
            for job, n in plan:
                job.done_tokens += n
            self.metrics.prompt_tokens.inc(tokens)
            finished = [e for e in admitted[: len(plan)] if e.job.remaining == 0]
            done_at = loop.time()
            for e in finished:
                self.queue.remove(e)
                task = asyncio.create_task(self._finish(e, done_at))
                self.background.add(task)
                task.add_done_callback(self.background.discard)

    async def _make_kv(self, job: PrefillJob) -> tuple[bytes, int]:
        """The request's KV buffer and its CRC-32."""
        nbytes = kv_transfer_bytes(self.cfg.profile, job.prompt_tokens, self.cfg.bandwidth_scale)
        if self.cfg.kv_share < 1.0:  # the KV-off control: at least one byte still moves
            nbytes = max(1, round(nbytes * self.cfg.kv_share))
        make = (job.request_id, self.cfg.seed, nbytes)
        if nbytes > _THREAD_BUFFER_BYTES:
            return await asyncio.to_thread(kv_buffer_and_checksum, *make)
        return kv_buffer_and_checksum(*make)

    async def _finish(self, e: _Entry, done_at: float) -> None:
        loop = asyncio.get_running_loop()
        kv = e.kv if e.kv is not None else asyncio.create_task(self._make_kv(e.job))
        data, checksum = await kv  # made during the compute: normally done by now
        self.reserved_tokens -= e.job.prompt_tokens
        held = self.store.put(
            e.job.request_id,
            data,
            e.job.prompt_tokens,
            loop.time(),
            self.cfg.wall_s(self.cfg.kv_lease_s),
            checksum,
        )
        self.holding.set()
        now = done_at
        started = e.started if e.started is not None else now
        queue_s, prefill_s = started - e.arrival, now - started
        m = self.metrics
        m.queue_time.observe(queue_s)
        m.prefill_time.observe(prefill_s)
        m.ttft.observe(now - e.arrival)
        m.e2e.observe(now - e.arrival)
        m.generation_tokens.inc(1)
        m.request_success["length"].inc()
        # Prefill's side of the PD hand-off generates one token (vLLM's P instance: max_tokens=1).
        m.finished(e.job.prompt_tokens, 1, 1)
        if not e.done.done():
            e.done.set_result((held, queue_s, prefill_s))
        else:  # the requester went away: nobody will pull this KV
            self.store.release(e.job.request_id)

    def release(self, request_id: str) -> bool:
        """Decode pulled the KV: free it now."""
        freed = self.store.release(request_id)
        self._update_gauges()
        return freed

    async def expire_loop(self) -> None:
        """Free held KV whose lease ran out (counted in vllm:nixl_num_kv_expired_reqs); with
        nothing held it sleeps until something is."""
        loop = asyncio.get_running_loop()
        period = min(1.0, self.cfg.wall_s(self.cfg.kv_lease_s) / 4)
        while True:
            if not len(self.store):
                self.holding.clear()
                await self.holding.wait()
            await asyncio.sleep(period)
            gone = self.store.expire(loop.time())
            if gone:
                self.metrics.kv_expired.inc(len(gone))
                log.info("KV lease expired for %d request(s)", len(gone))
            self._update_gauges()


ENGINE_KEY = web.AppKey("prefill_engine", PrefillEngine)
CONFIG_KEY = web.AppKey("prefill_config", PrefillConfig)


def kv_transfer_params(cfg: PrefillConfig, held: HeldKV) -> dict[str, object]:
    """The hand-off for decode, shaped like vLLM NIXL's (our extensions at the end)."""
    first = cfg.kv_bind[0]
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": list(range(math.ceil(held.tokens / BLOCK_SIZE))),
        "remote_engine_id": cfg.nixl_engine_id,
        "remote_request_id": held.request_id,
        "remote_host": first.host,
        "remote_port": first.port,
        "tp_size": 1,
        "remote_addresses": [str(a) for a in cfg.kv_bind],
        "num_tokens": held.tokens,
        "num_bytes": len(held.data),
        "checksum": held.checksum,
    }


def _handler(kind: str):
    async def handle(request: web.Request) -> web.Response:
        cfg = request.app[CONFIG_KEY]
        engine = request.app[ENGINE_KEY]
        body = await httpapi.read_json(request)
        req = parse_request(body, kind, cfg.profile, cfg.model_name)
        request_id = httpapi.request_id(request)
        loop = asyncio.get_running_loop()
        fut = engine.submit(request_id, req.prompt_tokens, loop.time())
        try:
            held, _, _ = await fut
        finally:
            fut.cancel()  # a no-op when done; drops the job if this handler was cancelled
        rng = request_rng(req.seed, cfg.seed, request_id)
        plan = plan_output(rng, 1, 0, True, 0.0)
        text = token_text(rng, 0, plan)
        return httpapi.json_response(
            full_response(
                req,
                request_id,
                int(time.time()),
                text,
                "length",
                1,
                kv_transfer_params(cfg, held),
            )
        )

    return handle


async def _mrc_server(cfg: PrefillConfig, engine: PrefillEngine) -> MrcServer:
    """The MRC-style KV server on the kv-bind addresses (UDP), EVs from `kv_mrc_ev_base`."""
    ports = ev_ports(cfg.kv_mrc_evs, cfg.kv_mrc_ev_base) if cfg.kv_mrc_ev_base else []
    return await start_mrc_server(
        engine.store.get_bytes,
        cfg.kv_bind,
        ev_ports=ports,
        evs=cfg.kv_mrc_evs,
        mtu=cfg.kv_mrc_mtu,
        clock=cfg.clock,
    )


async def _engine_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[CONFIG_KEY]
    engine = app[ENGINE_KEY]
    servers = [
        await start_kv_server(engine.store.get_bytes, engine.release, a) for a in cfg.kv_bind
    ]
    mrc = await _mrc_server(cfg, engine) if cfg.kv_transport == "mrc" else None
    tasks = [asyncio.create_task(engine.run()), asyncio.create_task(engine.expire_loop())]
    try:
        with exchange_log(engine.a2a, cfg.ep_log):
            yield
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for s in servers:
            s.close()
        if mrc is not None:
            mrc.close()
        for t in list(engine.background):
            t.cancel()
        await engine.a2a.close()


def make_prefill_app(
    cfg: PrefillConfig, registry: CollectorRegistry | None = None
) -> web.Application:
    """The prefill app: OpenAI routes that prefill and hold KV, plus health and metrics."""
    registry = registry if registry is not None else VersionedRegistry()
    app = httpapi.new_app(registry, cfg.model_name)
    app[CONFIG_KEY] = cfg
    metrics = EngineMetrics(
        registry, cfg.model_name, cfg.engine_index, cfg.profile.context_length, cfg.clock
    )
    app[ENGINE_KEY] = PrefillEngine(
        cfg=cfg,
        metrics=metrics,
        store=KVStore(cfg.profile.kv_capacity_tokens),
        a2a=engine_alltoall(cfg, metrics),
    )
    app.router.add_post("/v1/completions", _handler(COMPLETION))
    app.router.add_post("/v1/chat/completions", _handler(CHAT))
    app.cleanup_ctx.append(_engine_ctx)
    return app


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Prefill flags (declared on `PrefillConfig`)."""
    add_flags(parser, PrefillConfig, config_file=True)


def config_from_args(args: argparse.Namespace) -> PrefillConfig:
    """PrefillConfig from parsed flags."""
    return from_args(PrefillConfig, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one prefill instance until interrupted."""
    return httpapi.run_role(
        "python -m zcube_lab.serving.prefill",
        __doc__,
        add_arguments,
        config_from_args,
        make_prefill_app,
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
