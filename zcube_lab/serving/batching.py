"""Pure scheduling decisions for the engines: which prompt tokens go into a prefill step, and
which waiting sequences join the running decode batch. No clock, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class PrefillJob:
    """A prompt being prefilled, possibly over several steps (chunked prefill)."""

    request_id: str
    prompt_tokens: int
    done_tokens: int = 0
    cached_tokens: int = 0  # served from the prefix cache: no compute, but their KV still moves

    @property
    def remaining(self) -> int:
        """Prompt tokens not yet computed."""
        return self.prompt_tokens - self.cached_tokens - self.done_tokens


def plan_prefill_step(
    jobs: Sequence[PrefillJob], token_budget: int
) -> list[tuple[PrefillJob, int]]:
    """First come first served: fill the step's token budget, chunking the last prompt."""
    plan: list[tuple[PrefillJob, int]] = []
    left = token_budget
    for job in jobs:
        if left <= 0:
            break
        n = min(job.remaining, left)
        if n > 0:
            plan.append((job, n))
            left -= n
    return plan


def admit_count(
    needs: Sequence[int], running: int, seq_limit: int, kv_used: int, kv_capacity: int
) -> int:
    """How many of the waiting sequences (KV tokens each needs, in order) may start now."""
    admitted = 0
    for need in needs:
        if running + admitted >= seq_limit or kv_used + need > kv_capacity:
            break
        kv_used += need
        admitted += 1
    return admitted
