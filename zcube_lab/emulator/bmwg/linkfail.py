"""`zcube-lab bmwg run 12.3`: the draft's link failure during serving on each fabric, as live
serving runs (`zcube_lab.core.bmwg.linkfail` says what a trial is, which link each fabric loses
and how the figures are defined), run by the live sections' runner
(`zcube_lab.emulator.bmwg.live`): each trial is one `zcube-lab run --policy ff --fail 'link
...'`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcube_lab.core.bmwg import linkfail as lf
from zcube_lab.core.bmwg import report
from zcube_lab.emulator.bmwg.live import LiveCase, LiveSection, trusted_text

if TYPE_CHECKING:
    from zcube_lab.core.bmwg.config import BmwgConfig


def links_of(fabrics: Sequence[str], gpus: int) -> dict[str, lf.FailedLink]:
    """The link each fabric's trials fail (`linkfail.failed_link` on the run's fabric)."""
    from zcube_lab.core.fabric.scaledown import scaled_fabric

    out = {}
    for kind in fabrics:
        fabric = scaled_fabric(kind, gpus)
        out[kind] = lf.failed_link(fabric, lf.decode_hosts(fabric))
    return out


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _figures(run: Path, link: str) -> dict[str, Any]:
    """A trial's figures from its run folder (`linkfail.trial_figures`)."""
    summary = json.loads((run / "summary.json").read_text())
    return lf.trial_figures(
        summary, _jsonl(run / "requests.jsonl"), _jsonl(run / "faults.jsonl"), link
    )


def refigure(path: Path) -> dict[str, Any]:
    """A §12.3 bmwg.json with every trial's figures computed again from its run folder (kept
    beside it) by today's `linkfail.trial_figures`, and its summary and comparison with them:
    for a figure added or defined anew after the runs. The runs' own records are not
    touched."""
    doc = json.loads(path.read_text())
    for r in doc["rows"]:
        r["figures"] = _figures(path.parent / r["run"], r["failed_link"]["link"])
    doc["summary"] = report.summarize(doc["rows"])
    doc["comparison"] = report.compare(doc["summary"])
    return doc


def fault_argv(specs: Mapping[str, str], gpus: int) -> Callable[[str, LiveCase], list[str]]:
    """The `zcube-lab run` flags of a trial whose fabric's link `specs[fabric]` fails: the
    fast-failover policy, §12.3's prefill split and the fault."""
    from zcube_lab.core.fabric.scaledown import scaled_fabric

    prefill = {k: lf.prefill_servers(scaled_fabric(k, gpus)) for k in specs}

    def argv(fabric: str, _case: LiveCase) -> list[str]:
        return ["--policy", lf.POLICY, "--prefill-servers", str(prefill[fabric]),
                "--fail", specs[fabric]]  # fmt: skip

    return argv


def section(cfg: BmwgConfig) -> LiveSection:
    """§12.3 on the run's fabrics: each loses its own link (`links_of`) during every trial."""
    from zcube_lab.core.bmwg.catalogue import test_of

    lf.check_trial_seconds(cfg.trial_seconds)
    fabrics = cfg.fabric_kinds
    links = links_of(fabrics, cfg.gpus)
    specs = {k: lf.fail_spec(links[k], cfg.trial_seconds) for k in fabrics}
    test = test_of(lf.SECTION)
    at, span = lf.fault_timing(cfg.trial_seconds)
    argv = fault_argv(specs, cfg.gpus)

    def row(run: Path, fabric: str, _case: LiveCase) -> dict[str, Any]:
        summary = json.loads((run / "summary.json").read_text())
        return {
            "failed_link": links[fabric].to_dict(),
            "fail": specs[fabric],
            "policy": summary.get("policy"),
            "figures": _figures(run, links[fabric].to_dict()["link"]),
        }

    return LiveSection(
        section=lf.SECTION,
        cases=(
            LiveCase(
                "12.3",
                lf.case_label(),
                {"prompt_tokens": lf.PROMPT_TOKENS, "rate": lf.RATE},
                lf.profile(),
                shown="",
            ),
        ),
        row=row,
        headline=_headline,
        head={
            "rate": lf.RATE,
            "prompt_tokens": lf.PROMPT_TOKENS,
            "policy": lf.POLICY,
            "fail_at_s": at,
            "fail_for_s": span,
            "failed_links": {k: v.to_dict() for k, v in links.items()},
        },
        notes=(
            f"12.3: live serving runs at the default time scale, routing policy {lf.POLICY}; "
            f"each fabric loses one switch-to-switch link at {at:g} s for {span:g} s, the first "
            "fabric-facing link of the switch with the most decode host ports (the KV pulls "
            "into those decode hosts cross that switch's fabric-facing links); a "
            f"{lf.BIN_S:g} s bin (by send time, from the onset) is disrupted when a request "
            f"sent in it failed or its TTFT p99 is more than {lf.TOLERANCE:.0%} above the "
            "highest TTFT sent before the onset; recovery_time_s: the onset to the end of the "
            "last disrupted bin (0: none), disruption_time_s: the disrupted bins' seconds; a "
            "run the lab's verdict did not trust is kept, its comparison out of reach",
        ),
        parameter_lines=(
            "§12.3 parameters (the draft's | this run's):",
            *lf.parameter_lines(cfg.trials, cfg.trial_seconds, test.trials, test.trial_s),
            *(f"  {kind} loses {link.describe()}" for kind, link in links.items()),
        ),
        fabric_argv=argv,
    )


def _headline(f: Mapping[str, Any]) -> str:
    def num(name: str, unit: str = "") -> str:
        v = f.get(name)
        return "-" if v is None else f"{v:,.1f}{unit}"

    trusted = trusted_text(f)
    return (
        f"link down {num('fault_held_s', ' s')}, failed {f.get('failed_requests')} of "
        f"{f.get('requests')}, TTFT p99 before/during/after {num('TTFT_p99_before_ms')}/"
        f"{num('TTFT_p99_during_ms')}/{num('TTFT_p99_after_ms')} ms, recovered in "
        f"{num('recovery_time_s', ' s')}, KV pulls retried {f.get('KV_pulls_retried')}, {trusted}"
    )
