"""Time dilation converges (issue 20, "Done when"): the same tiny point (ZCube n=2, coding-agent,
the same seed, so the same requests) run at k = 2 and at k = 4 gives the same modelled TTFT
median within 10%, both runs are trustworthy, and the KV pull converges on its analytic anchor:
its time over bytes x 8 / path rate falls from k = 2 to k = 4 and is within 10% of 1 at k = 4.

The KV pull median is not compared pairwise between k = 2 and 4: the dilation ladder
(docs/BENCHMARKS.md) measured it 11% apart there (a fixed cost in wall time that shrinks by k),
which is why k = 4, not 2, is the light point's validated k; a clean-clone CI run measured 13%.
About 4 minutes of wall time, most of it the k = 4 run (its load lasts four times its modelled
15 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_trusted

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

TOLERANCE = 0.10


def _run(results: Path, k: int) -> dict:
    out = results / f"k{k}"
    for stale in out.glob("*/summary.json"):  # an earlier attempt spoiled by the host
        stale.rename(stale.with_name("summary.spoiled.json"))
    done = subprocess.run(
        [
            sys.executable, "-m", "zcube_lab.cli", "run", "--fabric", "zcube", "--n", "2",
            "--gpus-per-server", "2", "--workload", "coding-agent", "--rate", "1", "--seed", "1",
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
    return {k: run_trusted(lambda k=k: _run(results, k)) for k in (2, 4)}


def test_both_dilated_runs_are_trustworthy(runs: dict[int, dict]) -> None:
    for k, summary in runs.items():
        assert summary["dilation"] == k
        assert summary["trustworthy"] is True, (k, summary["health"]["reasons"])
        assert summary["client"]["completed"] >= 10 and summary["client"]["failed"] == 0


def test_k2_and_k4_agree_on_the_modelled_ttft_median(runs: dict[int, dict]) -> None:
    two, four = runs[2]["client"]["ttft_p50_s"], runs[4]["client"]["ttft_p50_s"]
    assert two > 0 and four > 0
    assert abs(four - two) / two <= TOLERANCE, (two, four)


def test_the_kv_pull_converges_on_bytes_over_the_path_rate(runs: dict[int, dict]) -> None:
    two = runs[2]["transfers"]["kv_xfer_ratio_p50"]
    four = runs[4]["transfers"]["kv_xfer_ratio_p50"]
    assert four <= two * (1 + TOLERANCE / 2), (two, four)  # no worse with more dilation
    assert abs(four - 1.0) <= TOLERANCE, (two, four)
