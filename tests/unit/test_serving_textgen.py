"""The prompt-token counting rule and seeded synthetic output."""

from __future__ import annotations

import random

from zcube_lab.serving.textgen import (
    StopStrings,
    count_chat_tokens,
    count_prompt_tokens,
    output_text,
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


def _run(stops: StopStrings, pieces: list[str]) -> tuple[list[str], str | None, int]:
    """Feed `pieces` as the engine does: the sent chunks, the stop hit, tokens consumed."""
    sent: list[str] = []
    for i, piece in enumerate(pieces):
        text, hit = stops.feed(piece)
        if hit is not None:
            return [*sent, text], hit, i + 1
        sent.append(text)
    sent[-1] += stops.rest()
    return sent, None, len(pieces)


PIECES = [" the", " fabric", " carries", " tokens", " between", " prefill"]


def test_a_stop_string_across_tokens_ends_the_text_before_it_and_is_never_sent() -> None:
    sent, hit, used = _run(StopStrings(("ies tok",)), PIECES)
    assert (hit, used) == ("ies tok", 4)
    assert "".join(sent) == " the fabric carr"
    # " carries" ends with "ies", which may start the stop string: held back, then cut.
    assert sent == [" the", " fabric", " carr", ""]


def test_include_stop_str_in_output_ends_right_after_it_and_drops_the_rest_of_the_token() -> None:
    sent, hit, used = _run(StopStrings(("arri",), include=True), PIECES)
    assert ("".join(sent), hit, used) == (" the fabric carri", "arri", 3)
    assert sent == [" the", " fabric", " carri"]  # nothing held back: it is sent anyway


def test_held_text_is_released_when_no_stop_string_follows() -> None:
    sent, hit, _ = _run(StopStrings(("the end", "tokens x")), PIECES)
    assert hit is None and "".join(sent) == "".join(PIECES)
    # " the" could start "the end" and " tokens" "tokens x": both held for one token.
    assert sent == [" ", "the fabric", " carries", " ", "tokens between", " prefill"]
    # A partial match still held at the last token is sent with it (`rest`).
    sent, hit, _ = _run(StopStrings(("prefill now",)), PIECES)
    assert hit is None and sent[-1] == " prefill"


def test_the_stop_string_that_starts_first_wins_and_min_tokens_delays_the_check() -> None:
    sent, hit, used = _run(StopStrings(("carries", "fabric car")), PIECES)
    assert (hit, "".join(sent), used) == ("fabric car", " the ", 3)
    # Not looked for within the first `min_tokens` tokens (vLLM's rule): the later one ends it.
    sent, hit, used = _run(StopStrings(("the", "between"), min_tokens=2), PIECES)
    assert (hit, "".join(sent), used) == ("between", " the fabric carries tokens ", 5)


def test_a_stop_word_the_generator_emits_cuts_its_text_where_it_first_occurs() -> None:
    rng = request_rng(11, 0, "")
    pieces = output_text(rng, plan_output(rng, 40, 0, True, 0.0))
    full = "".join(pieces)
    word = pieces[7].strip()
    sent, hit, used = _run(StopStrings((word,)), pieces)
    assert hit == word and "".join(sent) == full[: full.index(word)]
    assert word not in "".join(sent) and used <= 8
