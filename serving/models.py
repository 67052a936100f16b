"""Model profiles as data, and the pure compute model that turns them into seconds and bytes.

A profile is a frozen record named by its short id (`glm-5.1`, `deepseek-v3`, `llama-3.1-70b`,
`llama-3.1-8b`, `tiny`). KV bytes per token follow docs/DOMAIN.md §3: grouped-query attention stores
`2 * layers * kv_heads * head_dim * bytes`; latent attention (MLA) stores
`layers * (kv_lora_rank + rope_dim) * bytes`. Throughput and step-time figures are rough
per-instance numbers for an 8-GPU H800-class node, chosen to be plausible, not measured.
Every byte that crosses the fabric is divided by `bandwidth_scale`; seconds stay real.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zcube_lab.errors import ConfigError


@dataclass(frozen=True)
class Attention:
    """How a model stores its KV cache: `gqa` (kv heads x head dim) or `mla` (latent + rope)."""

    kind: str
    layers: int
    bytes_per_element: int = 2
    kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int = 0
    rope_dim: int = 0


@dataclass(frozen=True)
class ModelProfile:
    """Everything the mock engine needs to know about one served model."""

    name: str
    hf_name: str
    attention: Attention
    context_length: int
    prefill_tokens_per_s: float
    prefill_step_overhead_s: float
    decode_step_base_s: float
    decode_step_per_seq_s: float
    kv_capacity_tokens: int
    max_num_seqs: int
    # Mixture-of-experts shape for the expert-parallel all-to-all; 0 means a dense model.
    hidden_size: int = 0
    experts_per_token: int = 0

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache one token occupies (docs/DOMAIN.md §3)."""
        return kv_bytes_per_token(self.attention)

    @property
    def is_moe(self) -> bool:
        """True when the model routes tokens to experts (so EP makes sense)."""
        return self.experts_per_token > 0


def kv_bytes_per_token(att: Attention) -> int:
    """KV bytes per token for grouped-query or latent attention."""
    if att.kind == "gqa":
        return 2 * att.layers * att.kv_heads * att.head_dim * att.bytes_per_element
    if att.kind == "mla":
        return att.layers * (att.kv_lora_rank + att.rope_dim) * att.bytes_per_element
    raise ConfigError("attention.kind", att.kind, "one of gqa, mla")


PROFILES: dict[str, ModelProfile] = {
    p.name: p
    for p in (
        ModelProfile(
            name="glm-5.1",
            hf_name="zai-org/GLM-5.1",
            attention=Attention(kind="mla", layers=78, kv_lora_rank=512, rope_dim=64),
            context_length=202_752,
            prefill_tokens_per_s=18_000.0,
            prefill_step_overhead_s=0.010,
            decode_step_base_s=0.030,
            decode_step_per_seq_s=0.0002,
            kv_capacity_tokens=3_000_000,
            max_num_seqs=256,
            hidden_size=6144,
            experts_per_token=8,
        ),
        ModelProfile(
            name="deepseek-v3",
            hf_name="deepseek-ai/DeepSeek-V3",
            attention=Attention(kind="mla", layers=61, kv_lora_rank=512, rope_dim=64),
            context_length=163_840,
            prefill_tokens_per_s=20_000.0,
            prefill_step_overhead_s=0.010,
            decode_step_base_s=0.028,
            decode_step_per_seq_s=0.0002,
            kv_capacity_tokens=3_500_000,
            max_num_seqs=256,
            hidden_size=7168,
            experts_per_token=8,
        ),
        ModelProfile(
            name="llama-3.1-70b",
            hf_name="meta-llama/Llama-3.1-70B-Instruct",
            attention=Attention(kind="gqa", layers=80, kv_heads=8, head_dim=128),
            context_length=131_072,
            prefill_tokens_per_s=12_000.0,
            prefill_step_overhead_s=0.008,
            decode_step_base_s=0.022,
            decode_step_per_seq_s=0.0001,
            kv_capacity_tokens=1_200_000,
            max_num_seqs=256,
        ),
        ModelProfile(
            name="llama-3.1-8b",
            hf_name="meta-llama/Llama-3.1-8B-Instruct",
            attention=Attention(kind="gqa", layers=32, kv_heads=8, head_dim=128),
            context_length=131_072,
            prefill_tokens_per_s=60_000.0,
            prefill_step_overhead_s=0.004,
            decode_step_base_s=0.008,
            decode_step_per_seq_s=0.00005,
            kv_capacity_tokens=4_000_000,
            max_num_seqs=512,
        ),
        # A test profile: small KV, fast steps, MoE-shaped so EP can be exercised.
        ModelProfile(
            name="tiny",
            hf_name="zcube-lab/tiny",
            attention=Attention(kind="gqa", layers=2, kv_heads=2, head_dim=64),
            context_length=8192,
            prefill_tokens_per_s=100_000.0,
            prefill_step_overhead_s=0.002,
            decode_step_base_s=0.002,
            decode_step_per_seq_s=0.00002,
            kv_capacity_tokens=200_000,
            max_num_seqs=256,
            hidden_size=256,
            experts_per_token=2,
        ),
    )
}


def get_profile(name: str) -> ModelProfile:
    """The profile named `name`, or a ConfigError listing the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError("model", name, "one of " + ", ".join(sorted(PROFILES))) from None


def prefill_step_seconds(profile: ModelProfile, tokens: int) -> float:
    """Compute time of one prefill step that processes `tokens` prompt tokens."""
    if tokens <= 0:
        return 0.0
    return profile.prefill_step_overhead_s + tokens / profile.prefill_tokens_per_s


def decode_step_seconds(profile: ModelProfile, batch_size: int) -> float:
    """Compute time of one decode step for a batch of `batch_size` running sequences."""
    if batch_size <= 0:
        return 0.0
    return profile.decode_step_base_s + profile.decode_step_per_seq_s * batch_size


def scaled_bytes(real_bytes: float, bandwidth_scale: float) -> int:
    """Bytes actually sent for a payload of `real_bytes` (at least 1 for any non-empty one)."""
    if real_bytes <= 0:
        return 0
    return max(1, math.ceil(real_bytes / bandwidth_scale))


def kv_transfer_bytes(profile: ModelProfile, tokens: int, bandwidth_scale: float) -> int:
    """Bytes of KV cache that cross the fabric for a prompt of `tokens` tokens."""
    return scaled_bytes(profile.kv_bytes_per_token * tokens, bandwidth_scale)


def alltoall_bytes_per_peer(
    profile: ModelProfile, tokens: int, ep_size: int, bandwidth_scale: float
) -> int:
    """Bytes sent to each peer in one dispatch (and received back in combine) for a step.

    Each token's hidden state (bf16) goes to `experts_per_token` experts spread evenly over
    `ep_size` hosts, so one peer receives `tokens * k * hidden * 2 / ep_size` bytes.
    """
    if ep_size <= 1 or tokens <= 0 or not profile.is_moe:
        return 0
    real = tokens * profile.experts_per_token * profile.hidden_size * 2 / ep_size
    return scaled_bytes(real, bandwidth_scale)
