"""The structure table (a scaled fabric beside its full size) rendered for `report.html` and
for the console; the rows come from `zcube_lab.core.fabric.fullsize.structure_rows` (pure)."""

from __future__ import annotations

import html

from zcube_lab.core.fabric.fullsize import StructureComparison, structure_rows
from zcube_lab.core.fabric.structure import SHARE_GOAL_POINTS

HEADER = ("", "scaled", "full size", "difference")


def structure_title(cmp: StructureComparison) -> str:
    """The table's title: scenario, scaled fabric, full size."""
    scenario = f" for {cmp.scenario}" if cmp.scenario else ""
    return f"Structure{scenario}: {cmp.scaled.label} vs full size {cmp.full.label}"


def structure_verdict(cmp: StructureComparison) -> str:
    """One line: are all shares within the goal, and which pair sets miss it."""
    gaps = cmp.share_gaps()
    off = [f"{name} {gap:.1f} pt" for name, gap in gaps.items() if gap > SHARE_GOAL_POINTS]
    if not off:
        return f"every share within {SHARE_GOAL_POINTS:g} points of full size"
    return f"shares beyond {SHARE_GOAL_POINTS:g} points of full size: " + ", ".join(off)


def structure_text(cmp: StructureComparison) -> str:
    """The table as aligned plain text; a share beyond the goal is marked `!`."""
    lines = [[*HEADER]]
    section = None
    for row in structure_rows(cmp):
        if row.section != section:
            section = row.section
            lines.append([section, "", "", ""])
        lines.append(
            [f"  {row.label}", row.scaled, row.full, row.diff + (" !" if row.beyond_goal else "")]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    out = [structure_title(cmp)]
    for line in lines:
        cells = [line[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True)
        ]
        out.append("  ".join(cells).rstrip())
    out.append(structure_verdict(cmp))
    return "\n".join(out)


def structure_html(cmp: StructureComparison) -> str:
    """The table as an HTML fragment (a heading, a table, the verdict line) for report.html."""
    parts = [
        f"<h2>{html.escape(structure_title(cmp))}</h2>",
        "<table class='structure'><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
        + "</tr>",
    ]
    section = None
    for row in structure_rows(cmp):
        if row.section != section:
            section = row.section
            parts.append(f"<tr><th colspan='4'>{html.escape(section)}</th></tr>")
        mark = " class='bad'" if row.beyond_goal else ""
        cells = (row.label, row.scaled, row.full, row.diff)
        parts.append(f"<tr{mark}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    parts.append("</table>")
    parts.append(f"<p>{html.escape(structure_verdict(cmp))}</p>")
    return "\n".join(parts)
