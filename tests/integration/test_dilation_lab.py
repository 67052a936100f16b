"""Time dilation converges (issue 20, "Done when"): the same tiny point (ZCube n=2, coding-agent,
the same seed, so the same requests) run at k = 2 and at k = 4 gives the same modelled TTFT and
KV pull medians within 10%, and both runs are trustworthy. About 4 minutes of wall time, most of
it the k = 4 run (its load lasts four times its modelled 15 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

TOLERANCE = 0.10


def _run(results: Path, k: int) -> dict:
    out = results / f"k{k}"
    done = subprocess.run(
        [
            sys.executable, "-m", "zcube_lab.cli", "run", "--fabric", "zcube", "--n", "2",
            "--workload", "coding-agent", "--rate", "1", "--seed", "1",
            "--duration", "15", "--drain", "20", "--dilation", str(k), "--results", str(out),
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = out.glob("*/summary.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    results = tmp_path_factory.mktemp("dilation")
    return {k: _run(results, k) for k in (2, 4)}


def test_both_dilated_runs_are_trustworthy(runs: dict[int, dict]) -> None:
    for k, summary in runs.items():
        assert summary["dilation"] == k
        assert summary["trustworthy"] is True, (k, summary["health"]["reasons"])
        assert summary["client"]["completed"] >= 10 and summary["client"]["failed"] == 0


@pytest.mark.parametrize(
    ("section", "field"), [("client", "ttft_p50_s"), ("transfers", "kv_xfer_p50_s")]
)
def test_k2_and_k4_agree_on_the_modelled_medians(
    runs: dict[int, dict], section: str, field: str
) -> None:
    two, four = runs[2][section][field], runs[4][section][field]
    assert two > 0 and four > 0
    assert abs(four - two) / two <= TOLERANCE, (field, two, four)
