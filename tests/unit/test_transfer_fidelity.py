"""The transfer-fidelity probes (zcube_lab.emulator.probes.kvprobe, epprobe, and the fidelity and
hostprobe modules they share): the rates and ideal times from the fabric description, the
verdict rows, and the probes themselves on localhost
(no lab: a real KV server and real pulls, real EP peers and exchanges over loopback)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.hostplan import kv_source_map
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.probes.cutprobe import served_prefix
from zcube_lab.emulator.probes.epprobe import alltoall_ideal_s, lane_ports
from zcube_lab.emulator.probes.fidelity import (
    Fidelity,
    fidelity_row,
    fidelity_table,
    ideal_seconds,
    port_mbps,
)
from zcube_lab.emulator.probes.hostprobe import ProbeOutput
from zcube_lab.emulator.probes.kvprobe import kv_path_mbps

REPO = Path(__file__).resolve().parents[2]
SCALE = Scale(nic_mbps=100.0)


@pytest.fixture(scope="module")
def zcube():
    return build_fabric(FabricSpec.of("zcube", n=4, gpus_per_server=4))


@pytest.fixture(scope="module")
def roft():
    return build_fabric(FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2))


def test_zcube_ports_run_at_half_the_nic(zcube) -> None:
    assert port_mbps(zcube, SCALE, "h0", 0) == pytest.approx(50.0)
    assert port_mbps(zcube, SCALE, "h0", 1) == pytest.approx(50.0)


def test_zcube_disjoint_pull_uses_both_ports_and_shortest_one_for_a_same_rail_pair(zcube):
    disjoint = kv_source_map(zcube, zcube.host("h4"))
    assert kv_path_mbps(zcube, SCALE, "h0", "h4", disjoint) == pytest.approx(100.0)
    # h4 reaches both of h0's addresses through its port 2 (B0): one 50 Mb/s port.
    assert kv_path_mbps(zcube, SCALE, "h0", "h4") == pytest.approx(50.0)
    # A pair on another rail and segment: the routes already spread the two addresses.
    assert kv_path_mbps(zcube, SCALE, "h0", "h5") == pytest.approx(100.0)


def test_roft_pull_runs_at_the_nic(roft) -> None:
    assert kv_path_mbps(roft, SCALE, "h0", "h5") == pytest.approx(100.0)


def test_alltoall_ideal_is_the_busiest_port(zcube, roft) -> None:
    mb = 1_000_000
    # ZCube, one port: h0's same-rail peers are all one hop away through its port 2 (50 Mb/s).
    assert alltoall_ideal_s(zcube, SCALE, "h0", ["h4", "h8", "h12"], mb, "one") == pytest.approx(
        2 * ideal_seconds(3 * mb, 50.0)  # dispatch, then combine
    )
    # Both ports (the default): half of every peer's bytes on each port, each path its own.
    assert alltoall_ideal_s(zcube, SCALE, "h0", ["h4", "h8", "h12"], mb) == pytest.approx(
        2 * ideal_seconds(3 * mb, 100.0)
    )
    assert lane_ports(zcube, "h0", "h4") == [(0, 1), (1, 0)]  # port 1 to port 2 and back
    assert lane_ports(zcube, "h0", "h4", "one") == [(1, 1)]
    assert alltoall_ideal_s(roft, SCALE, "h0", ["h4", "h8", "h12"], mb) == pytest.approx(
        2 * ideal_seconds(3 * mb, 100.0)
    )


def test_fidelity_row_subtracts_the_fixed_cost() -> None:
    row = fidelity_row(1_000_000, [0.95, 0.9, 1.0], 0, 0.1, 0.8, 0.10)
    assert row.seconds == pytest.approx(0.95)
    assert row.ratio == pytest.approx(0.85 / 0.8)
    assert row.within
    assert not fidelity_row(1_000_000, [1.2], 0, 0.1, 0.8, 0.10).within
    assert not fidelity_row(1_000_000, [0.9], 1, 0.1, 0.8, 0.10).within  # a failed pull
    empty = fidelity_row(1_000_000, [], 3, 0.1, 0.8, 0.10)
    assert empty.seconds is None and not empty.within


def test_probe_output_fails_with_the_probe_s_last_lines() -> None:
    proc = _popen(
        "zcube_lab.emulator.probes.kvprobe",
        "pulls",
        "--sizes",
        "10",
        "--max-bytes",
        "x",
        "127.0.0.1:1",
    )
    with pytest.raises(RuntimeError, match=r"(?s)exited \(2\).*invalid int value"):
        ProbeOutput(proc, "h0").until("started", 30)


def test_fidelity_table_has_a_row_per_size() -> None:
    rows = (
        fidelity_row(300_000, [0.03], 0, 0.005, 0.024, 0.10),
        fidelity_row(3_000_000, [0.5], 1, 0.005, 0.24, 0.10),
    )
    lines = fidelity_table([Fidelity("zcube", "disjoint", "h0->h4", 100.0, 0.005, rows)], 0.10)
    assert len(lines) == 4 and "within 10%" in lines[0]
    assert "| zcube | disjoint | h0->h4 | 100 | 5.0 | 300,000 |" in lines[2]
    assert lines[2].endswith("| yes |") and lines[3].endswith("| NO (1 failed) |")


# -- the probes over loopback -------------------------------------------------------------------
def _popen(module: str, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture
def server() -> Iterator[Callable[..., None]]:
    started: list[subprocess.Popen[str]] = []

    def start(module: str, *argv: str) -> None:
        proc = _popen(module, *argv)
        started.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"

    yield start
    for proc in started:
        proc.kill()
        proc.wait(timeout=5)


def _lines(module: str, *argv: str) -> list[dict]:
    """Run a probe client to its end, reading it as the lab does (`ProbeOutput`)."""
    proc = _popen(module, *argv)
    try:
        out = ProbeOutput(proc, "localhost")
        out.until("started", 30)
        return list(out.records(30))
    finally:
        proc.kill()
        proc.wait(timeout=5)


def test_kv_probe_pulls_every_size_in_one_process(server) -> None:
    port = free_port()
    server("zcube_lab.emulator.probes.cutprobe", "serve", "--bytes", "300000", f"127.0.0.1:{port}")
    recs = _lines(
        "zcube_lab.emulator.probes.kvprobe", "pulls", "--max-bytes", "300000",
        "--sizes", "1000,300000", "--repeat", "2", f"127.0.0.1:{port}",
    )  # fmt: skip
    assert [(r["bytes"], r["warmup"]) for r in recs] == [
        (1000, True), (1000, False), (1000, False), (300000, False), (300000, False),
    ]  # fmt: skip
    assert all(r["ok"] and r["checksum_ok"] and r["seconds"] > 0 for r in recs)


def test_kv_probe_pulls_every_size_over_mrc_too(server) -> None:
    port = free_port()
    server(
        "zcube_lab.emulator.probes.cutprobe", "serve", "--bytes", "300000", "--mrc-evs", "4",
        f"127.0.0.1:{port}",
    )  # fmt: skip
    recs = _lines(
        "zcube_lab.emulator.probes.kvprobe", "pulls", "--max-bytes", "300000", "--transport", "mrc",
        "--sizes", "1000,300000", "--repeat", "2", f"127.0.0.1:{port}",
    )  # fmt: skip
    assert [r["bytes"] for r in recs] == [1000, 1000, 1000, 300000, 300000]
    # Each size gets its own prefix of the payload (the id's `@N`), checksum and all.
    assert all(r["ok"] and r["checksum_ok"] for r in recs), recs


def test_the_mrc_probe_server_answers_the_prefix_an_id_names() -> None:
    data = bytes(range(256)) * 4
    assert served_prefix(data, "probe-3@10") == data[:10]
    assert served_prefix(data, "probe") == data
    assert served_prefix(data, "probe@x") == data


def test_ep_probe_exchanges_and_steps(server) -> None:
    port = free_port()
    server("zcube_lab.emulator.probes.epprobe", "serve", f"127.0.0.1:{port}")
    peer = f"127.0.0.1:{port}"
    recs = _lines(
        "zcube_lab.emulator.probes.epprobe",
        "exchanges",
        "--sizes",
        "1000,100000",
        "--repeat",
        "2",
        peer,
    )
    assert [r["bytes_per_peer"] for r in recs] == [1000, 1000, 100000, 100000]
    assert all(r["failures"] == 0 for r in recs)
    out = _lines(
        "zcube_lab.emulator.probes.epprobe", "steps", "--bytes", "1000", "--compute-s", "0.05",
        "--repeat", "3", peer,
    )  # fmt: skip
    steps, hists = out[:-1], out[-1]["histograms"]
    assert len(steps) == 3
    assert all(s["step_s"] >= 0.05 and s["seconds"] < s["step_s"] for s in steps)
    a2a_sum, a2a_count = hists["zcube:ep_alltoall_seconds"]
    step_sum, step_count = hists["zcube:ep_step_seconds"]
    assert a2a_count == step_count == 3
    assert a2a_sum == pytest.approx(sum(s["seconds"] for s in steps))
    assert step_sum == pytest.approx(sum(s["step_s"] for s in steps))
