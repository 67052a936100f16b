"""Model profiles: docs/DOMAIN.md §3 KV-bytes table, the compute model and fabric byte scaling."""

from __future__ import annotations

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.serving.models import (
    PREFILL_CACHED_TOKEN_COST,
    PROFILES,
    decode_step_seconds,
    get_profile,
    kv_transfer_bytes,
    prefill_step_seconds,
    scaled_bytes,
)


@pytest.mark.parametrize(
    ("name", "bytes_per_token"),
    [
        ("llama-3.1-8b", 131_072),
        ("llama-3.1-70b", 327_680),
        ("deepseek-v3", 70_272),
        ("glm-5.1", 89_856),
    ],
)
def test_kv_bytes_per_token_matches_domain_table(name: str, bytes_per_token: int) -> None:
    assert get_profile(name).kv_bytes_per_token == bytes_per_token


def test_required_profiles_exist_and_are_sane() -> None:
    assert {"glm-5.1", "deepseek-v3", "llama-3.1-70b", "llama-3.1-8b", "tiny"} <= set(PROFILES)
    for p in PROFILES.values():
        assert p.context_length > 0 and p.kv_capacity_tokens > 0 and p.max_num_seqs > 0
        assert p.prefill_tokens_per_s > 0


def test_unknown_profile_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as exc:
        get_profile("gpt-9")
    assert exc.value.field == "model" and "tiny" in exc.value.allowed


def test_decode_step_time_grows_with_batch() -> None:
    p = get_profile("glm-5.1")
    assert decode_step_seconds(p, 0) == 0.0
    one, many = decode_step_seconds(p, 1), decode_step_seconds(p, 128)
    assert one == pytest.approx(0.030 + 0.0002)
    assert many == pytest.approx(0.030 + 0.0002 * 128)


def test_decode_step_time_grows_with_the_tokens_attended() -> None:
    p = get_profile("glm-5.1")
    short, long = decode_step_seconds(p, 1, 100), decode_step_seconds(p, 1, 28_000)
    # reading 28K tokens of 89,856-byte KV at 8 x 3 TB/s: about 0.1 ms more than 100 tokens
    assert long - short == pytest.approx(27_900 * 89_856 / 24e12)
    # a batch of 64 at 28K each reads 161 GB: 6.7 ms on top of base and per-sequence costs
    batch = decode_step_seconds(p, 64, 64 * 28_000)
    assert batch == pytest.approx(0.030 + 0.0002 * 64 + 64 * 28_000 * 89_856 / 24e12)
    # the same batch attends more as its contexts grow: every step of a long one costs more
    assert decode_step_seconds(p, 64, 64 * 100) < batch
    gqa = get_profile("llama-3.1-70b")  # 3.6x the KV per token: 3.6x the attention time
    extra = decode_step_seconds(gqa, 1, 10_000) - decode_step_seconds(gqa, 1, 0)
    assert extra == pytest.approx(10_000 * 327_680 / 24e12)


def test_prefill_time_is_overhead_plus_tokens_over_throughput() -> None:
    p = get_profile("deepseek-v3")
    assert prefill_step_seconds(p, 0) == 0.0
    assert prefill_step_seconds(p, 20_000) == pytest.approx(0.010 + 1.0)


def test_prefill_counts_cached_tokens_at_a_fraction() -> None:
    p = get_profile("deepseek-v3")
    assert PREFILL_CACHED_TOKEN_COST == 0.1
    # 5,000 new tokens after a 15,000-token prefix hit: 5,000 + 0.1 x 15,000 token-equivalents
    assert prefill_step_seconds(p, 5_000, 15_000) == pytest.approx(0.010 + 6_500 / 20_000)
    assert prefill_step_seconds(p, 5_000, 0) < prefill_step_seconds(p, 5_000, 15_000)
    assert prefill_step_seconds(p, 0, 15_000) == 0.0  # no step without a token to compute


def test_fabric_bytes_divide_by_bandwidth_scale() -> None:
    glm = get_profile("glm-5.1")
    assert kv_transfer_bytes(glm, 100_000, 1.0) == 8_985_600_000
    assert kv_transfer_bytes(glm, 100_000, 4000.0) == 2_246_400
    assert scaled_bytes(1, 4000.0) == 1  # never rounds a real payload down to nothing
    assert scaled_bytes(0, 4000.0) == 0


def test_moe_profiles_have_their_moe_layers() -> None:
    ds = get_profile("deepseek-v3")
    assert ds.moe_layers == 58 and get_profile("glm-5.1").moe_layers == 75
    for p in PROFILES.values():
        assert (p.moe_layers > 0) == p.is_moe and p.moe_layers <= p.attention.layers
