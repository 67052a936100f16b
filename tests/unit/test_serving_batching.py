"""Pure schedulers: prefill token budget with chunking, decode admission."""

from __future__ import annotations

from zcube_lab.serving.batching import PrefillJob, admit_count, plan_prefill_step


def test_prefill_fills_budget_and_chunks_last_prompt() -> None:
    jobs = [PrefillJob("a", 3000), PrefillJob("b", 6000), PrefillJob("c", 10)]
    plan = plan_prefill_step(jobs, 8192)
    assert [(j.request_id, n) for j, n in plan] == [("a", 3000), ("b", 5192)]


def test_prefill_long_prompt_takes_several_steps() -> None:
    job = PrefillJob("long", 20_000)
    steps = 0
    while job.remaining:
        ((j, n),) = plan_prefill_step([job], 8192)
        j.done_tokens += n
        steps += 1
    assert steps == 3


def test_admission_stops_at_seq_limit_and_kv_capacity() -> None:
    assert admit_count([10, 10, 10], running=0, seq_limit=2, kv_used=0, kv_capacity=100) == 2
    assert admit_count([60, 60], running=0, seq_limit=8, kv_used=0, kv_capacity=100) == 1
    # first come first served: a big head blocks smaller ones behind it
    assert admit_count([200, 1], running=0, seq_limit=8, kv_used=0, kv_capacity=100) == 0
