"""Prompt-token counting and seeded synthetic output text.

Counting rule (documented in docs/SERVING.md, used by every role so usage is exact):
- a string prompt counts one token per word (`\\w+`) and one per other non-space character;
- a list of integers counts one token per integer (they are token ids);
- a chat request counts, per message, 4 tokens of framing plus its content's tokens, plus 3
  tokens that prime the assistant's reply (OpenAI's published chat accounting).

Output text is one word per token drawn from a fixed vocabulary by a `random.Random` that the
caller seeds (from the request's `seed`, or from the server seed and the request id).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_REPLY_PRIMING = 3

VOCABULARY: tuple[str, ...] = (
    "the", "fabric", "carries", "tokens", "between", "prefill", "and", "decode", "while",
    "switches", "forward", "packets", "over", "two", "ports", "of", "each", "NIC", "a",
    "cache", "moves", "quickly", "when", "paths", "are", "disjoint", "so", "latency", "stays",
    "low", "expert", "layers", "exchange", "hidden", "states", "in", "every", "step", "model",
    "serves", "code", "requests", "with", "long", "contexts", "short", "answers", "ring",
    "cube", "group", "spine", "leaf", "rail", "link", "queue", "batch", "stream", "byte",
)  # fmt: skip


def count_text_tokens(text: str) -> int:
    """Tokens in a string under the documented rule (words and punctuation marks)."""
    return len(_TOKEN_RE.findall(text))


def count_prompt_tokens(prompt: str | Sequence[int]) -> int:
    """Tokens in a completions prompt: a string, or a list of token ids."""
    if isinstance(prompt, str):
        return count_text_tokens(prompt)
    return len(prompt)


def count_chat_tokens(contents: Sequence[str]) -> int:
    """Tokens in a chat prompt given each message's text content."""
    return (
        sum(CHAT_TOKENS_PER_MESSAGE + count_text_tokens(c) for c in contents)
        + CHAT_TOKENS_REPLY_PRIMING
    )


@dataclass(frozen=True)
class OutputPlan:
    """How many tokens a request will generate and why it stops (`length` or `stop`)."""

    num_tokens: int
    finish_reason: str


def plan_output(
    rng: random.Random,
    max_tokens: int,
    min_tokens: int,
    ignore_eos: bool,
    eos_probability: float,
) -> OutputPlan:
    """Draw the output length: EOS may end it after `min_tokens`, unless `ignore_eos`."""
    if ignore_eos or eos_probability <= 0.0 or min_tokens >= max_tokens:
        return OutputPlan(max_tokens, "length")
    # Geometric number of tokens before the EOS token; the EOS token itself is generated and
    # counted (as vLLM counts it) but carries no text.
    u = 1.0 - rng.random()  # in (0, 1]
    extra = math.floor(math.log(u) / math.log1p(-eos_probability)) if eos_probability < 1 else 0
    n = max(min_tokens, 1) + extra
    if n >= max_tokens:
        return OutputPlan(max_tokens, "length")
    return OutputPlan(n, "stop")


def token_text(rng: random.Random, index: int, plan: OutputPlan) -> str:
    """Text of output token `index` (0-based); an EOS-stopped plan's last token is empty."""
    word = " " + rng.choice(VOCABULARY)
    if plan.finish_reason == "stop" and index == plan.num_tokens - 1:
        return ""
    return word


def request_rng(seed: int | None, server_seed: int, request_id: str) -> random.Random:
    """The generator for one request: the request's own seed wins, else server seed + id."""
    if seed is not None:
        return random.Random(seed)
    return random.Random(f"{server_seed}:{request_id}")
