"""The episode hook beside the lossless agent: warm ports read in the background, episodes
opened and closed by the agent's observations, attributed, written as JSON lines."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path

from zcube_lab.core.fabric.lossless import PortThresholds
from zcube_lab.core.fabric.pauseepisodes import PauseEpisode
from zcube_lab.emulator.lab.episodehook import EpisodeHook, warm_ports

LIMITS = {"a0-eth1": PortThresholds(xoff=72_000, xon=54_000, limit=900_000)}
FEEDS = {"a0-eth1": frozenset({"b0-eth3"})}


def test_warm_means_half_xoff() -> None:
    assert warm_ports({"a0-eth1": 36_000, "x": 10**9}, LIMITS) == {"a0-eth1"}
    assert warm_ports({"a0-eth1": 35_999}, LIMITS) == set()


def test_a_kv_filled_port_is_recorded_and_attributed(tmp_path: Path) -> None:
    kv = [0]
    read_ports: list[list[str]] = []

    def reader(ports: Iterable[str]) -> dict[str, dict[str, int]]:
        kv[0] += 9_000
        read_ports.append(list(ports))
        return {p: {"ep": 100, "kv": kv[0]} for p in ports}

    hook = EpisodeHook(FEEDS, LIMITS, tmp_path / "episodes.jsonl", period_s=0.01, reader=reader)
    hook.after_observe({"a0-eth1": 0}, set())  # cold: nothing read
    time.sleep(0.05)
    assert read_ports == []
    hook.after_observe({"a0-eth1": 40_000}, set())  # warm: read in the background
    deadline = time.monotonic() + 2
    while len(read_ports) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    hook.after_observe({"a0-eth1": 80_000}, {"a0-eth1"})
    hook.after_observe({"a0-eth1": 50_000}, set())
    out = hook.stop()
    episodes = [PauseEpisode.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    assert len(episodes) == 1
    e = episodes[0]
    assert (e.congested, e.paused, e.raised_by) == ("a0-eth1", frozenset({"b0-eth3"}), "kv")
    assert 0 <= e.end - e.start < 1


def test_a_write_while_paused_carries_the_open_episode_ending_now(tmp_path: Path) -> None:
    now = [100.0]
    hook = EpisodeHook(FEEDS, LIMITS, tmp_path / "e.jsonl", period_s=10, clock=lambda: now[0])
    hook.after_observe({"a0-eth1": 80_000}, {"a0-eth1"})  # congested at 100
    now[0] = 100.5
    written = [PauseEpisode.from_dict(json.loads(x)) for x in hook.write().read_text().splitlines()]
    assert [(e.congested, e.start, e.end) for e in written] == [("a0-eth1", 100.0, 100.5)]
    now[0] = 101.0  # the write changed nothing: the episode is still open, and ends at stop
    hook.after_observe({"a0-eth1": 10_000}, set())
    stopped = [PauseEpisode.from_dict(json.loads(x)) for x in hook.stop().read_text().splitlines()]
    assert [(e.start, e.end) for e in stopped] == [(100.0, 101.0)]
    assert not (tmp_path / "e.jsonl.part").exists()
