"""Fidelity under load (issue 11): the lab's transfers take what the fabric's rates say, its
health verdict tells a run it cannot trust from one it can, and the all-to-all figure is the
exchange's, not the engine step's.

- One mid-size KV pull per fabric, uncontended, takes bytes / path rate within 10% once the
  fixed cost (a tiny pull's median) is taken off (`zcube_lab.emulator.probes.kvprobe`, the library
  of `bench/kv_fidelity.py`).
- A run whose links cannot hold what crosses them (queues of two packets at every switch port
  and host NIC port: every KV pull's initial windows overflow them) is marked not trustworthy,
  with a reason that names a host or an interface. A tiny `--nic-mbps` would not do: every byte
  crossing the fabric is divided by the same bandwidth scale, so the load stays as light.
- A KV pull reuses its connections: over 20 pulls the puller's host holds the same four
  (2 addresses x 2 streams) established KV connections and no closed ones pile up, where
  connections opened for each pull leave theirs in TIME-WAIT, four per pull.
- That a clean short run is trustworthy is not run here (issue 48 item 4: a whole run, ~50 s,
  that others make too): tests/integration/test_replay_fidelity.py trusts a run on this
  default-size ZCube, tests/integration/test_kv_warm_lab.py one at a low rate with every
  request completed and none failed.
- Engine steps whose compute and exchange differ by 10x, both ways: the all-to-all histogram
  and log follow the exchange, the step histogram the step (`zcube_lab.emulator.probes.epprobe`).
About 54 s here: two labs and one short run (the clean run, before issue 48 item 4: 51 s more).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.noisy import timing_bar
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.stats import mean
from zcube_lab.emulator.experiment.comparison import fabric_specs
from zcube_lab.emulator.probes.epprobe import EP_GROUP, ep_steps
from zcube_lab.emulator.probes.hostprobe import running_lab
from zcube_lab.emulator.probes.kvprobe import KV_PAIRS, KV_TOLERANCE, kv_fidelity, kv_socket_counts
from zcube_lab.serving.vllm_metrics import ALLTOALL_TIME, EP_STEP_TIME

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

MID_SIZE = 3_000_000
# A network reason of the verdict: where (a host `h3`, an interface `h3-eth0` or `leaf0-eth2`,
# a CPU's input queue `cpu1`, or ovs-vswitchd), then what (zcube_lab.emulator.verdict.network: TCP
# timeouts and SYN retransmits, drops, shaping that did not hold, a held backlog, the datapath's
# losses).
NETWORK_REASON = re.compile(
    r"^(?:h\d+|cpu\d+|[\w.]+-eth\d+|ovs-vswitchd): .*(?:TCP retransmission timeout|SYN retransmit"
    r"|dropped|held a backlog|above its|send error)"
)


def _fabric(kind: str) -> Fabric:
    return build_fabric(fabric_specs([kind], 16, 2)[kind])


def _assert_within(lab) -> None:
    server, puller = KV_PAIRS[lab.fabric.kind]

    def within(fid) -> tuple[bool, str]:
        (row,) = fid.rows
        if row.ratio is None:
            return False, f"no ratio ({row.failed} of the pulls failed)"
        figure = (
            f"{fid.fabric} {fid.route}: {row.seconds:.4f} s, fixed {fid.fixed_s:.4f} s, ideal "
            f"{row.ideal_s:.4f} s at {fid.mbps:g} Mb/s: ratio {row.ratio:.3f} "
            f"({1 + KV_TOLERANCE:.2f}x allowed)"
        )
        return abs(row.ratio - 1) <= KV_TOLERANCE, figure

    # The ratio is wall time: on a noisy machine it is measured again (tests/noisy.py).
    fid = timing_bar(
        lambda: kv_fidelity(lab, server, puller, [MID_SIZE], repeat=3),
        within,
        f"a {MID_SIZE / 1e6:g} MB KV pull against bytes / path rate",
    )
    (row,) = fid.rows
    assert row.failed == 0 and row.seconds is not None, fid
    assert 0 < fid.fixed_s < row.seconds / 4, fid
    assert abs(row.ratio - 1) <= KV_TOLERANCE, within(fid)[1]


# One lab at a time (they share host names and the management bridge): the ZCube lab is
# class-scoped, so it is down before the ROFT lab and the runs below start.
@pytest.fixture(scope="class")
def zcube(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    with running_lab(_fabric("zcube"), tmp_path_factory.mktemp("zcube-lab")) as lab:
        yield lab


class TestOnZCube:
    def test_a_kv_pull_takes_bytes_over_the_path_rate(self, zcube) -> None:
        _assert_within(zcube)

    def test_a_kv_pull_reuses_its_connections(self, zcube) -> None:
        server, puller = KV_PAIRS["zcube"]
        kept = kv_socket_counts(zcube, server, puller, 200_000, 20)
        assert kept[0]["ESTAB"] == 0, kept
        # Opened by the first pull, reused by the 19 others: the count does not grow.
        assert [c["ESTAB"] for c in kept[1:]] == [4] * 20, kept
        assert kept[-1]["TIME-WAIT"] <= kept[1]["TIME-WAIT"], kept
        fresh = kv_socket_counts(zcube, server, puller, 200_000, 10, connections="fresh")
        assert all(c["ESTAB"] == 0 for c in fresh[1:]), fresh
        grew = fresh[-1]["TIME-WAIT"] - fresh[0]["TIME-WAIT"]
        assert grew >= 4 * 10 - 8, fresh  # four per pull (a few earlier ones may expire)

    def test_the_alltoall_figure_is_the_exchange_not_the_step(self, zcube) -> None:
        leader, peers = EP_GROUP
        # Compute 10x the exchange: 10 KB per peer (~5 ms on h0's 50 Mb/s port) beside 0.3 s.
        slow_compute, hists_c = ep_steps(zcube, leader, peers, 10_000, 0.3, repeat=5)
        # The exchange 10x the compute: 1 MB per peer (~0.5 s) beside 20 ms.
        slow_net, hists_n = ep_steps(zcube, leader, peers, 1_000_000, 0.02, repeat=3)
        for recs, hists in ((slow_compute, hists_c), (slow_net, hists_n)):
            assert recs and all(r["failures"] == 0 for r in recs), recs
            a2a_sum, a2a_count = hists[ALLTOALL_TIME]
            step_sum, step_count = hists[EP_STEP_TIME]
            assert a2a_count == step_count == len(recs)
            # The histograms hold exactly what the exchange log says.
            assert a2a_sum == pytest.approx(sum(r["seconds"] for r in recs), rel=1e-6)
            assert step_sum == pytest.approx(sum(r["step_s"] for r in recs), rel=1e-6)
        exchange = mean(r["seconds"] for r in slow_compute)
        step = mean(r["step_s"] for r in slow_compute)
        assert step >= 0.3 and exchange * 10 <= step, (exchange, step)
        exchange = mean(r["seconds"] for r in slow_net)
        step = mean(r["step_s"] for r in slow_net)
        assert exchange >= 10 * 0.02 and exchange >= 0.8 * step, (exchange, step)


def test_a_kv_pull_on_roft_takes_bytes_over_the_path_rate(tmp_path: Path) -> None:
    with running_lab(_fabric("roft"), tmp_path) as lab:
        _assert_within(lab)


# --- whole runs: the verdict --------------------------------------------------------------------


def _run(results: Path, *extra: str) -> dict:
    done = subprocess.run(
        [
            sys.executable, "-m", "zcube_lab.cli", "run",
            "--workload", "coding-agent", "--results", str(results), *extra,
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = results.glob("*/summary.json")
    return json.loads(path.read_text())


def test_a_run_with_overflowing_queues_is_not_trustworthy(tmp_path: Path) -> None:
    summary = _run(
        tmp_path,
        "--fabric", "roft", "--duration", "15", "--drain", "20", "--rate", "3",
        "--queue-packets", "2", "--host-queue-packets", "2",
    )  # fmt: skip
    reasons = summary["health"]["reasons"]
    assert summary["trustworthy"] is False
    network = [r for r in reasons if NETWORK_REASON.match(r)]
    assert network, f"no network reason among {reasons}"
