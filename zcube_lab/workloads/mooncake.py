"""Mooncake trace format: parsing, validation and a seeded synthetic-trace generator.

A trace is JSON Lines, one request per line, as published with Mooncake (FAST '25):
`{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [ints]}`.
`timestamp` is the arrival time in milliseconds from the trace start; each hash id names one
block of `BLOCK_TOKENS` prompt tokens, so two requests that share leading hash ids share that
prompt prefix (what a prefix cache, or a KV store, can reuse).

Regenerate the shipped trace with
`python -m zcube_lab.workloads.mooncake --seed 7 --out
zcube_lab/workloads/traces/synthetic-mooncake.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zcube_lab.core.errors import ConfigError

# Mooncake's traces hash prompts in blocks of 512 tokens.
BLOCK_TOKENS = 512
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


@dataclass(frozen=True)
class TraceRecord:
    """One request of a trace: arrival (ms), prompt and output lengths, prefix block ids."""

    timestamp: int
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def parse_record(obj: object, where: str) -> TraceRecord:
    """A validated record from one decoded JSON line; `where` prefixes the field in errors."""
    if not isinstance(obj, dict):
        raise ConfigError(where, obj, "a JSON object with " + ", ".join(FIELDS))
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", obj[unknown[0]], "keys " + ", ".join(FIELDS))
    for key in FIELDS:
        if key not in obj:
            raise ConfigError(f"{where}.{key}", None, "a required field")
    ts = obj["timestamp"]
    if not _is_int(ts) or ts < 0:
        raise ConfigError(f"{where}.timestamp", ts, "an integer number of ms >= 0")
    for key in ("input_length", "output_length"):
        if not _is_int(obj[key]) or obj[key] < 1:
            raise ConfigError(f"{where}.{key}", obj[key], "an integer number of tokens >= 1")
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not all(_is_int(h) and h >= 0 for h in ids):
        raise ConfigError(f"{where}.hash_ids", ids, "a list of integers >= 0")
    most = math.ceil(obj["input_length"] / BLOCK_TOKENS)
    if len(ids) > most:
        raise ConfigError(
            f"{where}.hash_ids", f"{len(ids)} ids", f"at most {most} ({BLOCK_TOKENS}-token blocks)"
        )
    return TraceRecord(ts, obj["input_length"], obj["output_length"], tuple(ids))


def parse_trace(lines: Iterable[str], source: str = "trace") -> list[TraceRecord]:
    """Records from JSONL text lines (blank lines skipped), sorted by timestamp."""
    records = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(where, line.strip()[:80], f"a JSON object ({exc.msg})") from None
        records.append(parse_record(obj, where))
    if not records:
        raise ConfigError(source, "empty", "at least one trace record")
    return sorted(records, key=lambda r: r.timestamp)


def load_trace(path: Path) -> list[TraceRecord]:
    """Records of the JSONL trace at `path`."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("trace", str(path), f"a readable JSONL file ({exc.strerror})") from None
    return parse_trace(text.splitlines(), source=path.name)


def dumps(records: Sequence[TraceRecord]) -> str:
    """JSONL text of `records`, keys in Mooncake's order."""
    return "".join(
        json.dumps(
            {
                "timestamp": r.timestamp,
                "input_length": r.input_length,
                "output_length": r.output_length,
                "hash_ids": list(r.hash_ids),
            }
        )
        + "\n"
        for r in records
    )


def synthesize(
    rng: random.Random,
    n: int = 240,
    rate: float = 4.0,
    prefixes: int = 12,
    input_median: float = 6000.0,
    output_median: float = 120.0,
) -> list[TraceRecord]:
    """A Mooncake-shaped trace: Poisson arrivals, lognormal lengths, shared prefix blocks.

    Each request picks one of `prefixes` shared documents (Zipf-like popularity, as a few system
    prompts and repositories dominate real traffic) and reuses a leading part of its blocks; the
    rest of its blocks are fresh, so prefix-cache hit rates come out in the tens of percent.
    """
    weights = [1.0 / (k + 1) for k in range(prefixes)]
    # Each shared document owns a disjoint range of block ids; fresh blocks come after them all.
    doc_blocks = 64
    next_fresh = prefixes * doc_blocks
    t = 0.0
    out = []
    for _ in range(n):
        t += rng.expovariate(rate)
        inp = max(1, min(60_000, round(rng.lognormvariate(math.log(input_median), 0.7))))
        outp = max(1, min(2000, round(rng.lognormvariate(math.log(output_median), 0.8))))
        blocks = math.ceil(inp / BLOCK_TOKENS)
        doc = rng.choices(range(prefixes), weights)[0]
        shared = min(blocks, doc_blocks, rng.randint(0, blocks))
        ids = [doc * doc_blocks + b for b in range(shared)]
        ids += range(next_fresh, next_fresh + blocks - shared)
        next_fresh += blocks - shared
        out.append(TraceRecord(round(t * 1000), inp, outp, tuple(ids)))
    return out


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def main(argv: Sequence[str] | None = None) -> int:
    """Write a synthetic trace (the shipped one is `--seed 7` with the defaults)."""
    p = argparse.ArgumentParser(
        prog="python -m zcube_lab.workloads.mooncake", description=main.__doc__
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--requests", type=int, default=240)
    p.add_argument("--rate", type=float, default=4.0, help="mean requests/s")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    records = synthesize(random.Random(args.seed), n=args.requests, rate=args.rate)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dumps(records))
    print(f"wrote {len(records)} records to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
