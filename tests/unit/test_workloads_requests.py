"""Request plans: deterministic per seed, exact prompt and output sizes, shared prefixes."""

from __future__ import annotations

import itertools
import json
import re
import statistics

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.workloads.arrivals import ArrivalSpec, Stage
from zcube_lab.workloads.profiles import load_profile
from zcube_lab.workloads.requests import (
    encode_request,
    generate_requests,
    prompt_token_ids,
    request_body,
)

# The counting rule of zcube_lab/serving/textgen.py, restated so this test does not depend on
# zcube_lab/serving/.
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


@pytest.mark.parametrize("name", ["coding-agent", "chat", "rail-aligned", "trace"])
def test_same_seed_same_plan_different_seed_different(name: str) -> None:
    p = load_profile(name, length_scale=0.05)
    a = generate_requests(p, None, 30.0, None, 42)
    b = generate_requests(p, None, 30.0, None, 42)
    c = generate_requests(p, None, 30.0, None, 43)
    assert a == b
    assert [request_body(r) for r in a[:5]] == [request_body(r) for r in b[:5]]
    assert a != c


def test_request_shapes_do_not_depend_on_the_arrival_process() -> None:
    p = load_profile("chat", length_scale=0.1)
    poisson = generate_requests(p, "poisson", 20.0, 5.0, 1)
    fixed = generate_requests(p, "fixed", 20.0, 5.0, 1)
    n = min(len(poisson), len(fixed))
    shape = [(r.prompt_tokens, r.max_tokens, r.hash_ids) for r in poisson[:n]]
    assert shape == [(r.prompt_tokens, r.max_tokens, r.hash_ids) for r in fixed[:n]]
    assert [r.t for r in fixed] == [i / 5.0 for i in range(100)]


def test_rate_and_arrival_overrides() -> None:
    p = load_profile("chat")
    plan = generate_requests(p, "gamma", 100.0, rate=20.0, seed=3, burstiness=0.5)
    assert abs(len(plan) / 100.0 - 20.0) < 3.0
    staged = generate_requests(
        p, ArrivalSpec("staged", stages=(Stage(2, 10), Stage(2, 30)), stage_process="fixed"), 4.0
    )
    assert len(staged) == 80


def test_outputs_are_exact_and_prompts_have_the_planned_size() -> None:
    for name in ("coding-agent", "trace"):
        plan = generate_requests(load_profile(name, length_scale=0.02), None, 60.0, None, 5)
        for r in plan[:50]:
            body = request_body(r)
            assert body["max_tokens"] == body["min_tokens"] == r.max_tokens
            assert body["ignore_eos"] is True and body["stream"] is True
            assert body["stream_options"] == {"include_usage": True}
            assert len(body["prompt"]) == r.prompt_tokens
            assert all(isinstance(t, int) and t > 0 for t in body["prompt"])
            assert r.path == "/v1/completions"


def test_chat_prompts_count_exactly_under_the_documented_rule() -> None:
    plan = generate_requests(load_profile("chat", length_scale=0.2), None, 10.0, None, 9)
    for r in plan:
        body = request_body(r)
        (msg,) = body["messages"]
        # 4 tokens per message + content + 3 priming the reply.
        assert 4 + len(_TOKEN_RE.findall(msg["content"])) + 3 == r.prompt_tokens
        assert r.path == "/v1/chat/completions"


def test_full_scale_shapes() -> None:
    agent = generate_requests(load_profile("coding-agent"), None, 120.0, None, 1)
    prompts = [r.prompt_tokens for r in agent]
    outputs = [r.max_tokens for r in agent]
    assert statistics.median(prompts) > 10_000
    assert sum(o < 50 for o in outputs) / len(outputs) > 0.75
    chat = generate_requests(load_profile("chat"), None, 120.0, None, 1)
    assert 100 < statistics.median(r.prompt_tokens for r in chat) < 1000
    assert 100 < statistics.median(r.max_tokens for r in chat) < 1000


def test_session_steps_grow_and_share_the_previous_prompt_as_prefix() -> None:
    plan = generate_requests(load_profile("coding-agent", length_scale=0.05), None, 120.0, None, 2)
    sessions: dict[int, list] = {}
    for r in plan:
        assert r.session is not None
        sessions.setdefault(r.session, []).append(r)
    multi = [s for s in sessions.values() if len(s) > 2]
    assert multi
    for steps in multi:
        assert [r.step for r in steps] == list(range(len(steps)))
        for prev, nxt in itertools.pairwise(steps):
            assert nxt.prompt_tokens > prev.prompt_tokens
            a, b = prompt_token_ids(prev), prompt_token_ids(nxt)
            assert b[: len(a)] == a
    # Different sessions start from different content.
    firsts = [s[0] for s in sessions.values()]
    assert prompt_token_ids(firsts[0])[:20] != prompt_token_ids(firsts[1])[:20]


def test_trace_replay_keeps_times_lengths_and_shared_blocks() -> None:
    p = load_profile("trace")
    plan = generate_requests(p, None, 1e9, None, 0)
    assert len(plan) == 240
    assert plan[0].t == 0.0
    faster = generate_requests(p, "trace", 1e9, rate=40.0, seed=0)
    span = faster[-1].t
    assert len(faster) / span == pytest.approx(40.0)
    assert [r.prompt_tokens for r in faster] == [r.prompt_tokens for r in plan]
    cut = generate_requests(p, None, 10.0, None, 0)
    assert cut and max(r.t for r in cut) < 10.0 and len(cut) < 240
    # Two requests that list the same leading block id start with the same tokens.
    by_first: dict[int, list] = {}
    for r in plan:
        by_first.setdefault(r.hash_ids[0], []).append(r)
    pair = next(v for v in by_first.values() if len(v) > 1)
    n = min(pair[0].prompt_tokens, pair[1].prompt_tokens, pair[0].block_tokens)
    assert prompt_token_ids(pair[0])[:n] == prompt_token_ids(pair[1])[:n]
    with pytest.raises(ConfigError) as e:
        generate_requests(p, "poisson", 10.0, 1.0, 0)
    assert e.value.field == "arrival"


def test_length_scale_shrinks_everything() -> None:
    small = generate_requests(load_profile("trace", length_scale=0.01), None, 1e9, None, 0)
    full = generate_requests(load_profile("trace"), None, 1e9, None, 0)
    assert max(r.prompt_tokens for r in small) <= max(r.prompt_tokens for r in full) // 50
    assert all(r.max_tokens >= 1 and r.prompt_tokens >= 1 for r in small)


@pytest.mark.parametrize("name", ["coding-agent", "chat", "trace"])
def test_encoded_bytes_are_the_body(name: str) -> None:
    plan = generate_requests(load_profile(name, length_scale=0.1), None, 20.0, None, 8)
    for r in plan[:30]:
        assert json.loads(encode_request(r)) == request_body(r)
        assert json.loads(encode_request(r, stream=False)) == request_body(r, stream=False)
