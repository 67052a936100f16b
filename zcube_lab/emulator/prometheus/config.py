"""The run's scrape configuration (pure): a validated, frozen `ScrapePlan` rendered as
prometheus.yml. It touches nothing, so it is unit-tested without a server; the server itself is
`zcube_lab.emulator.prometheus.server`.

Naming: one scrape job per component (`gateway`, `prefill`, `decode`, `controller`, `loadgen`,
and `emulator` for the health gauges); targets are `host:port`; the run labels (e.g. `run`,
`fabric`) are attached to every scraped series as target labels, so series from several runs stay
apart in one TSDB, and also set as external labels for anything federated out.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError

COMPONENTS = ("gateway", "prefill", "decode", "controller", "loadgen", "emulator")
MIN_INTERVAL_S = 0.1
# The issue caps the scrape interval at 2 s: slower scrapes blur a 30 s run's rates and quantiles.
MAX_INTERVAL_S = 2.0

_JOB_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Prometheus itself sets these on every series; a run label with the same name would clash.
_RESERVED_LABELS = frozenset({"job", "instance"})
_HOST = re.compile(
    r"^(\[[0-9a-fA-F:.]+\]"  # bracketed IPv6
    r"|[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*)$"
)


@dataclass(frozen=True)
class ScrapePlan:
    """A validated scrape plan: jobs in order, each with its `host:port` targets, scraped
    every `interval_s` modelled seconds (`clock.wall(interval_s)` on the wall clock)."""

    jobs: tuple[tuple[str, tuple[str, ...]], ...]
    interval_s: float
    labels: tuple[tuple[str, str], ...]
    clock: Clock = field(default_factory=Clock)

    @property
    def wall_interval_s(self) -> float:
        """Wall seconds between two scrapes of a target."""
        return self.clock.wall(self.interval_s)

    def __post_init__(self) -> None:
        _check_interval(self.interval_s)
        if not self.jobs:
            raise ConfigError("jobs", {}, "at least one scrape job")
        seen: set[str] = set()
        for job, targets in self.jobs:
            if not isinstance(job, str) or not _JOB_NAME.match(job):
                raise ConfigError("jobs", job, "a job name of letters, digits, '_' and '-'")
            if job in seen:
                raise ConfigError("jobs", job, "each job name once")
            seen.add(job)
            if not targets:
                raise ConfigError(f"jobs.{job}", targets, "a non-empty list of 'host:port'")
            for target in targets:
                _check_target(f"jobs.{job}", target)
            if len(set(targets)) != len(targets):
                raise ConfigError(f"jobs.{job}", list(targets), "each target once")
        for name, value in self.labels:
            if not isinstance(name, str) or not _LABEL_NAME.match(name) or name.startswith("__"):
                raise ConfigError(
                    "labels", name, "a label name matching [a-zA-Z_][a-zA-Z0-9_]*, not '__...'"
                )
            if name in _RESERVED_LABELS:
                raise ConfigError(f"labels.{name}", value, "a name other than 'job' or 'instance'")
            if not isinstance(value, str) or not value:
                raise ConfigError(f"labels.{name}", value, "a non-empty string")

    def render(self, wall_interval_s: float | None = None) -> str:
        """prometheus.yml text, scraping every `wall_interval_s` wall seconds if given (the live
        lab's idle pace, `zcube_lab.emulator.prometheus.pace`), else the plan's interval. JSON
        is a subset of YAML, so json.dumps writes it exactly."""
        if wall_interval_s is None:
            wall_interval_s = self.wall_interval_s
        elif not (math.isfinite(wall_interval_s) and wall_interval_s >= MIN_INTERVAL_S):
            raise ConfigError("wall_interval_s", wall_interval_s, f"seconds >= {MIN_INTERVAL_S}")
        duration = _duration(wall_interval_s)
        labels = dict(self.labels)
        doc: dict[str, Any] = {
            "global": {
                "scrape_interval": duration,
                # Prometheus rejects a scrape timeout longer than the interval (default 10 s).
                "scrape_timeout": duration,
                "evaluation_interval": duration,
                "external_labels": labels,
            },
            "scrape_configs": [
                {
                    "job_name": job,
                    "scrape_interval": duration,
                    "scrape_timeout": duration,
                    "static_configs": [{"targets": list(targets), "labels": labels}],
                }
                for job, targets in self.jobs
            ],
        }
        return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def scrape_config(
    jobs: Mapping[str, Sequence[str]],
    interval_s: float = 1.0,
    labels: Mapping[str, str] | None = None,
) -> str:
    """prometheus.yml scraping `jobs` (name -> `host:port` targets) every `interval_s` seconds."""
    return scrape_plan(jobs, interval_s, labels).render()


def scrape_plan(
    jobs: Mapping[str, Sequence[str]],
    interval_s: float = 1.0,
    labels: Mapping[str, str] | None = None,
    *,
    clock: Clock | None = None,
) -> ScrapePlan:
    """The frozen, validated plan behind `scrape_config`; `interval_s` is in modelled seconds
    of `clock` (None: undilated)."""
    if not isinstance(jobs, Mapping):
        raise ConfigError("jobs", jobs, "a mapping of job name to a list of 'host:port'")
    if labels is not None and not isinstance(labels, Mapping):
        raise ConfigError("labels", labels, "a mapping of label name to value")
    for job, targets in jobs.items():
        # A bare string is a Sequence too; tuple("h:1") would silently become characters.
        if isinstance(targets, str) or not isinstance(targets, Sequence):
            raise ConfigError(f"jobs.{job}", targets, "a list of 'host:port'")
    return ScrapePlan(
        jobs=tuple((job, tuple(targets)) for job, targets in jobs.items()),
        interval_s=interval_s,
        labels=tuple((labels or {}).items()),
        clock=clock or Clock(),
    )


def _check_interval(interval_s: object) -> None:
    if (
        isinstance(interval_s, bool)
        or not isinstance(interval_s, int | float)
        or not math.isfinite(interval_s)
        or not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S
    ):
        raise ConfigError(
            "interval_s", interval_s, f"seconds between {MIN_INTERVAL_S} and {MAX_INTERVAL_S}"
        )


def _check_target(field: str, target: object) -> None:
    allowed = "'host:port' with a hostname, IPv4 or [IPv6] host and a port 1-65535"
    if not isinstance(target, str) or ":" not in target:
        raise ConfigError(field, target, allowed)
    host, _, port = target.rpartition(":")
    if not _HOST.match(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(field, target, allowed)


def _duration(seconds: float) -> str:
    """A Prometheus duration; whole milliseconds, since 0.1 s is the finest interval allowed."""
    return f"{round(seconds * 1000)}ms"
