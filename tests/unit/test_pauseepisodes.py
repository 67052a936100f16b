"""Pause episodes: opened when a watched port becomes congested, closed when it leaves, each
attributed to the class with most bytes into the port over the window before its onset."""

from __future__ import annotations

from zcube_lab.core.fabric.pauseepisodes import EpisodeRecorder, PauseEpisode

FEEDS = {"a0-eth1": frozenset({"b0-eth3", "h1-eth0"}), "a1-eth1": frozenset({"b1-eth3"})}


def test_an_episode_from_onset_to_xon_raised_by_kv() -> None:
    r = EpisodeRecorder(FEEDS, window_s=0.1)
    r.reading(0.00, {"a0-eth1": {"ep": 1_000, "kv": 1_000}})
    r.reading(0.05, {"a0-eth1": {"ep": 5_000, "kv": 2_000}})
    # onset at 0.12: the baseline is the reading at 0.00 (the newest a window old):
    # ep 9,000 - 1,000 = 8,000; kv 73,000 - 1,000 = 72,000 -> kv raised it
    r.observe(0.12, {"a0-eth1"}, {"a0-eth1": {"ep": 9_000, "kv": 73_000}})
    r.observe(0.13, {"a0-eth1"})
    r.observe(0.20, set())
    assert r.episodes == [
        PauseEpisode("a0-eth1", 0.12, 0.20, frozenset({"b0-eth3", "h1-eth0"}), "kv")
    ]


def test_without_counters_an_episode_is_unattributed() -> None:
    r = EpisodeRecorder(FEEDS)
    r.observe(1.0, {"a1-eth1"})
    r.close_all(1.5)
    assert r.episodes == [PauseEpisode("a1-eth1", 1.0, 1.5, frozenset({"b1-eth3"}), None)]


def test_only_a_recent_window_of_readings_is_kept() -> None:
    r = EpisodeRecorder(FEEDS, window_s=0.1)
    for i in range(100):
        r.reading(i * 0.01, {"a0-eth1": {"ep": i * 100, "kv": 0}})
    kept = r._readings["a0-eth1"]
    assert len(kept) <= 12 and kept[0][0] <= 0.99 - 0.1
    # the onset at 1.0 reads ep's bytes over [0.89, 1.0]: EP raised it
    r.observe(1.0, {"a0-eth1"}, {"a0-eth1": {"ep": 10_000, "kv": 500}})
    r.close_all(1.1)
    assert r.episodes[0].raised_by == "ep"


def test_round_trip() -> None:
    e = PauseEpisode("a0-eth1", 0.1, 0.2, frozenset({"x", "y"}), None)
    assert PauseEpisode.from_dict(e.to_dict()) == e


def test_without_an_onset_reading_the_periodic_ones_attribute() -> None:
    r = EpisodeRecorder(FEEDS, window_s=0.1)
    r.reading(0.00, {"a0-eth1": {"ep": 0, "kv": 0}})
    r.reading(0.05, {"a0-eth1": {"ep": 100, "kv": 200}})
    r.reading(0.10, {"a0-eth1": {"ep": 4_000, "kv": 1_000}})
    r.observe(0.12, {"a0-eth1"})  # the newest (0.10) against the one a window older (0.00)
    r.reading(0.15, {"a1-eth1": {"ep": 0, "kv": 0}})
    r.observe(0.16, {"a0-eth1", "a1-eth1"})  # a1 has one reading only: unattributed
    r.close_all(0.2)
    assert [(e.congested, e.raised_by) for e in r.episodes] == [
        ("a0-eth1", "ep"),
        ("a1-eth1", None),
    ]
