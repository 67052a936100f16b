"""The dashboard model as plain data (queries, panels, template variables, dashboards) and the
PromQL pieces the dashboards share: label matchers, series names and histogram quantiles.

Series names: metric names come from the constants of the code that exports them; this module
turns them into the names Prometheus stores. prometheus_client appends `_total` to a counter
(`total`), and a histogram is stored as `_bucket`, `_sum` and `_count` series. Constants that
already end in `_total` (the controller's) are used as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

# Label matchers shared by the queries: every run's Prometheus attaches `run` and `fabric` to
# its targets; vLLM's series carry `model_name`, the load generator's own carry `model`.
RUN = 'run=~"$run", fabric=~"$fabric"'
SRV = f'{RUN}, model_name=~"$model_name"'
CLIENT = f'{RUN}, model=~"$model_name"'
RATE = "[$__rate_interval]"


def total(counter: str) -> str:
    """A counter's stored name (prometheus_client appends `_total`)."""
    return f"{counter}_total"


def bucket(histogram: str) -> str:
    """A histogram's bucket series."""
    return f"{histogram}_bucket"


def hist_sum(histogram: str) -> str:
    """A histogram's sum of observations."""
    return f"{histogram}_sum"


def hist_count(histogram: str) -> str:
    """A histogram's count of observations."""
    return f"{histogram}_count"


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    """A panel: a visualization of one or more queries; laid out left to right, 24 columns."""

    title: str
    description: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8


@dataclass(frozen=True)
class Variable:
    """A `label_values(metric, label)` template variable."""

    name: str
    label: str
    metric: str
    depends: str = ""  # matchers on earlier variables


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    panels: tuple[Panel, ...]
    link_mbps: bool = False  # adds the custom variable used to turn bit/s into utilization


def run_variables(metric: str) -> tuple[Variable, Variable]:
    """The `run` and `fabric` variables, read from a series every run of the dashboard has."""
    return Variable("run", "Run", metric), Variable("fabric", "Fabric", metric, 'run=~"$run"')


def quantile_expr(q: float, histogram: str, matchers: str, by: str = "") -> str:
    """PromQL of the `q` quantile of a histogram over the rate interval (kept apart `by`)."""
    group = f"le, {by}" if by else "le"
    rate = f"rate({bucket(histogram)}{{{matchers}}}{RATE})"
    return f"histogram_quantile({q}, sum by ({group}) ({rate}))"


def quantiles(histogram: str, matchers: str, by: str = "") -> tuple[Query, ...]:
    """p50, p90 and p99 of a histogram over the rate interval (optionally kept apart `by`)."""
    prefix = "{{" + by + "}} " if by else ""
    return tuple(
        Query(quantile_expr(q, histogram, matchers, by), f"{prefix}p{round(q * 100)}")
        for q in (0.5, 0.9, 0.99)
    )
