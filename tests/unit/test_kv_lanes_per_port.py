"""The KV transport's rule for every fabric (docs/DOMAIN.md, "KV transport: the same on every
fabric"): a pull runs `kv_streams` connections per NIC port, at the prefill's end and at the
decode's, on ZCube (two ports per host) as on ROFT and Clos (one)."""

from __future__ import annotations

from collections import Counter

import pytest

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.hostplan import egress_interface, kv_source_map
from zcube_lab.emulator.experiment.comparison import fabric_specs
from zcube_lab.emulator.probes.kvprobe import KV_PAIRS
from zcube_lab.serving.config import Address
from zcube_lab.serving.kvwire import pick_source, plan_lanes


@pytest.mark.parametrize("kind", ["zcube", "roft", "clos"])
@pytest.mark.parametrize("streams", [2, 8])
def test_every_nic_port_carries_the_same_lanes_of_a_pull(kind: str, streams: int) -> None:
    fabric = build_fabric(fabric_specs([kind], 16, 2)[kind])
    server, puller = KV_PAIRS[kind]
    src, dst = fabric.host(server), fabric.host(puller)
    # prefill advertises one KV address per NIC port; decode binds sources by kv_source_map
    addrs = [Address(i.ip, 7100) for i in src.interfaces]
    sources = kv_source_map(fabric, dst)
    lanes = plan_lanes(4 * 2**20, 64 * 1024, addrs, streams)
    by_ip = {i.ip: i.index for i in dst.interfaces}

    def puller_port(addr: Address) -> int | None:
        local = pick_source(addr.host, sources)
        return by_ip[local] if local is not None else egress_interface(dst, addr.host)

    server_ports = Counter(a.host for a, _ in lanes)
    puller_ports = Counter(puller_port(a) for a, _ in lanes)
    assert len(server_ports) == len(src.interfaces) and len(puller_ports) == len(dst.interfaces)
    assert set(server_ports.values()) == {streams} == set(puller_ports.values())
