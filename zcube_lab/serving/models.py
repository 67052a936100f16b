"""Model profiles as data, and the pure compute model that turns them into seconds and bytes.

A profile is a frozen record named by its short id (`glm-5.1`, `deepseek-v3`, `llama-3.1-70b`,
`llama-3.1-8b`, `tiny`). KV bytes per token follow docs/DOMAIN.md §3: grouped-query attention stores
`2 * layers * kv_heads * head_dim * bytes`; latent attention (MLA) stores
`layers * (kv_lora_rank + rope_dim) * bytes`. Throughput and step-time figures are rough
per-instance numbers for an 8-GPU H800-class node, chosen to be plausible, not measured.
Every byte that crosses the fabric is divided by `bandwidth_scale`; seconds stay real.

The compute model (docs/DOMAIN.md "Compute model"); [S] = sourced, [A] = assumption:
- prefill step: `prefill_step_overhead_s + (new + PREFILL_CACHED_TOKEN_COST * cached) /
  prefill_tokens_per_s`. `new` are the prompt tokens computed in the step; `cached` the
  prefix-cache hits of the prompts that start in it: their projections and experts are
  skipped, but the new tokens still attend to them. PREFILL_CACHED_TOKEN_COST = 0.1 [A]:
  with DeepSeek-V3's attention shape (128 heads, qk 192 + v 128 dims, 61 layers: about
  5 MFLOP per new-token x cached-token pair) against about 74 GFLOP per token for the rest
  (37 B active parameters), a 1-16K-token append to a 15-20K-token cached prefix (the
  coding-agent workload) costs 0.05-0.22 of recomputing the prefix; 0.1 is the middle.
- decode step: `decode_step_base_s + decode_step_per_seq_s * batch + attended *
  kv_bytes_per_token / attention_bytes_per_s`, `attended` the sum of the batch's context
  lengths (each running sequence reads its whole KV cache once per step). Decode attention
  is bound by reading the KV cache [S]: FlashMLA reaches 3,000 GB/s per H800 in its
  memory-bound configuration (github.com/deepseek-ai/FlashMLA, README); with data-parallel
  attention (each of the 8 GPUs holds its own sequences) an instance reads 8 x 3,000 GB/s
  [A: even spread over the GPUs]. `decode_step_base_s` and `decode_step_per_seq_s` stay
  the assumed per-step and per-sequence costs of everything else (experts, sampling).
- expert-parallel step: the all-to-all as DeepEP sends it (`ExpertWire`: FP8 dispatch with
  per-block scales, BF16 combine, each token once per destination node, a node limit, dual-batch
  overlap); `zcube_lab.serving.eptraffic` turns it into bytes per layer, per frame and per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError


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
class ExpertWire:
    """How a MoE layer's all-to-all is sent, as DeepEP's normal kernels send it (docs/DOMAIN.md
    "Expert-parallel traffic as DeepEP sends it"): the dispatch in FP8 (`dispatch_value_bytes`
    per hidden value) plus one `scale_bytes` scale per `scale_block` values, the combine in BF16
    (`combine_value_bytes`); with `per_node` each token crosses the network once per destination
    node (then NVLink inside it), else once per routed expert; `node_limit` caps the nodes a
    token is routed to (0: no cap); `dual_batch_overlap` runs two micro-batches so one's
    exchange hides behind the other's compute."""

    routed_experts: int = 256
    dispatch_value_bytes: int = 1
    scale_bytes: int = 4
    scale_block: int = 128
    combine_value_bytes: int = 2
    per_node: bool = True
    node_limit: int = 0
    dual_batch_overlap: bool = False


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
    # MoE layers (each does one dispatch and one combine per step); 0: dense.
    moe_layers: int = 0
    # KV-cache bytes per second one instance's decode attention reads (see the docstring).
    attention_bytes_per_s: float = 8 * 3.0e12
    # How the all-to-all is sent (MoE only).
    wire: ExpertWire = ExpertWire()

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
            # [S] 3 dense + 75 MoE layers (transformers' GlmMoeDsaConfig: mlp_layer_types)
            moe_layers=75,
            # [S] 256 routed experts, n_group = topk_group = 1: no node limit in the router;
            # [A] dual-batch overlap off (vLLM's default, --enable-dbo off)
            wire=ExpertWire(routed_experts=256, node_limit=0, dual_batch_overlap=False),
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
            # [S] config.json: num_hidden_layers 61, first_k_dense_replace 3
            moe_layers=58,
            # [S] 256 routed experts; each token to at most 4 nodes (the V3 report; config.json
            # n_group 8, topk_group 4); two micro-batches overlap (DeepSeek's inference system)
            wire=ExpertWire(routed_experts=256, node_limit=4, dual_batch_overlap=True),
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
            moe_layers=2,
            attention_bytes_per_s=1.0e12,
            wire=ExpertWire(routed_experts=8),
        ),
    )
}


def get_profile(name: str) -> ModelProfile:
    """The profile named `name`, or a ConfigError listing the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError("model", name, "one of " + ", ".join(sorted(PROFILES))) from None


# Share of a full prefill token's cost that a prefix-cache hit still costs (the new tokens'
# attention over it) [A]; see the module docstring.
PREFILL_CACHED_TOKEN_COST = 0.1


def prefill_step_seconds(profile: ModelProfile, tokens: int, cached_tokens: int = 0) -> float:
    """Compute time of one prefill step computing `tokens` prompt tokens, `cached_tokens` of
    prefix-cache hits attended (charged at PREFILL_CACHED_TOKEN_COST each)."""
    if tokens <= 0:
        return 0.0
    work = tokens + PREFILL_CACHED_TOKEN_COST * max(0, cached_tokens)
    return profile.prefill_step_overhead_s + work / profile.prefill_tokens_per_s


def decode_step_seconds(profile: ModelProfile, batch_size: int, context_tokens: int = 0) -> float:
    """Compute time of one decode step for `batch_size` running sequences whose context lengths
    (prompt + generated) sum to `context_tokens`."""
    if batch_size <= 0:
        return 0.0
    attention = max(0, context_tokens) * profile.kv_bytes_per_token / profile.attention_bytes_per_s
    return profile.decode_step_base_s + profile.decode_step_per_seq_s * batch_size + attention


def scaled_bytes(real_bytes: float, bandwidth_scale: float) -> int:
    """Bytes actually sent for a payload of `real_bytes` (at least 1 for any non-empty one)."""
    if real_bytes <= 0:
        return 0
    return max(1, math.ceil(real_bytes / bandwidth_scale))


def kv_transfer_bytes(profile: ModelProfile, tokens: int, bandwidth_scale: float) -> int:
    """Bytes of KV cache that cross the fabric for a prompt of `tokens` tokens."""
    return scaled_bytes(profile.kv_bytes_per_token * tokens, bandwidth_scale)
