"""A minimal OpenAI-compatible streaming server for testing and benchmarking the load generator.

Not a model of a serving cluster (that is `zcube_lab/serving/`): it answers every streaming
completion or chat request with exactly `max_tokens` one-token SSE chunks after a fixed first-token
delay and a fixed inter-token gap, then a usage chunk and `data: [DONE]`, as vLLM's server shapes
them. Its job is to be fast and predictable, so what a benchmark measures is the load generator.

Test hooks: model `fail-503` answers HTTP 503 with OpenAI's error body; model `fail-stream`
sends one token and then an error event. `python -m zcube_lab.workloads.stubserver --port P` runs
it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import Sequence

from aiohttp import web

TTFT_KEY = web.AppKey("ttft", float)
ITL_KEY = web.AppKey("itl", float)


def make_stub_app(ttft: float = 0.0, itl: float = 0.0) -> web.Application:
    """The stub app: first token after `ttft` seconds, then one token every `itl` seconds."""
    app = web.Application()
    app[TTFT_KEY] = ttft
    app[ITL_KEY] = itl
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/chat/completions", _completions)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    return app


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})


async def _completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    app = request.app
    model = body.get("model", "stub")
    if model == "fail-503":
        err = {"message": "overloaded", "type": "ServiceUnavailable", "param": None, "code": 503}
        return web.json_response({"error": err}, status=503)
    chat = request.path.endswith("/chat/completions")
    n = int(body.get("max_tokens") or 16)
    prompt = body.get("prompt", [])
    prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    # The load generator may hang up mid-stream (run ended, request cancelled): not an error.
    with contextlib.suppress(ConnectionResetError):
        await _stream(resp, app, model, chat, n, prompt_tokens)
    return resp


async def _stream(
    resp: web.StreamResponse, app: web.Application, model: str, chat: bool, n: int, prompt: int
) -> None:
    created = int(time.time())
    if app[TTFT_KEY] > 0:
        await asyncio.sleep(app[TTFT_KEY])
    for i in range(n):
        if i and app[ITL_KEY] > 0:
            await asyncio.sleep(app[ITL_KEY])
        if model == "fail-stream" and i == 1:
            err = {"message": "decode failed", "type": "InternalServerError", "code": 500}
            await resp.write(b"data: " + json.dumps({"error": err}).encode() + b"\n\n")
            break
        finish = "length" if i == n - 1 else None
        choice = (
            {"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": finish}
            if chat
            else {"index": 0, "text": f" w{i}", "finish_reason": finish}
        )
        chunk = {"id": "cmpl-stub", "created": created, "model": model, "choices": [choice]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    usage = {"prompt_tokens": prompt, "completion_tokens": n}
    final = {"id": "cmpl-stub", "model": model, "choices": [], "usage": usage}
    await resp.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
    await resp.write_eof()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the stub on loopback until interrupted."""
    p = argparse.ArgumentParser(
        prog="python -m zcube_lab.workloads.stubserver", description=main.__doc__
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ttft", type=float, default=0.0, help="first-token delay, s")
    p.add_argument("--itl", type=float, default=0.0, help="inter-token gap, s")
    args = p.parse_args(argv)
    web.run_app(
        make_stub_app(args.ttft, args.itl),
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
