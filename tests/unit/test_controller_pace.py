"""The statistics poll's pace: active while counters move, relaxed after quiet polls, back at
once when a reply shows them moved; never relaxed without an idle interval (a run's)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from zcube_lab.controller.__main__ import parse_args
from zcube_lab.controller.app import ControllerConfig, ZCubeController
from zcube_lab.controller.pace import QUIET_POLLS, PollPace
from zcube_lab.controller.port_metrics import FabricStats, OpenFlowPortStats
from zcube_lab.controller.rules import compute_rules
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.lab.controlplane import controller_argv
from zcube_lab.emulator.lab.options import LabOptions

ROFT = FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2)


def test_the_pace_relaxes_after_quiet_polls_and_comes_back_at_the_first_move() -> None:
    pace = PollPace(1.0, 5.0)
    assert [pace.polled(True)] + [pace.polled(False) for _ in range(QUIET_POLLS)] == [
        1.0,
        *[1.0] * (QUIET_POLLS - 1),
        5.0,
    ]
    assert pace.idle
    assert pace.polled(False) == 5.0  # still idle
    assert pace.replied(False) is False
    assert pace.replied(True) is True  # poll again now
    assert not pace.idle
    assert pace.replied(True) is False  # already active: no extra poll
    assert pace.polled(True) == 1.0


def test_one_moved_poll_restarts_the_count() -> None:
    pace = PollPace(1.0, 5.0)
    intervals = [pace.polled(m) for m in (False, False, True, False, False, False)]
    assert intervals == [1.0, 1.0, 1.0, 1.0, 1.0, 5.0]


@pytest.mark.parametrize("idle_s", [0.0, 1.0, 0.5])
def test_without_a_longer_idle_interval_the_pace_never_relaxes(idle_s: float) -> None:
    pace = PollPace(1.0, idle_s)
    assert [pace.polled(False) for _ in range(20)] == [1.0] * 20
    assert pace.replied(True) is False


def test_bad_intervals_are_refused() -> None:
    with pytest.raises(ConfigError):
        PollPace(0.0)
    with pytest.raises(ConfigError) as err:
        PollPace(1.0, -1.0)
    assert err.value.field == "idle_poll_interval"
    with pytest.raises(ConfigError):
        ControllerConfig(
            build_fabric(ROFT), "ecmp", 1.0, CollectorRegistry(), idle_poll_interval=-2.0
        )


def _counters(packets: int) -> dict[int, OpenFlowPortStats]:
    return {1: OpenFlowPortStats(rx_packets=packets, tx_packets=packets), 2: OpenFlowPortStats()}


def test_port_replies_say_whether_a_packet_count_moved() -> None:
    fabric = build_fabric(ROFT)
    stats = FabricStats({r.name: r for r in compute_rules(fabric, "ecmp").values()})
    assert stats.ports("leaf0", _counters(0)) is True  # new ports
    assert stats.ports("leaf0", _counters(0)) is False
    assert stats.ports("leaf0", {1: OpenFlowPortStats(rx_packets=0, tx_packets=1)}) is True
    bytes_only = {1: OpenFlowPortStats(rx_bytes=9, rx_packets=0, tx_packets=1)}
    assert stats.ports("leaf0", bytes_only) is False  # packets are what tell a move


class _ScriptedWake:
    """The poll loop's wake event: records each wait's timeout, delivers the scripted replies
    during it, and stops the app after the script."""

    def __init__(self, app: ZCubeController, script: list[Callable[[], None] | None]) -> None:
        self.app, self.script = app, script
        self.timeouts: list[float] = []
        self.sets = 0

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        i = len(self.timeouts) - 1
        if i < len(self.script):
            step = self.script[i]
            if step is not None:
                step()
        else:
            self.app._stop.set()
        return False

    def clear(self) -> None:
        pass

    def set(self) -> None:
        self.sets += 1


def _loop(
    monkeypatch: pytest.MonkeyPatch, idle_poll_interval: float
) -> tuple[list[float], int, int]:
    """The poll loop over a scripted switch: replies with packets 1, 1, 1, 1, then 2."""
    config = ControllerConfig(
        build_fabric(ROFT), "ecmp", 1.0, CollectorRegistry(), idle_poll_interval=idle_poll_interval
    )
    app = ZCubeController(zcube_config=config)
    dpid = next(d for d, r in app.rules.items() if r.name == "leaf0")
    sent: list[Any] = []
    dp = SimpleNamespace(id=dpid, send_msg=sent.append, ofproto_parser=None)
    app._datapaths[dpid] = dp

    def reply(packets: int) -> Callable[[], None]:
        port = SimpleNamespace(port_no=1, **vars(OpenFlowPortStats(1, 1, packets, packets)))
        ofp = SimpleNamespace(OFPP_MAX=0xFFFFFF00)
        msg = SimpleNamespace(datapath=SimpleNamespace(id=dpid, ofproto=ofp), body=[port])
        return lambda: app._on_port_stats(SimpleNamespace(msg=msg))

    wake = _ScriptedWake(app, [None, reply(1), reply(1), reply(1), reply(1), reply(2)])
    app._wake = wake  # type: ignore[assignment]
    monkeypatch.setattr(
        "zcube_lab.controller.app.stats_requests", lambda dp, groups: ["port", "aggregate"]
    )
    app._poll_loop()
    return wake.timeouts, wake.sets, sent.count("port")


def test_the_poll_loop_relaxes_on_still_counters_and_wakes_on_a_move(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timeouts, sets, polls = _loop(monkeypatch, idle_poll_interval=5.0)
    # 1 s until the counters stood still for 3 polls, 5 s then; a moved reply during that
    # wait wakes the loop, which polls at once and is back at 1 s.
    assert timeouts == [1.0, 1.0, 1.0, 1.0, 1.0, 5.0, 1.0]
    assert sets == 1
    assert polls == 6


def test_a_run_s_poll_loop_keeps_its_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    timeouts, sets, polls = _loop(monkeypatch, idle_poll_interval=0.0)
    assert timeouts == [1.0] * 7
    assert sets == 0
    assert polls == 6


def test_the_idle_interval_reaches_the_controller_only_when_longer() -> None:
    fabric = build_fabric(ROFT)
    run = controller_argv(fabric, LabOptions(poll_interval=1.0))
    assert "--idle-poll-interval" not in run
    live = controller_argv(fabric, LabOptions(poll_interval=1.0, idle_poll_interval=5.0))
    assert live[live.index("--idle-poll-interval") + 1] == "5.0"
    base = ["--fabric-spec", ROFT.to_json()]
    assert parse_args(base).idle_poll_interval == 0.0
    assert parse_args([*base, "--idle-poll-interval", "5"]).idle_poll_interval == 5.0
