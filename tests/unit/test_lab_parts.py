"""The lab's parts beside `Lab` that need no root: the controller's command line and the wait
for its rules (`controlplane`), the options' summary (`options`), the Mininet topology and the
ping sweep (`nodes`), and the lossless agent's waits (`losslessproc`), with fakes for processes
and Mininet nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.queues import queue_summary
from zcube_lab.emulator.lab import losslessproc
from zcube_lab.emulator.lab.controlplane import controller_argv, wait_listening, wait_routed
from zcube_lab.emulator.lab.nodes import topology, unreachable, unreachable_text
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.system import LabError

ZCUBE = build_fabric(FabricSpec.of("zcube", n=2))


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_controller_gets_the_fabric_and_the_routing_options() -> None:
    o = LabOptions(datapath="user", policy="spray", of_port=7000, metrics_port=9200)
    argv = controller_argv(ZCUBE, o)
    assert argv[1:3] == ["-m", "zcube_lab.controller"]
    assert FabricSpec.from_json(_flag(argv, "--fabric-spec")) == ZCUBE.spec
    assert (_flag(argv, "--policy"), _flag(argv, "--of-port")) == ("spray", "7000")
    assert (_flag(argv, "--metrics-port"), _flag(argv, "--listen-host")) == ("9200", "127.0.0.1")
    assert "--recompute" not in argv and "--ev-rules" not in argv
    both = controller_argv(ZCUBE, LabOptions(datapath="user", recompute=True, ev_rules=True))
    assert both[-2:] == ["--recompute", "--ev-rules"]


class FakeProc:
    def __init__(self, code: int | None) -> None:
        self.returncode = code
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)


def test_waiting_for_the_controller_reads_its_log_after_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "controller.log"
    log.write_text("controller listening on 6653\nrestarted\n")
    wait_listening(FakeProc(None), 1.0, log)  # type: ignore[arg-type]
    with pytest.raises(LabError, match="exited with 3"):
        # the listening line is before the offset: the second start has not printed its own
        wait_listening(FakeProc(3), 1.0, log, offset=log.stat().st_size)  # type: ignore[arg-type]


def test_waiting_for_routes_returns_the_counts_or_names_what_is_missing(tmp_path: Path) -> None:
    expected = {"a0": 5, "b0": 7}
    readings = iter([{"a0": 5, "b0": 2}, {"a0": 5, "b0": 7}])
    assert wait_routed(expected, lambda: next(readings), 5.0, tmp_path) == expected
    with pytest.raises(LabError, match=r"within 0s .*'b0': \(2, 7\).*see /x"):
        wait_routed(expected, lambda: {"a0": 5, "b0": 2}, 0.0, Path("/x"))


def test_the_options_summary_names_the_queues_or_unshaped() -> None:
    o = LabOptions(datapath="user")
    got = o.summary(ZCUBE)
    assert list(got) == [
        "bandwidth_scale", "nic_mbps", "mtu", "congestion_control", "lossless", "queue_model",
        "queues",
    ]  # fmt: skip
    assert got["queues"] == queue_summary(ZCUBE, o.scale, o.mtu, o.queue)
    assert got["mtu"] == 9000 and got["queue_model"] == o.queue.describe()
    bare = LabOptions(datapath="user", shaped=False).summary(ZCUBE)
    assert bare["queue_model"] == "unshaped" and bare["queues"] == []


def test_the_topology_is_the_fabric_s_nodes_dpids_and_ports() -> None:
    topo = topology(ZCUBE, lambda node: {"server": f"m-{node}"})
    assert sorted(topo.hosts()) == sorted(h.name for h in ZCUBE.hosts)  # type: ignore[attr-defined]
    s = ZCUBE.switches[0]
    info = topo.nodeInfo(s.name)  # type: ignore[attr-defined]
    assert info["dpid"] == f"{s.dpid:016x}" and info["server"] == f"m-{s.name}"
    assert len(topo.links()) == len(ZCUBE.links)  # type: ignore[attr-defined]
    lk = ZCUBE.links[0]
    ports = topo.port(lk.node1, lk.node2)  # type: ignore[attr-defined]
    assert ports == (lk.port1, lk.port2)


class FakeNode:
    """A Mininet host shell that answers `fping -a` with the addresses in `up`."""

    def __init__(self, up: set[str]) -> None:
        self.up, self.sent = up, []

    def sendCmd(self, *argv: str) -> None:  # Mininet's name
        self.sent = list(argv)

    def waitOutput(self) -> str:
        return "".join(f"{ip}\n" for ip in self.sent if ip in self.up)


def test_the_ping_sweep_reports_what_each_host_could_not_reach() -> None:
    everyone = {i.ip for h in ZCUBE.hosts for i in h.interfaces}
    dead = ZCUBE.hosts[1].interfaces[0].ip
    nodes = {h.name: FakeNode(everyone - {dead}) for h in ZCUBE.hosts}
    net = type("Net", (), {"get": staticmethod(nodes.__getitem__)})()
    failures = unreachable(net, ZCUBE, 300, 1, passes=1)
    first = ZCUBE.hosts[0].name
    assert failures[first] == [dead] and failures[ZCUBE.hosts[1].name] == []
    assert nodes[first].sent[:5] == ["fping", "-a", "-t", "300", "-r"]


class FlakyNode(FakeNode):
    """Loses the replies of `lost` on its first sweep only, as a busy machine does."""

    def __init__(self, up: set[str], lost: set[str]) -> None:
        super().__init__(up)
        self.lost, self.sweeps = lost, []

    def sendCmd(self, *argv: str) -> None:
        super().sendCmd(*argv)
        self.sweeps.append(list(argv))

    def waitOutput(self) -> str:
        answered = super().waitOutput().split()
        drop = self.lost if len(self.sweeps) == 1 else set()
        return "".join(f"{ip}\n" for ip in answered if ip not in drop)


def test_what_did_not_answer_is_asked_again_and_only_the_cut_off_stays_unreachable() -> None:
    everyone = {i.ip for h in ZCUBE.hosts for i in h.interfaces}
    dead = ZCUBE.hosts[1].interfaces[0].ip
    slow = ZCUBE.hosts[2].interfaces[0].ip
    nodes = {h.name: FlakyNode(everyone - {dead}, {slow}) for h in ZCUBE.hosts}
    net = type("Net", (), {"get": staticmethod(nodes.__getitem__)})()
    failures = unreachable(net, ZCUBE, 300, 1)
    first = nodes[ZCUBE.hosts[0].name]
    assert failures[ZCUBE.hosts[0].name] == [dead]  # the lost reply came on the second sweep
    assert failures[ZCUBE.hosts[2].name] == [dead]
    assert first.sweeps[1] == ["fping", "-a", "-t", "600", "-r", "1", dead, slow]  # waits longer
    # with one sweep the lost reply counts as unreachable; nothing left asks no third time
    nodes = {h.name: FlakyNode(everyone - {dead}, {slow}) for h in ZCUBE.hosts}
    net = type("Net", (), {"get": staticmethod(nodes.__getitem__)})()
    assert unreachable(net, ZCUBE, 300, 1, passes=1)[ZCUBE.hosts[0].name] == [dead, slow]
    nodes = {h.name: FlakyNode(everyone, {slow}) for h in ZCUBE.hosts}
    net = type("Net", (), {"get": staticmethod(nodes.__getitem__)})()
    assert not any(unreachable(net, ZCUBE, 300, 1, passes=5).values())
    assert max(len(n.sweeps) for n in nodes.values()) == 2


def test_a_failed_check_is_told_in_a_line_with_the_whole_list_in_a_file() -> None:
    bad = {f"h{i}": [f"198.18.0.{j}" for j in range(3)] for i in range(5)}
    text = unreachable_text(bad, Path("/r/logs/unreachable.json"))
    assert text.startswith("fabric not fully reachable after a second check: 15 address pairs")
    assert "from 5 hosts" in text and "h0 -> 198.18.0.0" in text and "and 11 more" in text
    assert text.endswith("all of them in /r/logs/unreachable.json)") and "\n" not in text


def test_the_lossless_agent_s_waits(tmp_path: Path) -> None:
    report = losslessproc.report_path(tmp_path)
    log = tmp_path / "lossless.log"
    log.write_text("no such port\n")
    with pytest.raises(LabError, match=r"(?s)did not start.*no such port"):
        losslessproc.wait_watching(FakeProc(1), report, log)  # type: ignore[arg-type]
    report.write_text(json.dumps({}))
    losslessproc.wait_watching(FakeProc(None), report, log)  # type: ignore[arg-type]
    agent = FakeProc(None)
    losslessproc.refresh_report(agent, report)  # type: ignore[arg-type]
    assert len(agent.signals) == 1  # asked once; the report did not change, so it waited 1 s
