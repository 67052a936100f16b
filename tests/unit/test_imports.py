"""Imports run one way between our packages, nothing imports the CLI, the pure core imports no
machine, and no modules import each other in a loop.

Every .py file of our packages is read with `ast` (nothing is imported), every import statement
counts, at module level or inside a function (a late import is still a dependency), and each
imported module is put in a layer:

- `cli`: `zcube_lab.cli*` (the command line, with its `commands` and `fabric_options`) and
  `zcube_lab.__main__` (`python -m zcube_lab`), the top floor: it may import every other layer and
  none imports it;
- `adapters`: `zcube_lab.adapters*` (the small helpers over the machine: process groups, HTTP
  waits, signals, free ports), the I/O floor just above the core; imports only the core;
- `core`: `zcube_lab.core*`, `zcube_lab.data` and the `zcube_lab` package itself (pure; imports
  nothing of ours outside the core, and no module of the standard library that reaches the machine);
- `zcube_lab.controller`, `.serving`, `.workloads` and `.emulator`, each its own layer, and
  `grafana` and `bench` (outside the installed package), each its own.

`ALLOWED` lists the layers each layer may import (its own always); it is acyclic, so a cycle
between packages shows up as at least one edge it does not allow. Inside a layer, modules must
not import each other in a loop either (`module_cycles`, over the same edges: a late or
`TYPE_CHECKING` import is still a tie). Failures list every offending edge with the file and
line of the import.
"""

from __future__ import annotations

import ast
import json
import os
import pwd
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("zcube_lab", "grafana", "bench")
# The product's packages under `zcube_lab`, each its own layer.
PRODUCT_LAYERS = ("controller", "emulator", "serving", "workloads")
CLI_MODULES = ("zcube_lab.cli", "zcube_lab.__main__")
ADAPTER_MODULES = ("zcube_lab.adapters",)

_ALL_BUT_CLI = frozenset(
    {"core", "adapters", "controller", "serving", "workloads", "emulator", "grafana", "bench"}
)
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "adapters": frozenset({"core"}),
    "controller": frozenset({"core", "adapters"}),
    "serving": frozenset({"core", "adapters"}),
    "workloads": frozenset({"core", "adapters", "serving"}),
    "emulator": frozenset({"core", "adapters", "controller", "serving", "workloads"}),
    "grafana": _ALL_BUT_CLI,
    "bench": _ALL_BUT_CLI,
    "cli": _ALL_BUT_CLI,
}


@dataclass(frozen=True)
class Edge:
    """One import statement: module `source` (in `path`, at `line`) imports module `target`."""

    source: str
    target: str
    path: str
    line: int

    def __str__(self) -> str:
        return (
            f"{self.source} ({layer(self.source)}) -> {self.target} ({layer(self.target)}) "
            f"at {self.path}:{self.line}"
        )


def layer(module: str) -> str:
    """The layer a module of ours belongs to (see the module docstring)."""
    if any(module == m or module.startswith(m + ".") for m in CLI_MODULES):
        return "cli"
    if any(module == m or module.startswith(m + ".") for m in ADAPTER_MODULES):
        return "adapters"
    parts = module.split(".")
    if parts[0] != "zcube_lab":
        return parts[0]
    return parts[1] if len(parts) > 1 and parts[1] in PRODUCT_LAYERS else "core"


def module_name(path: Path) -> str:
    """`zcube_lab/emulator/lab/ovs.py` -> `zcube_lab.emulator.lab.ovs`; a package's
    `__init__.py` -> the package."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> Iterator[Path]:
    """Every .py file of our packages."""
    for package in PACKAGES:
        yield from sorted((REPO / package).rglob("*.py"))


def _is_module(name: str) -> bool:
    base = REPO.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """(module imported, line) for every import statement in `tree`, relative ones resolved;
    `from a import b` names `a.b` when `b` is a module, else `a`."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if _is_module(full) else base), node.lineno


def our_edges(files: Iterable[Path]) -> list[Edge]:
    """The imports between our packages, one edge per imported module and statement."""
    edges = []
    for path in files:
        source = module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        for target, line in imported_modules(tree, source, path.name == "__init__.py"):
            if target.split(".", 1)[0] in PACKAGES:
                edges.append(Edge(source, target, str(path.relative_to(REPO)), line))
    return edges


def forbidden(edges: Iterable[Edge]) -> list[Edge]:
    """Edges that go against `ALLOWED` (a cycle between packages makes at least one)."""
    return [
        e
        for e in edges
        if layer(e.source) != layer(e.target) and layer(e.target) not in ALLOWED[layer(e.source)]
    ]


def cli_imports(edges: Iterable[Edge]) -> list[Edge]:
    """Imports of the CLI modules from outside the CLI."""
    return [e for e in edges if layer(e.target) == "cli" and layer(e.source) != "cli"]


def package_cycles(edges: Iterable[Edge]) -> list[list[str]]:
    """Cycles between layers in the graph the edges make, each as the layers in order."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        a, b = layer(e.source), layer(e.target)
        if a != b:
            graph.setdefault(a, set()).add(b)
    cycles: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == path[0]:
                cycles.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its least layer
                walk(nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, [start])
    return cycles


def module_cycles(edges: Iterable[Edge]) -> list[list[str]]:
    """Groups of modules that import each other in a loop (the strongly connected parts of the
    import graph with more than one module), each sorted, in sorted order."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.source != e.target:
            graph.setdefault(e.source, set()).add(e.target)
            graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return our_edges(source_files())


def test_the_walk_sees_our_packages(edges: list[Edge]) -> None:
    layers = {layer(e.source) for e in edges}
    assert {"core", "controller", "emulator", "serving", "workloads", "cli"} <= layers
    # The adapters import nothing of ours today; they are seen as what the floors above import.
    assert "adapters" in {layer(e.target) for e in edges}
    # A late import (inside a function) counts: network.py imports the controller's rules there.
    assert any(
        e.source == "zcube_lab.emulator.lab.network" and e.target == "zcube_lab.controller.rules"
        for e in edges
    )


def test_imports_run_one_way_between_our_packages(edges: list[Edge]) -> None:
    bad = forbidden(edges)
    cycles = package_cycles(edges)
    assert not bad and not cycles, (
        "imports against the allowed direction (core <- adapters <- controller, serving <- "
        "workloads <- emulator; grafana and bench import anything but the CLI; the CLI "
        "imports anything):\n  "
        + "\n  ".join(map(str, bad))
        + "".join(f"\ncycle: {' -> '.join(c)}" for c in cycles)
    )


def test_nothing_outside_the_cli_imports_the_cli(edges: list[Edge]) -> None:
    bad = cli_imports(edges)
    assert not bad, "imports of the CLI from outside it:\n  " + "\n  ".join(map(str, bad))


def test_no_modules_import_each_other_in_a_loop(edges: list[Edge]) -> None:
    groups = module_cycles(edges)
    ties = [e for e in edges for g in groups if e.source in g and e.target in g]
    assert not groups, "modules that import each other in a loop:\n  " + "\n  ".join(map(str, ties))


def test_one_import_name() -> None:
    """Issue 44: the product installs one import name, `zcube_lab`. Its folders say which rule a
    file keeps: the pure core and the adapters, the four product packages (`PRODUCT_LAYERS`),
    `data` (files, no code) and the command line `zcube_lab.cli`; only the package itself (the
    version) and `__main__` stand beside them. Nothing of ours is installed beside it."""
    modules = {module_name(p) for p in (REPO / "zcube_lab").rglob("*.py")}
    product = [f"zcube_lab.{name}" for name in PRODUCT_LAYERS]
    floors = ("zcube_lab.core", "zcube_lab.adapters", "zcube_lab.cli", *product)
    stray = sorted(
        m
        for m in modules
        if m not in ("zcube_lab", "zcube_lab.__main__")
        and not any(m == r or m.startswith(r + ".") for r in floors)
    )
    assert not stray, f"zcube_lab modules outside its floors: {stray}"
    assert {"zcube_lab.core.fabric.description", "zcube_lab.adapters.procs"} <= modules
    assert layer("zcube_lab.core.stats") == "core" and layer("zcube_lab") == "core"
    assert layer("zcube_lab.adapters.ports") == "adapters"
    assert layer("zcube_lab.serving.gateway") == "serving"
    assert layer("zcube_lab.emulator.lab.ovs") == "emulator"
    for old in ("controller", "serving", "workloads", "emulator", "zcube_cli"):
        assert not (REPO / old).exists(), f"{old}/ is a top-level package again"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["zcube_lab*"]


def test_the_cli_is_the_top_floor() -> None:
    """`zcube_lab.cli` is what the `zcube-lab` console script, `python -m zcube_lab.cli` and
    `python -m zcube_lab` run."""
    modules = {module_name(p) for p in (REPO / "zcube_lab" / "cli").rglob("*.py")}
    assert {"zcube_lab.cli", "zcube_lab.cli.__main__", "zcube_lab.cli.commands.run"} <= modules
    assert layer("zcube_lab.cli.fabric_options") == "cli"
    assert layer("zcube_lab.__main__") == "cli"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["zcube-lab"] == "zcube_lab.cli:main"
    tree = ast.parse((REPO / "zcube_lab" / "cli" / "__init__.py").read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
    for argv in (["-m", "zcube_lab", "--help"], ["-m", "zcube_lab.cli", "--help"]):
        out = subprocess.run(
            [sys.executable, *argv], capture_output=True, text=True, timeout=60, cwd=REPO
        )
        assert out.returncode == 0 and "usage: zcube-lab" in out.stdout, (argv, out.stderr)


# Standard-library modules that reach the machine (processes, signals, sockets, files, the clock):
# the pure core imports none of them; their users live in `zcube_lab.adapters` and above.
MACHINE_STDLIB = (
    "asyncio", "ctypes", "fcntl", "http", "multiprocessing", "os", "select", "shutil", "signal",
    "socket", "subprocess", "tempfile", "threading", "time", "urllib",
)  # fmt: skip


def machine_imports(files: Iterable[Path]) -> list[tuple[str, str, int]]:
    """(module, machine module imported, line) for every import of `MACHINE_STDLIB` in `files`."""
    found = []
    for path in files:
        module = module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        for target, line in imported_modules(tree, module, path.name == "__init__.py"):
            if target.split(".", 1)[0] in MACHINE_STDLIB:
                found.append((module, target, line))
    return found


def test_the_core_imports_no_machine() -> None:
    """`zcube_lab.core` is pure: no module of it imports a standard-library module that starts a
    process, sends a signal, opens a socket or reads the clock (those are the adapters')."""
    core = sorted((REPO / "zcube_lab" / "core").rglob("*.py"))
    bad = machine_imports(core)
    assert not bad, "the core imports modules that reach the machine:\n  " + "\n  ".join(
        f"{m} -> {t} at line {line}" for m, t, line in bad
    )
    adapters = sorted((REPO / "zcube_lab" / "adapters").rglob("*.py"))
    assert {t for _m, t, _l in machine_imports(adapters)} >= {"os", "signal", "socket"}


def test_the_module_cycle_check_catches_a_made_up_loop() -> None:
    made_up = [
        Edge(
            "zcube_lab.emulator.results.a",
            "zcube_lab.emulator.results.b",
            "zcube_lab/emulator/results/a.py",
            1,
        ),
        Edge(
            "zcube_lab.emulator.results.b",
            "zcube_lab.emulator.prometheus.c",
            "zcube_lab/emulator/results/b.py",
            2,
        ),
        Edge(
            "zcube_lab.emulator.prometheus.c",
            "zcube_lab.emulator.results.a",
            "zcube_lab/emulator/prometheus/c.py",
            3,
        ),
        Edge(
            "zcube_lab.emulator.prometheus.c",
            "zcube_lab.core.stats",
            "zcube_lab/emulator/prometheus/c.py",
            4,
        ),
        Edge("zcube_lab.workloads.x", "zcube_lab.workloads.y", "zcube_lab/workloads/x.py", 5),
        Edge("zcube_lab.workloads.y", "zcube_lab.workloads.x", "zcube_lab/workloads/y.py", 6),
        Edge(
            "zcube_lab.serving.z", "zcube_lab.serving.z", "zcube_lab/serving/z.py", 7
        ),  # a module naming itself: no loop
    ]
    assert module_cycles(made_up) == [
        [
            "zcube_lab.emulator.prometheus.c",
            "zcube_lab.emulator.results.a",
            "zcube_lab.emulator.results.b",
        ],
        ["zcube_lab.workloads.x", "zcube_lab.workloads.y"],
    ]
    assert module_cycles(made_up[:2] + made_up[3:5]) == []  # one edge fewer: no loop
    # within one layer, so the package check alone would not see them
    assert not forbidden(made_up) and not package_cycles(made_up)


def test_the_checks_catch_a_cycle_and_a_cli_import() -> None:
    made_up = [
        Edge(
            "zcube_lab.core.fabric.cost",
            "zcube_lab.emulator.lab.network",
            "zcube_lab/core/fabric/cost.py",
            1,
        ),
        Edge(
            "zcube_lab.emulator.lab.network",
            "zcube_lab.core.fabric.description",
            "zcube_lab/emulator/lab/x.py",
            2,
        ),
        Edge("bench.recovery", "zcube_lab.cli.commands.compare", "bench/recovery.py", 3),
        Edge(
            "zcube_lab.cli.commands.up",
            "zcube_lab.emulator.lab.network",
            "zcube_lab/cli/commands/up.py",
            4,
        ),
        Edge("zcube_lab.emulator.lab.state", "zcube_lab.cli", "zcube_lab/emulator/lab/state.py", 5),
    ]
    assert forbidden(made_up) == [made_up[0], made_up[2], made_up[4]]
    assert package_cycles(made_up) == [["cli", "emulator", "cli"], ["core", "emulator", "core"]]
    assert cli_imports(made_up) == [made_up[2], made_up[4]]


def test_the_checks_keep_the_core_under_the_adapters() -> None:
    made_up = [
        Edge("zcube_lab.core.clock", "zcube_lab.adapters.procs", "zcube_lab/core/clock.py", 1),
        Edge(
            "zcube_lab.adapters.procs",
            "zcube_lab.serving.cluster",
            "zcube_lab/adapters/procs.py",
            2,
        ),
        Edge(
            "zcube_lab.serving.cluster",
            "zcube_lab.adapters.procs",
            "zcube_lab/serving/cluster.py",
            3,
        ),
        Edge(
            "zcube_lab.controller.app", "zcube_lab.adapters.ports", "zcube_lab/controller/app.py", 4
        ),
        Edge("zcube_lab.adapters.ports", "zcube_lab.core.errors", "zcube_lab/adapters/ports.py", 5),
    ]
    assert forbidden(made_up) == made_up[:2]
    assert package_cycles(made_up) == [
        ["adapters", "core", "adapters"],
        ["adapters", "serving", "adapters"],
    ]


def test_relative_and_from_imports_resolve_to_modules() -> None:
    tree = ast.parse(
        "from . import ovs\nfrom ..lab.state import sweep\nfrom zcube_lab.adapters import procs"
    )
    found = [m for m, _line in imported_modules(tree, "zcube_lab.emulator.lab.network", False)]
    assert found == [
        "zcube_lab.emulator.lab.ovs",
        "zcube_lab.emulator.lab.state",
        "zcube_lab.adapters.procs",
    ]


VERDICT = "zcube_lab.emulator.verdict"
# What the verdict package may import of ours: the pure core, the metric names the engines
# export (the lateness and overrun histograms it reads), and itself.
VERDICT_MAY_IMPORT = ("zcube_lab.core", "zcube_lab.serving.vllm_metrics", VERDICT)


def verdict_leaks(edges: Iterable[Edge]) -> list[Edge]:
    """Imports from the verdict package of anything but `VERDICT_MAY_IMPORT`."""
    return [
        e
        for e in edges
        if (e.source == VERDICT or e.source.startswith(VERDICT + "."))
        and not any(e.target == m or e.target.startswith(m + ".") for m in VERDICT_MAY_IMPORT)
    ]


def test_the_verdict_is_one_pure_package(edges: list[Edge]) -> None:
    """Issue 20: the verdict lives in `zcube_lab.emulator.verdict` alone and imports no sampler,
    tool or
    lab module, so it can be read and tested as data in, reasons out."""
    modules = {module_name(p) for p in (REPO / "zcube_lab" / "emulator" / "verdict").rglob("*.py")}
    assert {f"{VERDICT}.{m}" for m in ("limits", "judge", "network", "netstats")} <= modules
    assert not list((REPO / "zcube_lab" / "emulator" / "lab").glob("verdict.py"))
    leaks = verdict_leaks(edges)
    assert not leaks, "the verdict imports outside its package:\n  " + "\n  ".join(map(str, leaks))
    made_up = [
        Edge(
            f"{VERDICT}.judge",
            "zcube_lab.emulator.lab.health",
            "zcube_lab/emulator/verdict/judge.py",
            1,
        )
    ]
    assert verdict_leaks(made_up) == made_up


# The pure floors of `emulator`: what judges a run and what reads its results. Neither may import
# a package of ours that starts processes, touches the machine or runs the lab.
PURE_PACKAGES = (VERDICT, "zcube_lab.emulator.results")
ADAPTERS = (
    "zcube_lab.emulator.lab", "zcube_lab.emulator.experiment", "zcube_lab.emulator.cluster",
    "zcube_lab.emulator.probes", "zcube_lab.emulator.prometheus",
)  # fmt: skip


def _within(module: str, packages: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def adapter_imports(edges: Iterable[Edge]) -> list[Edge]:
    """Imports of an adapter package (`ADAPTERS`) from a pure one (`PURE_PACKAGES`)."""
    return [e for e in edges if _within(e.source, PURE_PACKAGES) and _within(e.target, ADAPTERS)]


def test_the_verdict_and_the_results_import_no_adapter(edges: list[Edge]) -> None:
    """Issue 35: `zcube_lab.emulator.verdict` and `zcube_lab.emulator.results` are pure (data in,
    data out), so
    neither imports the lab, the experiments, the cluster, the probes or Prometheus's server."""
    bad = adapter_imports(edges)
    assert not bad, "pure packages importing adapters:\n  " + "\n  ".join(map(str, bad))
    made_up = [
        Edge(
            "zcube_lab.emulator.results.report",
            "zcube_lab.emulator.lab.health",
            "zcube_lab/emulator/results/report.py",
            1,
        ),
        Edge(
            "zcube_lab.emulator.verdict.combine",
            "zcube_lab.emulator.cluster.remote",
            "zcube_lab/emulator/verdict/c.py",
            2,
        ),
        Edge(
            "zcube_lab.emulator.experiment.clusterrun",
            "zcube_lab.emulator.verdict.combine",
            "x.py",
            3,
        ),
        Edge(
            "zcube_lab.emulator.results.sweep.capacity",
            "zcube_lab.emulator.verdict.combine",
            "y.py",
            4,
        ),
    ]
    assert adapter_imports(made_up) == made_up[:2]


# Run in a fresh interpreter by `test_the_pure_packages_import_without_root`: import every module
# of the pure packages, then list what got loaded.
_IMPORT_ALL = """
import importlib, json, os, pkgutil, sys
names = []
for package in sys.argv[1:]:
    pkg = importlib.import_module(package)
    for info in pkgutil.walk_packages(pkg.__path__, package + "."):
        importlib.import_module(info.name)
        if not info.ispkg:
            names.append(info.name)
print(json.dumps({"uid": os.geteuid(), "imported": names, "loaded": sorted(sys.modules)}))
"""
# Adapters outside zcube_lab/emulator/ that touch the machine: Mininet, the OpenFlow stack, our I/O
# floor.
MACHINE_MODULES = ("mininet", "os_ken", "zcube_lab.adapters")


def test_the_pure_packages_import_without_root(tmp_path: Path) -> None:
    """Every module of `zcube_lab.emulator.verdict` and `zcube_lab.emulator.results` imports in a
    fresh interpreter, as an unprivileged user when the tests run as root (so an import that needs
    root, /proc of
    another user or a device fails here), and loads no adapter of ours."""
    user = None
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("nobody").pw_name
        except KeyError:
            user = None
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, *PURE_PACKAGES],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp_path),
             "PATH": os.defpath, "MPLBACKEND": "Agg"},
        user=user,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert user is None or report["uid"] != 0
    files = {module_name(p) for pkg in PURE_PACKAGES for p in
             (REPO / pkg.replace(".", "/")).rglob("*.py") if p.name != "__init__.py"}  # fmt: skip
    assert set(report["imported"]) == files and f"{VERDICT}.combine" in files
    loaded = [m for m in report["loaded"] if _within(m, (*ADAPTERS, *MACHINE_MODULES))]
    assert not loaded, f"importing the pure packages loaded adapters: {loaded}"


def test_every_test_file_has_its_own_name() -> None:
    """pytest imports test files by basename (the tests folders are not packages), so two files
    of one name in tests/unit and tests/integration stop the whole suite at collection."""
    names: dict[str, list[str]] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        names.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    doubled = {n: p for n, p in names.items() if len(p) > 1}
    assert not doubled, f"test files sharing a name: {doubled}"
    assert len(names) > 50  # the walk saw the suite
