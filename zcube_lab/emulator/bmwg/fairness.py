"""`zcube-lab bmwg run 9.4`: Jain's fairness index over the decode workers on each fabric, as
live serving runs (`zcube_lab.core.bmwg.fairness` says what a case, a trial and a worker's
share are), run by the live sections' runner (`zcube_lab.emulator.bmwg.live`). After each
trial the decode engines' own counters are read from the run's Prometheus database (`promtool
tsdb dump`, the lab's Prometheus tools) and the engines' KV logs are kept beside them as a
check."""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcube_lab.core.bmwg import fairness as f94
from zcube_lab.emulator.bmwg.live import LiveCase, LiveSection, figure_text, trusted_text

if TYPE_CHECKING:
    from zcube_lab.core.bmwg.config import BmwgConfig

PROMTOOL = "promtool"
# The run drains its requests after the load: at 0.9 of the knee up to a few seconds more.
DRAIN_S = 5.0


def knee(gpus: int) -> float:
    """§9.4's knee on a fabric of `gpus` GPU hosts (req/s): the prefill pool over GLM-5.1's
    prefill of one `PROMPT_TOKENS` prompt."""
    from zcube_lab.serving.models import get_profile, prefill_step_seconds

    step = prefill_step_seconds(get_profile(f94.MODEL), f94.PROMPT_TOKENS)
    return f94.knee_rate(gpus, step)


def decode_engines(run_dir: Path) -> list[str]:
    """The decode engines of a run by their metrics' `engine` label (the GPU host's number),
    from the placement its config.json records."""
    cfg = json.loads((run_dir / "config.json").read_text())
    ids = [e["engine_id"] for e in cfg["placement"] if e["role"] == "decode"]
    return [i.rsplit("-", 1)[-1] for i in ids]


def read_series(run_dir: Path) -> dict[tuple[str, str, str], list[tuple[int, float]]]:
    """The decode engines' samples of `METRICS` from the run's Prometheus database."""
    names = "|".join(metric for metric, _ in f94.METRICS.values())
    match = f'{{job="{f94.DECODE_JOB}",__name__=~"{names}"}}'
    done = subprocess.run(
        [PROMTOOL, "tsdb", "dump", f"--match={match}", str(run_dir / "prometheus" / "tsdb")],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"§9.4 {run_dir.name}: promtool tsdb dump: {done.stderr[-500:]}")
    return f94.parse_dump(done.stdout)


def kv_log_shares(run_dir: Path, engines: Sequence[str]) -> dict[str, dict[str, float]]:
    """The check beside the counters, from each decode engine's KV log (one line per pull
    attempt): requests it pulled KV for, and the bytes of its completed pulls (lab bytes)."""
    out: dict[str, dict[str, float]] = {"requests": {}, "kv_bytes": {}}
    for e in engines:
        path = run_dir / "logs" / f"kv-decode-{e}.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if (
            path.exists()) else []  # fmt: skip
        ok = [r for r in rows if r.get("ok")]
        out["requests"][e] = float(len({r["request_id"] for r in ok}))
        out["kv_bytes"][e] = float(sum(int(r.get("bytes") or 0) for r in ok))
    return out


def section(cfg: BmwgConfig) -> LiveSection:
    """§9.4 over the run's load levels (shares of the knee on its fabrics' GPU hosts)."""
    at = knee(cfg.gpus)
    cases = tuple(
        LiveCase(
            f"{load:g}",
            f94.case_label(load),
            {"load": load, "rate": f94.rate_of(load, at)},
            f94.profile(load, at),
            shown=f"load {load:g}",
        )
        for load in cfg.jfi_levels
    )
    return LiveSection(
        section=f94.SECTION,
        cases=cases,
        row=lambda run, _fabric, _case: trial_row(run),
        headline=headline,
        head={
            "levels": list(cfg.jfi_levels),
            "knee_rate": round(at, 3),
            "decode_workers": f94.decode_workers(cfg.gpus),
            "prompt_tokens": f94.PROMPT_TOKENS,
            "output_tokens": f94.OUTPUT_TOKENS,
        },
        notes=NOTES,
        parameter_lines=tuple(
            parameter_lines(cfg.gpus, cfg.jfi_levels, cfg.trials, cfg.trial_seconds)
        ),
        drain_s=DRAIN_S,
    )


def trial_row(run_dir: Path) -> dict[str, Any]:
    """A trial's figures, each worker's shares and the KV logs' check, from its run folder."""
    summary = json.loads((run_dir / "summary.json").read_text())
    engines = decode_engines(run_dir)
    shares = f94.totals(read_series(run_dir), engines)
    return {
        "figures": f94.trial_figures(summary, shares, len(engines)),
        "workers": {"engines": engines, **shares, "kv_log": kv_log_shares(run_dir, engines)},
    }


def headline(f: Mapping[str, Any]) -> str:
    num = functools.partial(figure_text, f)
    trusted = trusted_text(f)
    return (
        f"JFI over {f.get('decode_workers')} decode workers: tokens {num('JFI_decode', '.3f')}, "
        f"KV bytes {num('JFI_kv', '.3f')}, decode time {num('JFI_busy', '.3f')}; TTFT p99 "
        f"{num('TTFT_p99_ms', ',.0f')} ms, {trusted}"
    )


def parameter_lines(gpus: int, levels: Sequence[float], trials: int,
                    trial_seconds: float) -> list[str]:  # fmt: skip
    """The draft's parameters beside the run's, printed before it starts."""
    from zcube_lab.core.bmwg.catalogue import test_of

    t = test_of(f94.SECTION)
    at = knee(gpus)
    rates = ", ".join(f"{v:g} ({f94.rate_of(v, at):g} req/s)" for v in levels)
    return [
        "§9.4 parameters, draft -> this run:",
        f"  decode workers N_D: {', '.join(map(str, f94.DRAFT_WORKERS))} -> "
        f"{f94.decode_workers(gpus)} (half of {gpus} GPU hosts; the other half prefill)",
        f"  load: a sustained request stream (no rate named) -> {rates} of the knee, "
        f"{at:.2f} req/s (prefill of {f94.PROMPT_TOKENS:,} tokens on "
        f"{f94.prefill_gpus(gpus)} GPUs)",
        f"  requests: -> {f94.PROMPT_TOKENS:,} prompt + {f94.OUTPUT_TOKENS} output tokens "
        f"({f94.MODEL}, CFG-E), no prefix cache",
        "  metrics: KV receive rate, GPU utilization, output TPS -> "
        + "; ".join(f"{name}: {metric}" for metric, name in f94.METRICS.values()),
        f"  trials: {t.trials} x {t.trial_s:g} s -> {trials} x {trial_seconds:g} s",
    ]


NOTES = (
    "9.4: live serving runs at the default time scale; each decode worker's share is "
    "its own counters' total (tokens generated, KV bytes pulled, request-seconds in "
    "decode), Jain's index over the workers; the gateway's routing policy (least "
    "outstanding requests) decides the balance, the fabric only through the KV pulls",
)
