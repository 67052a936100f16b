"""`--fabric file:PATH` on the commands that build one fabric (run, up, fabric): the file's own
spec, its size never overridden, and bad values refused by name (issue 47 item 4)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from zcube_lab.cli.fabric_options import add_fabric_arguments, spec_from_args
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fabrics" / "hpn-pod.yaml"


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_fabric_arguments(p)
    return p.parse_args(argv)


def test_a_file_fabric_is_built_from_its_own_spec():
    spec = spec_from_args(parse("--fabric", f"file:{EXAMPLE}"))
    assert spec.kind == "file" and dict(spec.params)["path"] == str(EXAMPLE)
    assert len(build_fabric(spec).hosts) == 16


def test_size_options_and_unknown_kinds_are_refused():
    with pytest.raises(ConfigError, match="no size option with a fabric file"):
        spec_from_args(parse("--fabric", f"file:{EXAMPLE}", "--n", "4"))
    with pytest.raises(SystemExit):
        parse("--fabric", "fat-tree")
    with pytest.raises(SystemExit):
        parse("--fabric", "file:")
    with pytest.raises(ConfigError, match="64 GPUs"):
        spec_from_args(parse("--fabric", f"file:{EXAMPLE}", "--gpus", "64"))


def test_two_fabric_files_in_one_comparison_are_two_variants(tmp_path: Path):
    from zcube_lab.core.fabric.files import file_spec
    from zcube_lab.emulator.experiment.plan import plan_run
    from zcube_lab.emulator.experiment.runconfig import RunConfig

    other = tmp_path / "my-pod.yaml"
    other.write_text(EXAMPLE.read_text())
    labels = set()
    for path in (EXAMPLE, other):
        plan = plan_run(RunConfig(fabric=file_spec(path)))
        labels.add(plan.label)
        assert plan.run_name("20261207-000000").startswith(f"20261207-000000-{plan.label}-")
    assert labels == {"file-hpn-pod", "file-my-pod"}
