"""The management network: API and metrics reach every host from the root namespace without
crossing the fabric under test."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from emulator.lab.network import Lab, LabOptions
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.hostplan import MGMT_BRIDGE
from zcube_lab.core.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]


def _ipv4_bytes(lab: Lab) -> int:
    """Bytes matched by the IPv4 forwarding rules of every switch."""
    total = 0
    for s in lab.fabric.switches:
        out = subprocess.run(
            ["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", s.name, "ip"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        total += sum(int(p.split(",")[0]) for p in out.split("n_bytes=")[1:])
    return total


def test_management_network_reaches_hosts_off_fabric(tmp_path: Path) -> None:
    fabric = build_fabric(FabricSpec.of("zcube", n=2))
    options = LabOptions(
        of_port=free_port(), metrics_port=free_port(), state_dir=tmp_path, management=True
    )
    with Lab(fabric, options) as lab:
        state = json.loads(lab.state_file.read_text())
        assert MGMT_BRIDGE in state["interfaces"]
        before = _ipv4_bytes(lab)
        ips = [lab.management_ip(h.name) for h in fabric.hosts]
        ping = subprocess.run(
            ["fping", "-a", "-c", "3", "-q", "-t", "500", *ips],
            capture_output=True,
            text=True,
            check=False,
        )
        assert ping.returncode == 0, ping.stderr
        # Host to host over management too (hosts talk API to each other this way).
        out = lab.net.get("h0").cmd("fping", "-a", "-t", "500", ips[-1])
        assert ips[-1] in out
        # None of it crossed the fabric's forwarding rules.
        assert _ipv4_bytes(lab) == before
    assert not Path(f"/sys/class/net/{MGMT_BRIDGE}").exists()
    assert not any(Path(f"/sys/class/net/zm-{h.name}").exists() for h in fabric.hosts)
