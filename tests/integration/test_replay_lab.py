"""Replays on a real lab at the fine time scale (issue 45): a made-up incast with a known
completion time and a known pause pattern (none when XOFF holds the whole burst, some when it
holds a sliver), and teardown when a replay is interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scaledown import scaled_sizes
from zcube_lab.core.replay.synthetic import incast
from zcube_lab.core.replay.timescale import derive
from zcube_lab.emulator.replay.driver import Threshold, replay, slowest_port_gbps

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SENDERS, BURST = 4, 16e6  # four 16 MB transfers into one 400 Gb/s NIC: 1.28 ms at line rate


def zcube16():
    return build_fabric(FabricSpec.of("zcube", **scaled_sizes("zcube", 16)))


def run_incast(tmp_path: Path, xoff_bytes: float) -> dict:
    fabric = zcube16()
    ts = derive(7.0, fabric.nic_gbps, slowest_port_gbps([fabric]))  # k = 35: a quick test
    hosts = [h.name for h in fabric.hosts]
    rec = incast(hosts, "h5", SENDERS, BURST)
    return replay(rec, fabric, ts, Threshold(xoff_bytes, "test"), tmp_path, progress=print)


def test_an_incast_completes_near_line_rate_and_pauses_only_when_xoff_is_small(
    lab_available, tmp_path
):
    ideal = SENDERS * BURST * 8 / 400e9  # the receiver's NIC (two 200 Gb/s ports) is the cut
    small = run_incast(tmp_path / "small", xoff_bytes=1e6)  # 1 MB: 5 frames at S = 117
    kv = small["classes"]["kv"]
    assert kv["incomplete"] == 0, small
    last = kv["fct_s"]["max"]
    # every byte crosses the receiver's NIC: never faster than line rate; the pauses' late
    # reaction and the agents' start cost keep it within 2x (measured 1.5-1.7x)
    assert ideal * 0.95 <= last <= ideal * 2.0, (last, ideal)
    assert small["pauses"]["pause_frames"] > 0, small["pauses"]
    assert small["resolution"]["frame_us"] == 7.0 and small["xoff"]["frames"] == 5
    # it judged itself: a lossless incast loses nothing anywhere, and the CPU was read
    losses = small["losses"]
    assert losses["lost_datagrams"] == 0 and not any(losses["datagrams"].values()), losses
    assert small["cpu"]["busy"] is not None and "trusted" in small["verdict"]
    # its pauses counted as a live run counts them: every KV transfer waited behind an episode,
    # and no episode is put on EP, which sent nothing (an episode this short, 70 wall ms, often
    # ends before the class counters' next reading, so it may stay unattributed; production's
    # 12 wall s window attributes nearly all to KV: docs/results/fine-scale.md)
    victims = small["victims"]
    kv_tally = victims["classes"]["kv"]
    assert victims["pauses"] > 0 and kv_tally["transfers"] == kv_tally["delayed"] == SENDERS
    assert kv_tally["pauses_raised"] + victims["pauses_unattributed"] == victims["pauses"]
    assert victims["classes"].get("ep", {}).get("pauses_raised", 0) == 0, victims
    assert victims["ep_exchanges"] == 0 and victims["ep_victims"] == 0
    # XOFF above the whole burst (64 MB): no queue can reach it, so nothing pauses
    big = run_incast(tmp_path / "big", xoff_bytes=80e6)
    assert big["classes"]["kv"]["incomplete"] == 0
    assert big["pauses"]["pause_frames"] == 0, big["pauses"]


def test_an_interrupted_replay_tears_the_lab_down(lab_available, tmp_path):
    cmd = [
        sys.executable, "-m", "zcube_lab.cli", "replay", "--incast", "7", "--bytes", "2e9",
        "--fabrics", "zcube", "--resolution", "fine", "--results", str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("replaying"):
            break
        assert time.monotonic() < deadline, seen
    time.sleep(2.0)
    os.kill(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, "".join(seen) + out
    assert "torn down" in out
    bridges = subprocess.run(
        ["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [b for b in bridges if b[:1] in ("a", "b") and b[1:].isdigit()], bridges
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    agents = subprocess.run(
        ["pgrep", "-f", "zcube_lab.emulator.replay.agent"], capture_output=True, text=True
    ).stdout
    assert agents.strip() == "", agents
    assert "zcl" not in netns
