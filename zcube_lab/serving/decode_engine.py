"""The decode engine: continuous batching over running sequences, and KV pulls for new ones.

`DecodeEngine` admits waiting sequences (whose KV has arrived) into the running batch, runs
one step per loop (one token per running sequence, with the all-to-all of an expert-parallel
instance), and pulls KV for new requests with bounded retries, one `kv_log` JSON line per pull
attempt. `path_health(cfg)` is the engine's memory of stalled KV addresses across pulls;
`connections` its KV connections, kept open across pulls (and RELEASEs) per prefill address.
The HTTP side (routes, streaming) is `zcube_lab.serving.decode`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from zcube_lab.serving.alltoall import AllToAll
from zcube_lab.serving.batching import admit_count
from zcube_lab.serving.config import PATH_HOLD_STALLS, Address, DecodeConfig
from zcube_lab.serving.engine_step import run_step
from zcube_lab.serving.kvwire import (
    IDLE_PULLS,
    KVConnections,
    KVTransferError,
    PathHealth,
    PullResult,
    pick_source,
    pull_kv,
    release_kv,
)
from zcube_lab.serving.kvwire.mrc import pull_kv_mrc
from zcube_lab.serving.models import decode_step_seconds
from zcube_lab.serving.openai_api import ApiError, ApiRequest
from zcube_lab.serving.textgen import OutputPlan, StopStrings, token_text
from zcube_lab.serving.vllm_metrics import EngineMetrics

log = logging.getLogger(__name__)
RETRY_BACKOFF_S = 0.05
RELEASE_TIMEOUT_S = 5.0  # modelled seconds prefill has to acknowledge a KV release


@dataclass(frozen=True)
class KVHandle:
    """Where and what to pull, read from `kv_transfer_params`."""

    engine_id: str
    request_id: str
    addresses: tuple[Address, ...]
    num_bytes: int
    checksum: int


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
    stops: StopStrings | None = None  # the request's stop strings, if any
    stop_reason: str | None = None  # the stop string that ended it

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
    # Connections to the prefills' KV addresses, kept across pulls (None: each pull its own).
    connections: KVConnections | None = None

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
            # Each sequence's new token attends its whole context: prompt and generated.
            attended = sum(s.kv_tokens for s in batch)
            compute_s = self.cfg.wall_s(decode_step_seconds(profile, len(batch), attended))
            exchange = self.cfg.ep_traffic.step(len(batch))
            await run_step(compute_s, self.a2a, exchange, self.metrics)
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
        finish = seq.plan.finish_reason if done else None
        if seq.stops is not None:
            text, stop = seq.stops.feed(text)
            if stop is not None:
                done, finish, seq.stop_reason = True, "stop", stop
            elif done:
                text += seq.stops.rest()
        seq.out.put_nowait((text, finish))
        if done:
            seq.finished = True
            seq.kv = None
            self.running.remove(seq)
            m.request_success[finish].inc()
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
        pull = mrc_pull(cfg) if cfg.kv_transport == "mrc" else pull_kv
        self.pulling += 1
        try:
            for attempt in range(cfg.kv_retries + 1):
                if attempt:
                    await asyncio.sleep(cfg.wall_s(RETRY_BACKOFF_S * 2 ** (attempt - 1)))
                    self.metrics.kv_pull_retries.inc()
                start, wall_start = loop.time(), time.time()
                suspect = self._suspect_paths(handle.addresses)
                try:
                    buf, result = await pull(
                        handle.request_id,
                        handle.addresses,
                        handle.num_bytes,
                        handle.checksum,
                        chunk_bytes=cfg.kv_chunk_bytes,
                        streams=cfg.kv_streams,
                        timeout_s=cfg.wall_s(cfg.kv_timeout_s),
                        source_map=cfg.kv_source_map,
                        stall_timeout_s=stall_wall_s(cfg),
                        max_retired=cfg.kv_max_retired,
                        health=self.health,
                        chunks_per_lane=cfg.kv_chunks_per_lane or None,
                        connections=self.connections,
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
            "connections_opened": outcome.opened,
            "suspect_paths": suspect_paths,
            "error": error,
        }
        self.kv_log.write(json.dumps(record) + "\n")
        self.kv_log.flush()

    async def _release(self, handle: KVHandle, result: PullResult) -> None:
        # Over the address that carried the most bytes: the first one may be a dead path.
        moved = result.bytes_by_address
        addr = max(handle.addresses, key=lambda a: moved.get(str(a), 0))
        local = pick_source(addr.host, self.cfg.kv_source_map)
        try:
            await release_kv(
                handle.request_id,
                addr,
                timeout_s=self.cfg.wall_s(RELEASE_TIMEOUT_S),
                connections=self.connections,
                local=local,
            )
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.info("KV release of %s not acknowledged: %s", handle.request_id, exc)


def path_health(cfg: DecodeConfig) -> PathHealth | None:
    """The engine's path memory: only with a stall timeout and a hold above 0. The default hold,
    `PATH_HOLD_STALLS` stall timeouts, only has to bridge gaps without pulls (every pull probes
    the suspect addresses, renewing or clearing the suspicion within one stall timeout)."""
    stall = cfg.kv_stall_timeout_s
    if stall is None:
        return None
    hold = PATH_HOLD_STALLS * stall if cfg.kv_path_hold_s is None else cfg.kv_path_hold_s
    return PathHealth(cfg.wall_s(hold)) if hold > 0 else None


def mrc_pull(cfg: DecodeConfig) -> Callable[..., Awaitable[tuple[bytearray, PullResult]]]:
    """`pull_kv`'s call shape over the MRC-style transport (`zcube_lab.serving.kvwire.mrc`): the TCP
    lane options (streams, chunks, stall timeout, path health) do not apply and are ignored;
    each leg is paced at `kv_mrc_rate_mbps`, and the transport's timers follow the dilation."""

    async def pull(
        request_id: str,
        addrs: Sequence[Address],
        num_bytes: int,
        checksum: int,
        *,
        timeout_s: float,
        source_map: Sequence[tuple[str, str]] = (),
        **_tcp_only: object,
    ) -> tuple[bytearray, PullResult]:
        return await pull_kv_mrc(
            request_id,
            addrs,
            num_bytes,
            checksum,
            timeout_s=timeout_s,
            source_map=source_map,
            rate_bytes_s=cfg.kv_mrc_rate_mbps * 1e6 / 8,
            clock=cfg.clock,
            delay_bound_s=cfg.kv_mrc_delay_bound_ms / 1000,
        )

    return pull


def stall_wall_s(cfg: DecodeConfig) -> float | None:
    """The KV lane stall timeout in wall seconds (None: off)."""
    stall = cfg.kv_stall_timeout_s
    return None if stall is None else cfg.wall_s(stall)


def kv_connections(cfg: DecodeConfig) -> KVConnections:
    """The engine's kept KV connections: idle ones for `IDLE_PULLS` pulls of `kv_streams`
    lanes at once to each address (and a RELEASE), or the `kv_warm` opened at start if more;
    beyond that closed when given back."""
    return KVConnections(max_idle=max(IDLE_PULLS * cfg.kv_streams + 1, cfg.kv_warm))
