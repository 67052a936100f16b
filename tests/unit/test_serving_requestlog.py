"""The gateway's per-request log: one exact line per request, agreeing with what a client saw."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from zcube_lab.serving.models import get_profile
from zcube_lab.serving.openai_api import COMPLETION, ChunkWriter, parse_request
from zcube_lab.serving.requestlog import TOKEN_MARK, TokenCounter, completion_tokens

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving_fixtures import start_inprocess_cluster


def test_token_counter_counts_marks_split_across_pieces() -> None:
    req = parse_request(
        {"model": "tiny", "prompt": "a b", "max_tokens": 3, "stream": True},
        COMPLETION,
        get_profile("tiny"),
        "tiny",
    )
    w = ChunkWriter(req, "r1", 0)
    stream = w.token("x", None) + w.token("y", None) + w.token("z", "length") + w.usage(3)
    stream += b"data: [DONE]\n\n"
    assert stream.count(TOKEN_MARK) == 3
    for size in (1, 3, 7, 16, len(stream)):
        c = TokenCounter()
        for i in range(0, len(stream), size):
            c.feed(stream[i : i + size])
        assert c.count == 3, size


def test_completion_tokens_of_a_json_answer() -> None:
    assert completion_tokens(b'{"usage": {"completion_tokens": 5}}') == 5
    assert completion_tokens(b"not json") == 0 and completion_tokens(b"[]") == 0


async def _client_ttft(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[float, int]:
    """(seconds to the first token chunk, tokens) as the client saw them."""
    start = time.monotonic()
    first, tokens = None, 0
    async with s.post(url + "/v1/completions", json=body) as r:
        async for line in r.content:
            if line.startswith(b"data: {") and b'"choices":[{' in line:
                first = time.monotonic() if first is None else first
                tokens += 1
    assert first is not None
    return first - start, tokens


def _streaming(words: int, max_tokens: int) -> dict:
    return {
        "model": "tiny",
        "prompt": "w " * words,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }


def _streaming(words: int, max_tokens: int) -> dict:
    return {
        "model": "tiny",
        "prompt": "w " * words,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }


async def test_gateway_logs_exact_per_request_timings(aiohttp_server, tmp_path: Path) -> None:
    log = tmp_path / "requests-gateway.jsonl"
    c = await start_inprocess_cluster(aiohttp_server, gateway={"request_log": str(log)})
    wall_before = time.time()
    async with aiohttp.ClientSession() as s:
        seen = await asyncio.gather(
            *(_client_ttft(s, c.gateway_url, _streaming(50 + 400 * i, 3 + i)) for i in range(4))
        )
        async with s.post(
            c.gateway_url + "/v1/completions",
            json={"model": "tiny", "prompt": "hi", "max_tokens": 4, "ignore_eos": True},
        ) as r:
            assert r.status == 200
        async with s.post(c.gateway_url + "/v1/completions", json={"model": "nope"}) as r:
            assert r.status == 404
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 6
    streamed = sorted((x for x in lines if x["stream"]), key=lambda x: x["prompt_tokens"])
    for i, (rec, (client_ttft, tokens)) in enumerate(zip(streamed, seen, strict=True)):
        assert rec["status"] == 200 and rec["route"] == "/v1/completions"
        assert rec["output_tokens"] == tokens == 3 + i
        assert wall_before <= rec["arrival"] < rec["first_token"] <= rec["end"]
        assert rec["ttft_s"] == pytest.approx(rec["first_token"] - rec["arrival"], abs=1e-6)
        assert rec["e2e_s"] >= rec["ttft_s"] > 0
        # the client's TTFT includes the gateway's: equal but for loopback and parsing time
        assert 0 <= client_ttft - rec["ttft_s"] < 0.05
    plain = next(x for x in lines if not x["stream"] and x["status"] == 200)
    assert plain["output_tokens"] == 4 and plain["ttft_s"] > 0
    bad = next(x for x in lines if x["status"] == 404)
    assert bad["ttft_s"] is None and bad["first_token"] is None and bad["output_tokens"] == 0
