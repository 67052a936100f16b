"""report.html's lossless pieces (pure): the one-line fact on a lossless run's pauses and its
agent, and the victim accounting table: per variant, the EP exchanges' p50/p99, the
share of them delayed by a pause another class raised, and per class the pauses raised and the
seconds and bytes behind pauses (`zcube_lab.emulator.results.lossless.victims`), the median over the
runs that carry the section with [min-max]. Nothing when no run carries it (a lossy run, or an agent
that recorded no episodes).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from zcube_lab.emulator.results.ietf.kpitable import cell
from zcube_lab.emulator.results.lossless.victims import VictimReport
from zcube_lab.emulator.results.run.summary import LosslessFigures, RunSummary

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


def lossless_fact(figures: LosslessFigures) -> str:
    """One line on a lossless run's pauses (the fabric's) and its agent (the emulator's)."""
    if figures.ports:
        top = max(figures.ports.items(), key=lambda kv: kv[1].paused_s)
        most = f"; most paused {top[0]} ({top[1].pauses}x, {top[1].paused_s:.2f} s)"
    else:
        most = ""
    p99 = "-" if figures.reaction_p99_s is None else f"{figures.reaction_p99_s * 1e3:.2f} ms"
    return (
        f"lossless: {figures.pauses} pauses on {len(figures.ports)} ports, "
        f"{figures.paused_s:.2f} s paused in all{most}; agent reaction p99 {p99}, "
        f"{figures.agent_cores:.2f} cores"
    )
