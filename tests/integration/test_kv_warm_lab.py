"""`--kv-warm` in a real lab: every decode engine opens its KV connections to every prefill
address before the load (zcube_lab.serving.kvwire.warm), so the first pull between a decode and a
prefill takes kept connections instead of sending SYNs through the fabric. Without it that first
pull opens one connection per lane (4 on ZCube: 2 addresses x 2 streams), which the 64-GPU sweeps
saw as about 770 pulls of 3,840 opening connections, and dilated runs as SYNs retransmitted
behind paused queues (docs/DOMAIN.md §4). One ZCube n=2 run, about a minute."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_trusted

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

WARM = 2  # connections per prefill KV address


def _run(results: Path) -> dict:
    for stale in results.glob("*/summary.json"):  # an earlier attempt spoiled by the host
        stale.rename(stale.with_name("summary.spoiled.json"))
    done = subprocess.run(
        [
            sys.executable, "-m", "zcube_lab.cli", "run", "--fabric", "zcube", "--n", "2",
            "--gpus-per-server", "2", "--workload", "coding-agent", "--rate", "2", "--seed", "1",
            "--duration", "10",
            "--drain", "20", "--kv-warm", str(WARM), "--results", str(results),
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = results.glob("*/summary.json")
    return json.loads(path.read_text()) | {"folder": str(path.parent)}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    results = tmp_path_factory.mktemp("kvwarm")
    return run_trusted(lambda: _run(results))


def test_the_warm_run_completes_and_is_trustworthy(run: dict) -> None:
    assert run["trustworthy"] is True, run["health"]["reasons"]
    assert run["client"]["completed"] >= 10 and run["client"]["failed"] == 0


def test_every_decode_warmed_every_prefill_address(run: dict) -> None:
    logs = Path(run["folder"]) / "logs"
    decodes = sorted(logs.glob("decode-*.log"))
    assert decodes
    for log in decodes:
        text = log.read_text()
        assert "KV connections warmed" in text, log.name
        line = next(x for x in text.splitlines() if "KV connections warmed" in x)
        opened, _, want = line.split("warmed: ")[1].split(" (")[0].partition(" of ")
        assert int(opened) == int(want) > 0, line


def test_first_pull_to_each_prefill_opens_no_connection(run: dict) -> None:
    firsts: dict[tuple[str, str], dict] = {}
    for path in (Path(run["folder"]) / "logs").glob("kv-decode-*.jsonl"):
        for line in path.read_text().splitlines():
            pull = json.loads(line)
            firsts.setdefault((path.name, pull["engine_id"]), pull)
    assert firsts, "no KV pull was logged"
    for key, pull in firsts.items():
        assert pull["ok"] and pull["lanes"] >= 2, (key, pull)
        assert pull["connections_opened"] == 0, (key, pull)
