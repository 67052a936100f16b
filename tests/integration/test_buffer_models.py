"""Each switch buffer model (zcube_lab.core.fabric.queues) sets the queue limits it states on
a real fabric: a ZCube and a ROFT of 16 GPUs built in Mininet, every switch port's and two
hosts' leaf FIFOs read back with `tc -s qdisc show`. Each lab also gets one TCP congestion
control (`--cc`; each on both fabrics), read back with sysctl in every host namespace."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.queues import HOST_QUEUE_PACKETS, QueueModel
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

SPECS = {
    "zcube": FabricSpec.of("zcube", n=4),
    "roft": FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2),
}
# What each model states at NIC 100 Mb/s, MTU 9000 (hand arithmetic in tests/unit/test_queues.py):
# every chip is raised alike until a 400G port holds 64 packets; `time` gives a 200G ZCube
# port half a 400G port's bytes.
STATED = {
    ("zcube", "shared"): 64,
    ("zcube", "bytes"): 64,
    ("zcube", "time"): 32,
    ("roft", "shared"): 64,
    ("roft", "bytes"): 64,
    ("roft", "time"): 64,
}
# The congestion control each lab's hosts get: every choice once per fabric.
CC = {
    ("zcube", "shared"): "cubic",
    ("zcube", "bytes"): "reno",
    ("zcube", "time"): "bbr",
    ("roft", "shared"): "reno",
    ("roft", "bytes"): "bbr",
    ("roft", "time"): "cubic",
}
LEAF = re.compile(r"qdisc pfifo 10: (?:dev (\S+) )?parent 5:1 limit (\d+)p")


# A lab raises these machine-wide for ovs-vswitchd's send socket and leaves them raised; the
# largest buffer models here raise them far past what later tests' labs ask for, so put back
# what the machine had (a later test's TCP must not inherit this file's socket buffers).
SOCKET_DEFAULTS = ("/proc/sys/net/core/wmem_default", "/proc/sys/net/core/rmem_default")


@pytest.fixture(scope="module", autouse=True)
def restored_socket_defaults() -> Iterator[None]:
    before = {p: Path(p).read_text() for p in SOCKET_DEFAULTS}
    try:
        yield
    finally:
        for p, value in before.items():
            Path(p).write_text(value)


@pytest.fixture(scope="module", params=sorted(STATED), ids=lambda p: f"{p[0]}-{p[1]}")
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    kind, model = request.param
    options = LabOptions(
        scale=Scale(nic_mbps=100.0),
        of_port=free_port(),
        metrics_port=free_port(),
        state_dir=tmp_path_factory.mktemp("state"),
        queue=QueueModel(buffer_model=model),
        congestion_control=CC[request.param],
    )
    lab = Lab(build_fabric(SPECS[kind]), options)
    lab.start()
    try:
        yield lab
    finally:
        lab.stop()


def test_switch_and_host_ports_hold_the_stated_limits(lab: Lab) -> None:
    f = lab.fabric
    stated = STATED[(f.kind, lab.options.queue.buffer_model)]
    out = subprocess.run(
        ["tc", "-s", "qdisc", "show"], capture_output=True, text=True, check=True
    ).stdout
    switch_ports = set(f.switch_interfaces())
    read = {dev: int(p) for dev, p in LEAF.findall(out) if dev in switch_ports}
    assert set(read) == switch_ports  # every switch port has the leaf FIFO
    assert set(read.values()) == {stated}
    for h in (f.hosts[0], f.hosts[-1]):
        node = lab.net.get(h.name)
        for i in h.interfaces:
            text = node.cmd("tc", "-s", "qdisc", "show", "dev", i.name)
            [(_, packets)] = LEAF.findall(text)
            assert int(packets) == HOST_QUEUE_PACKETS, (h.name, i.name, text)


def test_every_host_namespace_runs_the_chosen_congestion_control(lab: Lab) -> None:
    chosen = lab.options.congestion_control
    for h in lab.fabric.hosts:
        got = lab.net.get(h.name).cmd("sysctl", "-n", "net.ipv4.tcp_congestion_control")
        assert got.strip() == chosen, h.name
