"""report.html's victim accounting table (pure): per variant, the EP exchanges' p50/p99, the
share of them delayed by a pause another class raised, and per class the pauses raised and the
seconds and bytes behind pauses (`emulator.results.victims`), the median over the runs that
carry the section with [min-max]. Nothing when no run carries it (a lossy run, or an agent that
recorded no episodes).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from emulator.results.kpitable import cell
from emulator.results.summary import RunSummary
from emulator.results.victims import VictimReport

Getter = Callable[[VictimReport], float | None]


def _class(name: str, attr: str) -> Getter:
    def get(v: VictimReport) -> float | None:
        tally = v.classes.get(name)
        return None if tally is None else float(getattr(tally, attr))

    return get


ROWS: tuple[tuple[str, Getter], ...] = (
    ("EP exchange p50 (s)", lambda v: v.ep_p50_s),
    ("EP exchange p99 (s)", lambda v: v.ep_p99_s),
    ("EP exchanges delayed by another class's pause (share)", lambda v: v.victim_share),
    ("pauses", lambda v: float(v.pauses)),
    ("pauses raised by KV", _class("kv", "pauses_raised")),
    ("pauses raised by EP", _class("ep", "pauses_raised")),
    ("EP seconds behind pauses", _class("ep", "seconds_behind")),
    ("EP bytes behind pauses", _class("ep", "bytes_behind")),
    ("KV seconds behind pauses", _class("kv", "seconds_behind")),
    ("KV bytes behind pauses", _class("kv", "bytes_behind")),
)


def victim_rows(runs: Sequence[RunSummary], variants: Sequence[str]) -> list[list[str]]:
    """[figure, one cell per variant] for every row; [] when no run has the section."""
    with_section = [r for r in runs if r.victims is not None]
    if not with_section:
        return []
    rows = []
    for label, get in ROWS:
        cells = []
        for v in variants:
            values = [
                x for r in with_section if r.variant == v if (x := get(r.victims)) is not None
            ]  # type: ignore[arg-type]
            cells.append(cell(values))
        rows.append([label, *cells])
    return rows


def victim_section(runs: Sequence[RunSummary], variants: Sequence[str]) -> list[str]:
    """The HTML section (nothing when no run has the accounting)."""
    rows = victim_rows(runs, variants)
    if not rows:
        return []
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ("figure", *variants))
    parts = ["<h2>Victim accounting: EP and KV behind pauses (docs/LOSSLESS.md)</h2>"]
    parts += ["<table>", f"<tr>{head}</tr>"]
    for row in rows:
        parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    return [*parts, "</table>"]
