"""The gateway's per-request log: the exact timings of every request as the gateway saw it.

One JSON line per request the gateway answered (errors and refusals included), flushed at once:

    {"request_id": "9f1c...", "route": "/v1/completions", "stream": true, "status": 200,
     "arrival": 1718000000.12, "first_token": 1718000000.61, "end": 1718000000.93,
     "ttft_s": 0.49, "e2e_s": 0.81, "prompt_tokens": 20412, "output_tokens": 24}

`arrival` is when the gateway began reading the request, `first_token` when the first byte of
decode's body reached the gateway (streaming: the first token's chunk; non-streaming: the whole
answer, as `zcube:gateway_time_to_first_token_seconds`), `end` when the answer was written; all
wall-clock seconds (`time.time()` at arrival plus monotonic durations, so differences are
exact). `ttft_s = first_token - arrival`, `e2e_s = end - arrival`. `first_token` and `ttft_s`
are null when no token came (an error status, or a stream that carried only an error event);
`prompt_tokens` is null when the request did not parse.
`output_tokens` counts streamed token chunks (or `usage.completion_tokens` of a JSON answer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TextIO

# Every token chunk of decode's stream carries this key once; usage and error chunks do not.
TOKEN_MARK = b'"finish_reason":'


@dataclass
class TokenCounter:
    """Counts token chunks in an SSE byte stream relayed in arbitrary pieces."""

    count: int = 0
    _tail: bytes = b""

    def feed(self, data: bytes) -> None:
        """Count the token marks completed by `data` (a mark may straddle two pieces)."""
        joined = self._tail + data
        self.count += joined.count(TOKEN_MARK)
        self._tail = joined[-(len(TOKEN_MARK) - 1) :]


def completion_tokens(body: bytes) -> int:
    """`usage.completion_tokens` of a JSON answer, or 0."""
    try:
        usage = json.loads(body).get("usage") or {}
        return int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return 0


@dataclass
class RequestTiming:
    """What the gateway saw of one request; times on the event loop's monotonic clock except
    `arrival_wall`."""

    route: str
    arrival_wall: float
    arrival: float
    request_id: str = ""
    stream: bool = False
    prompt_tokens: int | None = None
    first_token: float | None = None
    tokens: TokenCounter | None = None
    output_tokens: int = 0

    def record(self, status: int, end: float) -> dict[str, Any]:
        """The log line's fields (see the module docstring)."""
        wall = self.arrival_wall
        no_token = self.tokens is not None and self.tokens.count == 0  # e.g. an error event
        ttft = None if self.first_token is None or no_token else self.first_token - self.arrival
        return {
            "request_id": self.request_id,
            "route": self.route,
            "stream": self.stream,
            "status": status,
            "arrival": wall,
            "first_token": None if ttft is None else wall + ttft,
            "end": wall + (end - self.arrival),
            "ttft_s": ttft,
            "e2e_s": end - self.arrival,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.tokens.count if self.tokens is not None else self.output_tokens,
        }


def write_record(log: TextIO, record: dict[str, Any]) -> None:
    """Append one JSON line and flush it."""
    log.write(json.dumps(record) + "\n")
    log.flush()
