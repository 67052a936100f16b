"""Issue 6 acceptance: cut a fabric link that carries an active KV transfer, under each policy.

A real ZCube (n=4) in Mininet on Open vSwitch, routed by our os-ken controller; a real KV server
(zcube_lab.serving.kvwire) on the prefill host h0 and a real pull from the decode host h5, over both
NIC ports as decode does. h5 pulls h0's port-1 address from its port 2, across B1 > A0; once bytes
are flowing on that path, the real `FaultInjector` cuts link a0-b1 for the rest of the test.

- ff (fast-failover detours), recompute (controller reroutes) and spray (retire the stalled
  subflows, move their bytes) must complete the pull with every byte and the checksum verified;
- static (one path, nothing reacts) must fail with a clear timeout error, in bounded time;
- afterwards nothing of the lab remains.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.probes.cutprobe import CutResult, cut_during_pull

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

FABRIC = build_fabric(FabricSpec.of("zcube", n=4))
KV_BYTES = 24 * 1024 * 1024  # about 2 s over both 50 Mb/s ports
PULL_TIMEOUT_S = 6.0
# Prefill h0's port 1 hangs off a0; decode h5 pulls it from its port 2 on b1, across b1 > a0.
CUT = "a0-b1"


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


def _cut(policy: str, logs: Path, state_dir: Path) -> CutResult:
    return cut_during_pull(
        FABRIC,
        policy,
        "h0",
        "h5",
        link=CUT,
        num_bytes=KV_BYTES,
        timeout_s=PULL_TIMEOUT_S,
        log_dir=logs,
        state_dir=state_dir,
    )


@pytest.mark.parametrize("policy", ["ff", "recompute", "spray"])
def test_a_reacting_policy_completes_the_cut_transfer_intact(
    policy: str, tmp_path: Path, state_dir: Path
) -> None:
    cut = _cut(policy, tmp_path, state_dir)
    result, carried = cut.pull, cut.carried
    assert carried > 100_000, f"the cut link carried only {carried} bytes of the transfer"
    assert result["ok"], result["error"]
    assert result["bytes"] == KV_BYTES and result["checksum_ok"]
    events = [json.loads(x) for x in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [e["action"] for e in events] == ["down"]
    assert len(events[0]["interfaces"]) == 2
    if policy == "spray":
        assert result["retired"] >= 1  # the stalled subflows were retired, not waited for
    if policy == "recompute":
        assert cut.recomputes >= 1
        log = (tmp_path / "controller.log").read_text()
        assert "recomputed" in log


def test_static_routing_reports_the_failure_clearly_without_hanging(
    tmp_path: Path, state_dir: Path
) -> None:
    t0 = time.monotonic()
    cut = _cut("static", tmp_path, state_dir)
    result, carried = cut.pull, cut.carried
    assert carried > 100_000
    assert not result["ok"]
    assert "timed out" in result["error"] and str(KV_BYTES) in result["error"]
    assert result["seconds"] < PULL_TIMEOUT_S + 2
    assert time.monotonic() - t0 < 90


@pytest.mark.parametrize(
    ("spec", "policy"),
    [
        (FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2), "ff"),
        (FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2, planes=2), "spray"),
    ],
    ids=["roft-ff", "roft-2planes-spray"],
)
def test_roft_and_multiplane_roft_survive_a_cut_uplink(
    spec: FabricSpec, policy: str, tmp_path: Path, state_dir: Path
) -> None:
    # h0 (rail 0, leaf 0) to h5 (rail 1): cross-rail, through a spine; the busiest
    # switch-to-switch link of the transfer is cut. On two planes the pull also uses both.
    fabric = build_fabric(spec)
    cut = cut_during_pull(
        fabric, policy, "h0", "h5", num_bytes=KV_BYTES, log_dir=tmp_path, state_dir=state_dir
    )
    assert cut.carried > 100_000 and cut.link is not None
    assert cut.pull["ok"], cut.pull["error"]
    assert cut.pull["bytes"] == KV_BYTES and cut.pull["checksum_ok"]
    assert len(cut.pull["by_address"]) == len(fabric.host("h0").interfaces)


# --- a whole run with an injected fault: the pipeline from --fail to the report ---------------


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("fault-results")
    done = subprocess.run(
        [
            sys.executable, "-m", "zcube_lab.cli", "run",
            "--fabric", "zcube", "--n", "4", "--gpus-per-server", "4",
            "--workload", "coding-agent", "--duration", "16", "--drain", "30", "--rate", "3",
            "--policy", "ff", "--fail", "link a0-b1 at 4s for 6s",
            "--results", str(results),
        ],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fault: link a0-b1 down" in done.stderr
    (run,) = (p.parent for p in results.glob("*/summary.json"))
    return run


def test_a_fault_run_records_the_fault_and_reports_it(fault_run: Path) -> None:
    events = [json.loads(x) for x in (fault_run / "faults.jsonl").read_text().splitlines()]
    assert [e["action"] for e in events] == ["down", "up"]
    assert events[1]["wall"] - events[0]["wall"] == pytest.approx(6.0, abs=0.5)
    summary = json.loads((fault_run / "summary.json").read_text())
    assert summary["label"] == "zcube/ff" and summary["policy"] == "ff"
    f = summary["faults"]
    assert f["faults"] == 1 and len(f["spans_s"]) == 1
    assert f["requests_before"] > 0 and f["requests_during"] > 0 and f["requests_after"] > 0
    # Fast failover: nothing fails, every completed transfer is whole.
    assert summary["client"]["failed"] == 0 and f["failed_requests"] == 0
    assert f["kv_completed"] == summary["client"]["completed"]
    # No transfer was abandoned, and every completed one says it verified.
    assert f["kv_unfinished_transfers"] == 0 and f["kv_bytes_lost"] == 0
    assert f["kv_completed_unverified"] == 0 and f["kv_checksum_failures"] == 0
    assert f["ttft_p99_during_s"] is not None
    kv_logs = list((fault_run / "logs").glob("kv-*.jsonl"))
    assert len(kv_logs) == 12  # one per decode engine
    log = (fault_run / "logs" / "controller.log").read_text()
    assert "with policy ff" in log and "a0 port" in log and " down" in log


def test_the_fault_shows_in_prometheus_for_grafana(fault_run: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import grafana_support as g

    from zcube_lab.emulator.prometheus.server import PrometheusServer

    summary = json.loads((fault_run / "summary.json").read_text())
    start, end = g.run_window(fault_run)
    sel = f'run="{summary["run"]}"'
    with PrometheusServer("global: {}\n", g.copy_tsdb(fault_run, tmp_path)) as prom:
        active = prom.query_range(f"max(zcube_fault_active{{{sel}}})", start, end, 1.0)
        down = prom.query_range(f"count(zcube_link_up{{{sel}}} == 0)", start, end, 1.0)
    assert max(float(v) for _, v in active[0]["values"]) == 1.0
    # Both switch ends of a0-b1 were seen down by the controller (OpenFlow port status).
    assert max(float(v) for _, v in down[0]["values"]) == 2.0


def test_the_comparison_report_shows_fault_rows(fault_run: Path, tmp_path: Path) -> None:
    from zcube_lab.emulator.results.compare.report import write_report
    from zcube_lab.emulator.results.run.summary import RunSummary

    page = write_report([RunSummary.read(fault_run)], tmp_path, "zcube/ff", {})
    text = page.read_text()
    assert "TTFT p99 during fault" in text and "KV bytes never delivered" in text
    assert (tmp_path / "fault_timeline.png").stat().st_size > 10_000


def test_nothing_of_the_failure_labs_remains(state_dir: Path) -> None:
    # Runs after the tests above (file order): every lab was stopped, links and all.
    bridges = subprocess.run(
        ["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not {s.name for s in FABRIC.switches} & set(bridges)
    assert not [b for b in bridges if b.startswith(("leaf", "spine", "p0", "p1"))]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "a0-eth" not in links and "leaf0-eth" not in links and "p0leaf0" not in links
    assert not list(state_dir.glob("lab-*.json"))
    default = Path("/tmp/zcube-lab")  # the whole-run tests use the default state folder
    assert not list(default.glob("lab-*.json")) if default.is_dir() else True
