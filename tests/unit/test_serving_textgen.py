"""The prompt-token counting rule and seeded synthetic output."""

from __future__ import annotations

import random

from serving.textgen import (
    count_chat_tokens,
    count_prompt_tokens,
    plan_output,
    request_rng,
    token_text,
)


def test_counting_rule_words_and_punctuation() -> None:
    assert count_prompt_tokens("Hello, world!") == 4
    assert count_prompt_tokens("  ") == 0
    assert count_prompt_tokens("a b c") == 3
    assert count_prompt_tokens([1, 2, 3, 4, 5]) == 5


def test_chat_counting_adds_framing() -> None:
    # 2 messages x 4 framing + 3 priming + (1 + 2) content tokens
    assert count_chat_tokens(["hi", "hello there"]) == 2 * 4 + 3 + 3


def test_ignore_eos_generates_exactly_max_tokens() -> None:
    plan = plan_output(random.Random(1), 37, 0, True, 0.5)
    assert (plan.num_tokens, plan.finish_reason) == (37, "length")


def test_eos_respects_min_tokens_and_max_tokens() -> None:
    for seed in range(200):
        plan = plan_output(random.Random(seed), 20, 5, False, 0.3)
        assert 5 <= plan.num_tokens <= 20
        assert plan.finish_reason == ("length" if plan.num_tokens == 20 else "stop")


def test_same_seed_same_text_different_seed_different_text() -> None:
    def text(rng: random.Random) -> str:
        plan = plan_output(rng, 30, 0, True, 0.0)
        return "".join(token_text(rng, i, plan) for i in range(plan.num_tokens))

    assert text(request_rng(7, 0, "a")) == text(request_rng(7, 0, "b"))
    assert text(request_rng(None, 0, "a")) == text(request_rng(None, 0, "a"))
    assert text(request_rng(None, 0, "a")) != text(request_rng(None, 0, "b"))
