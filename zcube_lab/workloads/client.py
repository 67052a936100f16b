"""The OpenAI streaming client: per-request TTFT, ITL, TPOT, E2E, tokens and errors.

Two layers, so the measurement is testable without a network:

- `StreamMeter` (pure): fed the SSE lines of one response with the time each arrived, it
  returns a `RequestResult`. A *token chunk* is a `data:` event whose first choice carries
  non-empty `text` (completions) or `delta.content` (chat): the servers we drive send one token
  per chunk. TTFT is send -> first token chunk; ITL the gaps between token chunks; TPOT
  (e2e - ttft) / (tokens - 1); E2E send -> end of stream. The token count is the usage chunk's
  `completion_tokens` when the server sends one (we ask for it), else the number of token chunks.
- `OpenAIStreamClient`: a gevent-friendly transport (geventhttpclient, the client of Locust's
  FastHttpUser) that POSTs a planned request and feeds the meter. Under Locust many of them run
  concurrently as greenlets on one connection pool.

Time dilation (docs/DOMAIN.md §4): the client holds the run's `Clock`; its timeout is in
modelled seconds (lasting `clock.wall(timeout)`) and every result it returns is in modelled
seconds (`RequestResult.modelled`), measured on the wall clock.

Outcomes: `ok`, `http_error` (status >= 400), `stream_error` (an `error` event in the stream),
`incomplete` (the stream ended without `[DONE]`), `connect_error`, `timeout`; the driver adds
`cancelled` (still in flight when the run ended) and `overload` (refused by the driver's own
in-flight limit).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from zcube_lab.core.clock import Clock
from zcube_lab.workloads.requests import PlannedRequest, encode_request

OUTCOMES = (
    "ok",
    "http_error",
    "stream_error",
    "incomplete",
    "connect_error",
    "timeout",
    "cancelled",
    "overload",
)


@dataclass(frozen=True)
class RequestResult:
    """What one request measured; times in seconds, `None` where not measurable."""

    outcome: str
    status: int
    e2e: float
    ttft: float | None = None
    itl: tuple[float, ...] = ()
    output_tokens: int = 0
    prompt_tokens: int | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        """True when the stream completed without error."""
        return self.outcome == "ok"

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first: (e2e - ttft) / (tokens - 1)."""
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    def modelled(self, clock: Clock) -> RequestResult:
        """This result, timed on the wall clock, in the modelled seconds of `clock`."""
        if not clock.dilated:
            return self
        return replace(
            self,
            e2e=clock.modelled(self.e2e),
            ttft=None if self.ttft is None else clock.modelled(self.ttft),
            itl=tuple(clock.modelled(g) for g in self.itl),
        )


class StreamMeter:
    """Turns the timed SSE lines of one streaming response into a `RequestResult`."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.token_times: list[float] = []
        self.usage_completion: int | None = None
        self.usage_prompt: int | None = None
        self.done = False
        self.error = ""

    def feed_line(self, line: bytes | str, now: float) -> None:
        """One line of the event stream (with or without its newline), received at `now`."""
        text = line.decode() if isinstance(line, bytes) else line
        text = text.strip()
        # SSE: blank lines end events, ':' starts a comment; only `data:` fields matter here.
        if not text.startswith("data:"):
            return
        payload = text[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            self.error = self.error or f"unparsable event: {payload[:80]}"
            return
        if not isinstance(obj, dict):
            return
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            self.error = self.error or f"stream error: {msg}"
            return
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage_completion = usage.get("completion_tokens", self.usage_completion)
            self.usage_prompt = usage.get("prompt_tokens", self.usage_prompt)
        choices = obj.get("choices")
        if choices and isinstance(choices[0], dict):
            c = choices[0]
            delta = c.get("delta")
            piece = c.get("text") if delta is None else delta.get("content")
            if piece:
                self.token_times.append(now)

    def finish(self, now: float, status: int = 200) -> RequestResult:
        """The result when the response body has ended at `now`."""
        e2e = now - self.start
        ttft = self.token_times[0] - self.start if self.token_times else None
        itl = tuple(b - a for a, b in zip(self.token_times, self.token_times[1:], strict=False))
        tokens = (
            self.usage_completion if self.usage_completion is not None else len(self.token_times)
        )
        if self.error:
            outcome, error = "stream_error", self.error
        elif not self.done:
            outcome, error = "incomplete", "stream ended without [DONE]"
        else:
            outcome, error = "ok", ""
        return RequestResult(outcome, status, e2e, ttft, itl, tokens, self.usage_prompt, error)

    def fail(self, now: float, outcome: str, status: int = 0, error: str = "") -> RequestResult:
        """The result of a request that failed at `now` (what was measured so far is kept)."""
        ttft = self.token_times[0] - self.start if self.token_times else None
        return RequestResult(
            outcome, status, now - self.start, ttft, (), len(self.token_times), None, error
        )


class OpenAIStreamClient:
    """A gevent-friendly streaming client for one OpenAI-compatible base URL: `timeout` in
    modelled seconds, results in modelled seconds (of `clock`); `now` times the stream."""

    def __init__(
        self,
        base_url: str,
        timeout: float = 600.0,
        max_connections: int = 1024,
        now: Callable[[], float] = time.perf_counter,
        api_key: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        # Imported here so the pure parts of this module load without gevent.
        from geventhttpclient import HTTPClient

        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base URL must be http(s)://HOST[:PORT], got {base_url!r}")
        # Request paths carry `/v1`; accept an OpenAI-style base URL that already ends in it.
        self.prefix = parts.path.rstrip("/").removesuffix("/v1")
        self.now = now
        self.clock = clock or Clock()
        wall_timeout = self.clock.wall(timeout)
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        # An open-loop driver must never wait for a free connection (that would make it
        # closed-loop), so the pool is as large as the in-flight limit.
        self.http = HTTPClient(
            parts.hostname,
            parts.port or (443 if parts.scheme == "https" else 80),
            ssl=parts.scheme == "https",
            concurrency=max_connections,
            connection_timeout=min(wall_timeout, 30.0),
            network_timeout=wall_timeout,
        )

    def stream(self, req: PlannedRequest) -> RequestResult:
        """Send `req` (streaming) and measure it; never raises for network or server errors."""
        return self.stream_bytes(req.path, encode_request(req, stream=True))

    def stream_body(self, path: str, body: dict[str, Any]) -> RequestResult:
        """POST `body` to `path` with streaming and measure the response."""
        return self.stream_bytes(path, json.dumps(body, separators=(",", ":")).encode())

    def stream_bytes(self, path: str, data: bytes) -> RequestResult:
        """POST the JSON `data` to `path` with streaming and measure the response (in modelled
        seconds)."""
        return self._measure(path, data).modelled(self.clock)

    def _measure(self, path: str, data: bytes) -> RequestResult:
        from gevent import Timeout as GeventTimeout

        meter = StreamMeter(self.now())
        resp = None
        try:
            resp = self.http.request("POST", self.prefix + path, body=data, headers=self.headers)
            status = resp.status_code
            if status >= 400:
                text = resp.read().decode(errors="replace")
                return meter.fail(self.now(), "http_error", status, _error_message(text))
            while True:
                line = resp.readline(b"\n")
                now = self.now()
                if not line:
                    break
                meter.feed_line(line, now)
            return meter.finish(self.now(), status)
        except (TimeoutError, GeventTimeout) as exc:
            return meter.fail(self.now(), "timeout", 0, f"timeout: {exc}")
        except (OSError, ConnectionError) as exc:
            return meter.fail(self.now(), "connect_error", 0, f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            # geventhttpclient's parse errors and anything else a broken peer can cause.
            return meter.fail(self.now(), "connect_error", 0, f"{type(exc).__name__}: {exc}")
        finally:
            if resp is not None:
                _close_unfinished(resp)

    def close(self) -> None:
        """Close pooled connections."""
        self.http.close()


def _close_unfinished(resp: Any) -> None:
    # A response read to its end has already gone back to the pool. One abandoned midway must
    # not be pooled (the next request would read the rest of this body), so close its socket;
    # geventhttpclient has no public call for that, `release_socket` is what it uses itself.
    if getattr(resp, "message_complete", True):
        return
    pool, sock = getattr(resp, "_pool", None), getattr(resp, "_sock", None)
    if pool is not None and sock is not None:
        pool.release_socket(sock)
        resp._sock = resp._pool = None


def _error_message(text: str) -> str:
    try:
        err = json.loads(text).get("error", {})
        return str(err.get("message", err) if isinstance(err, dict) else err)[:200]
    except (ValueError, AttributeError):
        return text[:200]
