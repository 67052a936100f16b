"""The lab's Mininet link class: Mininet records the link's interfaces and runs nothing (the lab
creates and configures them in batches). Checked on Mininet's real `Link` constructor with
stand-in nodes, so no root is needed."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mininet")

from zcube_lab.emulator.lab.links import failure_text, link_class


class StandInNode:
    """What Mininet's Link asks of a node, recording interfaces and refusing commands."""

    def __init__(self, name: str, in_namespace: bool) -> None:
        self.name = name
        self.inNamespace = in_namespace
        self.ports: dict[Any, int] = {}

    def addIntf(self, intf: Any, port: int, moveIntfFn: Any = None) -> None:
        self.ports[intf] = port
        if moveIntfFn is not None:
            moveIntfFn(intf.name, self)  # Link's fast path passes a no-op

    def cmd(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError(f"{self.name} ran {args}")


def test_a_link_records_both_interfaces_and_runs_no_command() -> None:
    from mininet.link import Intf

    host, switch = StandInNode("h0", True), StandInNode("a0", False)
    link = link_class()(
        host,
        switch,
        port1=0,
        port2=3,
        addr1="02:00:00:00:00:01",
        addr2="02:00:00:00:00:02",
        intf=Intf,
    )
    assert (link.intf1.name, link.intf1.mac, host.ports[link.intf1]) == (
        "h0-eth0",
        "02:00:00:00:00:01",
        0,
    )
    assert (link.intf2.name, link.intf2.mac, switch.ports[link.intf2]) == (
        "a0-eth3",
        "02:00:00:00:00:02",
        3,
    )
    assert link.intf2.IP() is None  # so OVSSwitch.start adds it as a port
    assert type(link.intf1).__name__ == "BatchIntf"  # not TCIntf: batchStartup reapplies nothing


def test_a_failure_shows_its_end_without_htb_warnings() -> None:
    out = "\n".join(
        ["Warning: sch_htb: quantum of class 50001 is big. Consider r2q change."] * 50
        + ["RTNETLINK answers: No such device", "Command failed /run/lab/ports.tc:7"]
    )
    assert (
        failure_text(out) == "RTNETLINK answers: No such device\nCommand failed /run/lab/ports.tc:7"
    )
    assert failure_text("") == "no output"
