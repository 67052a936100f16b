"""The controller against a real Open vSwitch bridge: installed flows, groups and metrics.

One userspace (`netdev`) bridge plays the ROFT default fabric's `leaf0`: it gets that switch's
dpid and internal ports with the same OpenFlow numbers, connects to `python -m zcube_lab.controller`
on a free local port, and must end up holding exactly what `compute_rules` gives leaf0. Needs root
and a running Open vSwitch; leaves no bridge, port or process behind.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from zcube_lab.controller.ofctl import flow_lines, group_lines
from zcube_lab.controller.rules import compute_rules, port_peers
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.lab.ovsbridges import dump_bridge, rule_differences

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SPEC = FabricSpec.of("roft")  # the ROFT default: 4 servers x 4 GPUs, 2 spines
SWITCH = "leaf0"
POLICY = "ecmp"
DEADLINE_S = 30.0

T = TypeVar("T")


def _ovs_ready() -> str | None:
    """Why the test cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (creates an Open vSwitch bridge)"
    if shutil.which("ovs-vsctl") is None or shutil.which("ovs-ofctl") is None:
        return "Open vSwitch tools (ovs-vsctl, ovs-ofctl) are not installed"
    probe = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"Open vSwitch is not running: {probe.stderr.strip()}"
    return None


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30).stdout


def _until(what: str, probe: Callable[[], T | None], deadline_s: float = DEADLINE_S) -> T:
    """Poll `probe` until it returns something other than None, or fail naming `what`."""
    end = time.monotonic() + deadline_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline_s:.0f}s waiting for {what}")
        time.sleep(0.2)


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


def _sample(text: str, name: str, labels: dict[str, str]) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{"):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            if found == labels:
                return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.skipif(_ovs_ready() is not None, reason=str(_ovs_ready()))
def test_controller_installs_exactly_the_computed_rules_on_ovs(tmp_path: Path) -> None:
    fabric = build_fabric(SPEC)
    sw = fabric.switch(SWITCH)
    expected = compute_rules(fabric, POLICY)[sw.dpid]
    peers = {port: far for (node, port), (far, _) in port_peers(fabric).items() if node == SWITCH}
    bridge = f"zct{os.getpid() % 100000}"
    of_port, metrics_port = _free_ports(2)
    stderr = (tmp_path / "controller.err").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zcube_lab.controller",
            "--fabric-spec",
            SPEC.to_json(),
            "--policy",
            POLICY,
            "--of-port",
            str(of_port),
            "--metrics-port",
            str(metrics_port),
            "--poll-interval",
            "0.5",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], DEADLINE_S)
        line = proc.stdout.readline() if ready else ""
        assert "listening" in line, (
            f"controller did not start: {(tmp_path / 'controller.err').read_text()}"
        )

        add = ["ovs-vsctl", "--timeout=30", "add-br", bridge, "--", "set", "bridge", bridge]
        add += ["datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure"]
        add += [f"other-config:datapath-id={sw.dpid:016x}"]
        for port in sorted(peers):
            name = f"{bridge}p{port}"
            add += ["--", "add-port", bridge, name]
            add += ["--", "set", "interface", name, "type=internal", f"ofport_request={port}"]
        _run(*add)
        _run("ovs-vsctl", "set-controller", bridge, f"tcp:127.0.0.1:{of_port}")

        end = time.monotonic() + DEADLINE_S
        diff = rule_differences(bridge, expected)
        while diff and time.monotonic() < end:
            time.sleep(0.2)
            diff = rule_differences(bridge, expected)
        assert diff == [], "bridge differs from compute_rules (-missing, +unexpected)"
        want_flows, want_groups = flow_lines(expected), group_lines(expected)
        assert dump_bridge(bridge) == (want_flows, want_groups)
        assert len(want_flows) == 19 and len(want_groups) == 1  # 16 addresses + 3; one uplink set

        def exported() -> str | None:
            text = _metrics(metrics_port)
            ok = all(
                _sample(
                    text,
                    "zcube_port_rx_bytes_total",
                    {"switch": SWITCH, "port": str(p), "peer": peer},
                )
                is not None
                for p, peer in peers.items()
            )
            flows = _sample(text, "zcube_switch_flows", {"switch": SWITCH})
            return text if ok and flows == len(expected.flows) else None

        text = _until("zcube_port_* series and the flow count in /metrics", exported)
        assert _sample(text, "zcube_switch_rules_installed", {"switch": SWITCH}) == len(
            expected.flows
        )
        assert _sample(text, "zcube_switch_up", {"switch": SWITCH}) == 1
        assert re.search(r"^zcube_switches_connected 1\.0$", text, re.M)
        bucket = {"switch": SWITCH, "group": "1", "bucket": "0", "port": "5", "peer": "spine0"}
        assert _sample(text, "zcube_group_bucket_packets_total", bucket) is not None
    finally:
        subprocess.run(["ovs-vsctl", "--timeout=30", "--if-exists", "del-br", bridge], check=False)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(timeout=5)
        stderr.close()

    assert code == 0, f"controller exit code {code}"
    assert bridge not in _run("ovs-vsctl", "list-br").split()
    assert f"{bridge}p" not in _run("ip", "-o", "link", "show")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", of_port), timeout=1).close()
    assert _metrics(metrics_port) == ""
