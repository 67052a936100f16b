"""`zcube-lab bmwg run 13.3`: the draft's long-running serving stability in a short form on each
fabric (`zcube_lab.core.bmwg.soak` says what a trial is and what stands for each of the
draft's figures), run by the live sections' runner (`zcube_lab.emulator.bmwg.live`): each
trial is one `zcube-lab run --policy ff --fail 'link ... for 1s'` whose link is §12.3's
(`zcube_lab.emulator.bmwg.linkfail.links_of`)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcube_lab.core.bmwg import linkfail as lf
from zcube_lab.core.bmwg import soak
from zcube_lab.emulator.bmwg.linkfail import fault_argv, links_of
from zcube_lab.emulator.bmwg.live import LiveCase, LiveSection, figure_text, trusted_text

if TYPE_CHECKING:
    from zcube_lab.core.bmwg.config import BmwgConfig


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def switch_queue_packets(config: Mapping[str, Any]) -> int | None:
    """The switch ports' queue in packets, from the run's config.json (the largest of its
    queue classes)."""
    sizes = [int(q["queue_packets"]) for q in config.get("queues") or [] if q.get("queue_packets")]
    return max(sizes) if sizes else None


def figures(run: Path, hosts: tuple[str, ...]) -> dict[str, Any]:
    """A trial's figures from its run folder (`soak.trial_figures`)."""
    log = run / "logs" / "controller.log"
    return soak.trial_figures(
        _json(run / "summary.json"),
        _json(run / "health.json"),
        _jsonl(run / "requests.jsonl"),
        _jsonl(run / "faults.jsonl"),
        log.read_text(errors="replace") if log.exists() else "",
        switch_queue_packets(_json(run / "config.json")),
        hosts,
    )


def section(cfg: BmwgConfig) -> LiveSection:
    """§13.3 on the run's fabrics: each flaps §12.3's link at every trial's midpoint."""
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.core.fabric.scaledown import scaled_fabric

    soak.check_trial_seconds(cfg.trial_seconds)
    fabrics = cfg.fabric_kinds
    links = links_of(fabrics, cfg.gpus)
    specs = {k: soak.flap_spec(links[k], cfg.trial_seconds) for k in fabrics}
    hosts = {k: tuple(h.name for h in scaled_fabric(k, cfg.gpus).hosts) for k in fabrics}
    test = test_of(soak.SECTION)
    argv = fault_argv(specs, cfg.gpus)

    def row(run: Path, fabric: str, _case: LiveCase) -> dict[str, Any]:
        figs = figures(run, hosts[fabric])
        return {
            "flapped_link": links[fabric].to_dict(),
            "fail": specs[fabric],
            "buffer_peak_port": figs.pop("buffer_peak_port"),  # a name: not a figure
            "figures": figs,
        }

    return LiveSection(
        section=soak.SECTION,
        cases=(
            LiveCase(
                "13.3",
                soak.case_label(),
                {"prompt_tokens": lf.PROMPT_TOKENS, "rate": lf.RATE, "flap_s": soak.FLAP_S},
                lf.profile(),
                shown="",
            ),
        ),
        row=row,
        headline=headline,
        head={
            "rate": lf.RATE,
            "prompt_tokens": lf.PROMPT_TOKENS,
            "policy": lf.POLICY,
            "flap_at_s": round(soak.FLAP_AT * cfg.trial_seconds, 3),
            "flap_s": soak.FLAP_S,
            "flapped_links": {k: v.to_dict() for k, v in links.items()},
            "not_representable": soak.NOT_HERE,
        },
        notes=(
            "13.3: a short form of the draft's 24-hour soak: live serving runs at the default "
            f"time scale, routing policy {lf.POLICY}; each fabric's §12.3 link flaps (down "
            f"{soak.FLAP_S:g} s) at the trial's midpoint. Stand-ins: KV pull failures for QP "
            "state transitions, the largest switch queue over its size for the buffer, "
            "OpenFlow sessions lost for adjacency flaps, TCP retransmissions for RDMA's; FEC "
            "is not representable (veth pairs have none); recovery_time_s as §12.3 defines "
            "it; TTFT_p99_drift: the last third's TTFT p99 over the first third's",
        ),
        parameter_lines=(
            "§13.3 parameters (the draft's | this run's):",
            *soak.parameter_lines(cfg.trials, cfg.trial_seconds, test.trials),
            *(f"  {kind} flaps {link.describe()}" for kind, link in links.items()),
        ),
        fabric_argv=argv,
    )


def headline(f: Mapping[str, Any]) -> str:
    num = functools.partial(figure_text, f)
    trusted = trusted_text(f)
    return (
        f"flap held {num('fault_held_s', '.2f')} s, failed {f.get('failed_requests')} of "
        f"{f.get('requests')}, recovered in {num('recovery_time_s')} s, TTFT p99 drift "
        f"{num('TTFT_p99_drift', '.2f')}, max switch queue {num('Buffer_utilization_pct')}%, "
        f"TCP retransmissions {f.get('TCP_retransmissions')}, sessions lost "
        f"{f.get('adjacency_flaps')}, {trusted}"
    )
