"""A role's /metrics body, rendered again only when one of its metrics changed.

An idle engine is scraped every modelled second and its metrics (about 650 lines, vLLM's
histograms) do not move between two scrapes; rendering them each time cost about 3 ms of CPU
per scrape, most of the idle lab's cost (docs/BENCHMARKS.md, the idle floor of `up --serve`).

`VersionedRegistry` is a `CollectorRegistry` with a change count: every metric child made for it
through `tracked` (as `zcube_lab.serving.vllm_metrics` makes them) counts one change on each
`observe`, `inc`, `dec`, `set` and on each new label set (a new series is a change of the
exposition too). `Exposition` keeps the last rendering of such a registry with the count it was
rendered at, and renders again when the count moved. Collectors whose values change outside
any metric call (the garbage collector's pauses, `zcube_lab.serving.gcpause`) are named as
`fresh`: they are rendered on every scrape, in their place in the body, so a pause
between two scrapes is never hidden by the cache. A registry that is not versioned is rendered
on every scrape, as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector


class VersionedRegistry(CollectorRegistry):
    """A registry that counts the changes of the metrics `tracked` made for it."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 0

    def changed(self) -> None:
        """Count one change of a metric's value or series."""
        self.version += 1


class Tracked:
    """A prometheus_client metric (or labelled child) whose every change is counted in its
    registry's `version`."""

    __slots__ = ("_metric", "_registry")

    def __init__(self, metric: Any, registry: VersionedRegistry) -> None:
        self._metric = metric
        self._registry = registry

    def observe(self, amount: float) -> None:
        """`Histogram.observe`, counted."""
        self._metric.observe(amount)
        self._registry.changed()

    def inc(self, amount: float = 1) -> None:
        """`Counter.inc` / `Gauge.inc`, counted."""
        self._metric.inc(amount)
        self._registry.changed()

    def dec(self, amount: float = 1) -> None:
        """`Gauge.dec`, counted."""
        self._metric.dec(amount)
        self._registry.changed()

    def set(self, value: float) -> None:
        """`Gauge.set`, counted."""
        self._metric.set(value)
        self._registry.changed()

    def labels(self, *values: str) -> Tracked:
        """The child for these label values, itself tracked (a new series counts as a change)."""
        self._registry.changed()
        return Tracked(self._metric.labels(*values), self._registry)


def tracked(metric: Any, registry: CollectorRegistry) -> Any:
    """`metric` counted in `registry` when it is versioned, else `metric` itself."""
    return Tracked(metric, registry) if isinstance(registry, VersionedRegistry) else metric


class _Without:
    """A registry's metric families but those named (the fresh collectors')."""

    def __init__(self, registry: CollectorRegistry, names: frozenset[str]) -> None:
        self._registry = registry
        self._names = names

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if family.name not in self._names:
                yield family


class _Each:
    """Some collectors' families, collected on each call."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self._collectors = tuple(collectors)

    def collect(self) -> Iterator[Metric]:
        for c in self._collectors:
            yield from c.collect()


class Exposition:
    """The text exposition of `registry`: its `fresh` collectors' families rendered on every
    call, the rest kept while the registry's version stays the same."""

    def __init__(self, registry: CollectorRegistry, fresh: Sequence[Collector] = ()) -> None:
        self.registry = registry
        self._fresh = _Each(fresh)
        self._rest = _Without(registry, frozenset(f.name for f in self._fresh.collect()))
        self._kept: bytes | None = None
        self._kept_at = -1
        self.renders = 0  # how often the cached part was rendered (for tests and benches)

    def body(self) -> bytes:
        """The exposition now, byte for byte what `generate_latest(registry)` gives, with the
        fresh families first (they are registered first: `zcube_lab.serving.httpapi.new_app`)."""
        version = getattr(self.registry, "version", None)
        if version is None or version != self._kept_at or self._kept is None:
            # Read before rendering: a change during it (none can, on one event loop) would
            # leave the kept text older than its count, so the next scrape renders again.
            self._kept = generate_latest(self._rest)  # type: ignore[arg-type]
            self._kept_at = -1 if version is None else version
            self.renders += 1
        return generate_latest(self._fresh) + self._kept  # type: ignore[arg-type]
