"""Recordings made up for a test rather than recorded (pure): the IETF draft's incast bursts
(draft-calabria-bmwg-ai-fabric-inference-bench-05 §8.2: N_burst transfers of 16 MB arriving
within a window) and its EP/KV mix (§7.4), and the 7-to-1 victim flow."""

from __future__ import annotations

import random
from collections.abc import Sequence

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.replay.recording import Recording, Transfer


def incast(
    hosts: Sequence[str],
    receiver: str,
    senders: int,
    nbytes: float,
    within_s: float = 0.0,
    seed: int = 1,
) -> Recording:
    """`senders` KV transfers of `nbytes` real bytes into `receiver`, their starts spread
    uniformly at random over [0, within_s) (all at 0 when within_s is 0), from the hosts after
    the receiver in the fabric's order (wrapping)."""
    if receiver not in hosts:
        raise ConfigError("receiver", receiver, f"one of the fabric's hosts ({hosts[0]}...)")
    if not 1 <= senders < len(hosts):
        raise ConfigError("senders", senders, f"1 to {len(hosts) - 1} (the other hosts)")
    if nbytes <= 0 or within_s < 0:
        raise ConfigError("incast", (nbytes, within_s), "positive bytes and a window >= 0")
    i = hosts.index(receiver)
    others = [hosts[(i + j) % len(hosts)] for j in range(1, len(hosts))]
    rng = random.Random(seed)
    starts = sorted(rng.uniform(0, within_s) if within_s else 0.0 for _ in range(senders))
    ts = tuple(Transfer(n, "kv", starts[n], others[n], receiver, nbytes) for n in range(senders))
    return Recording(ts, tuple(hosts), {"synthetic": "incast", "within_s": within_s})


def victim(
    hosts: Sequence[str],
    receiver: str,
    senders: Sequence[str],
    victim_pair: tuple[str, str],
    nbytes: float,
    victim_bytes: float,
) -> Recording:
    """A `len(senders)`-to-1 incast of `nbytes` each into `receiver`, and beside it one victim
    transfer of `victim_bytes` between `victim_pair`, which shares the first sender's NIC but goes
    elsewhere (its time against its time alone is the victim's share of its rate). The victim is
    class "other", the incast "kv"."""
    src, dst = victim_pair
    for h in (receiver, *senders, src, dst):
        if h not in hosts:
            raise ConfigError("victim host", h, "hosts of the fabric")
    if dst == receiver or src == dst:
        raise ConfigError("victim", victim_pair, "a pair going elsewhere than the incast")
    ts = [Transfer(i, "kv", 0.0, s, receiver, nbytes) for i, s in enumerate(senders)]
    ts.append(Transfer(len(ts), "other", 0.0, src, dst, victim_bytes))
    return Recording(tuple(ts), tuple(hosts), {"synthetic": "victim"})


def ep_kv_mix(
    hosts: Sequence[str],
    ep_group: Sequence[str],
    kv_sources: Sequence[str],
    kv_load: float,
    layers: int,
    tokens: int = 128,
    top_k: int = 8,
    hidden: int = 7168,
    gap_s: float = 50e-6,
    kv_bytes: float = 16e6,
    nic_gbps: float = 400.0,
    seed: int = 1,
) -> Recording:
    """The draft's §7.4 mix: an EP group exchanging all-to-all layer by layer (DeepEP's
    low-latency shape: `tokens` tokens a GPU, each to `top_k` experts spread evenly over the
    group; dispatch in FP8 with a 4-byte scale per 128 values, combine in BF16; each member's
    next layer waits for every combine addressed to it plus `gap_s` of compute), and KV pulls of
    `kv_bytes` from `kv_sources` into the EP members (decode GPUs receive KV while they run EP),
    Poisson, at `kv_load` of the members' NIC capacity over the EP's uncontended span. With
    `kv_load` 0 only the EP; with `layers` 0 only the KV (over one ms)."""
    g = len(ep_group)
    if g < 2 and layers:
        raise ConfigError("ep group", list(ep_group), "at least 2 hosts")
    for h in (*ep_group, *kv_sources):
        if h not in hosts:
            raise ConfigError("ep/kv host", h, "hosts of the fabric")
    if not 0 <= kv_load < 1:
        raise ConfigError("kv load", kv_load, "a fraction from 0 to below 1")
    per_pair_tokens = tokens * top_k / g
    dispatch = per_pair_tokens * (hidden + hidden / 128 * 4)
    combine = per_pair_tokens * hidden * 2
    out: list[Transfer] = []
    into: dict[str, list[int]] = {m: [] for m in ep_group}  # last layer's combines into m
    for layer in range(layers):
        tag = f"ep/l{layer}"
        new_into: dict[str, list[int]] = {m: [] for m in ep_group}
        for m in ep_group:
            for j in ep_group:
                if j == m:
                    continue
                after = tuple(into[m])
                d = Transfer(len(out), "ep", 0.0, m, j, dispatch, after,
                             gap_s if after else 0.0, tag)  # fmt: skip
                out.append(d)
                c = Transfer(len(out), "ep", 0.0, j, m, combine, (d.id,), 0.0, tag)
                out.append(c)
                new_into[m].append(c.id)
        into = new_into
    # one layer moves (g - 1) x (dispatch + combine) through each member's NIC each way
    layer_s = (g - 1) * (dispatch + combine) * 8 / (nic_gbps * 1e9) + gap_s
    span = layers * layer_s if layers else 1e-3
    if kv_load > 0 and kv_sources:
        rng = random.Random(seed)
        rate = kv_load * len(ep_group) * nic_gbps * 1e9 / 8 / kv_bytes  # pulls per second
        t = rng.expovariate(rate)
        while t < span:
            src, dst = rng.choice(list(kv_sources)), rng.choice(list(ep_group))
            out.append(Transfer(len(out), "kv", t, src, dst, kv_bytes))
            t += rng.expovariate(rate)
    meta = {
        "synthetic": "ep_kv_mix",
        "kv_load": kv_load,
        "layers": layers,
        "ep_group": list(ep_group),
        "layer_s": layer_s,
        "dispatch_bytes_per_pair": dispatch,
        "combine_bytes_per_pair": combine,
    }
    return Recording(tuple(out), tuple(hosts), meta)
