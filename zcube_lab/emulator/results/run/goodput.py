"""Service-level objectives and goodput from the client's per-request records (pure).

An SLO is written `--slo ttft_p99=2s,tpot=50ms,e2e_p90=10s`: comma-separated targets
`<metric>[_p<NN>]=<value><unit>`, with metric one of `SLO_METRICS` (ttft, tpot, e2e: the
per-request `*_s` fields of `requests.jsonl`), unit `s` or `ms`, and NN a percentile in (0, 100).
ITL is not a metric here: a request has many inter-token gaps, not one value to hold to a
threshold (vLLM's `--goodput` takes the same three).

Semantics, as in DistServe and vLLM's `--goodput`:

- Each target is a **per-request threshold**. A request *meets a target* when it completed
  (`outcome == "ok"`) and its value is at most the threshold; a failed, cancelled or refused
  request misses every target. TPOT is undefined for a request with fewer than two output
  tokens: a completed one counts as meeting a TPOT target (it has no gap to miss); any other
  missing value is a miss.
- A request *meets the SLO* when it meets every target. **Goodput** is the number of such
  requests per second of the run's arrival window (`--duration`), the window the achieved
  throughput is taken over too. Only requests that *arrived* in the window count (sent before
  its end, `arrived_in_window`), here and in the throughput: the drain after it only lets them
  finish, and a request sent late, after the window, is not part of the load it measures.
- A run *meets the SLO* when, for every target, the share of its requests meeting that target
  (the target's *attainment*) is at least the target's percentile: `_p99` asks 99%, no suffix
  asks the sweep's `--attainment` (0.9 by default, DistServe's). A run without requests does
  not meet it.

**vLLM's form** (`vllm_goodput`): what `vllm bench serve --goodput ttft:MS tpot:MS e2el:MS`
reports as "Request goodput (req/s)" (`vllm/benchmarks/serve.py`, `calculate_metrics`): the
completed requests whose every given value is at most its threshold, over the benchmark's
duration, from its start to the last response. The thresholds are the SLO's targets (e2e is
vLLM's `e2el`); vLLM has no percentile, and neither does a per-request threshold, so the
`_pNN` share plays no part. As vLLM, a completed request with fewer than two output tokens has
a TPOT of 0 (it meets a TPOT target), and TPOT is (e2e - TTFT) / (output tokens - 1), which is
the records' `tpot_s`. Where it differs from our goodput above: every request of the run
counts, not only those that arrived in the window, and the denominator is the run's start to its
last response (`vllm_duration`, the drain included), not the window. Where the lab differs from
vLLM: the output tokens are the streamed tokens the client counted (vLLM takes the server's
usage or re-tokenizes the text), and a failed request's end is its send time when it has no
end-to-end time.

Names: a target's `label` is its key as written (`ttft_p99`, `tpot`); `threshold_s` seconds;
shares and attainments are fractions (0-1).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.stats import quantile

SLO_METRICS = ("ttft", "tpot", "e2e")
DEFAULT_ATTAINMENT = 0.9  # DistServe: the rate at which 90% of requests meet the SLO
_UNITS = {"s": 1.0, "ms": 1e-3}
_KEY = re.compile(r"^(?P<metric>[a-z0-9]+?)(?:_p(?P<pct>\d+(?:\.\d+)?))?$")
_VALUE = re.compile(r"^(?P<num>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s)$")
_SLO_FORM = "comma-separated <metric>[_pNN]=<value>(s|ms), e.g. ttft_p99=2s,tpot=50ms"


@dataclass(frozen=True)
class SloTarget:
    """One per-request threshold and the share of requests that must hold it."""

    metric: str  # one of SLO_METRICS
    threshold_s: float
    attainment: float  # 0-1
    percentile: float | None = None  # as written (`_p99` -> 99.0); None: the default share

    @property
    def label(self) -> str:
        """The target's key as written: `ttft_p99`, `tpot`."""
        if self.percentile is None:
            return self.metric
        return f"{self.metric}_p{self.percentile:g}"

    @property
    def text(self) -> str:
        """`label=value` with the value in ms below one second: `tpot=50ms`, `ttft_p99=2s`."""
        if self.threshold_s < 1:
            return f"{self.label}={self.threshold_s * 1000:g}ms"
        return f"{self.label}={self.threshold_s:g}s"

    @property
    def shown(self) -> str:
        """`text` with the percentile a target written without `_pNN` asks (the attainment):
        `tpot=50ms (p90)`."""
        if self.percentile is not None:
            return self.text
        return f"{self.text} (p{self.attainment * 100:g})"


@dataclass(frozen=True)
class Slo:
    """The targets of an SLO, in the order written."""

    targets: tuple[SloTarget, ...]

    @property
    def text(self) -> str:
        """The SLO as `--slo` takes it (it parses back to an equal `Slo`)."""
        return ",".join(t.text for t in self.targets)

    @property
    def shown(self) -> str:
        """The SLO for people: every target with its percentile (`ttft_p99=2s, tpot=50ms (p90)`)."""
        return ", ".join(t.shown for t in self.targets)

    def target(self, metric: str) -> SloTarget | None:
        """The target on `metric`, or None when the SLO has none."""
        return next((t for t in self.targets if t.metric == metric), None)


def parse_slo(text: str, attainment: float = DEFAULT_ATTAINMENT) -> Slo:
    """The SLO `--slo` describes; `attainment` is the share asked by targets without `_pNN`."""
    if not 0 < attainment <= 1:
        raise ConfigError("attainment", attainment, "a share in (0, 1], e.g. 0.9")
    parts = [p.strip() for p in (text or "").split(",") if p.strip()]
    if not parts:
        raise ConfigError("slo", text, _SLO_FORM)
    targets: list[SloTarget] = []
    for part in parts:
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep:
            raise ConfigError("slo", part, _SLO_FORM)
        target = _target(key.lower(), value.lower(), attainment)
        if any(t.metric == target.metric for t in targets):
            raise ConfigError("slo", part, f"one target per metric; {target.metric} came twice")
        targets.append(target)
    return Slo(tuple(targets))


def _target(key: str, value: str, attainment: float) -> SloTarget:
    m = _KEY.match(key)
    if m is None or m["metric"] not in SLO_METRICS:
        raise ConfigError("slo", key, f"a metric from {list(SLO_METRICS)}, optionally _pNN")
    pct = float(m["pct"]) if m["pct"] is not None else None
    if pct is not None and not 0 < pct < 100:
        raise ConfigError("slo", key, "a percentile suffix _pNN with 0 < NN < 100")
    v = _VALUE.match(value)
    if v is None:
        raise ConfigError(f"slo {key}", value, "a positive number with unit s or ms: 2s, 50ms")
    seconds = float(v["num"]) * _UNITS[v["unit"]]
    if not 0 < seconds < math.inf:
        raise ConfigError(f"slo {key}", value, "a positive number with unit s or ms: 2s, 50ms")
    share = pct / 100 if pct is not None else attainment
    return SloTarget(m["metric"], seconds, share, pct)


def request_meets(record: Mapping[str, Any], target: SloTarget) -> bool:
    """Whether one request record (a `requests.jsonl` row) meets one target."""
    if record.get("outcome") != "ok":
        return False
    value = record.get(f"{target.metric}_s")
    if value is None:
        return target.metric == "tpot"  # fewer than two tokens: no time per output token
    return float(value) <= target.threshold_s


def request_meets_slo(record: Mapping[str, Any], slo: Slo) -> bool:
    """Whether one request record meets every target of the SLO."""
    return all(request_meets(record, t) for t in slo.targets)


@dataclass(frozen=True)
class Goodput:
    """How one run's requests held the SLO."""

    requests: int
    good: int  # requests meeting every target
    goodput_per_s: float | None  # good / the arrival window; None without a window
    attainment: Mapping[str, float]  # target label -> share of requests meeting it
    observed: Mapping[str, float | None]  # target label -> that quantile of completed requests
    met: bool


def arrived_in_window(
    records: Iterable[Mapping[str, Any]], window_s: float
) -> list[Mapping[str, Any]]:
    """The records of requests sent before `window_s` (by `sent_s`, else `planned_s`; a record
    with neither counts); every record when the window is not positive."""
    out = []
    for r in records:
        t = r.get("sent_s", r.get("planned_s"))
        if window_s <= 0 or t is None or float(t) < window_s:
            out.append(r)
    return out


def goodput(records: Iterable[Mapping[str, Any]], slo: Slo, window_s: float) -> Goodput:
    """Goodput, per-target attainment and whether the run met the SLO, from the records of the
    requests that arrived in the window."""
    recs = arrived_in_window(records, window_s)
    n = len(recs)
    attained = {
        t.label: (sum(request_meets(r, t) for r in recs) / n if n else 0.0) for t in slo.targets
    }
    good = sum(request_meets_slo(r, slo) for r in recs)
    met = n > 0 and all(attained[t.label] >= t.attainment for t in slo.targets)
    return Goodput(
        requests=n,
        good=good,
        goodput_per_s=good / window_s if window_s > 0 else None,
        attainment=attained,
        observed={t.label: observed_quantile(recs, t) for t in slo.targets},
        met=met,
    )


VLLM_KEYS = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2el"}  # our metric -> --goodput key


def vllm_goodput_arg(slo: Slo) -> str:
    """The `--goodput` argument of `vllm bench serve` with the SLO's thresholds in ms:
    `ttft:2000 tpot:50`."""
    return " ".join(f"{VLLM_KEYS[t.metric]}:{t.threshold_s * 1000:g}" for t in slo.targets)


@dataclass(frozen=True)
class VllmGoodput:
    """vLLM's "Request goodput (req/s)" over one run (the module docstring's vLLM form)."""

    goodput_arg: str  # the equivalent `--goodput` argument
    good: int  # completed requests within every threshold
    completed: int
    duration_s: float | None  # the run's start to its last response
    request_goodput: float | None  # good / duration_s


def vllm_duration(records: Iterable[Mapping[str, Any]]) -> float | None:
    """From the run's start (the driver's t0, which `sent_s` counts from) to the last response:
    the latest `sent_s + e2e_s` (a record without `e2e_s` ends at its send); None for no
    records."""
    ends = [
        float(r.get("sent_s", r.get("planned_s")) or 0.0) + float(r.get("e2e_s") or 0.0)
        for r in records
    ]
    return max(ends) if ends else None


def vllm_goodput(records: Iterable[Mapping[str, Any]], slo: Slo) -> VllmGoodput:
    """vLLM's request goodput over every record of the run."""
    recs = list(records)
    good = sum(request_meets_slo(r, slo) for r in recs)
    duration = vllm_duration(recs)
    return VllmGoodput(
        goodput_arg=vllm_goodput_arg(slo),
        good=good,
        completed=sum(r.get("outcome") == "ok" for r in recs),
        duration_s=duration,
        request_goodput=good / duration if duration else None,
    )


def observed_quantile(records: Sequence[Mapping[str, Any]], target: SloTarget) -> float | None:
    """The target's metric at the target's share, over the completed requests that have it
    (what to set beside the threshold; failed requests count only in the attainment)."""
    values = [
        float(r[f"{target.metric}_s"])
        for r in records
        if r.get("outcome") == "ok" and r.get(f"{target.metric}_s") is not None
    ]
    return quantile(values, target.attainment)
