"""§7.1 (AllToAll dispatch throughput) and §7.3 (wide expert parallelism scaling) of
draft-calabria-bmwg-ai-fabric-inference-bench-05 as replays at the fine time scale (pure;
issue 46).

A trial is §7.4's EP part alone: an EP group (the first `ep_size` GPU hosts) exchanging layer
by layer for the trial's modelled seconds (`zcube_lab.core.replay.synthetic.ep_kv_mix` with no
KV: DeepEP's low-latency shape, `tokens` tokens a GPU each to top-8 experts spread evenly over
the group, dispatch in FP8 with its scales, combine in BF16; each member's next layer waits for
its combines and 50 µs of compute). An exchange is one layer's dispatches and combines (its
`exchange` tag); its latency, first dispatch to last combine (`exchange_latencies`), is the
draft's EP_alltoall_latency. EP_alltoall_bandwidth is what one GPU moves in an exchange, (g - 1)
x (dispatch + combine per peer), over the exchange latency's p50, in GB/s per GPU: at most its
NIC's 50 GB/s.

§7.1 sweeps the tokens a GPU dispatches (so the bytes per peer) at one EP size (8 unless
`--ep-sizes`); §7.3 sweeps the EP size (4, 8, 16: as far as 16 GPU hosts reach; the draft's 32
to 96 are not carried here) at the draft's 128 tokens, and its scaling_efficiency is a size's
bandwidth over the smallest size's in the same trial (`scaling_rows`). A case whose dispatch per
peer is under MIN_FRAMES frames of the time scale is not run: the fine scale does not represent
it (`cases`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.replay import synthetic
from zcube_lab.core.replay.recording import Recording
from zcube_lab.core.replay.timescale import TimeScale

SECTIONS = ("7.1", "7.3")
NIC_GBPS = 400.0
TOP_K, HIDDEN, GAP_S = 8, 7168, 50e-6
# §7.1's sweep of tokens a GPU dispatches around the draft's 128 (DeepEP's low-latency batch);
# at EP 8 a dispatch per peer of 59 KB to 3.8 MB
TOKENS_71 = (8, 32, 128, 512)
EP_SIZE_71 = 8
# §7.3's EP sizes on this machine's fabrics (16 GPU hosts) and its tokens (the draft's)
EP_SIZES_73 = (4, 8, 16)
TOKENS_73 = 128
# A dispatch per peer shorter than this many frames at the time scale is not represented.
MIN_FRAMES = 2.0


def dispatch_bytes(tokens: int, ep_size: int) -> float:
    """Real bytes one GPU dispatches to each peer: its tokens x top-k spread over the group,
    each token FP8 (the hidden size in bytes) with a 4-byte scale per 128 values."""
    return tokens * TOP_K / ep_size * (HIDDEN + HIDDEN / 128 * 4)


def combine_bytes(tokens: int, ep_size: int) -> float:
    """Real bytes each peer returns to a GPU in the combine: the same tokens in BF16."""
    return tokens * TOP_K / ep_size * HIDDEN * 2


def gpu_bytes(tokens: int, ep_size: int) -> float:
    """Real bytes one GPU sends in an exchange: a dispatch to and a combine for every peer."""
    return (ep_size - 1) * (dispatch_bytes(tokens, ep_size) + combine_bytes(tokens, ep_size))


def ideal_s(tokens: int, ep_size: int, nic_gbps: float = NIC_GBPS) -> float:
    """An exchange's modelled seconds alone at line rate: one GPU's bytes through its NIC."""
    return gpu_bytes(tokens, ep_size) * 8 / (nic_gbps * 1e9)


def bandwidth_gbps(nbytes: float, latency_s: float | None) -> float | None:
    """GB/s of `nbytes` moved in `latency_s` (None without a positive latency)."""
    return nbytes / latency_s / 1e9 if latency_s else None


def layers(tokens: int, ep_size: int, trial_s: float) -> int:
    """Exchanges filling `trial_s` back to back at line rate with the compute gap (at least 2)."""
    return max(2, round(trial_s / (ideal_s(tokens, ep_size) + GAP_S)))


def exchanges(hosts: Sequence[str], tokens: int, ep_size: int, trial_s: float) -> Recording:
    """A trial's recording (module docstring): the first `ep_size` hosts exchanging `layers`
    times; its meta names the tokens, EP size and bytes a GPU sends per exchange."""
    if not 2 <= ep_size <= len(hosts):
        raise ConfigError("ep_sizes", ep_size, f"2 to {len(hosts)} (the fabric's GPU hosts)")
    rec = synthetic.ep_kv_mix(
        hosts, hosts[:ep_size], [], 0.0, layers(tokens, ep_size, trial_s), tokens=tokens,
        top_k=TOP_K, hidden=HIDDEN, gap_s=GAP_S, nic_gbps=NIC_GBPS,
    )  # fmt: skip
    meta = {**rec.meta, "synthetic": "bmwg 7.1/7.3 exchanges", "tokens": tokens,
            "ep_size": ep_size, "gpu_bytes": gpu_bytes(tokens, ep_size)}  # fmt: skip
    return Recording(rec.transfers, rec.hosts, meta)


def trial_size(tokens: int, ep_size: int, trial_s: float) -> tuple[int, float]:
    """(transfers, modelled seconds) of one trial, without building it."""
    n = layers(tokens, ep_size, trial_s)
    return n * ep_size * (ep_size - 1) * 2, n * (ideal_s(tokens, ep_size) + GAP_S)


def check_ep_sizes(sizes: Sequence[int], hosts: int) -> None:
    """A ConfigError for an EP size the fabric cannot carry, naming the allowed range."""
    bad = [g for g in sizes if not 2 <= g <= hosts]
    if bad:
        raise ConfigError("ep_sizes", bad, f"2 to {hosts} on a fabric of {hosts} GPU hosts")


def case_params(
    section: str,
    hosts: int,
    ts: TimeScale,
    tokens: Sequence[int] | None = None,
    ep_sizes: Sequence[int] | None = None,
) -> tuple[list[dict[str, int]], list[tuple[dict[str, int], str]]]:
    """The (ep_size, tokens) of a section's cases, and those not run with the reason: §7.1
    every token count (TOKENS_71 unless `tokens`) at each EP size (EP_SIZE_71 unless
    `ep_sizes`), §7.3 every EP size (EP_SIZES_73 capped to `hosts` unless `ep_sizes`) at each
    token count (TOKENS_73 unless `tokens`). A size asked for past the hosts is a ConfigError;
    a dispatch per peer under MIN_FRAMES frames of `ts` is not run."""
    if ep_sizes:
        check_ep_sizes(ep_sizes, hosts)
    if tokens and min(tokens) < 1:
        raise ConfigError("tokens", list(tokens), "whole numbers of tokens from 1")
    if section == "7.1":
        gs, ts_ = tuple(ep_sizes or (min(EP_SIZE_71, hosts),)), tuple(tokens or TOKENS_71)
    elif section == "7.3":
        gs = tuple(ep_sizes or sorted({min(g, hosts) for g in EP_SIZES_73}))
        ts_ = tuple(tokens or (TOKENS_73,))
    else:
        raise ConfigError("section", section, f"one of {', '.join(SECTIONS)}")
    ok: list[dict[str, int]] = []
    refused: list[tuple[dict[str, int], str]] = []
    for g in gs:
        for t in ts_:
            params = {"ep_size": int(g), "tokens": int(t)}
            d = dispatch_bytes(int(t), int(g))
            frames = ts.lab_bytes(d) / ts.mtu
            if frames < MIN_FRAMES:
                refused.append((params, (
                    f"a dispatch of {d:,.0f} B per peer is {frames:.2g} frames of "
                    f"{ts.mtu} B at S = {ts.bandwidth_scale:.4g}: under {MIN_FRAMES:g}, "
                    "below what the time scale represents")))  # fmt: skip
                continue
            ok.append(params)
    return ok, refused


def trial_figures(rec: Recording, result: Mapping[str, Any]) -> dict[str, Any]:
    """One trial's figures from its recording (`exchanges`) and the replay's result (the
    driver's: its classes' figures and pauses), times in modelled µs: EP_alltoall_latency p50
    and p99 over the exchanges whose transfers all completed, EP_alltoall_bandwidth (GB/s per
    GPU, `gpu_bytes` over the p50), the ideal latency alone at line rate and the p50 over it,
    the bytes per peer, pauses and incomplete transfers."""
    ep = (result.get("classes") or {}).get("ep") or {}
    ex = ep.get("exchange_s") or {}
    p50, p99 = ex.get("p50"), ex.get("p99")
    tokens, g = int(rec.meta["tokens"]), int(rec.meta["ep_size"])
    ideal = ideal_s(tokens, g)
    pauses = result.get("pauses") or {}
    return {
        "EP_alltoall_latency_p50_us": None if p50 is None else p50 * 1e6,
        "EP_alltoall_latency_p99_us": None if p99 is None else p99 * 1e6,
        "EP_alltoall_bandwidth_GBps": bandwidth_gbps(gpu_bytes(tokens, g), p50),
        "EP_alltoall_latency_ideal_us": ideal * 1e6,
        "latency_over_ideal_p50": None if p50 is None else p50 / ideal,
        "dispatch_bytes_per_peer": dispatch_bytes(tokens, g),
        "combine_bytes_per_peer": combine_bytes(tokens, g),
        "exchanges": int(ex.get("n") or 0),
        "exchanges_run": int(rec.meta["layers"]),
        "PFC_frame_count": pauses.get("pause_frames"),
        "PAUSE_duration_us": pauses.get("pause_total_us"),
        "incomplete": int(ep.get("incomplete", 0)),
        "transfers": int(ep.get("transfers", len(rec.transfers))),
    }


def scaling_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """§7.3's scaling_efficiency per (tokens, fabric, trial), in the trial rows' shape: each
    EP size's EP_alltoall_bandwidth over the smallest size's in the same trial (1 when the
    bandwidth per GPU holds as the group widens: the bytes a GPU sends per exchange barely
    change with the size); case "ep_size=G, tokens=T, vs_ep_size=G0"; `incomplete` from both
    rows (any lost transfer makes it out of reach)."""
    groups: dict[tuple[int, str, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        if r["section"] == "7.3" and "ep_size" in r["params"]:
            key = (int(r["params"]["tokens"]), r["fabric"], int(r["trial"]))
            groups.setdefault(key, []).append(r)
    out = []
    for (tokens, fabric, trial), rs in groups.items():
        rs = sorted(rs, key=lambda r: int(r["params"]["ep_size"]))
        base = rs[0]
        b0 = base["figures"].get("EP_alltoall_bandwidth_GBps")
        for r in rs[1:]:
            b = r["figures"].get("EP_alltoall_bandwidth_GBps")
            params = {"ep_size": int(r["params"]["ep_size"]), "tokens": tokens,
                      "vs_ep_size": int(base["params"]["ep_size"])}  # fmt: skip
            lost = int(r["figures"].get("incomplete") or 0)
            lost += int(base["figures"].get("incomplete") or 0)
            out.append({
                "section": "7.3", "case": _label(params), "params": params,
                "fabric": fabric, "trial": trial,
                "figures": {"scaling_efficiency": b / b0 if b is not None and b0 else None,
                            "incomplete": lost},
            })  # fmt: skip
    return out


def _label(params: Mapping[str, int]) -> str:
    """A case label as `zcube_lab.core.bmwg.plan.label_of` writes whole numbers (not imported:
    plan imports this module)."""
    return ", ".join(f"{k}={int(v)}" for k, v in params.items())


def note(sections: Sequence[str]) -> list[str]:
    """The run's notes for §7.1 and §7.3."""
    out = []
    if "7.1" in sections or "7.3" in sections:
        out.append(
            "7.1/7.3: an exchange is one layer's dispatch and combine among the EP group (the "
            "first ep_size hosts, DeepEP low-latency shape, top-8, FP8 dispatch, BF16 combine); "
            "EP_alltoall_latency is its first dispatch to its last combine; "
            "EP_alltoall_bandwidth is the bytes a GPU sends in it over the latency's p50, GB/s "
            "per GPU (a 400 Gb/s NIC: at most 50)"
        )
    if "7.3" in sections:
        out.append(
            "7.3: EP sizes as far as the fabric's GPU hosts reach (the draft's 32-96 are not "
            "carried on 16); scaling_efficiency is a size's bandwidth over the smallest's in "
            "the same trial"
        )
    return out


def lab_frames(tokens: int, ep_size: int, ts: TimeScale) -> float:
    """A dispatch per peer in frames of the time scale (for the parameter table)."""
    return ts.lab_bytes(dispatch_bytes(tokens, ep_size)) / ts.mtu


__all__ = [
    "case_params",
    "dispatch_bytes",
    "exchanges",
    "gpu_bytes",
    "scaling_rows",
    "trial_figures",
    "trial_size",
]
