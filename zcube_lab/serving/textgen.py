"""Prompt-token counting and seeded synthetic output text.

Counting rule (documented in docs/SERVING.md, used by every role so usage is exact):
- a string prompt counts one token per word (`\\w+`) and one per other non-space character;
- a list of integers counts one token per integer (they are token ids);
- a chat request counts, per message, 4 tokens of framing plus its content's tokens, plus 3
  tokens that prime the assistant's reply (OpenAI's published chat accounting).

Output text is one word per token drawn from a fixed vocabulary by a `random.Random` that the
caller seeds (from the request's `seed`, or from the server seed and the request id).
`StopStrings` ends that text where it would contain one of the request's stop strings, as
vLLM's detokenizer does, and holds back what may be the start of one while streaming.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

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


def output_text(rng: random.Random, plan: OutputPlan) -> list[str]:
    """Every output token's text for `plan`, in order (what the engine streams without stops)."""
    return [token_text(rng, i, plan) for i in range(plan.num_tokens)]


@dataclass
class StopStrings:
    """One request's stop strings over its output, fed one token's text at a time.

    As vLLM: a stop string is looked for only once more than `min_tokens` tokens are out and
    only where it ends in the newest token's text (it may start in earlier tokens); the output
    ends at it, without it unless `include` (then it ends right after it), and whatever the
    same token carried after it is dropped. Where two stop strings end in the same token, the
    one that starts first wins, so the text sent never contains any of them. While streaming,
    the longest tail that is the start of a stop string is held back (never with `include`,
    where the stop string is sent anyway) and sent as soon as it is not, or at the end.
    """

    stops: tuple[str, ...]
    include: bool = False
    min_tokens: int = 0
    _text: str = field(default="", repr=False)
    _sent: int = 0
    _tokens: int = 0

    def feed(self, piece: str) -> tuple[str, str | None]:
        """The text that can be sent after one more token (`piece`), and the stop string the
        token completed (None: generation goes on)."""
        start = len(self._text)
        self._text += piece
        self._tokens += 1
        if piece and self._tokens > self.min_tokens:
            hit = self._find(start)
            if hit is not None:
                stop, at = hit
                return self._send(at + len(stop) if self.include else at), stop
        return self._send(len(self._text) - self._held()), None

    def rest(self) -> str:
        """What is still held back, to be sent when generation ends without a stop string."""
        return self._send(len(self._text))

    def _send(self, end: int) -> str:
        out = self._text[self._sent : end]
        self._sent = max(self._sent, end)
        return out

    def _find(self, start: int) -> tuple[str, int] | None:
        """The first stop string (by where it starts) that ends after `start`."""
        best: tuple[str, int] | None = None
        for stop in self.stops:
            at = self._text.find(stop, max(0, start - len(stop) + 1))
            if at >= 0 and (best is None or at < best[1]):
                best = (stop, at)
        return best

    def _held(self) -> int:
        """Length of the longest unsent tail that is a proper start of some stop string."""
        if self.include:
            return 0
        tail = self._text[self._sent :]
        longest = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(tail)), longest, -1):
                if tail.endswith(stop[:n]):
                    longest = n
                    break
        return longest
