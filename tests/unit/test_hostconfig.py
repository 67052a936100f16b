"""Host configuration as data: egress choice, ip batch lines, scale arithmetic."""

from __future__ import annotations

import itertools
import math
from ipaddress import ip_address, ip_network

import pytest

from zcube_lab.core.fabric.builders import build_clos, build_roft, build_zcube
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.hostplan import (
    egress_interface,
    ip_batch,
    kv_source_map,
    management_address,
    management_host_batch,
    management_root_batch,
    sysctls,
)
from zcube_lab.core.fabric.scale import Scale


def _hops_via(fabric: Fabric, src: str, out: int, dst: str, dst_if: int) -> float:
    a = fabric.attachments[(src, out)].switch
    b = fabric.attachments[(dst, dst_if)].switch
    # Ports into different planes of a multi-plane ROFT never meet.
    return fabric.switch_distances[a].get(b, math.inf) + 1


@pytest.mark.parametrize(
    "fabric",
    [
        build_zcube(n=4),
        build_zcube(n=8),
        build_roft(),
        build_clos(),
        build_roft(planes=2),
        build_roft(planes=4),
    ],
)
def test_egress_choice_is_a_shortest_way_to_each_address(fabric: Fabric) -> None:
    for src, dst in itertools.permutations(fabric.hosts, 2):
        for di in dst.interfaces:
            out = egress_interface(src, di.ip)
            assert out is not None
            best = min(
                _hops_via(fabric, src.name, si.index, dst.name, di.index) for si in src.interfaces
            )
            assert _hops_via(fabric, src.name, out, dst.name, di.index) == best < math.inf


def test_zcube_two_ports_give_the_two_disjoint_paths() -> None:
    f = build_zcube(n=4)
    src, dst = f.host("h0"), f.host("h5")  # segment 0 rail 0 -> segment 1 rail 1
    assert egress_interface(src, dst.interfaces[1].ip) == 0  # A0 > B1 > h5 port 2
    assert egress_interface(src, dst.interfaces[0].ip) == 1  # B0 > A1 > h5 port 1
    assert _hops_via(f, "h0", 0, "h5", 1) == 2
    assert _hops_via(f, "h0", 1, "h5", 0) == 2


def test_ip_batch_configures_addresses_routes_and_static_arp() -> None:
    f = build_zcube(n=4)
    lines = ip_batch(f, f.host("h0"), mtu=9000)
    assert "addr add 198.18.0.1/32 dev h0-eth0" in lines
    assert "addr add 198.18.128.1/32 dev h0-eth1" in lines
    assert "route replace 198.18.0.0/17 dev h0-eth1 src 198.18.128.1" in lines
    neigh = [ln for ln in lines if ln.startswith("neigh")]
    assert len(neigh) == 2 * 2 * 15  # every other host's two addresses, on both ports
    assert "rule add from 198.18.0.1 table 100 priority 100" in lines
    assert "route replace default dev h0-eth1 src 198.18.128.1 table 101" in lines
    roft = build_roft()
    single = ip_batch(roft, roft.host("h0"), mtu=1500)
    assert not [ln for ln in single if ln.startswith("rule")]
    assert len([ln for ln in single if ln.startswith("neigh")]) == 15
    h5 = f.host("h5")
    mac = h5.interfaces[1].mac
    assert f"neigh replace 198.18.129.2 lladdr {mac} dev h0-eth0 nud permanent" in lines
    assert any("mtu 9000" in ln for ln in lines)
    assert "net.ipv4.conf.h0-eth1.rp_filter=0" in sysctls(f.host("h0"))


def test_kv_source_map_puts_each_lane_on_a_disjoint_path() -> None:
    f = build_zcube(n=4)
    decode, prefill = f.host("h5"), f.host("h1")  # same rail 1, other segment
    smap = dict(kv_source_map(f, decode))
    for remote in prefill.interfaces:
        local_ip = next(v for k, v in smap.items() if ip_address(remote.ip) in ip_network(k))
        local = f.interfaces_by_ip[local_ip]
        assert local.index != remote.index  # port 1 to port 2 and port 2 to port 1
        a = f.attachments[(decode.name, local.index)].switch
        b = f.attachments[(prefill.name, remote.index)].switch
        assert f.switch_distances[a][b] == 1  # a 2-hop path: A to B or B to A
    assert kv_source_map(build_roft(), build_roft().host("h0")) == ()
    planes = build_roft(planes=2)
    assert kv_source_map(planes, planes.host("h0")) == ()  # routes keep each plane apart


def test_scale_keeps_time_and_shrinks_bytes() -> None:
    f = build_zcube(n=4, nic_gbps=400)
    scale = Scale(nic_mbps=100)
    assert scale.bandwidth_scale(f) == 4000
    assert scale.link_mbps(f, 200) == 50  # a ZCube port is half a NIC
    # 9 GB of KV at 400G takes 0.18 s; its scaled bytes at 100 Mb/s take the same.
    real_s = 9e9 * 8 / 400e9
    lab_s = (9e9 / scale.bandwidth_scale(f)) * 8 / 100e6
    assert lab_s == pytest.approx(real_s)


def test_management_network_is_apart_from_the_fabric() -> None:
    f = build_zcube(n=8)
    addrs = {management_address(h.gid) for h in f.hosts}
    assert len(addrs) == 64
    fabric_ips = {i.ip for h in f.hosts for i in h.interfaces}
    assert not addrs & fabric_ips
    assert all(ip_address(a) in ip_network("198.19.0.0/17") for a in addrs)
    # No host route of the fabric covers a management address.
    assert all(egress_interface(f.host("h0"), a) is None for a in addrs)
    root = management_root_batch(f, {h.name: 1000 + h.gid for h in f.hosts})
    assert "link set h7-mgmt netns 1007" in root
    assert root[0] == "link add zcl-mgmt type bridge"
    assert "addr add 198.19.0.8/17 dev h7-mgmt" in management_host_batch(f.host("h7"))


def test_state_folder_that_root_must_not_trust_is_refused(tmp_path) -> None:
    import os

    import pytest

    from zcube_lab.emulator.lab.state import check_state_dir
    from zcube_lab.emulator.lab.system import LabError

    good = tmp_path / "state"
    check_state_dir(good)
    assert good.is_dir() and (good.stat().st_mode & 0o777) == 0o700
    link = tmp_path / "link"
    link.symlink_to(good)
    with pytest.raises(LabError, match="symlink"):
        check_state_dir(link)
    if os.geteuid() == 0:
        other = tmp_path / "other"
        other.mkdir()
        os.chown(other, 65534, 65534)
        with pytest.raises(LabError, match="another user"):
            check_state_dir(other)


def test_a_reused_pid_is_not_taken_for_the_recorded_process() -> None:
    import os

    from zcube_lab.emulator.lab.state import process_start_time, same_process

    me = os.getpid()
    started = process_start_time(me)
    assert started is not None
    assert same_process(me, {str(me): started})
    assert not same_process(me, {str(me): started + 1})  # same pid, another process
    assert same_process(me, {})  # nothing recorded: alive is all we know


def test_state_file_round_trip_keeps_the_first_start_time(tmp_path) -> None:
    import json
    import os

    from zcube_lab.emulator.lab.state import LabState, read_state, state_path, write_state

    path = state_path(tmp_path / "state", 4242)
    assert path.name == "lab-4242.json" and read_state(path) is None
    me = os.getpid()
    state = LabState(4242, '{"kind": "roft"}', ("leaf0",), ("leaf0-eth1",), (me,), {}, "/r")
    write_state(path, state)
    first = read_state(path)
    assert first is not None and first.bridges == ("leaf0",) and first.pids == (me,)
    assert list(json.loads(path.read_text())) == [
        "owner",
        "fabric",
        "bridges",
        "interfaces",
        "pids",
        "starts",
        "run_dir",
    ]
    started = first.starts[str(me)]
    # A later write keeps start times recorded earlier, even of pids it no longer lists.
    path.write_text(LabState(4242, pids=(me,), starts={str(me): started - 1}).to_json())
    write_state(path, LabState(4242, pids=()))
    assert read_state(path).starts == {str(me): started - 1}
    path.write_text("not json")
    assert read_state(path) is None


def test_bridge_marks_name_their_owner() -> None:
    from zcube_lab.emulator.lab.ovsbridges import parse_marks

    text = 'leaf0\n{zcube-lab="123"}\n\nspine0\n{other=x, zcube-lab=77}\n\nbr-ext\n{}\n'
    assert parse_marks(text, "zcube-lab") == {"leaf0": 123, "spine0": 77}
    assert parse_marks("", "zcube-lab") == {}
