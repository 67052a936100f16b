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
