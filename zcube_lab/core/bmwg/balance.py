"""§9.3 of the draft (ECMP and dynamic load balancing under inference traffic), worked out before
any lab (pure): a live-serving test, like §9.4. A case is one traffic scenario under one
load-balancing algorithm; a trial is one `zcube-lab run` of it on a fabric.

The scenarios (`SCENARIOS`), each its own workload profile and run flags, on 16 GPU hosts
(8 servers of 2; half prefill, half decode, as in §9.4):
- `kv`: KV cache transfers only. Prompts of `KV_PROMPT_TOKENS` (16,384 tokens: 1.47 GB of
  GLM-5.1 KV each, the draft's "16 MB+" many times over) at a 0.97 prefix-cache hit rate, so
  prefill is cheap and every prompt's whole KV still moves (kv-heavy's device); expert
  parallelism off (`--ep-servers 1`: no all-to-all).
- `ep`: EP all-to-all dispatches only. Short prompts (`EP_PROMPT_TOKENS`) and longer answers,
  so the exchanges are prefill and decode steps of a few hundred tokens at most (well under the
  draft's 1 MB per peer and layer); EP instances of `EP_SERVERS` servers exchanging with every
  GPU of them (`--alltoall all`) so that they cross the switch tier on every fabric (with
  2-server instances a Clos leaf holds a whole instance, and rail-aligned exchanges stay under
  one ROFT leaf); `--kv-off`, so each KV pull moves one byte.
- `mixed`: both at once: the `kv` requests with the `ep` scenario's expert parallelism (its
  prefill dispatches carry the uncached 3% of each prompt: about twice the KV bytes).
Every scenario at `RATE` requests a second, Poisson.

The load-balancing algorithms (`ALGORITHMS`) are the lab's run policies that spread traffic
with every link up (`zcube_lab.core.policies`): `static` (one path per destination, the
reference without balancing), `ecmp` (select groups hashing each flow over the equal-cost next
hops), `spray` (ECMP, and every KV pull spread over many TCP subflows, each its own hash: MRC's
idea at connection granularity) and `mrc` (ECMP for TCP, and KV pulls as UDP datagrams sprayed
over entropy values that name their paths: packet spraying). `ff` and `recompute` differ from
`static` and `ecmp` only once a link fails, so they are not algorithms here. `spray` and `mrc`
change the KV transport only: the `ep` scenario does not run them (its traffic would be
`ecmp`'s). Every fabric takes every algorithm. On ZCube with one link per A-B pair each KV lane
and EP connection leaves from the NIC port whose path reaches the address it sends to (the KV
source map), so every switch on its way has one next hop: the balance is the hosts' (both NIC
ports, the two link-disjoint 2-hop paths), and the algorithms route alike there.

Which links (`tier_links`): the fabric's switch-to-switch links of one tier (leaf-spine on ROFT
and Clos, A-B on ZCube; the tier with the most links when a fabric file has several). Host
links are left out: what they carry is set by where the engines are placed, not by the
balancing. A link's utilization (`link_utilization`) is the busier of its two directions'
mean over the run window (the run's `link_util`, bytes over the window against the link's
emulated rate): KV moves one way, prefill to decode, so the other direction carries only
acknowledgements, and a link is as loaded as its busier direction.

Per trial (`trial_figures`): Jain's index over those links' utilizations (`JFI`, 1 when every
link is equally loaded), the highest and lowest utilization in % (`Link_utilization_max_pct`,
`Link_utilization_min_pct`), the mean, the measured max/mean (`max_mean_ratio`: how much more
the hottest link carries than an even spread would give it) and the fabric's structural
oversubscription (`oversubscription_ratio`, host-facing over switch-facing capacity of its
most oversubscribed switch with hosts; 1 on the lab's three fabrics).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zcube_lab.core.bmwg import workload
from zcube_lab.core.bmwg.trials import jain
from zcube_lab.core.bmwg.workload import single_turn
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric

SECTION = "9.3"
MODEL = workload.MODEL
# GLM-5.1's KV bytes per token (docs/DOMAIN.md, KV bytes per token).
KV_BYTES_PER_TOKEN = 89_856
KV_PROMPT_TOKENS = 16384
KV_OUTPUT_TOKENS = 32
# Prefill then computes 3% of a prompt, and its EP dispatch carries those tokens only: at 0.9
# the first mixed run's EP moved 6.8 times the KV bytes (2.5 MB of lab bytes a request against
# 0.37 MB) and loaded the 2-core machine into TCP timeouts; at 0.97 EP is about twice KV.
KV_PREFIX_HIT = 0.97
EP_PROMPT_TOKENS = 128
EP_OUTPUT_TOKENS = 128
EP_SERVERS = 4
RATE = 6.0  # req/s, every scenario
# The workload profile's prefill servers, written for 4 servers (half: 4 of 8 servers).
PROFILE_PREFILL_SERVERS = 2
MIN_GPUS = 16  # 8 servers of 2: EP instances of 4 servers on each side
DRAFT_KV_BYTES = 16e6  # the draft's "large flows, 16 MB+"
DRAFT_EP_BYTES = 1e6  # the draft's "small flows, < 1 MB"


@dataclass(frozen=True)
class Scenario:
    """One traffic scenario: its requests and the run flags that shape its traffic."""

    name: str
    what: str
    prompt_tokens: int
    output_tokens: int
    prefix_hit: float
    argv: tuple[str, ...]


SCENARIOS: Mapping[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("kv", "KV cache transfers only", KV_PROMPT_TOKENS, KV_OUTPUT_TOKENS,
                 KV_PREFIX_HIT, ("--ep-servers", "1")),
        Scenario("ep", "EP all-to-all dispatches only", EP_PROMPT_TOKENS, EP_OUTPUT_TOKENS,
                 0.0, ("--ep-servers", str(EP_SERVERS), "--alltoall", "all", "--kv-off")),
        Scenario("mixed", "KV cache transfers and EP dispatches", KV_PROMPT_TOKENS,
                 KV_OUTPUT_TOKENS, KV_PREFIX_HIT,
                 ("--ep-servers", str(EP_SERVERS), "--alltoall", "all")),
    )
}  # fmt: skip

# Algorithm -> the `zcube-lab run` flags that select it.
ALGORITHMS: Mapping[str, tuple[str, ...]] = {
    "static": ("--policy", "static"),
    "ecmp": ("--policy", "ecmp"),
    "spray": ("--policy", "spray"),
    "mrc": ("--policy", "ecmp", "--kv-transport", "mrc"),
}
DEFAULT_ALGORITHMS = ("static", "ecmp", "spray")
KV_ONLY = ("spray", "mrc")  # change the KV transport only: no `ep` case


def algorithms(text: str) -> tuple[str, ...]:
    """Algorithms from "ecmp,spray" (empty: `DEFAULT_ALGORITHMS`), in `ALGORITHMS`' order;
    ConfigError naming the field and the allowed ones."""
    if not text.strip():
        return DEFAULT_ALGORITHMS
    names = {x.strip() for x in text.split(",") if x.strip()}
    bad = sorted(names - set(ALGORITHMS))
    if bad or not names:
        raise ConfigError("balance", text, f"comma-separated from {list(ALGORITHMS)}")
    return tuple(a for a in ALGORITHMS if a in names)


def cases(algs: Sequence[str]) -> list[tuple[Scenario, str]]:
    """(scenario, algorithm) of every case, scenario by scenario; the `ep` scenario without
    the algorithms that change KV only."""
    return [(s, a) for s in SCENARIOS.values() for a in algs
            if not (s.name == "ep" and a in KV_ONLY)]  # fmt: skip


def case_params(scenario: Scenario, alg: str) -> dict[str, Any]:
    return {"traffic": scenario.name, "balance": alg}


def case_label(scenario: Scenario, alg: str) -> str:
    """The rows' case, as `zcube_lab.core.bmwg.plan.label_of` writes its params."""
    return ", ".join(f"{k}={v}" for k, v in case_params(scenario, alg).items())


def case_argv(scenario: Scenario, alg: str) -> tuple[str, ...]:
    """The `zcube-lab run` flags of a case: its scenario's, then its algorithm's."""
    return (*scenario.argv, *ALGORITHMS[alg])


def profile(scenario: Scenario, rate: float = RATE) -> dict[str, Any]:
    """The workload profile of a scenario: single-turn requests of its lengths at `rate`
    (Poisson), its prefix-cache hit rate, half the servers prefilling."""
    out = single_turn(
        f"bmwg-9.3-{scenario.name}",
        f"BMWG §9.3, {scenario.what}: single-turn requests of {scenario.prompt_tokens} prompt "
        f"and {scenario.output_tokens} output tokens at {rate:g} req/s, prefix-cache hit rate "
        f"{scenario.prefix_hit:g}, half the servers prefill.",
        scenario.prompt_tokens, scenario.output_tokens, rate,
        prefill_servers=PROFILE_PREFILL_SERVERS,
    )  # fmt: skip
    out["prefix_cache_hit_rate"] = scenario.prefix_hit
    return out


def check_gpus(gpus: int) -> None:
    """The EP scenarios' instances of `EP_SERVERS` servers need 8 servers (16 GPU hosts)."""
    if gpus < MIN_GPUS:
        raise ConfigError(
            "gpus", gpus, f"at least {MIN_GPUS} for §9.3 (EP instances of {EP_SERVERS} servers)"
        )


# -- links -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TierLink:
    """A switch-to-switch link: its name, and its two directions as the run's `link_util`
    names them (`zcube_lab.emulator.results.fabric.linkstats`: `a0:5->b1:1`)."""

    name: str
    forward: str
    back: str


def tier_links(fabric: Fabric) -> list[TierLink]:
    """The switch-to-switch links of the fabric's tier with the most links (by the two
    switches' roles: leaf-spine, A-B), in the fabric's order."""
    trunks = [lk for lk in fabric.links if fabric.is_switch(lk.node1)
              and fabric.is_switch(lk.node2)]  # fmt: skip

    def tier(lk: Any) -> tuple[str, ...]:
        return tuple(sorted((fabric.switch(lk.node1).role, fabric.switch(lk.node2).role)))

    if not trunks:
        return []
    counts = Counter(tier(lk) for lk in trunks)
    top = max(sorted(counts), key=lambda t: counts[t])
    out = []
    for lk in trunks:
        if tier(lk) != top:
            continue
        a, b = f"{lk.node1}:{lk.port1}", f"{lk.node2}:{lk.port2}"
        out.append(TierLink(f"{a}<->{b}", f"{a}->{b}", f"{b}->{a}"))
    return out


def link_utilization(
    link_util: Mapping[str, Mapping[str, Any]], links: Sequence[TierLink]
) -> dict[str, float] | None:
    """Each link's utilization (a fraction of its rate): the larger of its two directions'
    means in the run's `link_util` (a direction it does not name counts 0). None when it names
    neither direction of any link (a run without link counters)."""
    if not any(lk.forward in link_util or lk.back in link_util for lk in links):
        return None

    def mean(name: str) -> float:
        return float((link_util.get(name) or {}).get("mean") or 0.0)

    return {lk.name: max(mean(lk.forward), mean(lk.back)) for lk in links}


def structural_oversubscription(fabric: Fabric) -> float:
    """Host-facing over switch-facing capacity of the most oversubscribed switch with hosts
    (1 at 1:1): the fabric description's own figure (`structure.oversubscription`)."""
    from zcube_lab.core.fabric.structure import oversubscription

    return oversubscription(fabric)


def link_figures(util: Mapping[str, float] | None) -> dict[str, Any]:
    """JFI, max, min and mean utilization (%) and max/mean over the links' utilizations (None
    each without links or, for JFI and max/mean, when no link carried anything)."""
    xs = list((util or {}).values())
    if not xs:
        return {k: None for k in ("JFI", "Link_utilization_max_pct", "Link_utilization_min_pct",
                                  "Link_utilization_mean_pct", "max_mean_ratio")}  # fmt: skip
    mean = sum(xs) / len(xs)
    return {
        "JFI": jain(xs) if mean > 0 else None,
        "Link_utilization_max_pct": 100 * max(xs),
        "Link_utilization_min_pct": 100 * min(xs),
        "Link_utilization_mean_pct": 100 * mean,
        "max_mean_ratio": max(xs) / mean if mean > 0 else None,
    }


def trial_figures(summary: Mapping[str, Any], fabric: Fabric) -> dict[str, Any]:
    """A trial's figures from its run's summary (`link_util`, the server's byte counters, the
    KPIs) and fabric: `link_figures` over the tier's links, the structural oversubscription,
    the links counted, the KV and EP bytes the engines moved (lab bytes: which traffic ran),
    TTFT p99 (modelled ms) and `untrusted` (1 when the lab's verdict did not trust the run;
    under `--kv-off`, the EP-only scenario's, the verdict itself does not judge the one-byte KV
    pulls: `zcube_lab.emulator.verdict.network`)."""
    links = tier_links(fabric)
    figs = link_figures(link_utilization(summary.get("link_util") or {}, links))
    server = summary.get("server") or {}
    over = structural_oversubscription(fabric)
    figs["oversubscription_ratio"] = None if math.isinf(over) else over
    figs["links"] = len(links)
    figs["KV_bytes_lab"] = server.get("kv_bytes")
    figs["EP_bytes_lab"] = server.get("alltoall_bytes")
    figs["TTFT_p99_ms"] = ((summary.get("bmwg") or {}).get("TTFT") or {}).get("p99")
    figs["requests"] = (summary.get("client") or {}).get("completed")
    figs["untrusted"] = 0 if summary.get("trustworthy") else 1
    return figs
