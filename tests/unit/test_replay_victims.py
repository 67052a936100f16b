"""A replay's victims counted as a live run counts them (issue 45 item 3): the replay's KV
transfers and EP exchanges on the wall clock, set against pause episodes by hand."""

from __future__ import annotations

import pytest

from zcube_lab.core.clock import Clock
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.pauseepisodes import PauseEpisode
from zcube_lab.core.fabric.scaledown import scaled_sizes
from zcube_lab.core.replay.recording import Transfer
from zcube_lab.emulator.replay.victims import during, replay_transfers, replay_victims
from zcube_lab.emulator.results.lossless.victims import exchange_ports


@pytest.fixture(scope="module")
def fabric():
    return build_fabric(FabricSpec.of("zcube", **scaled_sizes("zcube", 16)))


RECORDED = (
    Transfer(0, "kv", 0.0, "h0", "h5", 4e6),
    Transfer(1, "ep", 0.0, "h2", "h3", 1e5, exchange="e2/1/0"),
    Transfer(2, "ep", 0.0, "h2", "h6", 1e5, exchange="e2/1/0"),
    Transfer(3, "ep", 0.0, "h9", "h10", 1e5, exchange="e9/1/0"),  # never arrived
)
SENT = {0: 0.0, 1: 10e-6, 2: 12e-6, 3: 10e-6}  # modelled seconds from T0
GOT = {0: {"arrived_s": 300e-6}, 1: {"arrived_s": 40e-6}, 2: {"arrived_s": 60e-6},
       3: {"arrived_s": None}}  # fmt: skip


def test_an_exchange_spans_its_first_start_to_its_last_arrival_on_the_wall_clock(fabric):
    clock = Clock(100.0)  # k = 100: a modelled µs is 100 wall µs
    kv, ep = replay_transfers(RECORDED, SENT, GOT, fabric, 1000.0, clock)
    assert (kv.traffic_class, kv.start, kv.end) == ("kv", 1000.0, pytest.approx(1000.03))
    assert kv.ports == exchange_ports(fabric, "h5", ["h0"])
    assert ep.traffic_class == "ep"
    assert (ep.start, ep.end) == (pytest.approx(1000.001), pytest.approx(1000.006))
    assert ep.nbytes == 200_000
    assert ep.ports == exchange_ports(fabric, "h2", ["h3"]) | exchange_ports(fabric, "h2", ["h6"])


def test_an_exchange_behind_a_kv_raised_pause_is_a_victim_and_times_come_back_modelled(fabric):
    clock = Clock(100.0)
    port = next(iter(exchange_ports(fabric, "h2", ["h3"])))
    episodes = [
        # during the exchange (1000.001-1000.006), on one of its ports, raised by KV: 2 wall ms
        PauseEpisode("x", 1000.002, 1000.004, frozenset({port}), "kv"),
        # before this replay: a lab kept for several replays records theirs too
        PauseEpisode("x", 990.0, 990.5, frozenset({port}), "kv"),
    ]
    assert during(episodes, 1000.0, 1000.05) == episodes[:1]
    report = replay_victims(RECORDED, SENT, GOT, fabric, 1000.0, clock, episodes, 1000.05)
    assert report.ep_exchanges == 1 and report.ep_victims == 1 and report.pauses == 1
    assert report.classes["kv"].pauses_raised == 1
    ep = report.classes["ep"]
    assert ep.delayed == 1
    assert ep.seconds_behind == pytest.approx(20e-6)  # 2 wall ms at k = 100
    assert report.ep_p50_s == pytest.approx(50e-6)  # 10 -> 60 modelled µs
    # raised by EP itself: behind a pause, but not a victim
    own = [PauseEpisode("x", 1000.002, 1000.004, frozenset({port}), "ep")]
    assert replay_victims(RECORDED, SENT, GOT, fabric, 1000.0, clock, own, 1000.05).ep_victims == 0
