"""EVs that name their paths: the pure path of a source port, and the EV rules that realise it."""

from __future__ import annotations

import pytest

from zcube_lab.controller.flowtable import FabricTable
from zcube_lab.controller.rules import PRIORITY_EV, compute_rules
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.evpaths import (
    EV_BASE,
    choice_bits,
    distinct_paths,
    ev_choice,
    ev_path,
    ev_paths,
    ev_ports,
    field_shift,
)

ROFT2 = build_fabric(FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2, planes=2))
CLOS = build_fabric(FabricSpec.of("clos"))
ZCUBE = build_fabric(FabricSpec.of("zcube", n=4))


def test_each_distance_reads_its_own_field_of_the_port() -> None:
    assert [field_shift(d) for d in (1, 2, 3, 4, 5)] == [0, 3, 6, 9, 0]
    assert [choice_bits(k) for k in (2, 3, 4, 5, 8, 12)] == [1, 2, 2, 3, 3, 3]
    port = EV_BASE | (5 << 3) | 2
    assert ev_choice(port, 1, 4) == 2 and ev_choice(port, 2, 8) == 5 and ev_choice(port, 2, 2) == 1
    with pytest.raises(ValueError):
        field_shift(0)


def test_ev_ports_are_distinct_and_cover_every_next_hop_at_each_level_early() -> None:
    ports = ev_ports(128)
    assert len(set(ports)) == 128 and min(ports) == EV_BASE and max(ports) < 2**16
    for distance in (1, 2, 3):
        assert {ev_choice(p, distance, 8) for p in ports[:8]} == set(range(8))
    with pytest.raises(ValueError):
        ev_ports(0)


def test_on_two_plane_roft_four_evs_take_four_paths_in_each_plane() -> None:
    for iface in ROFT2.host("h5").interfaces:
        paths = ev_paths(ROFT2, "h0", iface.ip, ev_ports(4))
        assert distinct_paths(list(paths.values())) == 4
        plane = "p0" if iface.index == 0 else "p1"
        assert all(hop.startswith(plane) for p in paths.values() for hop in p)
        spines = {p[1].split(":")[0] for p in paths.values()}
        assert spines == {f"{plane}spine0", f"{plane}spine1"}


def test_the_installed_ev_rules_send_every_ev_down_the_path_ev_path_names() -> None:
    for fabric, src, dst in ((ROFT2, "h0", "h5"), (CLOS, "h0", "h12"), (ZCUBE, "h0", "h5")):
        table = FabricTable(fabric, compute_rules(fabric, "ecmp", ev_rules=True))
        for iface in fabric.host(dst).interfaces:
            for port in ev_ports(16):
                trace = table.send(src, iface.ip, udp_src=port)
                (delivered,) = trace.delivered  # one path: no hashing left
                expected = tuple(h.split(":")[0] for h in ev_path(fabric, src, iface.ip, port))
                assert delivered.switches == expected
                assert (delivered.host, delivered.interface) == (dst, iface.index)


def test_ev_rules_leave_tcp_to_ecmp_and_are_absent_by_default() -> None:
    plain = compute_rules(ROFT2, "ecmp")
    with_ev = compute_rules(ROFT2, "ecmp", ev_rules=True)
    assert not any(f.priority == PRIORITY_EV for r in plain.values() for f in r.flows)
    ev_flows = [f for r in with_ev.values() for f in r.flows if f.priority == PRIORITY_EV]
    assert ev_flows and all(f.match_fields["ip_proto"] == 17 for f in ev_flows)
    table = FabricTable(ROFT2, with_ev)
    dst = ROFT2.host("h5").interfaces[0].ip
    assert len(table.send("h0", dst).paths) == 2  # TCP: the ECMP group, both spines


def test_a_cut_link_drops_only_the_evs_whose_path_crosses_it() -> None:
    table = FabricTable(ROFT2, compute_rules(ROFT2, "ecmp", ev_rules=True))
    dst = ROFT2.host("h5").interfaces[0].ip
    paths = ev_paths(ROFT2, "h0", dst, ev_ports(8))
    cut = next(lk for lk in ROFT2.links if {lk.node1, lk.node2} == {"p0leaf0", "p0spine0"})
    cut_table = table.with_failed([cut])
    crossing = 0
    for port, path in paths.items():
        crosses = path[0] in (f"p0leaf0:{cut.port1}", f"p0leaf0:{cut.port2}")
        delivered = bool(cut_table.send("h0", dst, udp_src=port).delivered)
        assert delivered != crosses, (port, path)
        crossing += crosses
    assert 0 < crossing < len(paths)


def test_the_fabric_command_shows_which_ev_takes_which_path(capsys: pytest.CaptureFixture) -> None:
    import json

    from zcube_lab.cli import main

    argv = ["fabric", "--fabric", "roft", "--gpus-per-server", "4", "--servers-per-leaf", "4"]
    argv += ["--planes", "2", "--paths", "h0", "h5", "--evs", "4"]
    assert main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["ev_paths"]
    assert len(rows) == 8  # 4 EVs to each of h5's two addresses
    first = rows[0]
    assert first["hops"] == list(ev_path(ROFT2, "h0", first["dst_ip"], first["ev"]))
    assert main(argv) == 0
    assert "EV 57344 to " in capsys.readouterr().out
    assert main(["fabric", "--fabric", "roft", "--evs", "4"]) == 2  # needs --paths


def test_one_dump_ports_gives_every_ports_tx_bytes() -> None:
    from zcube_lab.emulator.probes.cutprobe import switch_tx_bytes

    text = """OFPST_PORT reply (OF1.3) (xid=0x2): 3 ports
  port LOCAL: rx pkts=0, bytes=0, drop=0, errs=0, frame=0, over=0, crc=0
           tx pkts=0, bytes=0, drop=0, errs=0, coll=0
           duration=5.1s
  port  5: rx pkts=12, bytes=3400, drop=0, errs=0, frame=0, over=0, crc=0
           tx pkts=319, bytes=2875466, drop=0, errs=0, coll=0
  port 12: rx pkts=?, bytes=?, drop=?, errs=?, frame=?, over=?, crc=?
           tx pkts=1, bytes=98, drop=0, errs=0, coll=0
"""
    assert switch_tx_bytes(text) == {5: 2875466, 12: 98}


def test_the_mrc_delay_bound_is_the_path_s_full_queues_drained_and_longer_when_paused() -> None:
    from zcube_lab.core.fabric.evpaths import mrc_delay_bound_s
    from zcube_lab.core.fabric.queues import QueueModel, port_queue_limits
    from zcube_lab.core.fabric.scale import Scale

    scale, mtu = Scale(nic_mbps=100.0), 9000
    queues = port_queue_limits(ROFT2, scale, mtu, QueueModel(packets=64))
    lossy = mrc_delay_bound_s(ROFT2, scale, mtu, queues, "h5")
    # Leaf up, spine down, leaf down: 3 switch queues of 64 x 9000 B at 50 Mb/s (a plane's).
    assert lossy == pytest.approx(3 * 64 * 9000 * 8 / 50e6)
    paused = mrc_delay_bound_s(ROFT2, scale, mtu, queues, "h5", lossless=True)
    assert paused > lossy  # XOFF plus headroom per port
    # Modelled time: a dilated lab shapes k times slower, the bound stays the same.
    slow = Scale(nic_mbps=100.0, dilation=2.0)
    assert mrc_delay_bound_s(ROFT2, slow, mtu, queues, "h5") == pytest.approx(lossy)
