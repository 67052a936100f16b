"""The userspace datapath's packet sockets and its send-error log lines (pure parsing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zcube_lab.emulator.lab import ovs

_SKMEM = "skmem:(r0,rb{rb},t{t},tb{tb},f0,w0,o0,bl0,d{d})"
SS = "\n".join(
    [
        "Netid Recv-Q Send-Q Local Address:Port Peer Address:PortProcess",
        'p_raw 0 0 [0]:* * users:(("ovs-vswitchd",pid=27550,fd=136)) '
        + _SKMEM.format(rb=8388608, t=4096, tb=67108864, d=0),
        'p_raw 0 0 *:a0-eth3 * users:(("ovs-vswitchd",pid=27550,fd=39)) '
        + _SKMEM.format(rb=212992, t=0, tb=212992, d=7),
        'p_raw 0 0 *:eth0 * users:(("dhclient",pid=12,fd=5)) '
        + _SKMEM.format(rb=212992, t=0, tb=212992, d=3),
    ]
)


def test_parse_packet_sockets_keeps_the_daemons_sockets_and_their_buffers() -> None:
    send, port = ovs.parse_packet_sockets(SS)
    assert send.is_send_socket and not port.is_send_socket
    assert (send.sndbuf, send.rcvbuf, send.queued_send) == (67108864, 8388608, 4096)
    assert (port.local, port.drops) == ("*:a0-eth3", 7)


def test_send_errors_since_reads_only_what_was_logged_after_the_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "ovs-vswitchd.log"
    old = "2026-12-01T05:35:46Z|01|netdev_linux|WARN|error sending Ethernet packet on a0-eth8\n"
    log.write_text(old)
    monkeypatch.setattr(ovs, "VSWITCHD_LOG", log)
    offset = ovs.log_size()
    assert offset == len(old)
    with log.open("a") as f:
        f.write("2026-12-01T05:36:00Z|02|bridge|INFO|added port\n")
        f.write("2026-12-01T05:36:01Z|03|netdev_linux|WARN|error sending Ethernet packet on b1\n")
    lines = ovs.send_errors_since(offset)
    assert len(lines) == 1 and lines[0].endswith("on b1")
    monkeypatch.setattr(ovs, "VSWITCHD_LOG", tmp_path / "missing.log")
    assert ovs.log_size() == 0 and ovs.send_errors_since(0) == []
