"""`zcube-lab bmwg run 10.2`: the draft's ITL characterization and tail latency on each fabric,
as live serving runs (`zcube_lab.core.bmwg.itl` says what a case, a trial and a gap are), run by
the live sections' runner (`zcube_lab.emulator.bmwg.live`). After each trial the gaps are read
from the run's requests.jsonl (the client's per-token stamps)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcube_lab.core.bmwg import itl as i102
from zcube_lab.emulator.bmwg.live import LiveCase, LiveSection, figure_text, trusted_text

if TYPE_CHECKING:
    from zcube_lab.core.bmwg.config import BmwgConfig

# The run waits for its last requests to decode their `OUTPUT_TOKENS` (~30 ms a step).
DRAIN_S = i102.OUTPUT_TOKENS * 0.032


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def trial_row(run_dir: Path) -> dict[str, Any]:
    """A trial's figures and the compact CDF of its gaps (for the graph), from its folder."""
    summary = json.loads((run_dir / "summary.json").read_text())
    records = _jsonl(run_dir / "requests.jsonl")
    return {
        "figures": i102.trial_figures(summary, records),
        "itl_cdf_ms": i102.cdf_points(i102.pooled_gaps(records)),
    }


def section(cfg: BmwgConfig, rates: tuple[float, ...] | None = None) -> LiveSection:
    """§10.2 at the run's rate (or at each of `rates`)."""
    from zcube_lab.core.bmwg.catalogue import test_of

    i102.check_trial_seconds(cfg.trial_seconds)
    rates = rates or (cfg.rate,)
    test = test_of(i102.SECTION)
    params = {"prompt_tokens": i102.PROMPT_TOKENS, "output_tokens": i102.OUTPUT_TOKENS}
    rows = i102.parameter_rows(cfg.trials, cfg.trial_seconds, test.trials, test.trial_s,
                               rates[0])  # fmt: skip
    return LiveSection(
        section=i102.SECTION,
        cases=tuple(
            LiveCase(
                f"{r:g}",
                i102.case_label(r),
                {"rate": r, **params},
                i102.profile(r),
                shown=f"{r:g} req/s",
            )
            for r in rates
        ),
        row=lambda run, _fabric, _case: trial_row(run),
        headline=headline,
        head={
            "rates": list(rates),
            "prompt_tokens": i102.PROMPT_TOKENS,
            "output_tokens": i102.OUTPUT_TOKENS,
            "stall_factor": i102.STALL_FACTOR,
        },
        notes=NOTES,
        parameter_lines=(
            "§10.2 parameters, draft -> this run:",
            *(f"  {name}: {draft} -> {here}" for name, draft, here in rows),
        ),
        drain_s=DRAIN_S,
    )


def headline(f: Mapping[str, Any]) -> str:
    num = functools.partial(figure_text, f)
    trusted = trusted_text(f)
    return (
        f"ITL p50 {num('ITL_p50_ms')} / p99 {num('ITL_p99_ms')} / p99.9 {num('ITL_p999_ms')} "
        f"ms over {f.get('itl_samples')} gaps, stalls > 2x p50 {num('stall_share', '.2%')}, "
        f"TPOT {num('TPOT_p50_ms')} ms, {trusted}"
    )


NOTES = (
    "10.2: live serving runs at the default time scale; a trial's ITL is the pool of "
    "every gap between consecutive token chunks of every completed request, as the "
    "client stamped them (requests.jsonl); at this scale a gap is one decode step of "
    "the engine, not the fabric, unless a KV pull or an EP exchange delays a step, so "
    "a tie between fabrics is a measured tie",
)
