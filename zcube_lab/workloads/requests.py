"""Request plans: the seeded, pure expansion of a profile and an arrival process into requests.

`generate_requests(profile, arrival, duration, rate, seed)` returns `PlannedRequest`s sorted by
planned time. The same arguments give the same list on every machine and fabric: arrival times
and request shapes come from two `random.Random` streams derived from the seed, so changing the
rate or the arrival process changes *when* requests come, never *what* the i-th request is.

Prompts are described by block ids (Mooncake's `hash_ids`, `block_tokens` tokens each) and only
rendered into a body at send time (`request_body`): token `j` of a block is a fixed function of
the block id and `j`, so requests that share leading block ids share that exact prompt prefix
(a session's next step extends its previous prompt; trace requests share documents). Completions
prompts are token-id lists (one token per id); chat prompts are words (one token per word) plus
the 7 tokens of chat framing, under the counting rule of `zcube_lab/serving/textgen.py`.

Every request asks for exactly its planned output: `max_tokens == min_tokens`, `ignore_eos`.
"""

from __future__ import annotations

import functools
import json
import math
import random
from dataclasses import dataclass
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.workloads import arrivals, mooncake
from zcube_lab.workloads.arrivals import ArrivalSpec, Stage
from zcube_lab.workloads.profiles import CHAT_FRAMING_TOKENS, Profile

# Token ids stay below a typical 32K vocabulary; 0 is avoided (often a padding id).
VOCAB_SIZE = 32_000
# Plain lowercase words: each is exactly one `\w+` token under the documented counting rule.
WORDS: tuple[str, ...] = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "rail", "spine", "leaf", "cube",
)  # fmt: skip
# Block ids at or above this are request-unique padding (never shared).
UNIQUE_BLOCK_BASE = 1 << 40


@dataclass(frozen=True)
class PlannedRequest:
    """One request of a plan: when to send it (`t`, seconds from start) and what to ask."""

    index: int
    t: float
    prompt_tokens: int
    max_tokens: int
    model: str
    endpoint: str
    hash_ids: tuple[int, ...]
    block_tokens: int
    seed: int
    session: int | None = None
    step: int = 0
    ignore_eos: bool = True

    @property
    def min_tokens(self) -> int:
        """Equal to `max_tokens`, so the output length is exactly the planned one."""
        return self.max_tokens

    @property
    def path(self) -> str:
        """The OpenAI API path for this request's endpoint."""
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"


def generate_requests(
    profile: Profile,
    arrival: ArrivalSpec | str | None = None,
    duration: float = 60.0,
    rate: float | None = None,
    seed: int = 0,
    burstiness: float | None = None,
    stages: tuple[Stage, ...] = (),
) -> list[PlannedRequest]:
    """The request plan for `duration` seconds of `profile` under `arrival` (default: profile's)."""
    if profile.trace is not None:
        if arrival not in (None, "trace"):
            raise ConfigError("arrival", arrival, "trace (or nothing) for a trace profile")
        return _trace_requests(profile, duration, rate, seed)
    spec = resolve_arrival(profile, arrival, rate, burstiness, stages)
    # Separate streams: the i-th request's shape does not depend on the arrival process.
    times = arrivals.schedule(spec, duration, random.Random(f"{seed}:arrivals"))
    shapes = _synthetic_shapes(profile, len(times), random.Random(f"{seed}:shapes"))
    return [
        PlannedRequest(
            index=i,
            t=t,
            prompt_tokens=n_in,
            max_tokens=n_out,
            model=profile.model,
            endpoint=profile.endpoint,
            hash_ids=ids,
            block_tokens=block,
            seed=_request_seed(seed, i),
            session=session,
            step=step,
        )
        for i, (t, (n_in, n_out, ids, block, session, step)) in enumerate(
            zip(times, shapes, strict=True)
        )
    ]


def resolve_arrival(
    profile: Profile,
    arrival: ArrivalSpec | str | None,
    rate: float | None = None,
    burstiness: float | None = None,
    stages: tuple[Stage, ...] = (),
) -> ArrivalSpec:
    """The arrival spec a run uses: explicit spec, or a process name with overrides on defaults."""
    if isinstance(arrival, ArrivalSpec):
        return arrival
    base = profile.arrival
    return ArrivalSpec(
        process=arrival or base.process,
        rate=rate if rate is not None else base.rate,
        burstiness=burstiness if burstiness is not None else base.burstiness,
        stages=stages or base.stages,
    )


def _request_seed(seed: int, index: int) -> int:
    # The server draws output text from this seed, so outputs are reproducible too.
    return (seed * 1_000_003 + index) % (1 << 62)


Shape = tuple[int, int, tuple[int, ...], int, int | None, int]


@dataclass
class _Session:
    """A live multi-step session while a plan is being drawn (mutable, local to one call)."""

    ident: int
    steps_left: int
    context: int  # tokens the next step resends
    blocks: list[int]
    step: int


def _synthetic_shapes(profile: Profile, n: int, rng: random.Random) -> list[Shape]:
    """(prompt, output, block ids, block size, session, step) for `n` requests, in order."""
    prompt_d = profile.scaled_prompt()
    output_d = profile.scaled_output()
    block = max(1, round(mooncake.BLOCK_TOKENS * profile.length_scale))
    next_block = 0
    out: list[Shape] = []
    if profile.session is None:
        for _ in range(n):
            n_in, n_out = prompt_d.draw(rng), output_d.draw(rng)
            if profile.endpoint == "chat":
                n_in = max(n_in, CHAT_FRAMING_TOKENS + 1)
            blocks = math.ceil(n_in / block)
            out.append((n_in, n_out, tuple(range(next_block, next_block + blocks)), block, None, 0))
            next_block += blocks
        return out

    spec = profile.session
    append_d = spec.append.scaled(profile.length_scale)

    live: list[_Session] = []
    next_session = 0

    def new_session() -> _Session:
        nonlocal next_session
        steps = rng.randint(spec.steps_min, spec.steps_max)
        s = _Session(next_session, steps, prompt_d.draw(rng), [], 0)
        next_session += 1
        return s

    while len(out) < n:
        # Each arrival goes to one of `concurrent` live sessions, picked at random: a plan is
        # open-loop, so a step may be sent before the previous step's answer has arrived; its
        # prefix is still the previous step's prompt, which is what the prefix cache sees.
        while len(live) < spec.concurrent:
            live.append(new_session())
        k = rng.randrange(len(live))
        s = live[k]
        n_in = min(s.context, prompt_d.max)
        n_out = output_d.draw(rng)
        need = math.ceil(n_in / block)
        while len(s.blocks) < need:
            s.blocks.append(next_block)
            next_block += 1
        out.append((n_in, n_out, tuple(s.blocks[:need]), block, s.ident, s.step))
        s.step += 1
        s.steps_left -= 1
        # The next step resends everything plus this answer and new material (tool output).
        s.context = n_in + n_out + append_d.draw(rng)
        if s.steps_left == 0 or s.context > prompt_d.max:
            live.pop(k)
    return out


def _trace_requests(
    profile: Profile, duration: float, rate: float | None, seed: int
) -> list[PlannedRequest]:
    assert profile.trace is not None
    records = mooncake.load_trace(profile.trace)
    times = arrivals.rescale([r.timestamp / 1000.0 for r in records], rate, duration)
    scale = profile.length_scale
    block = max(1, round(mooncake.BLOCK_TOKENS * scale))
    out = []
    for i, (t, r) in enumerate(zip(times, records, strict=False)):
        n_in = max(1, round(r.input_length * scale))
        if profile.endpoint == "chat":
            n_in = max(n_in, CHAT_FRAMING_TOKENS + 1)
        need = math.ceil(n_in / block)
        # A trace may list fewer ids than blocks; the rest are unique to this request.
        ids = list(r.hash_ids[:need])
        ids += [UNIQUE_BLOCK_BASE + i * 4096 + k for k in range(need - len(ids))]
        out.append(
            PlannedRequest(
                index=i,
                t=t,
                prompt_tokens=n_in,
                max_tokens=max(1, round(r.output_length * scale)),
                model=profile.model,
                endpoint=profile.endpoint,
                hash_ids=tuple(ids),
                block_tokens=block,
                seed=_request_seed(seed, i),
            )
        )
    return out


# -- rendering ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _block_offsets(count: int) -> tuple[int, ...]:
    # The position part of `_block_values`, the same for every block of this length.
    return tuple(j * 40_503 + (j * j) % 7919 for j in range(count))


def _block_values(block_id: int, count: int, modulus: int) -> list[int]:
    # A cheap fixed mixing of (block id, position): identical ids give identical content.
    base = (block_id * 2_654_435_761) % modulus
    return [(base + off) % modulus for off in _block_offsets(count)]


def prompt_token_ids(req: PlannedRequest) -> list[int]:
    """The prompt as token ids: exactly `prompt_tokens` ids, block by block."""
    ids: list[int] = []
    left = req.prompt_tokens
    for h in req.hash_ids:
        take = min(left, req.block_tokens)
        ids.extend(1 + v for v in _block_values(h, take, VOCAB_SIZE - 1))
        left -= take
        if left == 0:
            break
    return ids


def prompt_words(req: PlannedRequest, count: int) -> str:
    """`count` words drawn block by block like `prompt_token_ids`, joined by spaces."""
    words: list[str] = []
    for h in req.hash_ids:
        take = min(count - len(words), req.block_tokens)
        words.extend(WORDS[v] for v in _block_values(h, take, len(WORDS)))
        if len(words) >= count:
            break
    return " ".join(words)


@functools.lru_cache(maxsize=4096)
def _block_json(block_id: int, count: int) -> str:
    # Sessions resend all their earlier blocks every step: caching each block's JSON text
    # makes encoding a 50K-token prompt a join instead of 50K integer conversions. That time
    # matters: all greenlets share one thread, so encoding delays other requests' timestamps.
    return ",".join([str(1 + v) for v in _block_values(block_id, count, VOCAB_SIZE - 1)])


def encode_request(req: PlannedRequest, stream: bool = True) -> bytes:
    """`request_body(req)` as compact JSON bytes, completions prompts from cached blocks."""
    if req.endpoint == "chat":
        return json.dumps(request_body(req, stream), separators=(",", ":")).encode()
    head = json.dumps(_body_fields(req, stream), separators=(",", ":"))
    parts = []
    left = req.prompt_tokens
    for h in req.hash_ids:
        take = min(left, req.block_tokens)
        parts.append(_block_json(h, take))
        left -= take
        if left == 0:
            break
    return (head[:-1] + ',"prompt":[' + ",".join(parts) + "]}").encode()


def _body_fields(req: PlannedRequest, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": req.model,
        "max_tokens": req.max_tokens,
        "min_tokens": req.min_tokens,
        "ignore_eos": req.ignore_eos,
        "temperature": 0.0,
        "seed": req.seed,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def request_body(req: PlannedRequest, stream: bool = True) -> dict[str, Any]:
    """The OpenAI JSON body for `req`: exact prompt size, exact output size, usage in-stream."""
    body = _body_fields(req, stream)
    if req.endpoint == "chat":
        words = prompt_words(req, req.prompt_tokens - CHAT_FRAMING_TOKENS)
        body["messages"] = [{"role": "user", "content": words}]
    else:
        body["prompt"] = prompt_token_ids(req)
    return body
