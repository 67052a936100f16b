"""The benchmarks run as modules of the `bench` package from the repository's root
(`python -m bench.NAME`), importing the project from its install, each other as `bench.*` and
the shared test fixtures as `tests.*`: no script changes `sys.path`."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


def path_patches(source: str) -> list[int]:
    """The lines of `source` that touch `sys.path`."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]


def test_no_bench_script_patches_sys_path() -> None:
    found = [
        f"{p.relative_to(REPO)}:{line}"
        for p in sorted(BENCH.glob("*.py"))
        for line in path_patches(p.read_text())
    ]
    assert found == [], "run it as `python -m bench.NAME` instead: " + ", ".join(found)
    assert path_patches("import sys\nsys.path.insert(0, 'x')") == [2]


def test_bench_is_a_package_and_not_installed() -> None:
    assert (BENCH / "__init__.py").is_file()
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"bench*"' not in pyproject  # a top-level `bench` would collide with other projects'


@pytest.mark.parametrize(
    "module",
    [
        "bench.kv_seen",  # imports a sibling (bench.victims_of)
        "bench.fuzz_gateway",  # imports the test fixtures (tests.fuzz_requests)
    ],
)
def test_a_bench_module_starts_from_the_root_with_a_clean_path(module: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
