"""The gateway fuzz at length (issue 12): N fuzzed requests through a gateway in front of real
prefill and decode apps; counts 5xx replies, malformed errors, hangs and dropped connections.

The property, the request strategies and the app factories are the unit fuzz's
(tests/fuzz_requests.py); here hypothesis draws `--cases` of them (seeded, no shrinking: a bad
reply is counted, not raised) and each is POSTed on a kept-alive connection. A hang is a reply
that does not start, or stops, for `--timeout` seconds (the socket's read timeout; the longest
honest reply, 8,192 tokens of the tiny profile, streams or returns within about 20 s). A reply
whose connection drops is counted apart. Prints one summary line and writes
bench/results/fuzz_gateway.json (`FuzzResult`). CPU-bound: run it niced.

    nice -n 19 .venv/bin/python -m bench.fuzz_gateway --cases 10000
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz_requests import (
    GATEWAY_CASES,
    MALFORMED_ERROR,
    PATHS,
    SERVER_ERROR,
    AppFactory,
    engine,
    gateway,
    post,
    reply_problem,
)
from tests.serving_fixtures import threaded_apps

ROOT = Path(__file__).resolve().parents[1]

RESULTS_PATH = ROOT / "bench" / "results" / "fuzz_gateway.json"
# Bad cases kept in the result, per kind, to reproduce them by hand.
KEEP_EXAMPLES = 5


@dataclass
class FuzzResult:
    """What one fuzz run saw: counts by outcome, by request shape, path and status."""

    cases: int = 0
    server_errors: int = 0
    malformed_errors: int = 0
    hangs: int = 0
    disconnects: int = 0
    streamed: int = 0
    shapes: dict[str, int] = field(default_factory=dict)
    paths: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    slowest_s: float = 0.0
    wall_s: float = 0.0
    timeout_s: float = 0.0
    seed: int = 0
    measured_at: str = ""
    examples: list[dict[str, str]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when no reply was a 5xx, a malformed error, a hang or a dropped connection."""
        return not (self.server_errors or self.malformed_errors or self.hangs or self.disconnects)

    def to_json(self) -> str:
        """The result as JSON text (read back with `from_json`)."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> FuzzResult:
        """A result written by `to_json`."""
        return cls(**json.loads(text))

    def summary(self) -> str:
        """One line: cases, failures by kind, time."""
        return (
            f"fuzz_gateway: {self.cases} cases in {self.wall_s:.0f} s: "
            f"{self.server_errors} 5xx, {self.malformed_errors} malformed errors, "
            f"{self.hangs} hangs, {self.disconnects} dropped connections; "
            f"statuses {_counts(self.statuses)}; shapes {_counts(self.shapes)}; "
            f"{self.streamed} streamed; slowest {self.slowest_s:.2f} s"
        )


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items()))


class Tally:
    """Sends cases on one connection (reopened after a hang or a drop) and counts outcomes."""

    def __init__(self, url: str, timeout_s: float, result: FuzzResult) -> None:
        self.url = urlsplit(url)
        self.timeout_s = timeout_s
        self.result = result
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=self.timeout_s)

    def _bad(self, kind: str, path: str, shape: str, body: bytes, detail: str) -> None:
        if sum(e["kind"] == kind for e in self.result.examples) < KEEP_EXAMPLES:
            self.result.examples.append(
                {
                    "kind": kind,
                    "path": path,
                    "shape": shape,
                    "body": body[:300].decode("latin-1"),
                    "detail": detail[:300],
                }
            )

    def send(self, shape: str, body: bytes, path: str) -> None:
        """POST one case and count what came back."""
        r = self.result
        r.cases += 1
        r.shapes[shape] = r.shapes.get(shape, 0) + 1
        r.paths[path] = r.paths.get(path, 0) + 1
        start = time.perf_counter()
        try:
            resp = post(self.conn, path, body)
            reply = resp.read()
        except TimeoutError:
            r.hangs += 1
            self._bad("hang", path, shape, body, f"no byte for {self.timeout_s} s")
            self.conn.close()
            self.conn = self._connect()
            return
        except (http.client.HTTPException, ConnectionError) as exc:
            r.disconnects += 1
            self._bad("disconnect", path, shape, body, repr(exc))
            self.conn.close()
            self.conn = self._connect()
            return
        finally:
            r.slowest_s = max(r.slowest_s, time.perf_counter() - start)
        status = str(resp.status)
        r.statuses[status] = r.statuses.get(status, 0) + 1
        if resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event"):
            r.streamed += 1
        problem = reply_problem(resp.status, reply)
        if problem == SERVER_ERROR:
            r.server_errors += 1
        elif problem == MALFORMED_ERROR:
            r.malformed_errors += 1
        if problem is not None:
            self._bad(problem, path, shape, body, f"{status} {reply[:200]!r}")

    def close(self) -> None:
        self.conn.close()


def run(
    cases: int,
    timeout_s: float,
    seed: int,
    backends: Sequence[AppFactory] = (engine("prefill"), engine("decode")),
) -> FuzzResult:
    """Fuzz a gateway in front of `backends` (prefill, decode) with `cases` requests."""
    result = FuzzResult(timeout_s=timeout_s, seed=seed)
    result.measured_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    with threaded_apps(*backends, gateway) as urls:
        tally = Tally(urls[-1], timeout_s, result)

        @settings(
            max_examples=cases,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @hypothesis.seed(seed)
        @given(case=GATEWAY_CASES, path=st.sampled_from(PATHS))
        def one(case: tuple[str, bytes], path: str) -> None:
            tally.send(case[0], case[1], path)

        try:
            one()
        finally:
            tally.close()
    result.wall_s = round(time.perf_counter() - start, 1)
    result.slowest_s = round(result.slowest_s, 3)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fuzz, print the summary line, write the result; 1 if any case failed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=10_000)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds without a byte: a hang")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS_PATH)
    args = p.parse_args(argv)
    result = run(args.cases, args.timeout, args.seed)
    print(result.summary())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(result.to_json())
    return 0 if result.clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
