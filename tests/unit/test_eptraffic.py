"""The all-to-all as DeepEP sends it: bytes per token, per node, per layer, per frame and per
step (zcube_lab.serving.eptraffic), against answers worked out by hand in the comments."""

from __future__ import annotations

import dataclasses

import pytest

from zcube_lab.serving.eptraffic import (
    JUMBO_FRAME_BYTES,
    EpTraffic,
    Frame,
    StepExchange,
    busy_seconds,
    combine_bytes_per_token,
    copies_per_node,
    dispatch_bytes_per_token,
    group_layers,
    layers_per_frame,
    nodes_per_token,
    packet_seconds,
    single_frame,
    with_wire,
)
from zcube_lab.serving.models import get_profile

GLM, DS, TINY = get_profile("glm-5.1"), get_profile("deepseek-v3"), get_profile("tiny")


def test_the_labs_time_resolution_is_one_jumbo_frame_on_a_half_rate_port() -> None:
    assert JUMBO_FRAME_BYTES == 9000
    assert packet_seconds(9000, 50.0) == pytest.approx(1.44e-3)  # a ZCube port at 100 Mb/s
    assert packet_seconds(9000, 100.0) == pytest.approx(0.72e-3)
    assert packet_seconds(9000, 400_000.0) == pytest.approx(0.18e-6)  # 400 Gb/s


def test_dispatch_is_fp8_with_a_scale_per_128_values_and_combine_bf16() -> None:
    # GLM-5.1: 6,144 values + 48 scales x 4 bytes; DeepSeek-V3: 7,168 + 56 x 4
    assert dispatch_bytes_per_token(GLM) == 6144 + 192 == 6336
    assert dispatch_bytes_per_token(DS) == 7168 + 224 == 7392
    assert combine_bytes_per_token(GLM) == 12_288 and combine_bytes_per_token(DS) == 14_336
    assert dispatch_bytes_per_token(TINY) == 256 + 2 * 4


def test_profiles_carry_deepeps_figures() -> None:
    assert (DS.wire.routed_experts, DS.wire.node_limit, DS.wire.dual_batch_overlap) == (
        256,
        4,
        True,
    )
    assert (GLM.wire.routed_experts, GLM.wire.node_limit, GLM.wire.dual_batch_overlap) == (
        256,
        0,
        False,
    )
    for p in (GLM, DS):
        w = p.wire
        assert (w.dispatch_value_bytes, w.scale_bytes, w.scale_block) == (1, 4, 128)
        assert w.combine_value_bytes == 2 and w.per_node


def test_nodes_a_token_reaches() -> None:
    # 8 experts on 4 nodes (2 each), top-2: a node is missed with (6/8)(5/7) = 15/28
    assert nodes_per_token(8, 2, 4) == pytest.approx(4 * 13 / 28)
    # on 2 nodes (4 each): missed with (4/8)(3/7) = 3/14
    assert nodes_per_token(8, 2, 2) == pytest.approx(2 * 11 / 14)
    # limited to 2 of 4 nodes: the 2 experts drawn from those 2 nodes' 4: missed (2/4)(1/3)
    assert nodes_per_token(8, 2, 4, node_limit=2) == pytest.approx(2 * 5 / 6)
    assert nodes_per_token(256, 1, 8) == pytest.approx(1.0)  # one expert, one node
    assert nodes_per_token(8, 2, 1) == pytest.approx(1.0)  # all on one node: it is reached
    # DeepSeek-V3 decode over 18 nodes: 6.7 nodes unlimited, at most 4 with the limit
    assert 6.6 < nodes_per_token(256, 8, 18) < 6.8
    assert 3.6 < nodes_per_token(256, 8, 18, 4) <= 4
    # a limit at or above the nodes changes nothing
    assert nodes_per_token(256, 8, 4, 4) == nodes_per_token(256, 8, 4)


def test_copies_one_node_receives_per_token() -> None:
    tiny_expert = with_wire(TINY, per_node=False)
    assert copies_per_node(tiny_expert, 4) == pytest.approx(2 / 4)  # top-2 over 4 nodes
    assert copies_per_node(TINY, 4) == pytest.approx(13 / 28)  # once per node reached
    assert copies_per_node(with_wire(TINY, node_limit=2), 4) == pytest.approx(5 / 3 / 4)


def test_layers_are_grouped_into_frames_no_smaller_than_the_minimum() -> None:
    assert layers_per_frame(1584, 75, 144_000) == 75  # 91 needed: the whole step
    assert layers_per_frame(1584, 75, 9000) == 6  # ceil(9000 / 1584)
    assert layers_per_frame(20_000, 75, 9000) == 1  # each layer is a frame
    assert layers_per_frame(0, 75, 9000) == 75
    assert group_layers(75, 6) == [6] * 10 + [5] * 3  # 13 frames, sizes within one
    assert group_layers(75, 75) == [75] and group_layers(0, 4) == []


def test_a_step_in_frames_by_hand() -> None:
    # GLM-5.1 sending per expert: 8 experts over 4 nodes is 2 copies per token per node;
    # 1,000 tokens: 2,000 x 6,336 = 12,672,000 dispatch bytes per peer and layer, 3,168 at
    # scale 4,000, 1,584 per lane over 2 lanes.
    glm = with_wire(GLM, per_node=False)
    t = EpTraffic(glm, nodes=4, bandwidth_scale=4000.0, lanes=2, frame_packets=16)
    assert t.layer_bytes(1000) == (12_672_000, 24_576_000)
    assert t.step_bytes(1000) == (75 * 12_672_000, 75 * 24_576_000)
    # 16 packets per lane (144,000 bytes) need 91 layers: one frame of the 75
    step = t.step(1000)
    assert step.frames == (Frame(75, 237_600, 460_800),) and step.micro_batches == 1
    # one packet per lane: 6 layers per frame, 13 frames
    fine = dataclasses.replace(t, frame_packets=1).step(1000)
    assert [f.layers for f in fine.frames] == [6] * 10 + [5] * 3
    assert fine.frames[0] == Frame(6, 6 * 3168, 6 * 6144)
    assert fine.dispatch == 237_600 and fine.combine == 460_800


def test_node_dedup_and_fp8_send_less_than_bf16_per_expert() -> None:
    # GLM-5.1 over 4 nodes: DeepEP's bytes per token per peer and layer, both ways, against
    # the BF16-per-expert both ways the lab sent before: 2 x 8/4 x 6144 x 2 = 49,152
    t = EpTraffic(GLM, nodes=4)
    d, c = t.layer_bytes(1)
    reached = nodes_per_token(256, 8, 4) / 4
    assert (d, c) == pytest.approx((reached * 6336, reached * 12_288))
    assert 2.8 < 49_152 / (d + c) < 3.0


def test_no_exchange_without_peers_tokens_or_experts() -> None:
    assert not EpTraffic(GLM, nodes=1).step(100)
    assert not EpTraffic(GLM, nodes=4).step(0)
    assert not EpTraffic(get_profile("llama-3.1-8b"), nodes=4).step(100)


def test_dual_batch_overlap_runs_two_micro_batches() -> None:
    assert EpTraffic(DS, nodes=4).step(100).micro_batches == 2
    assert EpTraffic(with_wire(DS, dual_batch_overlap=False), nodes=4).step(100).micro_batches == 1


def test_with_overlap_each_micro_batchs_half_of_a_frame_keeps_the_packet_floor() -> None:
    # the by-hand step above at one packet per lane: 1,584 bytes per lane and layer, 6 layers
    # to 9,000 bytes, 13 frames; each micro-batch sends half a frame, so 12 layers make its
    # 9,504 bytes: 7 frames evened out (11 x 5 + 10 x 2), 14 compute slices against 13 (before
    # this rule: 13 frames in two turns, 26 slices half as long)
    glm = with_wire(GLM, per_node=False)
    off = EpTraffic(glm, nodes=4, bandwidth_scale=4000.0, lanes=2, frame_packets=1).step(1000)
    on = dataclasses.replace(
        EpTraffic(glm, nodes=4, bandwidth_scale=4000.0, lanes=2, frame_packets=1),
        profile=with_wire(glm, dual_batch_overlap=True),
    ).step(1000)
    assert len(off.frames) == 13 and off.micro_batches == 1
    assert [f.layers for f in on.frames] == [11] * 5 + [10] * 2 and on.micro_batches == 2
    assert (on.dispatch, on.combine) == (off.dispatch, off.combine)  # the same bytes


def test_single_frame_and_busy_seconds() -> None:
    assert single_frame(10) == StepExchange((Frame(1, 10, 10),))
    assert single_frame(10, 3).combine == 3 and not single_frame(0)
    assert busy_seconds([(0.0, 1.0), (0.5, 2.0), (3.0, 3.5)]) == pytest.approx(2.5)
    assert busy_seconds([(0.0, 2.0), (0.5, 1.0)]) == pytest.approx(2.0)
    assert busy_seconds([]) == 0.0
