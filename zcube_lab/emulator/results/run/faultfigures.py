"""The fault section of `summary.json` (`RunSummary.faults`, pure): the injected failures, what
the run lost to them, and KV integrity, counted in every run. `FaultReport.recovery` (the
per-phase and recovery keys) is held nested and written flat, present only when a fault held.
Computed by `zcube_lab.emulator.results.run.fault_report.analyze`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zcube_lab.emulator.results.run.sections import Span
from zcube_lab.emulator.results.run.sections import flat as _flat
from zcube_lab.emulator.results.run.sections import from_flat as _from_flat
from zcube_lab.emulator.results.run.sections import pairs as _pairs


@dataclass(frozen=True)
class InjectedFault:
    """An injected failure as scheduled (`zcube_lab.core.fault_schedule.Fault.to_dict`)."""

    label: str
    kind: str
    at_s: float
    for_s: float | None
    links: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**_flat(self), "links": list(self.links)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InjectedFault:
        return _from_flat(cls, data, links=tuple(data.get("links") or ()))


@dataclass(frozen=True)
class FaultRecovery:
    """The part of the fault report that exists only when a fault held: per phase (by send
    time: before the first fault, during any, after the last) TTFT p99, requests and failures,
    and how long the hit KV transfers and the throughput took to recover."""

    ttft_p99_before_s: float | None
    requests_before: int
    failed_before: int
    ttft_p99_during_s: float | None
    requests_during: int
    failed_during: int
    ttft_p99_after_s: float | None
    requests_after: int
    failed_after: int
    kv_hit_transfers: int
    recovery_kv_first_s: float | None
    recovery_kv_all_s: float | None
    recovery_kv_first_after_restore: bool | None
    recovery_throughput_s: float | None


@dataclass(frozen=True)
class FaultReport:
    """What a run lost to its injected faults
    (`zcube_lab.emulator.results.run.fault_report.analyze`); KV
    integrity is counted in every run, faults or not."""

    faults: int
    failed_requests: int
    errors: Mapping[str, int]  # the five most frequent client errors -> count
    kv_transfers: int
    kv_completed: int
    kv_failed_attempts: int
    kv_retried: int
    kv_lanes_retired: int
    kv_checksum_failures: int
    kv_completed_unverified: int
    kv_unfinished_transfers: int
    kv_bytes_lost: int
    recovery: FaultRecovery | None = None
    injected: tuple[InjectedFault, ...] = ()
    spans_s: tuple[Span, ...] = ()  # fault windows, seconds since the load generator's start
    # The same windows in wall time: for the analysis, not written (the clock is the host's).
    windows: tuple[Span, ...] = field(default=(), compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in _flat(self).items() if k not in _FAULT_SPECIAL}
        out["errors"] = dict(self.errors)
        if self.recovery is not None:
            out.update(_flat(self.recovery))
        out["injected"] = [f.to_dict() for f in self.injected]
        out["spans_s"] = [list(s) for s in self.spans_s]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultReport:
        recovery = _from_flat(FaultRecovery, data) if "requests_before" in data else None
        return _from_flat(
            cls,
            data,
            errors=dict(data.get("errors") or {}),
            recovery=recovery,
            injected=tuple(InjectedFault.from_dict(f) for f in data.get("injected") or ()),
            spans_s=_pairs(data.get("spans_s")),
            windows=(),
        )


_FAULT_SPECIAL = ("recovery", "injected", "spans_s", "windows")
