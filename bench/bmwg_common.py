"""What docs/BMWG.md's per-section parts share: the fabrics' names, a case's trials and how
many the lab's verdict trusted, and the fabric comparison of one section in words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zcube_lab.core.bmwg.trials import HIGHER, LOWER, NO_SPREAD, OUT_OF_REACH, WITHIN

LABEL = {"zcube": "ZCube", "roft": "ROFT", "clos": "Clos"}


def name(fabric: str) -> str:
    return LABEL.get(fabric, fabric)


def trials_of(d: Mapping[str, Any], section: str, case: str, fabric: str) -> list[dict[str, Any]]:
    """The rows of one case's trials on one fabric."""
    return [r for r in d["rows"] if (r["section"], r["case"], r["fabric"]) == (section, case,
                                                                              fabric)]  # fmt: skip


def trusted(trials: Sequence[Mapping[str, Any]]) -> str:
    """ "n of m": the trials the lab's verdict trusted."""
    n = sum(1 for r in trials if not r["figures"].get("untrusted"))
    return f"{n} of {len(trials)}"


def comparison_words(d: Mapping[str, Any], section: str, tie: str, *, at_case: bool = True,
                     no_spread: str | None = None, within_note: str = "") -> str:  # fmt: skip
    """The section's fabric comparison in a sentence. `tie` is said when every comparison is
    within the trials' spread (given their count), `no_spread` when every one has a single
    trial; otherwise the counts (within, out of reach, single-trial) and each difference
    beyond the spread, naming the case when `at_case`."""
    cs = [c for c in d["comparison"] if c["section"] == section]
    if not cs:
        return "No fabric comparison (one fabric, or no trial had figures)."
    if no_spread is not None and all(c["verdict"] == NO_SPREAD for c in cs):
        return no_spread.format(n=len(cs))
    differ = [c for c in cs if c["verdict"] in (HIGHER, LOWER)]
    reach = [c for c in cs if c["verdict"] == OUT_OF_REACH]
    within = [c for c in cs if c["verdict"] == WITHIN]
    if len(within) == len(cs):
        return tie.format(n=len(cs))
    text = f"{len(within)} of {len(cs)} comparisons within the trials' spread{within_note}"
    if reach:
        text += f", {len(reach)} out of reach (a run the lab's verdict did not trust)"
    lone = [c for c in cs if c["verdict"] == NO_SPREAD]
    if no_spread is not None and lone:
        text += f", {len(lone)} with one trial (no spread to judge by: neither tie nor difference)"
    if differ:
        where = (lambda c: f" at {c['case']}") if at_case else (lambda _c: "")
        text += "; beyond it: " + "; ".join(
            f"ZCube's {c['figure']} {c['verdict']} than {name(c['versus'])}'s{where(c)} "
            f"({c['zcube']:.3g} against {c['other']:.3g})"
            for c in differ
        )
    return text + "."
