"""vLLM's metric names, labels and buckets, as they appear on the wire."""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from zcube_lab.serving import vllm_metrics as m

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving_fixtures import registry_text


def _families(registry: CollectorRegistry) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(registry_text(registry))}


def test_wire_names_match_vllm() -> None:
    reg = CollectorRegistry()
    em = m.EngineMetrics(reg, "glm-5.1", "0")
    em.prompt_tokens.inc(3)
    em.request_success["length"].inc()
    text = registry_text(reg)
    for name in (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="glm-5.1"} 1.0',
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:request_time_per_output_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:request_queue_time_seconds_bucket",
        "vllm:request_prefill_time_seconds_bucket",
        "vllm:request_decode_time_seconds_bucket",
        'vllm:num_requests_running{engine="0",model_name="glm-5.1"}',
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:nixl_xfer_time_seconds_bucket",
        "vllm:nixl_bytes_transferred_bucket",
        "vllm:nixl_num_failed_transfers_total",
        "vllm:nixl_num_kv_expired_reqs_total",
        "zcube:ep_alltoall_seconds_bucket",
        "zcube:ep_alltoall_bytes_total",
        "zcube:engine_step_overrun_seconds_bucket",
        'zcube:kv_lanes_retired_total{engine="0",model_name="glm-5.1"} 0.0',
        'zcube:kv_pull_retries_total{engine="0",model_name="glm-5.1"} 0.0',
    ):
        assert name in text, name


def _bounds(text: str, name: str) -> list[float]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name + "_bucket" and s.labels["le"] != "+Inf":
                out.append(float(s.labels["le"]))
    return out


def test_bucket_boundaries_are_vllms() -> None:
    reg = CollectorRegistry()
    m.EngineMetrics(reg, "tiny", "0")
    text = registry_text(reg)
    assert _bounds(text, "vllm:time_to_first_token_seconds") == [
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    ]  # fmt: skip
    assert _bounds(text, "vllm:inter_token_latency_seconds")[:3] == [0.01, 0.025, 0.05]
    assert _bounds(text, "vllm:e2e_request_latency_seconds")[-1] == 7680.0
    assert _bounds(text, "vllm:nixl_xfer_time_seconds")[0] == 0.005
    assert _bounds(text, "vllm:nixl_bytes_transferred") == [
        2.0 ** (10 + i) for i in range(1, 25, 2)
    ]


def test_two_components_in_one_process_use_their_own_registries() -> None:
    a, b = CollectorRegistry(), CollectorRegistry()
    ma, mb = m.EngineMetrics(a, "tiny", "0"), m.EngineMetrics(b, "tiny", "1")
    ma.generation_tokens.inc(5)
    mb.generation_tokens.inc(7)
    m.GatewayMetrics(CollectorRegistry(), "tiny").request("/v1/completions", 200)
    assert "vllm:generation_tokens_total" in registry_text(a)
    assert 'engine="0",model_name="tiny"} 5.0' in registry_text(a)
    assert 'engine="1",model_name="tiny"} 7.0' in registry_text(b)


def test_per_request_token_histograms_and_legacy_names() -> None:
    reg = CollectorRegistry()
    em = m.EngineMetrics(reg, "tiny", "0", max_model_len=8192)
    em.finished(3000, 24, 50)
    em.kv_usage.set(0.25)
    em.tpot.observe(0.03)
    text = generate_latest(reg).decode()
    assert m.build_1_2_5_buckets(8192)[-2:] == (2000.0, 5000.0)
    assert m.build_1_2_5_buckets(100) == (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
    assert 'vllm:request_prompt_tokens_bucket{engine="0",le="5000.0",model_name="tiny"} 1.0' in text
    assert 'vllm:request_prompt_tokens_bucket{engine="0",le="2000.0",model_name="tiny"} 0.0' in text
    assert 'vllm:request_generation_tokens_sum{engine="0",model_name="tiny"} 24.0' in text
    assert 'vllm:request_max_num_generation_tokens_sum{engine="0",model_name="tiny"} 50.0' in text
    assert 'vllm:gpu_cache_usage_perc{engine="0",model_name="tiny"} 0.25' in text
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25' in text
    assert 'vllm:time_per_output_token_seconds_count{engine="0",model_name="tiny"} 1.0' in text
    assert 'vllm:request_time_per_output_token_seconds_count{engine="0",model_name="tiny"} 1.0' in (
        text
    )
