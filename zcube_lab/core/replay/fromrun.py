"""A recording from a live run's engine logs (pure: rows in, transfers out; issue 45 item 3).

The engines already log every KV pull attempt (`kv-<decode engine>.jsonl`: wall `start`,
`bytes`, `engine_id` the prefill pulled from) and every expert-parallel engine step at its
leader (`ep-<engine>.jsonl`: wall `start`, `bytes_sent`, `bytes_received`, `frames`,
`compute_s` modelled, `step`). This module turns them into a `Recording`:
- times: wall seconds since the run's first logged event, through the run's clock;
- bytes: lab bytes times the run's bandwidth scale (real bytes);
- a KV pull: one transfer prefill host -> decode host (the decode pulls; the bytes flow from
  the prefill), released at its recorded start, with the time the live pull took (`live_s`,
  modelled) for a replay at the run's own scale to be set against;
- an EP step of F frames over P peers: per frame a dispatch leader -> each peer of
  bytes_sent / (F P) and a combine each peer -> leader of bytes_received / (F P); a combine
  follows its dispatch (the experts' compute is not logged: 0 here, stated); frame f + 1's
  dispatches follow every combine of frame f plus compute_s / F; a step's first frame follows
  the previous step's last combines (a GPU runs its steps in order) and is released at the
  step's recorded start. `split` cuts every frame into that many equal exchanges (layers of the
  frame, the compute gap shared alike): the live lab groups layers into frames only because its
  frames of 720 µs could not carry one layer's exchange; a fine replay can give each its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.replay.recording import Recording, Transfer

Row = Mapping[str, Any]


def recording_from_logs(
    kv: Iterable[tuple[str, Row]],
    ep: Iterable[tuple[str, Row]],
    engine_hosts: Mapping[str, str],
    ep_peers: Mapping[str, Sequence[str]],
    bandwidth_scale: float,
    clock: Clock,
    hosts: Sequence[str] = (),
    meta: Mapping[str, Any] | None = None,
    split: int = 1,
) -> Recording:
    """The recording of a run's logs: `kv` as (decode engine id, row), `ep` as (leader engine
    id, row); `engine_hosts` maps engine ids to hosts, `ep_peers` a leader engine to the hosts
    it exchanges with."""
    if split < 1:
        raise ConfigError("split", split, "a whole number >= 1")
    kv, ep = list(kv), list(ep)
    starts = [float(r["start"]) for _, r in kv + ep if r.get("start") is not None]
    if not starts:
        raise ConfigError("recording", "no transfers", "a run whose engines logged transfers")
    t0 = min(starts)
    out: list[Transfer] = []

    def modelled(wall: float) -> float:
        return clock.modelled(wall - t0)

    for decode_id, r in sorted(kv, key=lambda e: float(e[1].get("start") or 0)):
        nbytes = float(r.get("bytes") or 0)
        src, dst = engine_hosts.get(str(r.get("engine_id"))), engine_hosts.get(decode_id)
        if nbytes <= 0 or r.get("start") is None or src is None or dst is None or src == dst:
            continue
        start = modelled(float(r["start"]))
        live = None
        if r.get("ok", True) and r.get("end") is not None:
            live = clock.modelled(float(r["end"]) - float(r["start"]))
        out.append(Transfer(len(out), "kv", start, src, dst, nbytes * bandwidth_scale, live_s=live))
    by_leader: dict[str, list[Row]] = {}
    for leader, r in ep:
        by_leader.setdefault(leader, []).append(r)
    for leader, rows in sorted(by_leader.items()):
        host, peers = engine_hosts.get(leader), tuple(ep_peers.get(leader, ()))
        if host is None or not peers:
            continue
        last: tuple[int, ...] = ()
        for r in sorted(rows, key=lambda r: (int(r.get("step", 0)), float(r["start"]))):
            frames = max(1, int(r.get("frames", 1))) * split
            sent, recv = float(r.get("bytes_sent") or 0), float(r.get("bytes_received") or 0)
            if sent <= 0 or r.get("start") is None:
                continue
            release = modelled(float(r["start"]))
            gap = float(r.get("compute_s") or 0.0) / frames
            d_bytes = sent * bandwidth_scale / (frames * len(peers))
            c_bytes = recv * bandwidth_scale / (frames * len(peers))
            for f in range(frames):
                tag = f"{leader}/s{r.get('step', 0)}/f{f}"
                dispatch_gap = gap if f else 0.0
                combines: list[int] = []
                for peer in peers:
                    d = Transfer(len(out), "ep", release, host, peer, d_bytes,
                                 last, dispatch_gap if last else 0.0, tag)  # fmt: skip
                    out.append(d)
                    if c_bytes > 0:
                        c = Transfer(
                            len(out), "ep", release, peer, host, c_bytes, (d.id,), 0.0, tag
                        )
                        out.append(c)
                        combines.append(c.id)
                last = tuple(combines)
    info = {
        "bandwidth_scale": bandwidth_scale,
        "dilation": clock.dilation,
        "ep_split": split,
        "expert_compute_s": 0.0,
        **dict(meta or {}),
    }
    return Recording(tuple(out), tuple(hosts), info)
