"""The management network: API and metrics reach every host from the root namespace without
crossing the fabric under test."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.addressing import MGMT_PREFIX_LEN, MGMT_ROOT_IP
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.hostplan import MGMT_BRIDGE
from zcube_lab.emulator.lab import hostnet
from zcube_lab.emulator.lab.hostnet import parse_resolvers, read_host_network
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.system import LabError

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


def test_the_bridge_is_in_the_plans_range_and_clear_of_the_resolver(tmp_path: Path) -> None:
    fabric = build_fabric(FabricSpec.of("zcube", n=2))
    options = LabOptions(
        of_port=free_port(), metrics_port=free_port(), state_dir=tmp_path, management=True
    )
    resolvers = [e for e in read_host_network() if e.kind == "resolver"]
    with Lab(fabric, options):
        shown = json.loads(
            subprocess.run(
                ["ip", "-j", "-4", "addr", "show", "dev", MGMT_BRIDGE],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        (addr,) = shown[0]["addr_info"]
        assert f"{addr['local']}/{addr['prefixlen']}" == f"{MGMT_ROOT_IP}/{MGMT_PREFIX_LEN}"
        # While the lab is up, this machine's resolvers are still reached as before.
        for r in resolvers:
            route = subprocess.run(
                ["ip", "route", "get", str(r.network.network_address)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert MGMT_BRIDGE not in route, route


def test_a_plan_colliding_with_the_host_is_refused_before_anything_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = [*read_host_network(), *parse_resolvers("nameserver 198.19.0.53\n")]
    monkeypatch.setattr(hostnet, "read_host_network", lambda: host)
    fabric = build_fabric(FabricSpec.of("zcube", n=2))
    options = LabOptions(
        of_port=free_port(), metrics_port=free_port(), state_dir=tmp_path, management=True
    )
    with pytest.raises(LabError) as err:
        Lab(fabric, options).start()
    assert "management network 198.19.0.0/17" in str(err.value)
    assert "resolver 198.19.0.53" in str(err.value)
    assert not Path(f"/sys/class/net/{MGMT_BRIDGE}").exists()
    listed = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True)
    assert not set(listed.stdout.split()) & {s.name for s in fabric.switches}
    assert list(tmp_path.glob("lab-*.json")) == []
