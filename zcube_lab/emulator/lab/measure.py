"""Measurements inside a running lab: iperf3 throughput between hosts, and port and
select-group bucket counters read from Open vSwitch (through `zcube_lab.emulator.lab.ovsbridges`).
Needs a
started `Lab`."""

from __future__ import annotations

import json
import re
import subprocess
import time

from zcube_lab.emulator.lab import ovsbridges
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.system import LabError


def iperf3(
    lab: Lab,
    src: str,
    dst_ip: str,
    seconds: float = 3.0,
    parallel: int = 1,
    port: int = 5201,
    mbps: float | None = None,
) -> float:
    """TCP goodput in Mb/s from host `src` to fabric address `dst_ip` (receiver's count);
    `mbps` paces the load to that rate in all, split over the flows (default: unpaced)."""
    pace = ["-b", f"{mbps / parallel:.3f}M"] if mbps is not None else []
    dst = lab.fabric.interfaces_by_ip[dst_ip].host
    server = lab.net.get(dst).popen(
        ["iperf3", "-s", "-1", "-p", str(port), "-B", dst_ip],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(50):  # the server needs a moment to listen
            out = lab.net.get(src).cmd(
                "iperf3",
                "-c",
                dst_ip,
                "-p",
                str(port),
                "-t",
                str(seconds),
                "-P",
                str(parallel),
                *pace,
                "-J",
            )
            if "Connection refused" not in out and "unable to connect" not in out:
                break
            time.sleep(0.1)
        start = out.find("{")
        if start < 0:
            raise LabError(f"iperf3 {src} -> {dst_ip} printed no JSON: {out.strip()[:300]}")
        result = json.loads(out[start:])
        if "error" in result:
            raise LabError(f"iperf3 {src} -> {dst_ip}: {result['error']}")
        return float(result["end"]["sum_received"]["bits_per_second"]) / 1e6
    finally:
        server.kill()
        server.wait()


def port_tx_bytes(switch: str, port: int) -> int:
    """Bytes a switch port has sent so far (`ovs-ofctl dump-ports`)."""
    out = ovsbridges.dump_ports(switch, port)
    return int(out.split("tx pkts=", 1)[1].split("bytes=", 1)[1].split(",", 1)[0])


def group_bucket_packets(switch: str) -> dict[int, list[int]]:
    """Packets counted by every bucket of every group on a bridge: group id -> per bucket."""
    out = ovsbridges.dump_group_stats(switch)
    groups: dict[int, list[int]] = {}
    for line in out.splitlines():
        gid = re.search(r"group_id=(\d+)", line)
        if not gid:
            continue
        buckets = re.findall(r"bucket(\d+):packet_count=(\d+)", line)
        groups[int(gid.group(1))] = [int(count) for _, count in sorted(buckets)]
    return groups
