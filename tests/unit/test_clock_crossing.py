"""Wall and modelled time cross only through a `Clock` (`zcube_lab/core/clock.py`).

Every .py file of our packages is read with `ast` (nothing is imported); a multiplication or
division (`*`, `/`, `//`, and their `*=`, `/=`) with an operand that names the dilation (a name
or attribute containing `dilation`, or a `["...dilation..."]` subscript) outside the clock
fails, with the file and line: such a site converts by hand what `Clock.wall`, `Clock.modelled`
or `Clock.wall_rate` convert in one place.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("zcube_lab", "controller", "emulator", "serving", "workloads", "grafana", "bench")
CLOCK = Path("zcube_lab/core/clock.py")
# Modules allowed to convert by hand: the clock itself and nothing else.
ALLOWED = frozenset({CLOCK})
_OPS = (ast.Mult, ast.Div, ast.FloorDiv)


def _names_dilation(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return "dilation" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "dilation" in node.attr.lower()
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return "dilation" in str(node.slice.value).lower()
    return False


def hand_crossings(source: str) -> Iterator[int]:
    """The lines of `source` that multiply or divide by the dilation."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, _OPS):
            if _names_dilation(node.left) or _names_dilation(node.right):
                yield node.lineno
        elif (
            isinstance(node, ast.AugAssign)
            and isinstance(node.op, _OPS)
            and _names_dilation(node.value)
        ):
            yield node.lineno


def test_only_the_clock_converts_between_wall_and_modelled_time() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO)
            if rel in ALLOWED:
                continue
            found += [f"{rel}:{line}" for line in hand_crossings(path.read_text())]
    assert found == [], "use zcube_lab.core.clock.Clock: " + ", ".join(found)


def test_the_check_catches_every_spelling() -> None:
    caught = [
        "x = t * k.dilation",
        "x = t / dilation",
        "x = cfg.time_dilation * 2",
        "x = t // s['dilation']",
        "x = 1\nx /= self.dilation",
    ]
    for src in caught:
        assert list(hand_crossings(src)), src
    assert not list(hand_crossings("x = clock.wall(t) + dilation"))
    assert list(hand_crossings((REPO / CLOCK).read_text()))  # the clock does convert
