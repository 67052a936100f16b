"""bench/ovs_events_read.py: counter deltas and per-packet figures of an ovs_events.sh file,
against hand-counted answers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.ovs_events_read import main, read_events

FILE = """# zcube-lab run --fabric zcube --workload hotspot --rate 12 --duration 45 --nic-mbps 50
# window (load start to collecting), s: 55.6
## ovs-appctl dpif-netdev/pmd-stats-show (cleared at load start)
main thread:
  packets received: 1000
  avg. packets per output batch: 1.66
## ovs-appctl coverage/show at load start
Event coverage, avg rate over last: 5 seconds, last minute, last hour,  hash=1:
poll_create_node         10.0/sec     1.000/sec        0.0003/sec   total: 5000
util_xalloc              10.0/sec     1.000/sec        0.0003/sec   total: 100
## ovs-appctl coverage/show at collecting
Event coverage, avg rate over last: 5 seconds, last minute, last hour,  hash=2:
poll_create_node         10.0/sec     1.000/sec        0.0003/sec   total: 35000
util_xalloc              10.0/sec     1.000/sec        0.0003/sec   total: 900100
netdev_received          10.0/sec     1.000/sec        0.0003/sec   total: 600
"""


def test_deltas_and_per_packet() -> None:
    ev = read_events(FILE)
    assert ev.window_s == 55.6
    assert ev.packets == 1000
    assert ev.deltas == {"poll_create_node": 30000, "util_xalloc": 900000, "netdev_received": 600}
    assert ev.per_packet("poll_create_node") == 30.0
    assert ev.per_packet("util_xalloc") == 900.0
    assert ev.per_packet("netdev_sent") == 0.0


def test_a_file_missing_a_reading_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not an ovs_events\.sh file"):
        read_events(FILE.split("## ovs-appctl coverage/show at collecting")[0])


def test_the_second_file_is_compared_with_the_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(FILE)
    b.write_text(FILE.replace("packets received: 1000", "packets received: 1500"))
    assert main([str(a), str(b)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "1,000 packets" in out[0] and "poll_create_node 30,000 (30.0/packet)" in out[0]
    assert "against a.txt: packets +50%, poll_create_node +0%, util_xalloc +0%" in out[1]
