"""The expert-parallel all-to-all as DeepEP sends it, as arithmetic (pure): bytes per token, per
destination node, per layer, per frame and per step.

Per MoE layer, a token's hidden state goes to the nodes holding its routed experts (dispatch,
FP8 values plus one FP32 scale per 128 values) and their outputs come back (combine, BF16). With
`ExpertWire.per_node` a token crosses the network once per destination node; otherwise once per
routed expert. Experts are spread evenly over the instance's `nodes` (its GPU hosts) and
routing is taken as uniform [A]: a token's `k` experts are `k` distinct experts drawn at
random, among the experts of at most `node_limit` nodes when there is a limit. The exchange is a
star from the leader (`zcube_lab.serving.alltoall`), so one peer receives the tokens routed to its
node.

The lab's time resolution: a frame of one MTU (`JUMBO_FRAME_BYTES`, 9,000 bytes) takes
`packet_seconds(9000, 50)` = 1.44 ms on a 50 Mb/s port (a ZCube half-rate port at the default
100 Mb/s NIC), against 0.18 us at 400 Gb/s. A step's layers are therefore grouped into frames
(`layers_per_frame`): consecutive layers travel together until every lane's share of a frame
holds at least `frame_packets` packets (with dual-batch overlap, each micro-batch's half of
it). Each frame is one round trip (dispatch out, combine back); a frame's successor waits for
it, as layer l + 1 needs layer l's output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from zcube_lab.serving.models import ExpertWire, ModelProfile, scaled_bytes

JUMBO_FRAME_BYTES = 9000
# Packets (of JUMBO_FRAME_BYTES) each lane's share of a frame holds at least: a frame crosses a
# 3-link path with a pipeline fill of about 2 packet times each way, so 16 packets of dispatch
# (and about 32 of combine) keep that fill near a tenth of the frame's time.
FRAME_PACKETS = 16


def packet_seconds(frame_bytes: int, mbps: float) -> float:
    """Serialization time of one frame of `frame_bytes` at `mbps` (10^6 bits/s)."""
    return frame_bytes * 8 / (mbps * 1e6)


def dispatch_bytes_per_token(profile: ModelProfile) -> int:
    """Bytes of one token's dispatch: its hidden values and their scales."""
    w = profile.wire
    scales = math.ceil(profile.hidden_size / w.scale_block) if w.scale_bytes else 0
    return profile.hidden_size * w.dispatch_value_bytes + scales * w.scale_bytes


def combine_bytes_per_token(profile: ModelProfile) -> int:
    """Bytes of one token's combine: its hidden values in BF16."""
    return profile.hidden_size * profile.wire.combine_value_bytes


def nodes_per_token(experts: int, top_k: int, nodes: int, node_limit: int = 0) -> float:
    """Expected distinct nodes one token's `top_k` experts fall on, with `experts` spread evenly
    over `nodes`, routed among the experts of at most `node_limit` nodes (0: no limit)."""
    if nodes < 1 or top_k < 1 or experts < 1:
        return 0.0
    reach = nodes if node_limit <= 0 else min(nodes, node_limit)
    per_node = experts / nodes
    pool = reach * per_node
    # A given node of those reached gets none of the k experts drawn from the pool.
    miss = 1.0
    for i in range(min(top_k, math.floor(pool))):
        miss *= max(0.0, pool - per_node - i) / (pool - i)
    return reach * (1 - miss)


def copies_per_node(profile: ModelProfile, nodes: int) -> float:
    """Expected copies of one token that one destination node receives per layer: the share of
    tokens routed to it (per node), or its share of the routed experts (per expert)."""
    w = profile.wire
    if nodes < 1:
        return 0.0
    if not w.per_node:
        return profile.experts_per_token / nodes
    reached = nodes_per_token(w.routed_experts, profile.experts_per_token, nodes, w.node_limit)
    return reached / nodes


@dataclass(frozen=True)
class Frame:
    """One round trip of a step: `layers` consecutive MoE layers, the bytes sent to each peer
    (`dispatch`) and read back from it (`combine`), already divided by the bandwidth scale."""

    layers: int
    dispatch: int
    combine: int


@dataclass(frozen=True)
class StepExchange:
    """A step's all-to-all: its frames in order, run by `micro_batches` micro-batches (2: dual
    batch overlap, each with half of every frame's bytes)."""

    frames: tuple[Frame, ...] = ()
    micro_batches: int = 1

    @property
    def dispatch(self) -> int:
        """Bytes sent to each peer over the step."""
        return sum(f.dispatch for f in self.frames)

    @property
    def combine(self) -> int:
        """Bytes read back from each peer over the step."""
        return sum(f.combine for f in self.frames)

    def __bool__(self) -> bool:
        return any(f.dispatch or f.combine for f in self.frames)


def single_frame(dispatch: int, combine: int | None = None) -> StepExchange:
    """A step whose whole exchange is one frame (probes, tests)."""
    back = dispatch if combine is None else combine
    return StepExchange((Frame(1, dispatch, back),)) if dispatch > 0 else StepExchange()


def layers_per_frame(layer_bytes_per_lane: float, layers: int, min_frame_bytes: int) -> int:
    """Fewest consecutive layers whose bytes on one lane reach `min_frame_bytes` (all of them
    when even that falls short, at least one)."""
    if layers < 1:
        return 0
    if layer_bytes_per_lane <= 0:
        return layers
    return max(1, min(layers, math.ceil(min_frame_bytes / layer_bytes_per_lane)))


def group_layers(layers: int, per_frame: int) -> list[int]:
    """`layers` as `ceil(layers / per_frame)` frames whose sizes differ by at most one."""
    if layers < 1 or per_frame < 1:
        return []
    count = math.ceil(layers / per_frame)
    base, extra = divmod(layers, count)
    return [base + (1 if i < extra else 0) for i in range(count)]


@dataclass(frozen=True)
class EpTraffic:
    """An engine's all-to-all: the profile (its `wire` as the engine runs it), the instance's
    GPU hosts (`nodes`, the leader included), the bandwidth scale, the lanes each peer's bytes
    are spread over and the frame rule."""

    profile: ModelProfile
    nodes: int
    bandwidth_scale: float = 1.0
    lanes: int = 1
    frame_packets: int = FRAME_PACKETS
    mtu: int = JUMBO_FRAME_BYTES

    def layer_bytes(self, tokens: int) -> tuple[float, float]:
        """Real (unscaled) bytes one peer receives in one layer's dispatch, and sends back."""
        if self.nodes <= 1 or tokens <= 0 or not self.profile.is_moe:
            return 0.0, 0.0
        copies = tokens * copies_per_node(self.profile, self.nodes)
        return (
            copies * dispatch_bytes_per_token(self.profile),
            copies * combine_bytes_per_token(self.profile),
        )

    def step_bytes(self, tokens: int) -> tuple[float, float]:
        """Real bytes one peer receives over a step's MoE layers, and sends back."""
        d, c = self.layer_bytes(tokens)
        return d * self.profile.moe_layers, c * self.profile.moe_layers

    def step(self, tokens: int) -> StepExchange:
        """The step's frames: layers grouped so that each lane's dispatch share of a frame holds
        at least `frame_packets` MTU packets, bytes scaled (each frame rounded up). With dual
        batch overlap the rule holds for each micro-batch's half of a frame, which is what
        crosses the wire at once: the same time resolution, and as many compute slices a step
        as without overlap (half as many frames, each computed in two turns)."""
        d, c = self.layer_bytes(tokens)
        layers = max(1, self.profile.moe_layers)
        if d <= 0:
            return StepExchange()
        batches = 2 if self.profile.wire.dual_batch_overlap else 1
        per_lane = d / self.bandwidth_scale / max(1, self.lanes) / batches
        per_frame = layers_per_frame(per_lane, layers, self.frame_packets * self.mtu)
        frames = tuple(
            Frame(
                n,
                scaled_bytes(d * n, self.bandwidth_scale),
                scaled_bytes(c * n, self.bandwidth_scale),
            )
            for n in group_layers(layers, per_frame)
        )
        return StepExchange(frames, batches)


def with_wire(
    profile: ModelProfile,
    *,
    per_node: bool | None = None,
    node_limit: int | None = None,
    dual_batch_overlap: bool | None = None,
) -> ModelProfile:
    """`profile` with the given `ExpertWire` fields changed (None: the profile's)."""
    w: ExpertWire = profile.wire
    changes = {
        k: v
        for k, v in (
            ("per_node", per_node),
            ("node_limit", node_limit),
            ("dual_batch_overlap", dual_batch_overlap),
        )
        if v is not None
    }
    return replace(profile, wire=replace(w, **changes)) if changes else profile


def busy_seconds(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the (start, end) spans: a step's exchange time when
    frames of two micro-batches overlap."""
    total = 0.0
    reach = -math.inf
    for start, end in sorted(spans):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total
