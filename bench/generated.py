"""Generated blocks in the docs (pure): the text between `<!-- generated: COMMAND --table NAME -->`
and `<!-- end generated -->`, rewritten by the command that owns the marker."""

from __future__ import annotations

import re
from collections.abc import Callable

END = "<!-- end generated -->"


def rewrite_blocks(doc: str, begin: re.Pattern[str], render: Callable[[str], list[str]]) -> str:
    """`doc` with every block `begin` opens replaced by `render(its table name)`."""
    parts, pos = [], 0
    for m in begin.finditer(doc):
        end = doc.index(END, m.end())
        parts += [doc[pos : m.end()], "\n", "\n".join(render(m.group(1))), "\n"]
        pos = end
    return "".join(parts) + doc[pos:]
