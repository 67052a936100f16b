"""Wall and modelled time cross only through a `Clock` (`zcube_lab/core/clock.py`), and a clock
is built from a number only where a config hands out its own (`clock` properties).

Every .py file of our packages is read with `ast` (nothing is imported). A *dilation value* is
followed through the code, whatever it is called:

- it starts where the dilation is read: what a `Clock(...)` or `check_dilation(...)` is built
  from (so the config fields `dilation`, `time_dilation`, ... are found, not listed), a `Clock`'s
  own `.dilation`, and any name, attribute, `["..."]` subscript or `.get("...")` of one of those
  field names;
- it flows through assignments (`k = cfg.dilation`, `k = float(x or 1)`), through keyword
  arguments (`f(time_scale=k)` makes `time_scale` a dilation name everywhere) and through
  positional arguments into the parameters of a function of that name (`_divided(s, names, k)`
  makes `_divided`'s third parameter one).

A multiplication or division (`*`, `/`, `//`, and their `*=`, `/=`, `//=`) with a dilation
value as an operand, outside the clock, fails with the file and line: such a site converts by
hand what `Clock.wall`, `Clock.modelled` or `Clock.wall_rate` convert in one place.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("zcube_lab", "zcube_lab.cli", "controller", "emulator", "serving", "workloads", "bench")
CLOCK = Path("zcube_lab/core/clock.py")
# Modules allowed to convert by hand: the clock itself and nothing else.
ALLOWED = frozenset({CLOCK})
# Modules with a crossing known and being fixed in another change (issue 44: the sweep's
# wall-time estimate). Each must still hold one: once fixed, its entry goes.
PENDING: frozenset[Path] = frozenset()
_OPS = (ast.Mult, ast.Div, ast.FloorDiv)
# Calls whose result is the dilation they are given (a cast, a bound).
_SAME_VALUE = frozenset({"float", "int", "max", "min", "abs", "round"})
# Calls that take a dilation: what their first argument reads is a dilation field.
_TAKES_DILATION = frozenset({"Clock", "check_dilation"})

_Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _read_name(node: ast.AST) -> str | None:
    """The field or variable `node` reads (`x`, `o.x`, `o["x"]`, `o.get("x")`), if any."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    if (
        isinstance(node, ast.Call)
        and _call_name(node) == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return str(node.args[0].value)
    return None


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[str]:
    a = fn.args
    return [p.arg for p in (*a.posonlyargs, *a.args)]


@dataclass
class Tracker:
    """What is known to hold a dilation: field names (global) and locals (per scope)."""

    names: set[str] = field(default_factory=lambda: {"dilation"})
    local: dict[int, set[str]] = field(default_factory=dict)  # id(scope) -> names
    params: dict[str, set[int]] = field(default_factory=dict)  # function -> positions

    def is_dilation(self, node: ast.AST, scopes: list[_Scope]) -> bool:
        """True when `node` evaluates to a dilation value."""
        name = _read_name(node)
        if name is not None:
            if name in self.names:
                return True
            if isinstance(node, ast.Name):
                return any(name in self.local.get(id(s), ()) for s in scopes)
            return False
        if isinstance(node, ast.BoolOp):
            return any(self.is_dilation(v, scopes) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.is_dilation(node.body, scopes) or self.is_dilation(node.orelse, scopes)
        if isinstance(node, ast.NamedExpr):
            return self.is_dilation(node.value, scopes)
        if isinstance(node, ast.Call) and _call_name(node) in _SAME_VALUE:
            return any(self.is_dilation(a, scopes) for a in node.args)
        return False


def _walk(node: ast.AST, scopes: list[_Scope]) -> Iterator[tuple[ast.AST, list[_Scope]]]:
    """Every node under `node` with the scopes it sees (innermost last)."""
    for child in ast.iter_child_nodes(node):
        inner = scopes
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inner = [*scopes, child]
        yield child, inner
        yield from _walk(child, inner)


def _learn(tree: ast.Module, t: Tracker) -> bool:
    """One pass over `tree`: what else holds a dilation. True when something was learned."""
    before = (len(t.names), sum(map(len, t.local.values())), sum(map(len, t.params.values())))

    def mark(target: ast.AST, scope: _Scope) -> None:
        if isinstance(target, ast.Name):
            t.local.setdefault(id(scope), set()).add(target.id)
        elif isinstance(target, ast.Attribute):
            t.names.add(target.attr)

    for node, scopes in _walk(tree, [tree]):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            positions = t.params.get(node.name, set())
            names = _params(node)
            for i in positions:
                # A method called as `obj.f(k)` gets `k` in its second parameter.
                j = i + 1 if names and names[0] in ("self", "cls") else i
                if j < len(names):
                    t.local.setdefault(id(node), set()).add(names[j])
        elif isinstance(node, ast.Assign) and t.is_dilation(node.value, scopes):
            for target in node.targets:
                mark(target, scopes[-1])
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            if t.is_dilation(node.value, scopes):
                mark(node.target, scopes[-1])
        elif isinstance(node, ast.Call):
            if _call_name(node) in _TAKES_DILATION and node.args:
                name = _read_name(node.args[0])
                if name is not None and not isinstance(node.args[0], ast.Call):
                    # A local passed to a clock is a dilation in its scope only.
                    if isinstance(node.args[0], ast.Name):
                        mark(node.args[0], scopes[-1])
                    else:
                        t.names.add(name)
            for kw in node.keywords:
                if kw.arg is not None and t.is_dilation(kw.value, scopes):
                    t.names.add(kw.arg)
            for i, arg in enumerate(node.args):
                if t.is_dilation(arg, scopes):
                    t.params.setdefault(_call_name(node), set()).add(i)
    after = (len(t.names), sum(map(len, t.local.values())), sum(map(len, t.params.values())))
    return after != before


def learn(trees: Iterable[ast.Module]) -> Tracker:
    """What holds a dilation across `trees`, followed until nothing new is learned."""
    trees = list(trees)
    t = Tracker()
    while any([_learn(tree, t) for tree in trees]):
        pass
    return t


def crossings(tree: ast.Module, t: Tracker) -> Iterator[int]:
    """The lines of `tree` that multiply or divide by a dilation value."""
    for node, scopes in _walk(tree, [tree]):
        operands: tuple[ast.AST, ...] = ()
        if isinstance(node, ast.BinOp) and isinstance(node.op, _OPS):
            operands = (node.left, node.right)
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, _OPS):
            operands = (node.target, node.value)
        if any(t.is_dilation(o, scopes) for o in operands):
            yield node.lineno


def hand_crossings(*sources: str) -> list[tuple[int, int]]:
    """(source index, line) of every crossing in `sources`, analysed together."""
    trees = [ast.parse(s) for s in sources]
    t = learn(trees)
    return [(i, line) for i, tree in enumerate(trees) for line in crossings(tree, t)]


def clock_builds(tree: ast.Module) -> Iterator[int]:
    """The lines that build a `Clock` from a value outside a `clock` property (a constant, as
    in `Clock()` or `Clock(1.0)`, is no dilation read from anywhere)."""
    for node, scopes in _walk(tree, [tree]):
        if not (isinstance(node, ast.Call) and _call_name(node) == "Clock"):
            continue
        given = [*node.args, *(kw.value for kw in node.keywords)]
        if all(isinstance(a, ast.Constant) for a in given):
            continue
        fn = scopes[-1]
        if isinstance(fn, ast.FunctionDef) and fn.name == "clock":
            continue
        yield node.lineno


def _our_files() -> list[Path]:
    return [p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))]


def test_only_the_clock_converts_between_wall_and_modelled_time() -> None:
    files = _our_files()
    trees = [ast.parse(p.read_text()) for p in files]
    t = learn(trees)
    found = [
        (path.relative_to(REPO), line)
        for path, tree in zip(files, trees, strict=True)
        if path.relative_to(REPO) not in ALLOWED
        for line in crossings(tree, t)
    ]
    wrong = [f"{path}:{line}" for path, line in found if path not in PENDING]
    assert wrong == [], "use zcube_lab.core.clock.Clock: " + ", ".join(wrong)
    fixed = PENDING - {path for path, _ in found}
    assert not fixed, f"no longer pending, take it out of PENDING: {sorted(map(str, fixed))}"


# A what-if table over several dilations builds one clock per row, not one per run.
BUILDS_ALLOWED = frozenset({Path("zcube_lab/core/fabric/resolution.py")})


def test_a_clock_is_built_once_from_its_config_and_passed_on() -> None:
    found = []
    for path in _our_files():
        rel = path.relative_to(REPO)
        if rel not in BUILDS_ALLOWED:
            found += [f"{rel}:{line}" for line in clock_builds(ast.parse(path.read_text()))]
    assert found == [], "take the config's `clock`, do not rebuild one: " + ", ".join(found)


def test_the_check_catches_a_crossing_by_any_name() -> None:
    caught = [
        "x = t * k.dilation",
        "x = t / dilation",
        "x = t // s['dilation']",
        "x = 1\nx /= self.dilation",
        # An alias of the run's dilation (zcube_lab/emulator/experiment/sweep.py's estimate).
        "k = p.config.dilation\nleast = 5 + k * p.config.duration_s",
        # A field found because a clock is built from it, then read under an alias.
        "c = Clock(cfg.time_dilation)\nscale = cfg.time_dilation\ny = x / scale",
        # A keyword argument: the callee's parameter is a dilation, by whatever name.
        "f(time_scale=cfg.dilation)\ndef f(x, time_scale=1.0):\n    return x / time_scale",
        # A positional argument: the parameter in that position is one.
        "def g(v, k):\n    return v / k\ndef h(s):\n    return g(s.t, s.dilation)",
        "class A:\n    def m(self, q):\n        return 2 * q\nA().m(run.dilation)",
        "k = float(cfg.get('dilation') or 1.0)\nend = t + e2e * k",
        "def f(x, time_scale):\n    check_dilation(time_scale)\n    return x * time_scale",
    ]
    for src in caught:
        assert hand_crossings(src), src
    # Across modules: one file passes the dilation, another divides by it.
    assert hand_crossings("run(cfg.dilation)", "def run(k):\n    return 3 / k") == [(1, 2)]


def test_the_check_leaves_other_arithmetic_alone() -> None:
    clean = [
        "x = clock.wall(t) + dilation",
        "k = 4\ny = x * k",  # a k that is no dilation
        "for k in range(3):\n    y = k * interval",
        "dilated = cfg.dilation != 1\ny = 2 * n",
        "def g(v, k):\n    return v / k\ng(1, 2)",
        "clock = cfg.clock\ny = clock.modelled(x) * 2",
    ]
    for src in clean:
        assert not hand_crossings(src), src
    assert hand_crossings((REPO / CLOCK).read_text())  # the clock does convert


def test_the_build_check_catches_a_rebuilt_clock() -> None:
    assert list(clock_builds(ast.parse("c = Clock(scale.dilation)")))
    assert list(clock_builds(ast.parse("def f(k):\n    return Clock(dilation=k)")))
    ok = "c = Clock()\nd = Clock(1.0)\nclass S:\n    def clock(self):\n        return Clock(self.k)"
    assert not list(clock_builds(ast.parse(ok)))
