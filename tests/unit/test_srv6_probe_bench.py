"""bench/srv6_probe.py without root: the SRH the sender writes, the shift the switch rules do,
and the test bed's teardown when a step fails."""

from __future__ import annotations

import re
import struct
import subprocess
from collections.abc import Sequence
from ipaddress import IPv6Address

import pytest

from bench import srv6_probe
from bench.srv6_probe import BRIDGE, NAMESPACES, prefix, shift_action, srh_option
from zcube_lab.core.fabric.srv6 import container, shift


def test_the_srh_puts_the_active_segment_last_and_leaves_slot_zero_to_the_kernel() -> None:
    ev = container([0x0201, 0x0102, 0xE001])
    option = srh_option([ev])
    _next, hdrlen, kind, left, last, flags, tag = struct.unpack("!BBBBBBH", option[:8])
    assert (hdrlen, kind, left, last, flags, tag) == (4, 4, 1, 1, 0, 0)
    assert len(option) == (hdrlen + 1) * 8
    assert option[8:24] == bytes(16) and IPv6Address(option[24:40]) == ev
    three = srh_option([IPv6Address("fc00::1"), IPv6Address("fc00::2")])
    assert IPv6Address(three[8 + 16 * 2 :]) == IPv6Address("fc00::1")  # active: highest slot


def _apply(actions: str, value: int) -> int:
    """Open vSwitch's `move` and `load` on the IPv6 destination (bit 0 the address's last)."""
    for action in actions.split(","):
        if m := re.fullmatch(
            r"move:NXM_NX_IPV6_DST\[(\d+)\.\.(\d+)\]->NXM_NX_IPV6_DST\[(\d+)\.\.(\d+)\]", action
        ):
            lo, hi, to_lo, to_hi = map(int, m.groups())
            assert hi - lo == to_hi - to_lo
            bits = (value >> lo) & ((1 << (hi - lo + 1)) - 1)
            value &= ~(((1 << (hi - lo + 1)) - 1) << to_lo)
            value |= bits << to_lo
        elif m := re.fullmatch(r"load:(\d+)->NXM_NX_IPV6_DST\[(\d+)\.\.(\d+)\]", action):
            load, lo, hi = map(int, m.groups())
            value &= ~(((1 << (hi - lo + 1)) - 1) << lo)
            value |= load << lo
        else:
            raise AssertionError(action)
    return value


def test_the_switch_actions_shift_the_address_as_the_ncsid_end_does() -> None:
    for sids in ([0x0201, 0x0102, 0xE001], [1, 2, 3, 4, 5, 6], [0xFFFF] * 6):
        address = container(sids)
        assert IPv6Address(_apply(shift_action(), int(address))) == shift(address)
    assert prefix(0x0102) == "fc00:c0be:102::/48"


def test_the_test_bed_is_torn_down_when_a_step_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(argv: Sequence[str], check: bool = True, timeout: float = 30) -> object:
        calls.append(list(argv))
        if argv[:3] == ["ip", "netns", "add"] and argv[3] == NAMESPACES[1]:
            raise subprocess.CalledProcessError(1, list(argv))
        return subprocess.CompletedProcess(list(argv), 0, '[{"address": "02:00:00:00:00:0a"}]', "")

    monkeypatch.setattr(srv6_probe, "run", fake_run)
    with pytest.raises(subprocess.CalledProcessError), srv6_probe.testbed():
        pass
    failed = calls.index(["ip", "netns", "add", NAMESPACES[1]])
    after = calls[failed + 1 :]
    assert ["ovs-vsctl", "--if-exists", "del-br", BRIDGE] in after
    assert all(["ip", "netns", "del", ns] in after for ns in NAMESPACES)
