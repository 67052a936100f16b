"""`zcube-lab bmwg run 11.1`: the draft's aggregate tokens per second on each fabric, as live
serving runs up a fixed ladder of offered rates (`zcube_lab.core.bmwg.throughput` says what a
rung, a trial and the SLO boundary are), run by the live sections' runner
(`zcube_lab.emulator.bmwg.live`) with `--prefill-servers` setting the cell's split. After each
trial the client's request records are held to the per-request SLO for goodput
(`zcube_lab.emulator.results.run.goodput`); the link utilization is the run summary's per link
direction (`link_util`, from the switches' port counters in its Prometheus)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcube_lab.core.bmwg import throughput as t111
from zcube_lab.emulator.bmwg.live import LiveCase, LiveSection, figure_text, trusted_text

if TYPE_CHECKING:
    from zcube_lab.core.bmwg.config import BmwgConfig

# The run drains its requests after the load: above the knee the prefill queue holds a few
# seconds more.
DRAIN_S = 5.0


def prefill_step_s() -> float:
    """GLM-5.1's modelled prefill of one `PROMPT_TOKENS` prompt (seconds)."""
    from zcube_lab.serving.models import get_profile, prefill_step_seconds

    return prefill_step_seconds(get_profile(t111.MODEL), t111.PROMPT_TOKENS)


def cell(fabrics: Sequence[str], gpus: int) -> dict[str, int]:
    """The cell's split on the fabrics compared: GPU hosts to a server (the same on each:
    `xpyd.per_server` refuses fabrics that differ), servers and GPU hosts prefilling."""
    from zcube_lab.emulator.bmwg.xpyd import per_server

    per = per_server(fabrics, gpus)
    servers = t111.prefill_servers(gpus // per)
    return {"per_server": per, "prefill_servers": servers, "prefill_gpus": servers * per}


def knee(fabrics: Sequence[str], gpus: int) -> float:
    """The cell's knee (req/s): its prefill GPU hosts over one prompt's prefill."""
    return t111.knee_rate(cell(fabrics, gpus)["prefill_gpus"], prefill_step_s())


def slo_check(run_dir: Path, window_s: float) -> dict[str, Any]:
    """The run's requests that arrived in the load window against `SLO_TEXT`: how many, how
    many completed, how many met it and their output tokens."""
    from zcube_lab.emulator.results.run.goodput import (
        arrived_in_window,
        parse_slo,
        request_meets_slo,
    )

    path = run_dir / "requests.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if (
        path.exists()) else []  # fmt: skip
    slo = parse_slo(t111.SLO_TEXT, 1.0)
    sent = arrived_in_window(recs, window_s)
    good = [r for r in sent if request_meets_slo(r, slo)]
    return {
        "slo": slo.text,
        "window_s": window_s,
        "requests": len(sent),
        "completed": sum(1 for r in sent if r.get("outcome") == "ok"),
        "good": len(good),
        "good_output_tokens": sum(int(r.get("output_tokens") or 0) for r in good),
    }


def trial_row(run_dir: Path, window_s: float) -> dict[str, Any]:
    """A trial's figures and its requests against the SLO, from its run folder."""
    from zcube_lab.emulator.results.run.summary import RunSummary

    summary = json.loads((run_dir / "summary.json").read_text())
    good = slo_check(run_dir, window_s)
    load_wall_s = RunSummary.read(run_dir).clock.wall(window_s)
    return {"figures": t111.trial_figures(summary, good, window_s, load_wall_s), "slo": good}


def section(cfg: BmwgConfig) -> LiveSection:
    """§11.1 up the run's ladder (shares of the cell's knee on its fabrics' GPU hosts)."""
    at = knee(cfg.fabric_kinds, cfg.gpus)
    split = cell(cfg.fabric_kinds, cfg.gpus)
    shares = cfg.tps_ladder
    window_s = cfg.trial_seconds  # the load window

    def finish(doc: Mapping[str, Any]) -> dict[str, Any]:
        return {"boundary": [t111.boundary(doc["summary"], f) for f in doc["fabrics"]]}

    return LiveSection(
        section=t111.SECTION,
        cases=tuple(
            LiveCase(
                f"{s:g}",
                t111.case_label(s),
                {"load": s, "rate": t111.rate_of(s, at)},
                t111.profile(s, at),
                argv=("--prefill-servers", str(split["prefill_servers"])),
                shown=f"{t111.rate_of(s, at):g} req/s",
            )
            for s in shares
        ),
        row=lambda run, _fabric, _case: trial_row(run, window_s),
        headline=headline,
        head={
            "ladder": list(shares),
            "rates": [t111.rate_of(s, at) for s in shares],
            "knee_rate": round(at, 3),
            "prefill_gpus": split["prefill_gpus"],
            "prefill_step_s": round(prefill_step_s(), 6),
            "prompt_tokens": t111.PROMPT_TOKENS,
            "output_tokens": t111.OUTPUT_TOKENS,
            "slo_run": {"TTFT_p99_ms": t111.TTFT_P99_MS, "ITL_p99_ms": t111.ITL_P99_MS},
            "slo_request": t111.SLO_TEXT,
        },
        notes=NOTES,
        parameter_lines=tuple(parameter_lines(cfg, at, shares)),
        drain_s=DRAIN_S,
        finish=finish,
        closing=lambda doc: [
            f"§11.1 SLO boundary on {b['fabric']}: {t111.boundary_words(b)}"
            for b in doc["boundary"]
            if b is not None
        ],
    )


def headline(f: Mapping[str, Any]) -> str:
    num = functools.partial(figure_text, f)
    trusted = trusted_text(f)
    met = "SLO met" if f.get("slo_met") else "SLO missed"
    return (
        f"TPS_output {num('TPS_output', ',.0f')}, TPS_input {num('TPS_input', ',.0f')}, "
        f"goodput {num('Inference_Goodput', ',.0f')} tokens/s at "
        f"{num('Request_Rate', '.2f')} req/s; TTFT p99 {num('TTFT_p99_ms', ',.0f')} ms, ITL "
        f"p99 {num('ITL_p99_ms', '.1f')} ms, {met}; links {num('Link_utilization_mean', '.2f')}"
        f"% mean, busiest {num('Link_utilization_max', '.2f')}%, {trusted}"
    )


def parameter_lines(cfg: BmwgConfig, at: float, shares: Sequence[float]) -> list[str]:
    """The draft's parameters beside the run's, printed before it starts."""
    from zcube_lab.core.bmwg.catalogue import test_of

    t = test_of(t111.SECTION)
    split = cell(cfg.fabric_kinds, cfg.gpus)
    pre = split["prefill_gpus"]
    ladder = ", ".join(f"{s:g} ({t111.rate_of(s, at):g})" for s in shares)
    return [
        "§11.1 parameters, draft -> this run:",
        f"  rates: from {t111.DRAFT_START_RATE:g} req/s up until the SLO breaks -> a fixed "
        f"ladder, shares of the knee (req/s): {ladder}, the same on every fabric; the draft's "
        f"1 req/s is {t111.draft_share(at):.2f} of this cell's knee",
        f"  knee: -> {at:.2f} req/s, prefill compute: {pre} prefill GPU hosts "
        f"({split['prefill_servers']} servers, the lab's default quarter) over one "
        f"{t111.PROMPT_TOKENS:,}-token prefill "
        f"({prefill_step_s() * 1e3:.0f} modelled ms); the other {cfg.gpus - pre} decode",
        f"  SLO: TTFT p99 {t111.TTFT_P99_MS:g} ms, ITL p99 {t111.ITL_P99_MS:g} ms -> the same, "
        f"in modelled ms; goodput per request: {t111.SLO_TEXT}",
        f"  requests: -> {t111.PROMPT_TOKENS:,} prompt + {t111.OUTPUT_TOKENS} output tokens "
        f"({t111.MODEL}, CFG-E), no prefix cache, Poisson arrivals",
        "  fabric utilization: -> every link direction's bytes over its rate during the load "
        "(mean, busiest; switch-to-switch alone; the highest 1 s peak)",
        f"  trials: {t.trials} x {t.trial_s:g} s -> {cfg.trials} x {cfg.trial_seconds:g} s",
    ]


NOTES = (
    "11.1: live serving runs at the default time scale up a fixed ladder of offered rates "
    "(shares of the cell's prefill knee, the same on every fabric); the draft's SLO (TTFT "
    "p99 500 ms, ITL p99 50 ms) in modelled ms, per run; goodput counts the output tokens "
    "of requests meeting TTFT 500 ms and TPOT 50 ms each; link utilization is over the load "
    "window (the run's window's bytes, drain included, over the load's seconds)",
)
