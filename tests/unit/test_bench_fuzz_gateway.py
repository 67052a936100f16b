"""bench/fuzz_gateway.py counts what it claims: every case once, and a 5xx, a malformed error and
a hang each as such (a gateway in front of a decode that misbehaves on cue), and its result
survives the JSON round trip."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from bench.fuzz_gateway import FuzzResult, Tally, run
from tests.fuzz_requests import PATHS, gateway, stub_backend
from tests.serving_fixtures import threaded_apps


def _misbehaving_decode(_urls: list[str]) -> web.Application:
    """Answers by prompt: `crash` a 500, `garble` a 400 that is not JSON, `stall` late."""

    async def answer(request: web.Request) -> web.Response:
        prompt = (await request.json())["prompt"]
        if prompt == "crash":
            return web.Response(status=500, text="Internal Server Error")
        if prompt == "garble":
            return web.Response(status=400, text="nope")
        if prompt == "stall":
            await asyncio.sleep(1.0)
        return web.json_response({"id": "cmpl-x", "choices": [], "usage": {}})

    app = web.Application()
    for path in PATHS:
        app.router.add_post(path, answer)
    return app


def _body(prompt: str) -> bytes:
    return json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 2}).encode()


def test_each_failure_is_counted_as_its_kind_and_the_connection_recovers() -> None:
    with threaded_apps(stub_backend("prefill"), _misbehaving_decode, gateway) as urls:
        result = FuzzResult()
        tally = Tally(urls[2], 0.3, result)
        try:
            for prompt in ("crash", "garble", "stall", "fine"):
                tally.send("prompt", _body(prompt), PATHS[0])
            tally.send("bytes", b"\xff", PATHS[1])
        finally:
            tally.close()
    assert (result.cases, result.server_errors, result.malformed_errors, result.hangs) == (
        5,
        1,
        1,
        1,
    )
    assert result.disconnects == 0 and not result.clean
    # The stalled reply never arrived; after it the reopened connection answered both.
    assert result.statuses == {"500": 1, "400": 2, "200": 1}
    assert result.shapes == {"prompt": 4, "bytes": 1}
    assert [e["kind"] for e in result.examples] == ["server_error", "malformed_error", "hang"]


def test_a_short_run_against_real_engines_is_clean_and_counts_every_case() -> None:
    result = run(cases=40, timeout_s=10.0, seed=3)
    assert result.cases == 40 and result.clean, result.examples
    assert sum(result.shapes.values()) == sum(result.statuses.values()) == 40
    assert sum(result.paths.values()) == 40 and set(result.paths) <= set(PATHS)
    assert FuzzResult.from_json(result.to_json()) == result
