"""The workload profile every live bmwg section runs: single-turn completions of exactly one
prompt and one output length, no prefix cache (the whole prompt is prefilled and its whole KV
moves), Poisson arrivals. Each section names it and says what it is for."""

from __future__ import annotations

from typing import Any

from zcube_lab.core.errors import ConfigError

MODEL = "glm-5.1"  # the lab's GLM-5.1 profile: the draft's CFG-E


def exactly(n: int) -> dict[str, float]:
    """A length distribution that always gives `n` tokens."""
    return {"median": n, "sigma": 0.0, "min": n, "max": n}


def single_turn(name: str, description: str, prompt_tokens: int, output_tokens: int,
                rate: float, prefill_servers: int | None = None,
                field: str = "rate") -> dict[str, Any]:  # fmt: skip
    """The profile (`zcube_lab.workloads` JSON); `prefill_servers` when the section sets the
    split in the profile itself. A rate that is not positive is refused, naming `field`."""
    if not rate > 0:
        raise ConfigError(field, rate, "a positive rate in requests per second")
    out: dict[str, Any] = {
        "name": name,
        "description": description,
        "model": MODEL,
        "endpoint": "completions",
        "placement": "default",
        "length_scale": 1.0,
        "arrival": {"process": "poisson", "rate": rate},
        "prompt": exactly(prompt_tokens),
        "output": exactly(output_tokens),
        "prefix_cache_hit_rate": 0.0,
    }
    if prefill_servers is not None:
        out["prefill_servers"] = prefill_servers
    return out
