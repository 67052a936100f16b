"""Both NIC ports for an expert-parallel exchange on ZCube (issue 32, item 3).

On a ZCube with n = 2 (4 hosts, 2 per segment), h0 and h2 are a rail-aligned pair: rank 0 of
servers 0 and 1, one B switch apart. With `--ep-ports all` the leader reaches the peer at both
of its addresses, each lane leaving its own port (the KV source map): h0.p1 > A0 > B0 > h2.p2
and h0.p2 > B0 > A1 > h2.p1, the two link-disjoint paths. Each host port then carries half of
the exchange (within 10%), and an exchange takes bytes / (2 x port rate), within 10%, once the
fixed cost (the median of a 1,000-byte exchange on the same warm connections) is taken off.
With `--ep-ports one` it takes the one-hop path through B0, port 2 at both ends, about twice as
long. The figures are printed (run with -s to see them). About a minute: one small lab.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.noisy import timing_bar
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.probes.epprobe import port_split
from zcube_lab.emulator.probes.hostprobe import running_lab

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

LEADER, PEER = "h0", "h2"
SIZE = 1_500_000  # bytes per peer each way: 0.24 s over both 50 Mb/s ports
TOLERANCE = 0.10


@pytest.fixture(scope="module")
def zcube(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    fabric = build_fabric(FabricSpec.of("zcube", n=2))
    with running_lab(fabric, tmp_path_factory.mktemp("ep-ports-lab")) as lab:
        yield lab


def _shares(sent: dict[str, int], host: str) -> list[float]:
    mine = [v for k, v in sorted(sent.items()) if k.startswith(f"{host}-")]
    return [v / sum(mine) for v in mine]


def test_a_rail_aligned_exchange_uses_both_ports_at_twice_the_port_rate(zcube) -> None:
    def within(measured) -> tuple[bool, str]:
        (row,) = measured[0].rows
        if row.ratio is None:
            return False, f"no ratio ({row.failed} of the exchanges failed)"
        return abs(row.ratio - 1) <= TOLERANCE, (
            f"ratio {row.ratio:.3f} ({1 + TOLERANCE:.2f}x allowed): {row.seconds:.4f} s against "
            f"{row.ideal_s:.4f} s"
        )

    # wall time against the ports' rate: measured again on a noisy machine (tests/noisy.py)
    both, sent = timing_bar(
        lambda: port_split(zcube, LEADER, [PEER], [SIZE], repeat=5, ports="all"),
        within,
        "an exchange over both ports against twice the port rate",
    )
    one, sent_one = port_split(zcube, LEADER, [PEER], [SIZE], repeat=3, ports="one")
    (row,), (row_one,) = both.rows, one.rows
    figures = {
        "fixed_s": both.fixed_s,
        "both_ports_s": row.seconds,
        "both_ideal_s": row.ideal_s,
        "both_ratio": row.ratio,
        "one_port_s": row_one.seconds,
        "one_ideal_s": row_one.ideal_s,
        "one_fixed_s": one.fixed_s,
        "bytes_sent": sent,
        "bytes_sent_one_port": sent_one,
    }
    print(json.dumps(figures, indent=1))
    for host in (LEADER, PEER):
        shares = _shares(sent, host)
        assert len(shares) == 2 and all(abs(s - 0.5) <= 0.5 * TOLERANCE for s in shares), (
            host,
            sent,
        )
    # bytes / (2 x port rate): dispatch and combine each spread over both 50 Mb/s ports
    assert row.ideal_s == pytest.approx(2 * SIZE * 8 / (2 * 50e6))
    assert row.failed == 0 and row.ratio is not None, both
    assert abs(row.ratio - 1) <= TOLERANCE, figures
    # one port: all of it on port 2 (the one-hop path through B0), twice as long
    assert max(_shares(sent_one, LEADER)) > 0.95, sent_one
    assert row_one.seconds is not None and row.seconds is not None
    assert row_one.seconds > 1.7 * row.seconds, figures
