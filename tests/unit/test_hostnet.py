"""The host-collision check: pure, from `ip -j` and resolv.conf text, then the real adapter."""

from __future__ import annotations

import json
from ipaddress import ip_network
from pathlib import Path

import pytest

from zcube_lab.core.fabric.addressing import lab_networks, plan_networks
from zcube_lab.core.fabric.builders import build_zcube
from zcube_lab.core.fabric.clusterplan import mgmt_tunnel_name
from zcube_lab.core.fabric.hostplan import MGMT_BRIDGE, management_peer
from zcube_lab.emulator.lab import hostnet
from zcube_lab.emulator.lab.doctor import judge_addresses
from zcube_lab.emulator.lab.hostnet import (
    conflicts,
    is_lab_device,
    leftovers,
    parse_addresses,
    parse_resolvers,
    parse_routes,
    read_host_network,
    refusal,
)
from zcube_lab.emulator.lab.system import LabError

# What `ip -j route` and `ip -j addr` print on a machine like this one, with a killed run's
# management bridge (the old plan's 10.255.255.254/16) still up.
ROUTES = json.dumps(
    [
        {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0", "flags": []},
        {"dst": "192.0.2.0/24", "dev": "eth0", "protocol": "kernel", "prefsrc": "192.0.2.2"},
        {"dst": "10.255.0.0/16", "dev": "zcl-mgmt", "protocol": "kernel"},
        {"dst": "fd00::/64", "dev": "eth0"},
    ]
)
ADDRS = json.dumps(
    [
        {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
        {
            "ifname": "eth0",
            "addr_info": [
                {"family": "inet", "local": "192.0.2.2", "prefixlen": 24},
                {"family": "inet6", "local": "fd00::2", "prefixlen": 64},
            ],
        },
        {
            "ifname": "zcl-mgmt",
            "addr_info": [{"family": "inet", "local": "10.255.255.254", "prefixlen": 16}],
        },
    ]
)
RESOLV = "# generated\nsearch example\nnameserver 10.255.255.53 # the cloud's\nnameserver fd00::1\n"
HOST = parse_routes(ROUTES) + parse_addresses(ADDRS) + parse_resolvers(RESOLV)


def test_parsers_keep_ipv4_entries_with_their_devices() -> None:
    routes = parse_routes(ROUTES)
    assert [str(r.network) for r in routes] == ["0.0.0.0/0", "192.0.2.0/24", "10.255.0.0/16"]
    assert routes[0].text == "route 0.0.0.0/0 via 192.0.2.1 dev eth0"
    addrs = parse_addresses(ADDRS)
    assert [(a.device, str(a.network)) for a in addrs] == [
        ("lo", "127.0.0.1/32"),
        ("eth0", "192.0.2.2/32"),
        ("zcl-mgmt", "10.255.255.254/32"),
    ]
    assert addrs[1].text == "address 192.0.2.2/24 on eth0"
    (resolver,) = parse_resolvers(RESOLV)
    assert resolver.text == "resolver 10.255.255.53 (resolv.conf)"
    assert parse_routes("") == [] and parse_resolvers("") == []


def test_the_old_plan_collides_with_this_machines_resolver_naming_both() -> None:
    old = [("management network", ip_network("10.255.0.0/16"))]
    (found,) = conflicts(old, HOST)
    assert found.host.kind == "resolver"
    assert str(found) == (
        "the lab's management network 10.255.0.0/16 overlaps this machine's "
        "resolver 10.255.255.53 (resolv.conf)"
    )
    text = refusal([found])
    assert "10.255.0.0/16" in text and "10.255.255.53" in text


def test_the_plan_is_clear_of_this_machine_and_the_leftover_bridge_is_no_conflict() -> None:
    assert conflicts(plan_networks(), HOST) == []
    assert {e.device for e in leftovers(HOST)} == {"zcl-mgmt"}


@pytest.mark.parametrize(
    ("entry", "lab_part"),
    [
        ({"dst": "198.19.0.0/16", "dev": "eth1"}, "management network"),  # around it
        ({"dst": "198.19.3.0/24", "dev": "eth1"}, "management network"),  # inside it
        ({"dst": "198.0.0.0/8", "gateway": "192.0.2.9", "dev": "eth0"}, "fabric"),
        ({"dst": "198.18.7.7", "dev": "wg0"}, "fabric"),  # a host route
    ],
)
def test_a_route_overlapping_a_lab_range_conflicts(entry: dict[str, str], lab_part: str) -> None:
    found = conflicts(plan_networks(), parse_routes(json.dumps([entry])))
    assert lab_part in {c.lab for c in found}
    assert all(entry["dst"].split("/")[0] in c.host.text for c in found)


def test_catch_all_routes_are_no_conflict() -> None:
    vpn = [{"dst": "0.0.0.0/1", "dev": "tun0"}, {"dst": "128.0.0.0/1", "dev": "tun0"}]
    assert conflicts(plan_networks(), parse_routes(json.dumps(vpn))) == []
    assert conflicts(plan_networks(), parse_routes(ROUTES)) == []


def test_an_address_or_resolver_inside_a_lab_range_conflicts() -> None:
    addr = [{"ifname": "eth1", "addr_info": [{"family": "inet", "local": "198.18.0.9"}]}]
    (found,) = conflicts(lab_networks(2, management=False), parse_addresses(json.dumps(addr)))
    assert (found.lab, str(found.network)) == ("fabric plane 0", "198.18.0.0/17")
    assert conflicts(lab_networks(1, True), parse_resolvers("nameserver 198.19.1.1\n"))


def test_the_labs_own_devices_are_recognised() -> None:
    f = build_zcube(n=4)
    names = [MGMT_BRIDGE, *(management_peer(h) for h in f.hosts), mgmt_tunnel_name(0, 1)]
    assert all(is_lab_device(n) for n in names)
    assert not any(is_lab_device(n) for n in ("eth0", "zpeer0", "lo", "docker0", ""))


def test_doctor_judges_collisions_leftovers_and_a_clear_machine() -> None:
    clear = judge_addresses(parse_routes(ROUTES)[:2] + parse_resolvers(RESOLV))
    assert clear.status == "pass" and "198.18.0.0/16 (fabric)" in clear.detail
    assert judge_addresses(HOST).status == "warn"  # the killed run's bridge
    assert "zcl-mgmt" in judge_addresses(HOST).detail
    assert "zcube-lab clean" in judge_addresses(HOST).fix  # the command that removes it
    bad = judge_addresses(parse_resolvers("nameserver 198.19.0.53\n"))
    assert bad.status == "fail"
    assert "198.19.0.0/17" in bad.detail and "198.19.0.53" in bad.detail
    assert judge_addresses((), "ip: not found").status == "warn"


def test_the_adapter_reads_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 198.19.9.9\n")
    entries = read_host_network((conf, tmp_path / "missing"))
    assert any(e.kind == "route" for e in entries)
    assert any(e.kind == "address" and str(e.network) == "127.0.0.1/32" for e in entries)
    assert [e.text for e in entries if e.kind == "resolver"] == [
        "resolver 198.19.9.9 (resolv.conf)"
    ]
    monkeypatch.setattr(hostnet, "read_host_network", lambda: entries)
    with pytest.raises(LabError, match=r"management network 198\.19\.0\.0/17 .* 198\.19\.9\.9"):
        hostnet.check_host_network(plan_networks())
