"""The three roles in one event loop on loopback: PD flow, metrics, faults, EP, openai SDK."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from zcube_lab.adapters.ports import free_port
from zcube_lab.serving.config import Address, GatewayConfig
from zcube_lab.serving.gateway import make_gateway_app
from zcube_lab.serving.models import decode_step_seconds, get_profile, prefill_step_seconds
from zcube_lab.serving.textgen import output_text, plan_output, request_rng

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving_fixtures import (
    delayed_ep_peer,
    metric_sum,
    registry_text,
    run_app_servers,
    start_inprocess_cluster,
)

TINY = get_profile("tiny")


async def _stream(session: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, list, dict]:
    """POST a streaming request; return status, parsed data events, headers."""
    async with session.post(url + "/v1/completions", json=body) as r:
        if r.status != 200:
            return r.status, [await r.json()], dict(r.headers)
        events = []
        async for line in r.content:
            if line.startswith(b"data: "):
                payload = line[6:].strip()
                events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
        return r.status, events, dict(r.headers)


def _body(prompt_words: int, max_tokens: int, **kw: object) -> dict:
    return {
        "model": "tiny",
        "prompt": "w " * prompt_words,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        **kw,
    }


async def test_concurrent_streams_counts_match_metrics(aiohttp_server) -> None:
    c = await start_inprocess_cluster(aiohttp_server)
    n, out = 24, 7
    async with aiohttp.ClientSession() as s:
        results = await asyncio.gather(
            *(
                _stream(
                    s, c.gateway_url, _body(10 + i, out, stream_options={"include_usage": True})
                )
                for i in range(n)
            )
        )
    for status, events, _ in results:
        assert status == 200 and events[-1] == "[DONE]"
        tokens = [e for e in events[:-1] if e.get("choices")]
        assert len(tokens) == out  # one token per chunk
        assert tokens[-1]["choices"][0]["finish_reason"] == "length"
        assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == out
    d, p = registry_text(c.decode_registry), registry_text(c.prefill_registry)
    assert metric_sum(d, "vllm:generation_tokens_total") == n * out
    assert metric_sum(d, "vllm:request_success_total", finished_reason="length") == n
    assert metric_sum(d, "vllm:time_to_first_token_seconds_count") == n
    assert metric_sum(d, "vllm:inter_token_latency_seconds_count") == n * (out - 1)
    assert metric_sum(d, "vllm:nixl_xfer_time_seconds_count") == n
    expected_bytes = sum((10 + i) * TINY.kv_bytes_per_token for i in range(n))
    assert metric_sum(d, "vllm:nixl_bytes_transferred_sum") == expected_bytes
    assert metric_sum(p, "vllm:prompt_tokens_total") == sum(10 + i for i in range(n))
    assert metric_sum(d, "vllm:num_requests_running") == 0
    # every pulled KV was released on prefill
    await asyncio.sleep(0.1)
    assert metric_sum(registry_text(c.prefill_registry), "vllm:kv_cache_usage_perc") == 0
    g = registry_text(c.gateway_registry)
    assert metric_sum(g, "zcube:gateway_requests_total", status="200") == n


async def test_ttft_covers_prefill_and_kv_transfer(aiohttp_server) -> None:
    c = await start_inprocess_cluster(aiohttp_server, decode={"kv_chunk_bytes": 64 * 1024})
    words = 6000
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as s:
        start = loop.time()
        async with s.post(c.gateway_url + "/v1/completions", json=_body(words, 3)) as r:
            assert r.status == 200
            await r.content.readline()
            ttft = loop.time() - start
            await r.read()
    d = registry_text(c.decode_registry)
    xfer = metric_sum(d, "vllm:nixl_xfer_time_seconds_sum")
    assert metric_sum(d, "vllm:nixl_bytes_transferred_sum") == words * TINY.kv_bytes_per_token
    floor = prefill_step_seconds(TINY, words) + xfer
    assert floor <= ttft <= floor + 0.5


async def test_non_streaming_and_models(aiohttp_server) -> None:
    c = await start_inprocess_cluster(aiohttp_server)
    async with aiohttp.ClientSession() as s:
        body = {"model": "tiny", "prompt": "a b c", "max_tokens": 4, "ignore_eos": True}
        async with s.post(c.gateway_url + "/v1/completions", json=body) as r:
            obj = await r.json()
        assert r.status == 200
        assert obj["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
        assert len(obj["choices"][0]["text"].split()) == 4
        async with s.get(c.gateway_url + "/v1/models") as r:
            assert (await r.json())["data"][0]["id"] == "tiny"
        async with s.post(c.gateway_url + "/v1/completions", data=b"{nope") as r:
            err = await r.json()
            assert r.status == 400 and "not valid JSON" in err["error"]["message"]


async def test_gateway_overload_is_429_with_retry_after(aiohttp_server) -> None:
    c = await start_inprocess_cluster(aiohttp_server, gateway={"max_outstanding": 2})
    async with aiohttp.ClientSession() as s:
        results = await asyncio.gather(*(_stream(s, c.gateway_url, _body(5, 30)) for _ in range(6)))
    statuses = sorted(r[0] for r in results)
    assert statuses.count(200) >= 2 and statuses.count(429) >= 1
    assert all(r[2].get("Retry-After") == "1" for r in results if r[0] == 429)
    g = registry_text(c.gateway_registry)
    assert metric_sum(g, "zcube:rejected_requests_total") == statuses.count(429)


async def _until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait (polling the loop) until `done()`; fail after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not done():
        assert loop.time() < deadline, f"not reached in {timeout_s} s"
        await asyncio.sleep(0.005)


async def test_decode_queue_full_is_503_relayed(aiohttp_server) -> None:
    c = await start_inprocess_cluster(aiohttp_server, decode={"max_num_seqs": 1, "max_waiting": 1})

    def waiting() -> float:
        return metric_sum(registry_text(c.decode_registry), "vllm:num_requests_waiting")

    # States, not sleeps: the first holds the one running slot (its first token came: it runs;
    # 2,000 tokens of 2 ms steps hold it for 4 s at least), the second waits behind it in the
    # decode's queue of one, so the third finds the queue full. With fixed sleeps of 50 ms and a
    # first of 100 tokens (0.2 s), a loaded machine let the first finish before the third came.
    async with aiohttp.ClientSession() as s:
        async with s.post(c.gateway_url + "/v1/completions", json=_body(5, 2000)) as first:
            assert first.status == 200
            await first.content.readline()
            second = asyncio.create_task(_stream(s, c.gateway_url, _body(5, 5)))
            await _until(lambda: waiting() == 1)
            third = await _stream(s, c.gateway_url, _body(5, 5))
            assert third[0] == 503 and third[2].get("Retry-After") == "1"
            assert third[1][0]["error"]["code"] == "overloaded"
        # The first's client left: the decode drops it, and the second takes the slot.
        assert (await second)[0] == 200
    assert metric_sum(registry_text(c.decode_registry), "zcube:rejected_requests_total") == 1


async def test_kv_pull_failure_is_an_error_event_after_bounded_retries(
    aiohttp_server, tmp_path: Path
) -> None:
    dead = (("prefill-0", (Address("127.0.0.1", free_port()),)),)
    kv_log = tmp_path / "kv.jsonl"
    c = await start_inprocess_cluster(
        aiohttp_server,
        decode={
            "prefill_kv": dead,
            "kv_retries": 2,
            "kv_timeout_s": 1.0,
            "kv_log": str(kv_log),
        },
    )
    async with aiohttp.ClientSession() as s:
        status, events, _ = await _stream(s, c.gateway_url, _body(5, 5))
        assert status == 200 and events[-1] == "[DONE]"
        assert events[0]["error"]["code"] == "kv_transfer_failed"
        assert "after 3 attempts" in events[0]["error"]["message"]
        body = _body(5, 5, stream=False)
        async with s.post(c.gateway_url + "/v1/completions", json=body) as r:
            assert r.status == 502 and (await r.json())["error"]["code"] == "kv_transfer_failed"
    d = registry_text(c.decode_registry)
    assert metric_sum(d, "vllm:nixl_num_failed_transfers_total") == 6  # 2 requests x 3 tries
    assert metric_sum(d, "zcube:kv_pull_retries_total") == 4  # the attempts after the first
    assert metric_sum(d, "zcube:kv_lanes_retired_total") == 0  # no stall timeout: none
    lines = [json.loads(line) for line in kv_log.read_text().splitlines()]
    assert [r["attempt"] for r in lines] == [0, 1, 2, 0, 1, 2]
    assert len({r["request_id"] for r in lines}) == 2
    for r in lines:
        assert r["ok"] is False and r["bytes"] == 0 and r["expected_bytes"] > 0
        assert r["checksum_ok"] is None and "ConnectionRefused" in r["error"]
        assert r["start"] <= r["end"] and r["retired_lanes"] == 0


@pytest.mark.parametrize("hold_s", [None, 0.0], ids=["path-memory", "no-memory"])
async def test_a_dead_kv_path_is_retired_and_each_attempt_logged(
    aiohttp_server, tmp_path: Path, hold_s: float | None
) -> None:
    # Prefill serves KV on two addresses; decode reaches one of them through a dead path,
    # listed first. Two requests one after the other: with path memory (the default with a
    # stall timeout) the second pull keeps its lanes off the dead address and only probes it;
    # with `kv_path_hold_s=0` every pull pays the stall again.
    kv_bind = (
        Address("127.0.0.1", free_port("127.0.0.1")),
        Address("127.0.0.2", free_port("127.0.0.2")),
    )
    dead = Address("127.0.0.3", free_port("127.0.0.3"))
    held: list[asyncio.StreamWriter] = []

    async def black_hole(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepts, reads nothing, answers nothing: a dead path
        await asyncio.Event().wait()

    hole = await asyncio.start_server(black_hole, dead.host, dead.port)
    kv_log = tmp_path / "kv.jsonl"
    try:
        c = await start_inprocess_cluster(
            aiohttp_server,
            prefill={"kv_bind": kv_bind},
            decode={
                "prefill_kv": (("prefill-0", (dead, kv_bind[0])),),
                "kv_chunk_bytes": 16384,
                "kv_stall_timeout_s": 0.2,
                "kv_path_hold_s": hold_s,
                "kv_log": str(kv_log),
            },
        )
        words = 100  # 100 KiB of KV: 7 chunks over 2 addresses x 2 streams
        async with aiohttp.ClientSession() as s:
            for _ in range(2):
                status, events, _ = await _stream(s, c.gateway_url, _body(words, 3))
                assert status == 200 and events[-1] == "[DONE]"
                assert all("error" not in e for e in events[:-1])
        d = registry_text(c.decode_registry)
    finally:
        hole.close()
        for w in held:
            w.transport.abort()
    memory = hold_s is None
    # 2 lanes on the dead path in the first pull; in the second none (memory) or 2 again
    assert metric_sum(d, "zcube:kv_lanes_retired_total") == (2 if memory else 4)
    assert metric_sum(d, "zcube:kv_paths_suspect") == (1 if memory else 0)
    assert metric_sum(d, "zcube:kv_pull_retries_total") == 0  # recovered inside one attempt
    assert metric_sum(d, "vllm:nixl_num_failed_transfers_total") == 0
    assert metric_sum(d, "vllm:nixl_bytes_transferred_sum") == 2 * words * TINY.kv_bytes_per_token
    lines = [json.loads(line) for line in kv_log.read_text().splitlines()]
    assert len(lines) == 2
    for r in lines:
        assert set(r) >= {
            "request_id", "start", "end", "ok", "bytes", "expected_bytes", "checksum_ok",
            "attempt", "lanes", "retired_lanes", "suspect_paths", "error",
        }  # fmt: skip
        assert r["ok"] is True and r["checksum_ok"] is True and r["error"] is None
        assert r["bytes"] == r["expected_bytes"] == words * TINY.kv_bytes_per_token
        assert r["attempt"] == 0 and r["lanes"] == 4
    first, second = lines
    assert first["retired_lanes"] == 2 and first["paths_used"] == 6
    assert first["suspect_paths"] == 0 and 0.2 <= first["end"] - first["start"] < 2.0
    if memory:
        # the four lanes all went to the live address: nothing stalled, no stall timeout paid
        assert second["suspect_paths"] == 1
        assert second["retired_lanes"] == 0 < first["retired_lanes"]
        assert second["paths_used"] == 4
        assert second["end"] - second["start"] < 0.2
    else:
        assert second["suspect_paths"] == 0
        assert second["retired_lanes"] == 2 and second["paths_used"] == 6
    # the KV was released over the live address, not the dead first-listed one
    await asyncio.sleep(0.1)
    assert metric_sum(registry_text(c.prefill_registry), "vllm:kv_cache_usage_perc") == 0


async def test_unpulled_kv_expires_on_prefill(aiohttp_server) -> None:
    dead = (("prefill-0", (Address("127.0.0.1", free_port()),)),)
    c = await start_inprocess_cluster(
        aiohttp_server,
        prefill={"kv_lease_s": 0.2},
        decode={"prefill_kv": dead, "kv_retries": 0},
    )
    async with aiohttp.ClientSession() as s:
        await _stream(s, c.gateway_url, _body(50, 5))
    p = registry_text(c.prefill_registry)
    assert metric_sum(p, "vllm:kv_cache_usage_perc") > 0  # still held
    await asyncio.sleep(0.5)
    p = registry_text(c.prefill_registry)
    assert metric_sum(p, "vllm:nixl_num_kv_expired_reqs_total") == 1
    assert metric_sum(p, "vllm:kv_cache_usage_perc") == 0


async def test_client_disconnect_frees_the_sequence(aiohttp_server) -> None:
    c = await start_inprocess_cluster(aiohttp_server)
    async with aiohttp.ClientSession() as s:
        r = await s.post(c.gateway_url + "/v1/completions", json=_body(5, 5000))
        for _ in range(5):
            await r.content.readline()
        r.close()  # drop the connection mid-stream
    for _ in range(50):
        await asyncio.sleep(0.02)
        d = registry_text(c.decode_registry)
        if metric_sum(d, "vllm:request_success_total", finished_reason="abort") == 1:
            break
    assert metric_sum(d, "vllm:request_success_total", finished_reason="abort") == 1
    assert metric_sum(d, "vllm:num_requests_running") == 0
    assert metric_sum(d, "vllm:kv_cache_usage_perc") == 0
    generated = metric_sum(d, "vllm:generation_tokens_total")
    assert generated < 5000
    await asyncio.sleep(0.1)
    assert metric_sum(registry_text(c.decode_registry), "vllm:generation_tokens_total") == generated


async def test_expert_parallel_all_to_all_moves_profile_sized_bytes_and_takes_time(
    aiohttp_server, tmp_path: Path
) -> None:
    # The peers answer 30 ms late, 15x the tiny profile's 2 ms decode compute: an exchange
    # that returned at once (or was not awaited) would fail the time checks below.
    delay, steps = 0.03, 10
    started = [await delayed_ep_peer(delay) for _ in range(3)]
    peers = tuple(a for a, _ in started)
    log = tmp_path / "ep-decode.jsonl"
    try:
        c = await start_inprocess_cluster(
            aiohttp_server,
            prefill={"ep_peers": peers},
            decode={"ep_peers": peers, "ep_log": str(log)},
        )
        async with aiohttp.ClientSession() as s:
            status, _, _ = await _stream(s, c.gateway_url, _body(100, steps))
        assert status == 200
    finally:
        for _, srv in started:
            srv.close()
    # per peer and step, as DeepEP sends it (zcube_lab.serving.eptraffic): a token reaches a given
    # one of the 4 nodes with probability 1 - (6/8)(5/7) = 13/28 (2 of 8 experts per node, top-2);
    # dispatch 256 FP8 values + 2 scales of 4 bytes = 264 bytes, combine 256 x 2 = 512, over
    # 2 MoE layers in one frame, rounded up; 3 peers
    dispatch, combine = math.ceil(2 * 13 / 28 * 264), math.ceil(2 * 13 / 28 * 512)
    assert (dispatch, combine) == (246, 476)
    d = registry_text(c.decode_registry)
    assert metric_sum(d, "zcube:ep_alltoall_bytes_total") == steps * 3 * (dispatch + combine)
    assert metric_sum(d, "zcube:ep_alltoall_seconds_count") == steps
    assert metric_sum(d, "zcube:engine_step_overrun_seconds_count") == steps  # one per step
    # time: every exchange waits for the peers, and the step waits for the exchange
    a2a_sum = metric_sum(d, "zcube:ep_alltoall_seconds_sum")
    assert steps * delay <= a2a_sum < steps * (delay + 0.2)
    compute = decode_step_seconds(TINY, 1, 100)
    assert metric_sum(d, "zcube:ep_step_seconds_sum") >= a2a_sum + steps * compute * 0.95
    assert metric_sum(d, "vllm:request_decode_time_seconds_sum") >= steps * (delay + compute)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["step"] for r in lines] == list(range(steps))
    for r in lines:
        assert r["peers"] == 3 and r["failures"] == 0
        assert (r["bytes_sent"], r["bytes_received"]) == (3 * dispatch, 3 * combine)
        assert r["frames"] == 1 and r["micro_batches"] == 1 and r["lanes"] == 3
        assert delay <= r["seconds"] <= r["end"] - r["start"] + 1e-6 < delay + 0.2
        assert r["step_s"] >= r["seconds"] + r["compute_s"] * 0.95
    p = registry_text(c.prefill_registry)
    # prefill's one step of 100 tokens, the same way
    sent, back = math.ceil(200 * 13 / 28 * 264), math.ceil(200 * 13 / 28 * 512)
    assert metric_sum(p, "zcube:ep_alltoall_bytes_total") == 3 * (sent + back)
    assert metric_sum(p, "zcube:ep_alltoall_seconds_sum") >= delay


async def test_openai_sdk_streaming_and_not(aiohttp_server) -> None:
    c = await start_inprocess_cluster(aiohttp_server)
    client = openai.AsyncOpenAI(base_url=c.gateway_url + "/v1", api_key="unused", max_retries=0)
    try:
        comp = await client.completions.create(
            model="tiny", prompt="hello there", max_tokens=6, extra_body={"ignore_eos": True}
        )
        assert comp.usage is not None and comp.usage.completion_tokens == 6
        assert comp.choices[0].finish_reason == "length"
        stream = await client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        pieces, usage = [], None
        async for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content)
            if chunk.usage:
                usage = chunk.usage
        assert len(pieces) == 5 and usage is not None
        assert usage.prompt_tokens == 4 + 1 + 3 and usage.completion_tokens == 5
        with pytest.raises(openai.NotFoundError):
            await client.completions.create(model="nope", prompt="x", max_tokens=1)
        with pytest.raises(openai.BadRequestError):
            await client.completions.create(model="tiny", prompt="x", max_tokens=-3)
    finally:
        await client.close()


def _generated(seed: int, max_tokens: int) -> list[str]:
    """The tokens' text the engines generate for a request with `seed` and `ignore_eos`."""
    rng = request_rng(seed, 0, "")
    return output_text(rng, plan_output(rng, max_tokens, 0, True, 0.0))


def _cut(pieces: list[str], stop: str, include: bool = False) -> tuple[str, int]:
    """The text up to the first `stop` (and through it if `include`), and the tokens it took
    to generate (the token that completes the stop string counts, as in vLLM)."""
    full = "".join(pieces)
    at = full.find(stop)
    assert at >= 0, "the stop string must be one the generator emits"
    end, done = at + len(stop), 0
    while len("".join(pieces[:done])) < end:
        done += 1
    return full[: end if include else at], done


async def _sdk_call(
    client: openai.AsyncOpenAI, kind: str, **kw: object
) -> tuple[list[str], str | None, object, int | None]:
    """One request through the SDK: the text pieces, finish and stop reasons, usage's
    completion tokens."""
    stream = kw.get("stream")
    if kind == "chat":
        call = client.chat.completions.create(
            messages=[{"role": "user", "content": "say it"}], **kw
        )
    else:
        call = client.completions.create(prompt="say it", **kw)
    if not stream:
        out = await call
        choice = out.choices[0]
        text = choice.message.content if kind == "chat" else choice.text
        tokens = out.usage.completion_tokens if out.usage else None
        return [text], choice.finish_reason, choice.model_extra["stop_reason"], tokens
    pieces, finish, stop_reason, tokens = [], None, None, None
    async for chunk in await call:
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
        for choice in chunk.choices:
            assert finish is None, "nothing after the finish chunk but usage"
            pieces.append(choice.delta.content if kind == "chat" else choice.text)
            finish = choice.finish_reason
            stop_reason = (choice.model_extra or {}).get("stop_reason")
    return pieces, finish, stop_reason, tokens


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", ["completions", "chat"])
async def test_openai_sdk_stop_strings_end_the_text_as_vllm(aiohttp_server, kind, stream) -> None:
    c = await start_inprocess_cluster(aiohttp_server)
    client = openai.AsyncOpenAI(base_url=c.gateway_url + "/v1", api_key="unused", max_retries=0)
    seed, max_tokens = 20260 + len(kind) + stream, 40
    pieces = _generated(seed, max_tokens)
    full = "".join(pieces)
    # A word the generator emits (completions) or one spanning two tokens (chat).
    stop = pieces[9].strip() if kind == "completions" else pieces[9][-2:] + pieces[10][:3]
    assert "END" not in full
    want, want_tokens = _cut(pieces, stop)
    extra = {"stream_options": {"include_usage": True}} if stream else {}
    try:
        got, finish, stop_reason, tokens = await _sdk_call(
            client, kind, model="tiny", max_tokens=max_tokens, seed=seed,
            stop=["END", stop], stream=stream, extra_body={"ignore_eos": True}, **extra,
        )  # fmt: skip
        text = "".join(got)
        assert text == want and stop not in text and len(text) < len(full)
        assert (finish, stop_reason, tokens) == ("stop", stop, want_tokens)
        if stream:
            # One chunk per generated token; none ever carried a part of the stop string.
            assert len(got) == want_tokens
            assert all(want.startswith("".join(got[: i + 1])) for i in range(len(got)))
        # Without the stop strings the same seed gives the whole text.
        got, finish, stop_reason, tokens = await _sdk_call(
            client, kind, model="tiny", max_tokens=max_tokens, seed=seed,
            stream=stream, extra_body={"ignore_eos": True}, **extra,
        )  # fmt: skip
        assert ("".join(got), finish, stop_reason, tokens) == (full, "length", None, max_tokens)
    finally:
        await client.close()
    d = registry_text(c.decode_registry)
    assert metric_sum(d, "vllm:request_success_total", finished_reason="stop") == 1
    assert metric_sum(d, "vllm:generation_tokens_total") == want_tokens + max_tokens
    assert metric_sum(d, "vllm:request_generation_tokens_sum") == want_tokens + max_tokens
    assert metric_sum(d, "vllm:num_requests_running") == 0


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_include_stop_str_in_output_keeps_the_stop_string(aiohttp_server, stream) -> None:
    c = await start_inprocess_cluster(aiohttp_server)
    client = openai.AsyncOpenAI(base_url=c.gateway_url + "/v1", api_key="unused", max_retries=0)
    seed = 77
    pieces = _generated(seed, 30)
    stop = pieces[4][1:4]  # inside a word: the rest of that word is dropped
    want, want_tokens = _cut(pieces, stop, include=True)
    try:
        got, finish, stop_reason, tokens = await _sdk_call(
            client, "completions", model="tiny", max_tokens=30, seed=seed, stop=stop,
            stream=stream, extra_body={"ignore_eos": True, "include_stop_str_in_output": True},
            **({"stream_options": {"include_usage": True}} if stream else {}),
        )  # fmt: skip
    finally:
        await client.close()
    assert "".join(got) == want and want.endswith(stop)
    assert (finish, stop_reason, tokens) == ("stop", stop, want_tokens)


async def test_guidellm_s_stream_options_get_the_usage_on_every_chunk(aiohttp_server) -> None:
    """GuideLLM 0.8.1 sends these stream options on every streamed request (a 400 before)."""
    c = await start_inprocess_cluster(aiohttp_server)
    opts = {"include_usage": True, "continuous_usage_stats": True}
    async with aiohttp.ClientSession() as s:
        status, events, _ = await _stream(s, c.gateway_url, _body(5, 4, stream_options=opts))
    assert status == 200 and events[-1] == "[DONE]"
    tokens = [e for e in events[:-1] if e["choices"]]
    assert [e["usage"]["completion_tokens"] for e in tokens] == [1, 2, 3, 4]
    assert events[-2]["choices"] == [] and events[-2]["usage"]["total_tokens"] == 5 + 4


async def test_invalid_stop_values_are_openai_style_400s(aiohttp_server) -> None:
    c = await start_inprocess_cluster(aiohttp_server)
    async with aiohttp.ClientSession() as s:
        for stop in (["a", "b", "c", "d", "e"], 5, [""], ["x", None], {"a": 1}):
            body = {"model": "tiny", "prompt": "x", "max_tokens": 2, "stop": stop}
            async with s.post(c.gateway_url + "/v1/completions", json=body) as r:
                err = (await r.json())["error"]
                assert r.status == 400, stop
                assert err["param"] == "stop" and err["type"] == "invalid_request_error"


def test_backend_groups_pair_prefill_and_decode_of_the_same_rail() -> None:
    from zcube_lab.serving.routing import Backend, same_group

    decodes = [Backend.parse(f"http://d{i}:8200#group=rail{i % 2}") for i in range(4)]
    assert decodes[1] == Backend("http://d1:8200", group="rail1")
    assert [b.url for b in same_group(decodes, "rail1")] == ["http://d1:8200", "http://d3:8200"]
    assert same_group(decodes, "") == decodes
    assert same_group(decodes, "rail7") == decodes  # no decode on that rail: any will do
    assert Backend.parse("http://p:8100/") == Backend("http://p:8100")


async def test_prefix_cache_hits_skip_compute_but_not_kv_bytes(aiohttp_server) -> None:
    words = 8000

    async def once(rate: float) -> tuple[float, float, float]:
        c = await start_inprocess_cluster(aiohttp_server, prefill={"prefix_cache_hit_rate": rate})
        async with aiohttp.ClientSession() as s:
            status, _, _ = await _stream(s, c.gateway_url, _body(words, 1))
        assert status == 200
        p = registry_text(c.prefill_registry)
        d = registry_text(c.decode_registry)
        return (
            metric_sum(p, "vllm:request_prefill_time_seconds_sum"),
            metric_sum(d, "vllm:nixl_bytes_transferred_sum"),
            metric_sum(p, "vllm:prompt_tokens_total"),
        )

    full = await once(0.0)
    assert full[0] >= prefill_step_seconds(TINY, words) * 0.95
    # The prefill time is wall time, and a busy machine only adds to it: the cached request's
    # shortest of up to three tries is its own (a bar missed three times is the engine's).
    tries = [await once(0.75)]
    while tries[-1][0] >= 0.5 * full[0] and len(tries) < 3:
        tries.append(await once(0.75))
    cached = min(tries)
    assert cached[0] < 0.5 * full[0], tries  # a quarter of the tokens computed
    assert cached[1] == full[1] > 0  # the whole prompt's KV still crosses the fabric
    assert cached[2] == full[2] == words


async def test_dilation_stretches_every_modelled_compute_time(aiohttp_server) -> None:
    # k = 2 on both engines: a prefill step and each decode step last twice the model's time on
    # the wall clock, and the engines' histograms report the model's time (wall / k).
    k, words, tokens = 2.0, 8000, 20
    c = await start_inprocess_cluster(
        aiohttp_server, prefill={"dilation": k}, decode={"dilation": k}
    )
    async with aiohttp.ClientSession() as s:
        t0 = time.monotonic()
        status, _, _ = await _stream(s, c.gateway_url, _body(words, tokens))
        wall = time.monotonic() - t0
    assert status == 200
    p = registry_text(c.prefill_registry)
    prefill_s = metric_sum(p, "vllm:request_prefill_time_seconds_sum")
    step = prefill_step_seconds(TINY, words)
    assert step * 0.95 <= prefill_s <= step + 0.1 / k
    d = registry_text(c.decode_registry)
    tpot = metric_sum(d, "vllm:request_time_per_output_token_seconds_sum")
    # One sequence: each step attends its whole context (the prompt plus what it generated).
    steps = [decode_step_seconds(TINY, 1, words + i) for i in range(1, tokens)]
    assert min(steps) * 0.95 <= tpot <= max(steps) + 0.02 / k
    assert wall >= k * (step + sum(steps)) * 0.95


@pytest.mark.parametrize("servers", ["run_app", "cancelling"])
async def test_clients_that_go_away_are_not_upstream_errors(
    aiohttp_server, tmp_path: Path, caplog: pytest.LogCaptureFixture, servers: str
) -> None:
    """Streams cancelled by their client (before the first byte and mid-stream) are 499s at
    the gateway: no 5xx, no upstream error, no warning; decode frees every sequence. Under
    `run_app` (the role processes) handlers go on after their client left; under aiohttp's test
    server they are cancelled."""
    async with contextlib.AsyncExitStack() as stack:
        serve = aiohttp_server
        if servers == "run_app":
            serve = await stack.enter_async_context(run_app_servers())
        await _cancel_streams(serve, tmp_path, caplog)


async def _cancel_streams(serve, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    request_log = tmp_path / "requests.jsonl"
    c = await start_inprocess_cluster(serve, gateway={"request_log": str(request_log)})
    caplog.set_level("INFO", logger="serving")

    async def cancelled_mid_stream(s: aiohttp.ClientSession) -> None:
        r = await s.post(c.gateway_url + "/v1/completions", json=_body(5, 5000))
        assert r.status == 200
        for _ in range(5):
            await r.content.readline()
        r.close()

    async def cancelled_before_first_byte(s: aiohttp.ClientSession) -> None:
        # 6,000 prompt tokens take about 60 ms of prefill: the client leaves during it.
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.02):
                await s.post(c.gateway_url + "/v1/completions", json=_body(6000, 50))

    n = 4
    async with aiohttp.ClientSession() as s:
        await asyncio.gather(
            *(cancelled_mid_stream(s) for _ in range(n)),
            *(cancelled_before_first_byte(s) for _ in range(n)),
        )
        for _ in range(100):
            await asyncio.sleep(0.02)
            g = registry_text(c.gateway_registry)
            if metric_sum(g, "zcube:gateway_requests_total") == 2 * n:
                break
        # the gateway still serves: nothing of the cancelled streams is left in its pool
        status, events, _ = await _stream(s, c.gateway_url, _body(5, 3))
        assert status == 200 and events[-1] == "[DONE]"
    g = registry_text(c.gateway_registry)
    assert metric_sum(g, "zcube:gateway_requests_total", status="499") == 2 * n
    assert metric_sum(g, "zcube:gateway_requests_total", status="200") == 1
    assert metric_sum(g, "zcube:gateway_upstream_errors_total") == 0
    assert metric_sum(g, "zcube:gateway_outstanding_requests") == 0
    statuses = [json.loads(line)["status"] for line in request_log.read_text().splitlines()]
    assert sorted(statuses) == [200] + [499] * 2 * n
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "unreachable" not in caplog.text
    for _ in range(50):
        d = registry_text(c.decode_registry)
        if metric_sum(d, "vllm:num_requests_running") == 0:
            break
        await asyncio.sleep(0.02)
    assert metric_sum(d, "vllm:num_requests_running") == 0
    assert metric_sum(d, "vllm:kv_cache_usage_perc") == 0


async def test_decode_failing_mid_stream_ends_the_stream_with_an_error_event(
    aiohttp_server,
) -> None:
    """A decode that dies after its first chunk is an upstream error; our client, which has
    had its 200, gets that chunk, an error event and [DONE]."""

    async def prefill(request: web.Request) -> web.Response:
        return web.json_response({"kv_transfer_params": {"remote_engine_id": "p"}})

    async def decode(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\n')
        assert request.transport is not None
        request.transport.abort()
        return out

    urls = []
    for handler in (prefill, decode):
        app = web.Application()
        app.router.add_post("/v1/completions", handler)
        urls.append(str((await aiohttp_server(app)).make_url("")).rstrip("/"))
    greg = CollectorRegistry()
    cfg = GatewayConfig(prefill_urls=(urls[0],), decode_urls=(urls[1],))
    gateway = str((await aiohttp_server(make_gateway_app(cfg, greg))).make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as s, asyncio.timeout(10):  # (it used to hang)
        status, events, _ = await _stream(s, gateway, _body(3, 5))
    assert status == 200
    assert events[0]["choices"][0]["text"] == "a"
    assert events[1]["error"]["code"] == "upstream_error" and events[2] == "[DONE]"
    g = registry_text(greg)
    assert metric_sum(g, "zcube:gateway_upstream_errors_total", role="decode") == 1


async def test_an_idle_prefill_s_lease_loop_sleeps_until_kv_is_held() -> None:
    """With nothing held the expiry loop does not wake (an idle engine costs no CPU); once KV
    is held it sweeps every quarter lease and frees what ran out."""
    from zcube_lab.serving.config import PrefillConfig
    from zcube_lab.serving.prefill import ENGINE_KEY, make_prefill_app

    registry = CollectorRegistry()
    engine = make_prefill_app(PrefillConfig(kv_lease_s=0.08), registry)[ENGINE_KEY]
    sweeps = 0
    expire = engine.store.expire

    def counted(now: float) -> list[str]:
        nonlocal sweeps
        sweeps += 1
        return expire(now)

    engine.store.expire = counted  # type: ignore[method-assign]
    task = asyncio.create_task(engine.expire_loop())
    try:
        await asyncio.sleep(0.3)  # about 15 sweeps' time
        assert sweeps == 0
        engine.store.put("r", b"kv", 1, asyncio.get_running_loop().time(), 0.08)
        engine.holding.set()
        for _ in range(50):
            await asyncio.sleep(0.02)
            if not len(engine.store):
                break
        assert len(engine.store) == 0 and sweeps >= 1
        expired = metric_sum(registry_text(registry), "vllm:nixl_num_kv_expired_reqs_total")
        assert expired == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_dead_engine_is_routed_around_and_fails_fast_when_none_is_left(
    aiohttp_server,
) -> None:
    """A backend that refuses connections (its engine was killed) costs one refused attempt:
    the request goes to another backend, and later ones skip the dead one; with no backend
    left, the client gets a 502 OpenAI-style error at once."""
    served = {"prefill": 0, "decode": 0}

    async def prefill(request: web.Request) -> web.Response:
        served["prefill"] += 1
        return web.json_response({"kv_transfer_params": {"remote_engine_id": "p"}})

    async def decode(request: web.Request) -> web.Response:
        served["decode"] += 1
        return web.json_response({"choices": [{"text": "a"}], "usage": {"completion_tokens": 1}})

    urls = []
    for handler in (prefill, decode):
        app = web.Application()
        app.router.add_post("/v1/completions", handler)
        urls.append(str((await aiohttp_server(app)).make_url("")).rstrip("/"))
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]  # nobody listens
    greg = CollectorRegistry()
    cfg = GatewayConfig(
        prefill_urls=(dead[0], urls[0]), decode_urls=(dead[1], urls[1]), policy="round-robin"
    )
    gateway = str((await aiohttp_server(make_gateway_app(cfg, greg))).make_url("")).rstrip("/")
    body = _body(3, 1, stream=False)
    async with aiohttp.ClientSession() as s, asyncio.timeout(10):
        for _ in range(6):
            async with s.post(gateway + "/v1/completions", json=body) as r:
                assert r.status == 200, await r.text()
    assert served == {"prefill": 6, "decode": 6}
    g = registry_text(greg)
    # One refusal each: afterwards the dead backends are left out.
    assert metric_sum(g, "zcube:gateway_upstream_errors_total", role="prefill") == 1
    assert metric_sum(g, "zcube:gateway_upstream_errors_total", role="decode") == 1

    cfg = GatewayConfig(prefill_urls=(urls[0],), decode_urls=(dead[1],))
    gateway = str((await aiohttp_server(make_gateway_app(cfg))).make_url("")).rstrip("/")
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as s, asyncio.timeout(10):
        for _ in range(2):  # also while the only decode is marked down
            t0 = loop.time()
            async with s.post(gateway + "/v1/completions", json=body) as r:
                assert r.status == 502
                err = (await r.json())["error"]
            assert loop.time() - t0 < 1.0
            assert err["code"] == "upstream_error" and "decode" in err["message"]
