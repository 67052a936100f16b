"""The streaming client: pure measurement from timed SSE lines, the gevent transport against a
local stub server (loopback, a background thread), and a whole workload run (open and closed
loop) reporting to Locust-shaped events, Prometheus and files, without Locust itself."""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from zcube_lab.serving import vllm_metrics as server_metrics
from zcube_lab.workloads import client_metrics as metrics
from zcube_lab.workloads.client import OpenAIStreamClient, StreamMeter
from zcube_lab.workloads.locust_ext import build_run
from zcube_lab.workloads.profiles import load_profile
from zcube_lab.workloads.requests import generate_requests
from zcube_lab.workloads.stubserver import make_stub_app


def _chunk(text: str, chat: bool = False) -> str:
    choice = {"delta": {"content": text}} if chat else {"text": text}
    return "data: " + json.dumps({"choices": [choice]}) + "\n"


def test_meter_ttft_itl_tpot_e2e() -> None:
    m = StreamMeter(start=10.0)
    m.feed_line(_chunk(" a"), 10.5)
    m.feed_line("\n", 10.5)
    m.feed_line(_chunk(" b"), 10.6)
    m.feed_line(_chunk(" c"), 10.8)
    m.feed_line('data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}', 11)
    m.feed_line("data: [DONE]", 11.0)
    r = m.finish(11.0)
    assert r.ok and r.status == 200
    assert r.ttft == pytest.approx(0.5)
    assert r.itl == pytest.approx((0.1, 0.2))
    assert r.e2e == pytest.approx(1.0)
    assert r.tpot == pytest.approx((1.0 - 0.5) / 2)
    assert (r.output_tokens, r.prompt_tokens) == (3, 7)


def test_meter_chat_role_chunk_without_content_is_not_a_token() -> None:
    m = StreamMeter(start=0.0)
    m.feed_line('data: {"choices": [{"delta": {"role": "assistant", "content": ""}}]}', 0.1)
    m.feed_line(": keep-alive comment", 0.2)
    m.feed_line(_chunk("hi", chat=True), 0.3)
    m.feed_line(b"data: [DONE]\n", 0.4)
    r = m.finish(0.4)
    assert r.ttft == pytest.approx(0.3)
    assert r.output_tokens == 1 and r.tpot is None


def test_meter_errors() -> None:
    m = StreamMeter(start=0.0)
    m.feed_line(_chunk("x"), 0.1)
    m.feed_line('data: {"error": {"message": "boom", "code": 500}}', 0.2)
    m.feed_line("data: [DONE]", 0.3)
    r = m.finish(0.3)
    assert r.outcome == "stream_error" and "boom" in r.error and not r.ok
    cut = StreamMeter(start=0.0)
    cut.feed_line(_chunk("x"), 0.1)
    assert cut.finish(0.2).outcome == "incomplete"
    failed = StreamMeter(start=1.0).fail(3.0, "http_error", 503, "overloaded")
    assert (failed.outcome, failed.status, failed.e2e, failed.ttft) == (
        "http_error",
        503,
        2.0,
        None,
    )


def test_client_buckets_are_vllms_and_the_servers() -> None:
    assert metrics.TTFT_BUCKETS == server_metrics.TTFT_BUCKETS
    assert metrics.ITL_BUCKETS == server_metrics.ITL_BUCKETS
    assert metrics.REQUEST_LATENCY_BUCKETS == server_metrics.REQUEST_LATENCY_BUCKETS


def test_client_metrics_exposition() -> None:
    reg = CollectorRegistry()
    cm = metrics.ClientMetrics(reg, "tiny", "chat")
    m = StreamMeter(0.0)
    for i, t in enumerate((0.03, 0.05, 0.07)):
        m.feed_line(_chunk(f"w{i}"), t)
    m.feed_line("data: [DONE]", 0.07)
    cm.observe(m.finish(0.08), prompt_tokens=12)
    cm.observe(StreamMeter(0.0).fail(1.0, "timeout"), prompt_tokens=5)
    text = generate_latest(reg).decode()
    assert 'zcube_client_ttft_seconds_bucket{le="0.04",model="tiny",workload="chat"} 1.0' in text
    assert 'zcube_client_ttft_seconds_bucket{le="0.02",model="tiny",workload="chat"} 0.0' in text
    assert 'zcube_client_itl_seconds_count{model="tiny",workload="chat"} 2.0' in text
    assert "zcube_client_tpot_seconds_count" in text and "zcube_client_e2e_seconds_sum" in text
    assert 'zcube_client_requests_total{model="tiny",outcome="ok",workload="chat"} 1.0' in text
    assert 'zcube_client_requests_total{model="tiny",outcome="timeout",workload="chat"} 1.0' in text
    assert 'zcube_client_prompt_tokens_total{model="tiny",workload="chat"} 17.0' in text
    assert 'zcube_client_output_tokens_total{model="tiny",workload="chat"} 3.0' in text
    assert "zcube_client_requests_in_flight" in text


@pytest.fixture
def stub_url() -> Iterator[str]:
    """The stub server on an ephemeral loopback port, in a background event loop."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, object] = {}

    async def start() -> None:
        runner = web.AppRunner(make_stub_app(ttft=0.02, itl=0.005), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        holder["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert started.wait(10)
    try:
        yield f"http://127.0.0.1:{holder['port']}"
    finally:
        cleanup = holder["runner"].cleanup()  # type: ignore[attr-defined]
        asyncio.run_coroutine_threadsafe(cleanup, loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)


def test_transport_measures_a_real_stream(stub_url: str) -> None:
    plan = generate_requests(load_profile("chat", length_scale=0.05), None, 5.0, None, 1)
    client = OpenAIStreamClient(stub_url + "/v1")  # an OpenAI-style base URL works too
    try:
        for req in plan[:3]:
            r = client.stream(req)
            assert r.ok, r.error
            assert r.output_tokens == req.max_tokens
            assert r.ttft is not None and 0.02 <= r.ttft < 2.0
            assert len(r.itl) == req.max_tokens - 1
            # The stub paces tokens 5 ms apart. On a loaded machine one token can arrive late
            # and the next at once, so single gaps say little: the median follows the pacing,
            # and the gaps add up to the time between the first and the last token.
            assert statistics.median(r.itl) >= 0.004 and max(r.itl) < 2.0
            assert sum(r.itl) <= r.e2e - r.ttft + 1e-3
            assert r.e2e >= r.ttft + 0.005 * (req.max_tokens - 1) * 0.8
    finally:
        client.close()


def test_transport_errors(stub_url: str) -> None:
    client = OpenAIStreamClient(stub_url)
    try:
        r = client.stream_body("/v1/completions", {"model": "fail-503", "max_tokens": 3})
        assert (r.outcome, r.status, r.error) == ("http_error", 503, "overloaded")
        r = client.stream_body("/v1/completions", {"model": "fail-stream", "max_tokens": 5})
        assert r.outcome == "stream_error" and "decode failed" in r.error
        # The connection that carried the error is not reused mid-body: the next one is fine.
        r = client.stream_body("/v1/completions", {"model": "stub", "max_tokens": 2})
        assert r.ok and r.output_tokens == 2
        r = client.stream_body("/v1/nowhere", {"model": "stub"})
        assert (r.outcome, r.status) == ("http_error", 404)
    finally:
        client.close()
    dead = OpenAIStreamClient("http://127.0.0.1:9", timeout=2.0)
    r = dead.stream_body("/v1/completions", {"model": "stub"})
    assert r.outcome == "connect_error" and not r.ok
    dead.close()


def _run_env(url: str, tmp_path: Path, fired: list[dict[str, Any]], **kw: Any) -> Any:
    opts = {
        "workload": "chat",
        "seed": 4,
        "arrival": "fixed",
        "rate": 20.0,
        "burstiness": None,
        "stages": None,
        "model": "stub",
        "trace": None,
        "length_scale": 0.05,
        "duration": 1.0,
        "run_time": None,
        "requests_out": str(tmp_path / "requests.jsonl"),
        "summary_out": str(tmp_path / "summary.json"),
        "request_timeout": 30.0,
        "max_in_flight": 64,
    } | kw
    events = SimpleNamespace(request=SimpleNamespace(fire=lambda **e: fired.append(e)))
    return SimpleNamespace(host=url, parsed_options=SimpleNamespace(**opts), events=events)


def test_workload_run_open_loop_end_to_end(stub_url: str, tmp_path: Path) -> None:
    fired: list[dict[str, Any]] = []
    run = build_run(_run_env(stub_url, tmp_path, fired))
    run.drive()
    run.stop()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mode"] == "open-loop"
    assert summary["arrival"] == {"process": "fixed", "rate": 20.0, "burstiness": 1.0}
    assert (summary["planned"], summary["completed_ok"], summary["achieved_rate"]) == (20, 20, 20)
    rows = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and all(r["outcome"] == "ok" for r in rows)
    kinds = sorted({(e["request_type"], e["name"]) for e in fired})
    assert kinds == [("POST", "chat-stream"), ("TPOT", "chat-stream"), ("TTFT", "chat-stream")]
    posts = [e for e in fired if e["request_type"] == "POST"]
    assert len(posts) == 20 and all(e["exception"] is None for e in posts)
    # E2E in ms as Locust expects, tokens as the response length.
    assert all(20 <= e["response_time"] < 2000 and e["response_length"] > 0 for e in posts)
    text = generate_latest(run.registry).decode()
    assert 'zcube_client_requests_total{model="stub",outcome="ok",workload="chat"} 20.0' in text


def test_workload_run_failures_reach_locust(stub_url: str, tmp_path: Path) -> None:
    fired: list[dict[str, Any]] = []
    run = build_run(_run_env(stub_url, tmp_path, fired, model="fail-503", duration=0.2))
    run.drive()
    run.stop()
    posts = [e for e in fired if e["request_type"] == "POST"]
    assert len(posts) == 4
    assert all("http_error" in str(e["exception"]) for e in posts)
    assert not [e for e in fired if e["request_type"] == "TTFT"]


def test_workload_run_closed_loop(stub_url: str, tmp_path: Path) -> None:
    fired: list[dict[str, Any]] = []
    run = build_run(_run_env(stub_url, tmp_path, fired, rate=30.0))
    sent = 0
    while run.send_next():
        sent += 1
    run.stop()
    assert sent == 30 and not run.send_next()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mode"] == "closed-loop" and summary["completed_ok"] == 30
    rows = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    # One at a time: each request is sent after the previous one ended.
    for a, b in itertools.pairwise(rows):
        assert b["sent_s"] >= a["sent_s"] + a["e2e_s"] - 0.002
    # Rates are over the time the requests took, not the plan's window.
    last_end = rows[-1]["sent_s"] + rows[-1]["e2e_s"]
    assert summary["duration_s"] == pytest.approx(last_end, abs=1e-3)
    assert summary["achieved_rate"] == pytest.approx(30 / last_end, rel=1e-3)
