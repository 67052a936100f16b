"""`zcube-lab bmwg run 10.1`: the draft's TTFT under varying prompt lengths on each fabric, as
live serving runs of single requests (`zcube_lab.core.bmwg.ttftlen` says what a case, a trial
and a repetition are), run by the live sections' runner (`zcube_lab.emulator.bmwg.live`). After
each trial every request's TTFT split is read from the run's gateway and KV logs, its TTFT from
the client's requests.jsonl."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcube_lab.core.bmwg import configs
from zcube_lab.core.bmwg import ttft as t61
from zcube_lab.core.bmwg import ttftlen as t101
from zcube_lab.emulator.bmwg.live import LiveCase, LiveSection, figure_text, trusted_text

if TYPE_CHECKING:
    from zcube_lab.core.bmwg.config import BmwgConfig

NIC_GBPS = 400.0  # the modelled NIC a KV pull crosses (`zcube_lab.core.bmwg.scaling`)


def expected_e2e_s(prompt_tokens: int) -> float:
    """A lone request's expected end-to-end time on GLM-5.1's compute model (modelled s)."""
    from zcube_lab.serving.models import decode_step_seconds, get_profile, prefill_step_seconds

    p = get_profile(t101.MODEL)
    pull = p.kv_bytes_per_token * prompt_tokens * 8 / (NIC_GBPS * 1e9)
    step = decode_step_seconds(p, 1, prompt_tokens + t101.OUTPUT_TOKENS)
    return t101.e2e_estimate_s(prefill_step_seconds(p, prompt_tokens), pull, step)


def gaps(lengths: tuple[int, ...]) -> dict[int, float]:
    """The send gap of each prompt length (seconds)."""
    return {n: t101.gap_s(expected_e2e_s(n)) for n in lengths}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def trial_row(run_dir: Path) -> dict[str, Any]:
    """A trial's figures from its folder: summary.json, requests.jsonl and logs/."""
    from zcube_lab.emulator.results.fabric.transfers import (
        GATEWAY_LOG,
        KV_LOG_PREFIX,
        read_logs,
        request_parts,
    )

    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("dilation", 1) != 1:  # the logs' wall seconds would need the run's clock
        raise RuntimeError(f"§10.1 {run_dir.name}: a dilated run; §10.1 runs undilated")
    logs = run_dir / "logs"
    parts, left_out = request_parts(read_logs(logs, KV_LOG_PREFIX), _jsonl(logs / GATEWAY_LOG))
    figs = t101.trial_figures(summary, _jsonl(run_dir / "requests.jsonl"), parts)
    figs["parts_left_out"] = left_out
    return {"figures": figs}


def section(cfg: BmwgConfig) -> LiveSection:
    """§10.1 over the run's prompt lengths (the draft's eight unless --prompts)."""
    t61.check_trial_seconds(cfg.trial_seconds)
    lengths = t101.prompt_lengths(cfg.prompts)
    gap = gaps(lengths)
    rows = t101.parameter_rows(lengths, gap, cfg.trials, cfg.trial_seconds)
    return LiveSection(
        section=t101.SECTION,
        cases=tuple(
            LiveCase(
                str(n),
                t101.case_label(n),
                {"prompt_tokens": n, "gap_s": gap[n]},
                t101.profile(n, gap[n]),
                shown=f"{n} tokens",
            )
            for n in lengths
        ),
        row=lambda run, _fabric, _case: trial_row(run),
        headline=headline,
        head={
            "prompts": list(lengths),
            "gaps_s": {str(n): gap[n] for n in lengths},
            "output_tokens": t101.OUTPUT_TOKENS,
            "configuration": configs.LAB.id,
            "configuration_terms": configs.describe(configs.LAB),
        },
        notes=NOTES,
        parameter_lines=(
            "§10.1 parameters, draft -> this run:",
            *(f"  {name}: {draft} -> {here}" for name, draft, here in rows),
        ),
        drain_s=max(gap.values()),
    )


def headline(f: Mapping[str, Any]) -> str:
    num = functools.partial(figure_text, f)
    trusted = trusted_text(f)
    return (
        f"TTFT p50 {num('TTFT_p50_ms')} / p95 {num('TTFT_p95_ms')} / p99 {num('TTFT_p99_ms')} "
        f"ms, T_transfer p50 {num('T_transfer_p50_ms')} ms "
        f"({num('T_transfer_over_TTFT_p50', '.1%')} of TTFT), {f.get('repetitions')} "
        f"requests, at most {f.get('in_flight_max')} in flight, {trusted}"
    )


NOTES = (
    "10.1: live serving runs at the default time scale, one request at a time (fixed "
    "arrivals, one every gap_s, the open-loop generator's only mode; at most one in flight, "
    "checked per trial from requests.jsonl); TTFT at the client, its split per request from "
    "the gateway's and the KV logs as in 6.1, T_transfer/TTFT over the gateway's TTFT; the "
    "configuration is CFG-E (GLM-5.1); a run the lab's verdict did not trust, or whose "
    "requests overlapped, is kept, its comparison out of reach",
)
