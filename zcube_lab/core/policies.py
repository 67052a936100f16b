"""Run policies: what a run's `--policy` sets up (routing, controller, transport), as plain data.

Glossary: a *run* policy (here, `RUN_POLICIES`) picks a *routing* policy for the switches
(`zcube_lab.controller.rules.ROUTING_POLICIES`: ecmp, static, ff) and says whether the controller
recomputes and whether senders spray. The gateway's *balancing* policy (`zcube_lab.serving.routing`)
is a third, unrelated choice.

A policy is what reacts when a link dies, and where: the switches (`ff`, and `ecmp` among
equal-cost ports), the controller (`recompute`), the end hosts (`spray`) or nobody (`static`).

- `static`: one output port per destination; nothing reacts.
- `ecmp`: select groups over equal-cost ports; a switch skips a bucket whose port is down
  (a local repair, among equal-cost ports only).
- `ff`: fast-failover groups (primary, the other equal-cost ports, loop-free detours); the
  switch takes the first live bucket.
- `recompute`: ecmp rules; the controller recomputes shortest paths without the dead link and
  pushes the difference to every switch.
- `spray`: ecmp rules; each KV pull runs `SPRAY_STREAMS` subflows per address (over
  `SPRAY_CHUNK_BYTES` chunks, so a small pull still has that many), and a subflow
  with requests outstanding that receives nothing for `SPRAY_STALL_S` is retired: its bytes go
  to the others and a fresh subflow (new source port, new ECMP hash) replaces it.
Only `spray` changes the KV transport; the others keep the run's `--kv-streams` lanes.

Spraying is MRC's idea at our granularity: a subflow (TCP connection, its own source port, so its
own ECMP hash) stands for an MRC path id; OVS cannot spray packets of one connection.
"""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError

SPRAY_STREAMS = 8  # subflows per KV address: 16 per pull on a dual-port ZCube NIC
SPRAY_STALL_S = 0.5  # no byte for this long on a subflow with requests outstanding: retire it
# A pull has as many subflows as it has chunks at most: at bandwidth scale 4000 a 50K-token
# GLM-5.1 prompt is ~1.1 MB, 4 chunks of the default 256 KiB, so spraying uses smaller ones.
SPRAY_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class RunPolicy:
    """What a run's `--policy` sets up."""

    name: str
    routing: (
        str  # the routing policy (zcube_lab.controller.rules.ROUTING_POLICIES): static, ecmp or ff
    )
    recompute: bool  # the controller reroutes on port-status events
    spray: bool  # KV pulls spread over many subflows and retire stalled ones
    summary: str


RUN_POLICIES: dict[str, RunPolicy] = {
    p.name: p
    for p in (
        RunPolicy("static", "static", False, False, "one path per destination, no reaction"),
        RunPolicy("ecmp", "ecmp", False, False, "ECMP select groups; dead buckets skipped"),
        RunPolicy("ff", "ff", False, False, "fast-failover groups with loop-free detours"),
        RunPolicy("recompute", "ecmp", True, False, "ECMP; controller recomputes on port status"),
        RunPolicy(
            "spray", "ecmp", False, True, "ECMP; senders spray subflows, retire stalled ones"
        ),
    )
}
# Earlier name of `static`, still accepted.
ALIASES = {"single": "static"}


def get_policy(name: str) -> RunPolicy:
    """The run policy called `name`, or a ConfigError naming the allowed ones."""
    key = ALIASES.get(name, name)
    if key not in RUN_POLICIES:
        raise ConfigError("policy", name, f"one of {list(RUN_POLICIES)}")
    return RUN_POLICIES[key]
