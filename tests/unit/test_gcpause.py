"""The garbage collector's pauses as a role exports them, and the frozen start-up heap."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from zcube_lab.serving.gcpause import BUCKETS, GcPauseCollector, GcPauses, freeze_heap
from zcube_lab.serving.httpapi import new_app


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_pauses_land_in_cumulative_buckets_per_generation() -> None:
    pauses = GcPauses()
    pauses.observe(2, 0.003)
    pauses.observe(2, 0.030)
    pauses.observe(0, 0.0001)
    reg = CollectorRegistry()
    reg.register(GcPauseCollector(pauses))
    got = _samples(reg)

    def bucket(gen: str, le: str) -> float:
        key = (("generation", gen), ("le", le))
        return got[("zcube:python_gc_pause_seconds_bucket", key)]

    assert bucket("2", "0.0025") == 0 and bucket("2", "0.005") == 1
    assert bucket("2", "0.025") == 1 and bucket("2", "0.05") == 2 and bucket("2", "+Inf") == 2
    assert bucket("0", str(BUCKETS[0])) == 1 and bucket("1", "+Inf") == 0
    assert got[("zcube:python_gc_pause_seconds_sum", (("generation", "2"),))] == pytest.approx(
        0.033
    )
    assert got[("zcube:python_gc_pause_longest_seconds", (("generation", "2"),))] == 0.030


@pytest.fixture
def recording() -> Iterator[GcPauses]:
    pauses = GcPauses()
    pauses.install()
    pauses.install()  # idempotent: one callback
    yield pauses
    pauses.uninstall()


def test_a_real_collection_is_recorded_once_with_its_generation(recording: GcPauses) -> None:
    assert gc.callbacks.count(recording._callback) == 1
    gc.collect(2)
    assert sum(recording.counts[2]) == 1
    assert recording.sums[2] > 0 and recording.longest[2] == recording.sums[2]


def test_after_freeze_the_start_up_objects_are_out_of_the_collectors_walk() -> None:
    kept = [[i] for i in range(50_000)]  # long-lived objects, as a role holds after start-up
    try:
        freeze_heap()
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


def test_every_role_app_exports_the_pauses_on_its_registry() -> None:
    reg = CollectorRegistry()
    new_app(reg, "tiny")
    names = {name for name, _ in _samples(reg)}
    assert "zcube:python_gc_pause_seconds_count" in names
    assert "zcube:python_gc_pause_longest_seconds" in names
