"""A local PD cluster as real processes on loopback: openai SDK, concurrency, metrics, faults.

Needs no root: every role is `python -m zcube_lab.serving.<role>` in its own process group, KV
served on 127.0.0.1 and 127.0.0.2 (two "NIC ports"); fixtures stop every group in `finally`.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.serving.cluster import ClusterSpec, LocalCluster
from zcube_lab.serving.models import get_profile, prefill_step_seconds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving_fixtures import metric_sum

pytestmark = pytest.mark.integration
TINY = get_profile("tiny")


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(ClusterSpec(kv_addresses=2, kv_streams=2), tmp_path_factory.mktemp("logs"))
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_openai_sdk_streaming_and_not(cluster: LocalCluster) -> None:
    client = openai.OpenAI(base_url=cluster.gateway_url + "/v1", api_key="x", max_retries=0)
    try:
        comp = client.completions.create(
            model="tiny", prompt="one two three", max_tokens=8, extra_body={"ignore_eos": True}
        )
        assert comp.usage is not None
        assert (comp.usage.prompt_tokens, comp.usage.completion_tokens) == (3, 8)
        chat = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=4,
            extra_body={"ignore_eos": True},
        )
        assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content
        stream = client.completions.create(
            model="tiny",
            prompt="x y",
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        chunks = list(stream)
        texts = [c.choices[0].text for c in chunks if c.choices]
        assert len(texts) == 6 and chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens == 6
        models = client.models.list()
        assert [m.id for m in models.data] == ["tiny"]
    finally:
        client.close()


async def _one(session: aiohttp.ClientSession, url: str, words: int, out: int) -> int:
    body = {"model": "tiny", "prompt": "w " * words, "max_tokens": out, "stream": True,
            "ignore_eos": True}  # fmt: skip
    tokens = 0
    async with session.post(url + "/v1/completions", json=body) as r:
        assert r.status == 200
        async for line in r.content:
            if line.startswith(b"data: {"):
                tokens += bool(json.loads(line[6:])["choices"])
    return tokens


def test_many_concurrent_streams_and_metrics_agree(cluster: LocalCluster) -> None:
    before_d = _scrape(cluster.decode_urls[0])
    before_p = _scrape(cluster.prefill_urls[0])
    n, out = 120, 12
    words = [50 + 7 * i for i in range(n)]

    async def run() -> list[int]:
        async with aiohttp.ClientSession() as s:
            return await asyncio.gather(*(_one(s, cluster.gateway_url, w, out) for w in words))

    assert asyncio.run(run()) == [out] * n
    d, p = _scrape(cluster.decode_urls[0]), _scrape(cluster.prefill_urls[0])

    def delta(after: str, before: str, name: str, **labels: str) -> float:
        return metric_sum(after, name, **labels) - metric_sum(before, name, **labels)

    assert delta(d, before_d, "vllm:generation_tokens_total") == n * out
    assert delta(d, before_d, "vllm:request_success_total", finished_reason="length") == n
    assert delta(d, before_d, "vllm:time_to_first_token_seconds_count") == n
    assert delta(d, before_d, "vllm:nixl_xfer_time_seconds_count") == n
    assert delta(d, before_d, "vllm:nixl_num_failed_transfers_total") == 0
    # bytes received equal bytes expected (and each pull was checksum-verified to count)
    expected = sum(w * TINY.kv_bytes_per_token for w in words)
    assert delta(d, before_d, "vllm:nixl_bytes_transferred_sum") == expected
    assert delta(p, before_p, "vllm:prompt_tokens_total") == sum(words)
    assert delta(p, before_p, "vllm:request_prefill_time_seconds_count") == n


def test_clients_that_go_away_are_499s_not_upstream_errors(cluster: LocalCluster) -> None:
    """Streams their clients cancel (mid-stream, and during prefill as at a client's time
    limit) are counted as 499 by the gateway process: no 5xx, no upstream error, no warning."""
    before = _scrape(cluster.gateway_url)
    assert cluster.log_dir is not None
    (log,) = cluster.log_dir.glob("gateway-*.log")
    log_start = log.stat().st_size

    async def mid_stream(s: aiohttp.ClientSession) -> None:
        body = {"model": "tiny", "prompt": "w " * 5, "max_tokens": 5000, "stream": True,
                "ignore_eos": True}  # fmt: skip
        r = await s.post(cluster.gateway_url + "/v1/completions", json=body)
        assert r.status == 200
        for _ in range(5):
            await r.content.readline()
        r.close()

    async def before_first_byte(s: aiohttp.ClientSession) -> None:
        # 6,000 prompt tokens take about 60 ms of prefill: the client leaves during it.
        body = {"model": "tiny", "prompt": "w " * 6000, "max_tokens": 50, "stream": True,
                "ignore_eos": True}  # fmt: skip
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.02):
                await s.post(cluster.gateway_url + "/v1/completions", json=body)

    async def run() -> None:
        async with aiohttp.ClientSession() as s:
            await asyncio.gather(*(mid_stream(s) for _ in range(3)),
                                 *(before_first_byte(s) for _ in range(3)))  # fmt: skip

    asyncio.run(run())
    deadline = time.monotonic() + 10
    while True:
        g = _scrape(cluster.gateway_url)
        gone = metric_sum(g, "zcube:gateway_requests_total", status="499") - metric_sum(
            before, "zcube:gateway_requests_total", status="499"
        )
        if gone >= 6 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert gone == 6
    for status in ("500", "502", "503", "504"):
        assert metric_sum(g, "zcube:gateway_requests_total", status=status) == metric_sum(
            before, "zcube:gateway_requests_total", status=status
        )
    assert metric_sum(g, "zcube:gateway_upstream_errors_total") == metric_sum(
        before, "zcube:gateway_upstream_errors_total"
    )
    with open(log, "rb") as f:
        f.seek(log_start)
        text = f.read().decode()
    assert text.count("went away") == 6
    assert " WARNING " not in text and " ERROR " not in text and "unreachable" not in text


def test_prefill_gone_is_a_502_not_a_hang(tmp_path: Path) -> None:
    with LocalCluster(ClusterSpec(kv_addresses=1), tmp_path) as c:
        c.kill("prefill")
        body = json.dumps({"model": "tiny", "prompt": "x", "max_tokens": 2}).encode()
        req = urllib.request.Request(
            c.gateway_url + "/v1/completions", body, {"Content-Type": "application/json"}
        )
        start = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req, timeout=10)
        assert exc.value.code == 502 and time.monotonic() - start < 6
        err = json.loads(exc.value.read())["error"]
        assert err["code"] == "upstream_error" and "prefill" in err["message"]
        g = _scrape(c.gateway_url)
        assert metric_sum(g, "zcube:gateway_upstream_errors_total", role="prefill") == 1


def test_zcube_lab_serve_local_runs_and_stops(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "zcube_lab.cli", "serve", "--local", "--port", str(port)]
    argv += ["--log-dir", str(tmp_path)]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 128 + signal.SIGTERM
        # the gateway it started is gone too
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_expert_parallel_instances_exchange_bytes_with_ep_workers(tmp_path: Path) -> None:
    with LocalCluster(ClusterSpec(kv_addresses=1, ep_size=2), tmp_path) as c:

        async def run() -> int:
            async with aiohttp.ClientSession() as s:
                return await _one(s, c.gateway_url, 40, 5)

        assert asyncio.run(run()) == 5
        d = _scrape(c.decode_urls[0])
        p = _scrape(c.prefill_urls[0])

    # per peer, as DeepEP sends it (zcube_lab.serving.eptraffic): a token reaches the peer's node
    # with probability 1 - (4/8)(3/7) = 11/14 (tiny: 8 experts, 4 per node, top-2); dispatch 264
    # bytes (256 FP8 + 2 scales), combine 512 (BF16), over the 2 MoE layers in one frame
    def moved(tokens: int) -> int:
        share = 2 * tokens * 11 / 14
        return math.ceil(share * 264) + math.ceil(share * 512)

    assert moved(1) == 415 + 805
    assert metric_sum(d, "zcube:ep_alltoall_bytes_total") == 5 * moved(1)
    assert metric_sum(p, "zcube:ep_alltoall_bytes_total") == moved(40)


def test_ttft_at_least_prefill_plus_kv_transfer(cluster: LocalCluster) -> None:
    words = 6000
    before = _scrape(cluster.decode_urls[0])

    async def run() -> float:
        body = {"model": "tiny", "prompt": "w " * words, "max_tokens": 2, "stream": True,
                "ignore_eos": True}  # fmt: skip
        async with aiohttp.ClientSession() as s:
            start = time.perf_counter()
            async with s.post(cluster.gateway_url + "/v1/completions", json=body) as r:
                await r.content.readline()
                ttft = time.perf_counter() - start
                await r.read()
            return ttft

    ttft = asyncio.run(run())
    after = _scrape(cluster.decode_urls[0])
    xfer = metric_sum(after, "vllm:nixl_xfer_time_seconds_sum") - metric_sum(
        before, "vllm:nixl_xfer_time_seconds_sum"
    )
    moved = metric_sum(after, "vllm:nixl_bytes_transferred_sum") - metric_sum(
        before, "vllm:nixl_bytes_transferred_sum"
    )
    assert moved == words * TINY.kv_bytes_per_token
    floor = prefill_step_seconds(TINY, words) + xfer
    assert floor <= ttft <= floor + 1.0


def test_two_prefills_two_decodes_share_the_load(tmp_path: Path) -> None:
    spec = ClusterSpec(prefills=2, decodes=2, kv_addresses=2)
    with LocalCluster(spec, tmp_path) as c:

        async def run() -> list[int]:
            async with aiohttp.ClientSession() as s:
                return await asyncio.gather(*(_one(s, c.gateway_url, 30, 20) for _ in range(40)))

        assert asyncio.run(run()) == [20] * 40
        served = [
            metric_sum(_scrape(u), "vllm:request_success_total", finished_reason="length")
            for u in c.decode_urls
        ]
        prefilled = [metric_sum(_scrape(u), "vllm:prompt_tokens_total") for u in c.prefill_urls]
    assert sum(served) == 40 and min(served) >= 10
    assert sum(prefilled) == 40 * 30 and min(prefilled) >= 10 * 30
