"""The KV-cache pull protocol: plain TCP, framed, chunked, every chunk CRC-32 checked.

Decode pulls a request's KV from prefill over every KV address and several TCP connections
("lanes") each, sprays chunks over them, and with a stall timeout retires a silent lane and
opens another (a new source port, so a new path id), MRC-style. One module per concern:
`protocol` (frames, the prefill's KV server, release), `paths` (lane plans, source and
replacement addresses, path health across pulls), `conns` (a decode engine's connections,
kept across pulls), `pull` (one pull: lanes, retirement, verification). The names callers
use are importable from `zcube_lab.serving.kvwire`.
"""

from zcube_lab.serving.kvwire.conns import IDLE_PULLS, KVConnection, KVConnections, warm
from zcube_lab.serving.kvwire.paths import (
    CHUNKS_PER_LANE,
    MIN_CHUNK_BYTES,
    PathHealth,
    chunk_size,
    pick_replacement,
    pick_source,
    plan_lanes,
    probe_path,
)
from zcube_lab.serving.kvwire.protocol import encode_request, release_kv, start_kv_server
from zcube_lab.serving.kvwire.pull import (
    LANE_WINDOW,
    RETIRE_BUDGET_PER_LANE,
    KVTransferError,
    PullResult,
    pull_kv,
)

__all__ = [
    "CHUNKS_PER_LANE",
    "IDLE_PULLS",
    "LANE_WINDOW",
    "MIN_CHUNK_BYTES",
    "RETIRE_BUDGET_PER_LANE",
    "KVConnection",
    "KVConnections",
    "KVTransferError",
    "PathHealth",
    "PullResult",
    "chunk_size",
    "encode_request",
    "pick_replacement",
    "pick_source",
    "plan_lanes",
    "probe_path",
    "pull_kv",
    "release_kv",
    "start_kv_server",
    "warm",
]
