"""bench/datapath_ports.py without a lab: lever names, the qdisc and ofport readings, and the
ovs-vsctl transaction that retypes the switch ports."""

from __future__ import annotations

import json

import pytest

from bench.datapath_ports import (
    AFXDP_MAX_MTU,
    parse_lever,
    parse_ofports,
    parse_qdisc_sent,
    qdisc_share,
    retype_argv,
)

TC = """qdisc noqueue 0: dev lo root refcnt 2
 Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
qdisc htb 5: dev A0-eth1 root refcnt 2 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 64
 Sent 1183726 bytes 1234 pkt (dropped 0, overlimits 7 requeues 0)
 backlog 0b 0p requeues 0
qdisc bfifo 10: dev A0-eth1 parent 5:1 limit 400000b
 Sent 1183726 bytes 1234 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
qdisc htb 5: dev B1-eth2 root refcnt 2 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 64
 Sent 320 bytes 4 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
"""


def test_lever_names() -> None:
    assert parse_lever("system@9000").mtu == parse_lever("system").mtu == 9000
    system = parse_lever("system")
    assert (system.instances, system.hash, system.port_type, system.mtu) == (
        0,
        False,
        "system",
        9000,
    )
    assert parse_lever("inst8").instances == 8
    assert parse_lever("inst2+hash").hash
    afxdp = parse_lever("inst1+afxdp-nonpmd@3000")
    assert (afxdp.instances, afxdp.port_type, afxdp.mtu, afxdp.pmd) == (
        1,
        "afxdp-nonpmd",
        3000,
        False,
    )
    assert parse_lever("inst1+afxdp@3000").pmd and parse_lever("inst1+dpdk@3000").pmd
    assert parse_lever("inst1+dpdk").mtu == 9000
    bad = ("inst0", "inst", "hash", "instx", "system+tso", "system@80", "system@x")
    bad += (f"inst1+afxdp@{AFXDP_MAX_MTU + 2}", "inst1+afxdp", "system+afxdp-nonpmd@3000")
    bad += ("system+dpdk",)
    for name in bad:
        with pytest.raises(ValueError):
            parse_lever(name)


def test_root_qdisc_sends_per_device() -> None:
    assert parse_qdisc_sent(TC) == {"lo": 0, "A0-eth1": 1234, "B1-eth2": 4}
    assert qdisc_share(100, 1100, 5000, 6000) == 1.0
    assert qdisc_share(100, 104, 5000, 1_095_000) == 0.0
    assert qdisc_share(0, 0, 7, 7) is None


def test_ofports_and_the_retyping_transaction() -> None:
    listing = {
        "headings": ["name", "ofport"],
        "data": [["A0-eth2", 2], ["A0-eth1", 1], ["A0", 65534], ["x", ["set", []]], ["y", -1]],
    }
    ports = parse_ofports(json.dumps(listing))
    assert ports == {"A0-eth2": 2, "A0-eth1": 1, "A0": 65534}
    del ports["A0"]
    argv = retype_argv(ports, parse_lever("inst1+afxdp-nonpmd@3000"))
    assert argv[:9] == [
        "--",
        "set",
        "Interface",
        "A0-eth1",
        "ofport_request=1",
        "type=afxdp-nonpmd",
        "options:xdp-mode=generic",
        "--",
        "set",
    ]
    dpdk = retype_argv(ports, parse_lever("inst1+dpdk@3000"))
    assert "type=dpdk" in dpdk and "mtu_request=3000" in dpdk
    devargs = [a for a in dpdk if a.startswith("options:dpdk-devargs=")]
    assert len(devargs) == 2 and len(set(devargs)) == 2  # one vdev each, distinct names
    assert all("qdisc_bypass=0" in a and "iface=A0-eth" in a for a in devargs)
    assert retype_argv(ports, parse_lever("inst1"))[4:] == [
        "ofport_request=1",
        "--",
        "set",
        "Interface",
        "A0-eth2",
        "ofport_request=2",
    ]
