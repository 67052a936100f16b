"""Issue 23 acceptance: KV pulls over the MRC-style transport on a real 2-plane ROFT.

Mininet on Open vSwitch, our controller with ECMP and the EV rules (`--ev-rules`: bits of the
UDP source port pick every next hop), a real KV server on h0 (TCP and MRC) and a real pull from
h5 over both planes (`zcube_lab.emulator.probes.cutprobe`, `transport="mrc"`).

- cut: once bytes flow, the busiest switch-to-switch link is cut for the rest of the pull; the
  pull completes with every byte and the checksum verified, every EV whose path crosses the cut
  link is retired (`zcube_lab.core.fabric.evpaths` names each EV's path), fewer others are,
  and nothing failed;
- healthy: with 4 EVs per plane, the switch counters show the pull's bytes on 4 distinct
  uplinks in each plane, as many paths as it has EVs per plane;
- a whole run (`zcube-lab run --kv-transport mrc`, 2-plane ROFT, hotspot at k=4): trustworthy,
  every request's KV pulled over mrc, each pull whole with its checksum verified and naming one
  path per EV; under the lossless model (issue 36 item 2) it pauses ports and drops nothing,
  and its pulls mark 0 EVs ASSUMED_BAD: a pause is not a loss.

One whole run serves both (issue 48 item 4): a second run, on ZCube n=2 at k=2, asserted only
the transport's side (trust, pulls, checksums, paths per EV), which the ROFT run shows as well;
that the EV rules send each EV down the path `ev_path` names on ZCube is unit-tested
(tests/unit/test_evpaths.py). About 2 minutes here, 104 s of it the run (its load lasts four
times its modelled 15 s); the ZCube run took 55 s more.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import run_trusted

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec, Link
from zcube_lab.core.fabric.evpaths import ev_path, ev_ports
from zcube_lab.core.fabric.hostplan import egress_interface, kv_source_map
from zcube_lab.emulator.probes.cutprobe import cut_during_pull
from zcube_lab.serving.kvwire.paths import pick_source

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

FABRIC = build_fabric(FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2, planes=2))
KV_BYTES = 24 * 1024 * 1024  # about 2 s over both 50 Mb/s planes


def _leg_paths(evs: int) -> dict[tuple[int, int], tuple[str, ...]]:
    """(leg, EV) -> the hops h0's datagrams on that EV take to h5 (leg i: h0's interface i)."""
    sources = kv_source_map(FABRIC, FABRIC.host("h5"))
    out = {}
    for leg, iface in enumerate(FABRIC.host("h0").interfaces):
        local = pick_source(iface.ip, sources)
        if local is None:  # unbound: h5's own route picks the interface (one per plane)
            egress = egress_interface(FABRIC.host("h5"), iface.ip)
            assert egress is not None
            local = FABRIC.host("h5").interfaces[egress].ip
        for port in ev_ports(evs):
            out[(leg, port)] = ev_path(FABRIC, "h0", local, port)
    return out


def _crosses(path: tuple[str, ...], links: tuple[Link, ...]) -> bool:
    ends = {f"{n}:{p}" for lk in links for n, p in ((lk.node1, lk.port1), (lk.node2, lk.port2))}
    return any(hop in ends for hop in path)


def test_a_cut_plane_link_retires_its_evs_and_the_pull_completes_intact(tmp_path: Path) -> None:
    cut = cut_during_pull(
        FABRIC, "ecmp", "h0", "h5", num_bytes=KV_BYTES, log_dir=tmp_path, transport="mrc"
    )
    pull = cut.pull
    assert cut.carried > 100_000 and cut.cut_links, "the cut link carried none of the pull"
    assert pull["ok"], pull["error"]
    assert pull["bytes"] == KV_BYTES and pull["checksum_ok"]
    assert pull["retired_evs"] is not None, "the sender's STATS never arrived"
    retired = {tuple(x) for x in pull["retired_evs"]}
    paths = _leg_paths(16)
    on_cut = {key for key, path in paths.items() if _crosses(path, cut.cut_links)}
    assert on_cut, "no EV's path crosses the cut link"
    assert on_cut <= retired, f"EVs on the cut path not retired: {sorted(on_cut - retired)}; {pull}"
    # Off the cut path a datagram is lost only by accident (a late timer on a loaded 2-core
    # machine); such an EV is probed and restored. Fewer of them than on the cut path.
    assert len(retired - on_cut) < len(on_cut), f"EVs retired off the cut path: {pull}"
    assert pull["retransmitted_bytes"] > 0
    assert len(pull["by_address"]) == 2


def test_a_healthy_pull_spreads_over_as_many_paths_as_it_has_evs_per_plane(
    tmp_path: Path,
) -> None:
    evs = 4
    res = cut_during_pull(
        FABRIC,
        "ecmp",
        "h0",
        "h5",
        link=None,
        num_bytes=KV_BYTES // 2,
        log_dir=tmp_path,
        transport="mrc",
        mrc_evs=evs,
    )
    pull = res.pull
    assert pull["ok"], pull["error"]
    assert pull["checksum_ok"]
    assert pull["paths_used"] == 2 * evs
    paths = _leg_paths(evs)
    for leg in (0, 1):
        # The first hop of each EV's path is the uplink of h0's leaf in that plane.
        uplinks = {paths[(leg, p)][0] for p in ev_ports(evs)}
        assert len(uplinks) == evs
        share = KV_BYTES // 2 / (2 * evs)
        for hop in uplinks:
            switch, port = hop.split(":")
            sent = res.port_bytes[(switch, int(port))]
            assert sent > share / 2, f"{hop} carried {sent} bytes, expected about {share:.0f}"


# --- a whole run over mrc ------------------------------------------------------------------------


@pytest.mark.timeout(600)  # two runs of about 110 s at k=4, each up to 300
def test_a_lossless_run_over_mrc_pulls_every_kv_intact_pauses_and_marks_no_ev_bad(
    tmp_path: Path,
) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.mrc_retirements import figures

    extra = ["--planes", "2", "--workload", "hotspot", "--rate", "12", "--lossless"]
    # The agent is a Python process beside the transport's: on a busy 2-core machine its
    # reaction p99 (judged in wall time) passed the verdict's 5 ms at k=2 (11.7 ms once in the
    # full suite, twice in a row once alone), so k=4 halves the load per wall second; one more
    # run on that reason alone. At 8 req/s no pause forms, so the rate stays 12.
    summary = run_trusted(
        lambda: _mrc_run(
            Path(tempfile.mkdtemp(dir=tmp_path)), fabric="roft", extra=extra, dilation=4
        ),
        once_more=("lossless agent: reaction",),
    )
    assert summary["trustworthy"] is True, summary["health"]["reasons"]
    assert summary["client"]["completed"] >= 10 and summary["client"]["failed"] == 0
    run = Path(summary["_dir"])
    assert json.loads((run / "config.json").read_text())["kv_transport"] == "mrc"
    # Every request's KV was pulled over mrc, whole and verified.
    pulls = [
        json.loads(line)
        for log in (run / "logs").glob("kv-decode-*.jsonl")
        for line in log.read_text().splitlines()
    ]
    assert len(pulls) >= summary["client"]["completed"]
    assert all(p["ok"] and p["checksum_ok"] for p in pulls)
    # Over TCP a pull uses its lanes' few paths; over mrc it names one per EV (16 or more a
    # pull here, against 2 lanes).
    assert min(p["paths_used"] for p in pulls) > 2 * max(p["lanes"] for p in pulls)
    # Lossless: ports paused, nothing dropped, and no pause taken for a loss.
    ports = (summary.get("lossless") or {}).get("ports") or {}
    pauses = sum(p.get("pauses", 0) for p in ports.values())
    assert pauses > 0, "no pause formed: the run cannot tell a pause from a loss"
    got = figures(run)
    assert got["lossless"] and got["pulls"] >= summary["client"]["completed"] > 0
    assert got["queue_drops"] == 0, got
    assert got["failed"] == 0, got
    assert got["evs_assumed_bad"] == 0, f"{got} with {pauses} pauses"


def _mrc_run(results: Path, fabric: str, extra: Sequence[str], dilation: int) -> dict:
    """A whole run over mrc, dilated. At k=1 a run over mrc sits at the verdict's edge on a 2-core
    machine: CI once saw 4 of 381 decode steps (1.05%, 1% allowed) wake more than a quarter of
    their step late, where this machine sees 1-2; each datagram is Python work on the decode's
    step loop (mrc costs about 40% more serving CPU than TCP, docs/BENCHMARKS.md). At k=2 every
    timer of the transport follows the dilation and the steps have twice the slack in wall time.
    """
    done = subprocess.run(
        [
            sys.executable, "-m", "zcube_lab.cli", "run", "--fabric", fabric,
            *extra,
            "--duration", "15", "--drain", "20",
            "--kv-transport", "mrc", "--dilation", str(dilation), "--results", str(results),
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = results.glob("*/summary.json")
    return json.loads(path.read_text()) | {"_dir": str(path.parent)}
