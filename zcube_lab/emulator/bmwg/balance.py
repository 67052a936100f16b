"""`zcube-lab bmwg run 9.3`: link utilization uniformity under KV only, EP only and mixed
traffic, per load-balancing algorithm, on each fabric, as live serving runs
(`zcube_lab.core.bmwg.balance` says what a scenario, an algorithm and a link's utilization
are), run by the live sections' runner (`zcube_lab.emulator.bmwg.live`). Each trial's figures
come from its run's summary (the switch ports' byte counters over the run window, per link
direction) and the fabric its config.json records."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcube_lab.core.bmwg import balance as b93
from zcube_lab.emulator.bmwg.live import LiveCase, LiveSection, figure_text, trusted_text

if TYPE_CHECKING:
    from zcube_lab.core.bmwg.config import BmwgConfig

# The run drains its requests after the load: the EP scenario's 128-token answers take ~4 s.
DRAIN_S = 5.0


def run_fabric(run_dir: Path) -> Any:
    """The fabric a run was built on, from its config.json."""
    from zcube_lab.core.fabric.builders import build_fabric
    from zcube_lab.core.fabric.description import FabricSpec

    cfg = json.loads((run_dir / "config.json").read_text())
    return build_fabric(FabricSpec.from_json(json.dumps(cfg["fabric"])))


def trial_row(run_dir: Path) -> dict[str, Any]:
    """A trial's figures, every tier link's utilization (%) and the rules the lab's verdict did
    not apply to the run, with why (`not_judged`: KV pulls under --kv-off), from its run folder."""
    summary = json.loads((run_dir / "summary.json").read_text())
    fabric = run_fabric(run_dir)
    util = b93.link_utilization(summary.get("link_util") or {}, b93.tier_links(fabric))
    return {
        "figures": b93.trial_figures(summary, fabric),
        "link_util_pct": {k: round(100 * v, 4) for k, v in (util or {}).items()},
        "not_judged": list((summary.get("health") or {}).get("not_judged") or []),
    }


def section(cfg: BmwgConfig) -> LiveSection:
    """§9.3 over the scenarios and the run's algorithms."""
    b93.check_gpus(cfg.gpus)
    algs = cfg.balance_algorithms
    cases = tuple(
        LiveCase(
            f"{s.name}-{a}",
            b93.case_label(s, a),
            b93.case_params(s, a),
            b93.profile(s),
            argv=b93.case_argv(s, a),
            shown=f"{s.name} {a}",
        )
        for s, a in b93.cases(algs)
    )
    return LiveSection(
        section=b93.SECTION,
        cases=cases,
        row=lambda run, _fabric, _case: trial_row(run),
        headline=headline,
        head={
            "algorithms": list(algs),
            "scenarios": {
                s.name: {
                    "what": s.what,
                    "prompt_tokens": s.prompt_tokens,
                    "output_tokens": s.output_tokens,
                    "prefix_cache_hit_rate": s.prefix_hit,
                    "argv": list(s.argv),
                }
                for s in b93.SCENARIOS.values()
            },
            "rate": b93.RATE,
            "ep_servers": b93.EP_SERVERS,
            "kv_bytes_per_pull": b93.KV_PROMPT_TOKENS * b93.KV_BYTES_PER_TOKEN,
            "ep_dispatch_bytes": ep_dispatch_bytes(),
        },
        notes=NOTES,
        parameter_lines=tuple(parameter_lines(algs, cfg.trials, cfg.trial_seconds)),
        drain_s=DRAIN_S,
    )


def ep_dispatch_bytes() -> dict[str, float]:
    """Real bytes one EP peer receives in one MoE layer's dispatch: per token, and for the EP
    scenario's prompt (its prefill step) and a decode batch of 8 tokens, on an instance of
    `EP_SERVERS` servers of 2 GPU hosts exchanging with every GPU of the others."""
    from zcube_lab.serving.eptraffic import EpTraffic
    from zcube_lab.serving.models import get_profile

    nodes = 1 + 2 * (b93.EP_SERVERS - 1)  # itself and the other servers' GPU hosts
    t = EpTraffic(get_profile(b93.MODEL), nodes)
    return {
        "per_token": t.layer_bytes(1)[0],
        "prefill_ep": t.layer_bytes(b93.EP_PROMPT_TOKENS)[0],
        "decode_8": t.layer_bytes(8)[0],
    }


def headline(f: Mapping[str, Any]) -> str:
    num = functools.partial(figure_text, f)
    trusted = trusted_text(f)
    return (
        f"JFI over {f.get('links')} switch links {num('JFI', '.3f')}, utilization max "
        f"{num('Link_utilization_max_pct', '.2f')}% min {num('Link_utilization_min_pct', '.2f')}"
        f"% (max/mean {num('max_mean_ratio', '.2f')}, oversubscription "
        f"{num('oversubscription_ratio', 'g')}), {trusted}"
    )


def parameter_lines(algs: Sequence[str], trials: int, trial_seconds: float) -> list[str]:
    """The draft's parameters beside the run's, printed before it starts."""
    from zcube_lab.core.bmwg.catalogue import test_of

    t = test_of(b93.SECTION)
    kv = b93.KV_PROMPT_TOKENS * b93.KV_BYTES_PER_TOKEN
    ep = ep_dispatch_bytes()
    return [
        "§9.3 parameters, draft -> this run:",
        f"  (a) KV only, flows of {b93.DRAFT_KV_BYTES / 1e6:g} MB+ -> KV pulls of "
        f"{kv / 1e9:.2f} GB ({b93.KV_PROMPT_TOKENS:,}-token prompts, {b93.MODEL}), prefix-cache "
        f"hit {b93.KV_PREFIX_HIT:g}, no expert parallelism",
        f"  (b) EP only, flows under {b93.DRAFT_EP_BYTES / 1e6:g} MB -> dispatches of "
        f"{ep['prefill_ep'] / 1e3:,.0f} KB (prefill, {b93.EP_PROMPT_TOKENS} tokens) and "
        f"{ep['decode_8'] / 1e3:,.0f} KB (decode, 8 tokens) per peer and MoE layer; instances of "
        f"{b93.EP_SERVERS} servers, all-to-all over every GPU; KV pulls of one byte",
        "  (c) mixed -> (a)'s requests with (b)'s expert parallelism",
        f"  load: not named -> {b93.RATE:g} req/s Poisson in every scenario",
        f"  load balancing algorithms -> {', '.join(algs)} (the run policies; "
        f"{', '.join(b93.KV_ONLY)} change KV only: no EP-only case)",
        "  links: -> the switch-to-switch tier (leaf-spine, A-B), each link at its busier "
        "direction's mean",
        f"  trials: {t.trials} x {t.trial_s:g} s -> {trials} x {trial_seconds:g} s",
    ]


NOTES = (
    "9.3: live serving runs at the default time scale; a link's utilization is the busier of "
    "its two directions' mean over the run window (switch port byte counters), over the "
    "switch-to-switch links of the fabric's one switch tier (host links follow the placement, "
    "not the balancing); JFI, max and min over those links; oversubscription_ratio is the "
    "fabric's structural one, max_mean_ratio the measured hottest link over the mean",
    "9.3: in the EP-only scenario each KV pull moves one byte (--kv-off), all fixed cost; the "
    "lab's verdict does not judge KV pulls in a run with KV turned off (a row's not_judged "
    "says so), and every other rule decides `untrusted`",
)
