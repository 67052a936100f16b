"""A run's transfers as a recording: what crossed the fabric, when, between which hosts and how
many real bytes (pure; issue 45 item 3).

A recording is resolution-free: times are modelled seconds from the run's start and bytes are
real (lab bytes times the run's bandwidth scale), so it replays at any resolution. One JSON line
per transfer (`transfers.jsonl` in the run folder):

    {"id": 17, "cls": "kv", "start_s": 3.2041, "src": "h2", "dst": "h9", "bytes": 2.3e9}
    {"id": 18, "cls": "ep", "start_s": 3.2050, "src": "h0", "dst": "h4", "bytes": 917504,
     "after": [12, 13, 14], "gap_s": 0.00021, "exchange": "e0/s41/f2"}

A transfer starts at `start_s` or, if it has predecessors (`after`), once all of them have
arrived and `gap_s` more has passed, whichever is later: the chain of an EP step (a layer's
dispatch waits for the previous layer's combine and the compute between). Every predecessor
must arrive at the host the transfer leaves (`src`): a GPU only knows what it received, so each
host's agent can keep its own chains without asking anyone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zcube_lab.core.errors import ConfigError

CLASSES = ("kv", "ep", "other")
RECORDING = "transfers.jsonl"


@dataclass(frozen=True)
class Transfer:
    """One transfer of a recording (see the module docstring)."""

    id: int
    cls: str
    start_s: float
    src: str
    dst: str
    bytes: float
    after: tuple[int, ...] = ()
    gap_s: float = 0.0
    exchange: str = ""  # the EP exchange (engine/step/frame) it belongs to; "" for KV
    live_s: float | None = None  # how long it took in the live run (modelled), when logged

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "cls": self.cls,
            "start_s": round(self.start_s, 9),
            "src": self.src,
            "dst": self.dst,
            "bytes": self.bytes,
        }
        if self.after:
            out["after"] = list(self.after)
            out["gap_s"] = round(self.gap_s, 9)
        if self.exchange:
            out["exchange"] = self.exchange
        if self.live_s is not None:
            out["live_s"] = round(self.live_s, 9)
        return out

    @staticmethod
    def from_json(row: Mapping[str, Any]) -> Transfer:
        return Transfer(
            id=int(row["id"]),
            cls=str(row["cls"]),
            start_s=float(row["start_s"]),
            src=str(row["src"]),
            dst=str(row["dst"]),
            bytes=float(row["bytes"]),
            after=tuple(int(a) for a in row.get("after", ())),
            gap_s=float(row.get("gap_s", 0.0)),
            exchange=str(row.get("exchange", "")),
            live_s=None if row.get("live_s") is None else float(row["live_s"]),
        )


@dataclass(frozen=True)
class Recording:
    """A run's transfers and what it ran on: the fabric kind, its hosts, the run's own
    resolution (bandwidth scale, NIC rate, MTU, dilation) for a replay at the run's own scale."""

    transfers: tuple[Transfer, ...]
    hosts: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(self.transfers, self.hosts)

    @property
    def duration_s(self) -> float:
        return max((t.start_s for t in self.transfers), default=0.0)

    def of_class(self, classes: Iterable[str]) -> Recording:
        """Only the transfers of `classes`, chains kept among what stays (a predecessor of
        another class is dropped from `after`)."""
        keep = set(classes)
        ts = [t for t in self.transfers if t.cls in keep]
        ids = {t.id for t in ts}
        ts = [_with_after(t, tuple(a for a in t.after if a in ids)) for t in ts]
        return Recording(tuple(ts), self.hosts, self.meta)

    def window(self, start_s: float, end_s: float) -> Recording:
        """The transfers released in [start_s, end_s), times shifted to start at 0; a chain
        whose predecessor lies before the window starts at its own recorded time instead."""
        if not end_s > start_s:
            raise ConfigError("window", (start_s, end_s), "an end after its start")
        last = self.duration_s
        if start_s < 0 or start_s > last:
            raise ConfigError(
                "window", f"{start_s:g}-{end_s:g} s", f"a start within the run, 0 to {last:.3f} s"
            )
        inside = [t for t in self.transfers if start_s <= t.start_s < end_s]
        ids = {t.id for t in inside}
        out = []
        for t in inside:
            after = tuple(a for a in t.after if a in ids)
            out.append(replace(_with_after(t, after), start_s=t.start_s - start_s))
        meta = {**self.meta, "window_s": [start_s, end_s]}
        return Recording(tuple(out), self.hosts, meta)

    def to_lines(self) -> list[str]:
        head = {"recording": 1, "hosts": list(self.hosts), **dict(self.meta)}
        return [json.dumps(head)] + [json.dumps(t.to_json()) for t in self.transfers]

    def write(self, path: Path) -> None:
        path.write_text("\n".join(self.to_lines()) + "\n")


def _with_after(t: Transfer, after: tuple[int, ...]) -> Transfer:
    return replace(t, after=after, gap_s=t.gap_s if after else 0.0)


def check(transfers: Sequence[Transfer], hosts: Sequence[str] = ()) -> None:
    """Refuse a recording a replay could not keep: unknown class, duplicate id, a host outside
    `hosts` (when given), a predecessor that is missing, later in the list's order of ids'
    dependencies (a cycle), or that does not arrive where the transfer leaves."""
    by_id: dict[int, Transfer] = {}
    known = set(hosts)
    for t in transfers:
        if t.cls not in CLASSES:
            raise ConfigError(f"transfer {t.id} class", t.cls, f"one of {list(CLASSES)}")
        if t.id in by_id:
            raise ConfigError("transfer id", t.id, "unique within a recording")
        if t.bytes <= 0 or t.start_s < 0 or t.gap_s < 0:
            raise ConfigError(
                f"transfer {t.id}", (t.bytes, t.start_s, t.gap_s), "positive bytes, times >= 0"
            )
        if t.src == t.dst:
            raise ConfigError(f"transfer {t.id}", t.src, "a destination other than its source")
        if known and (t.src not in known or t.dst not in known):
            raise ConfigError(
                f"transfer {t.id} hosts", (t.src, t.dst), "hosts of the fabric replayed on"
            )
        by_id[t.id] = t
    for t in transfers:
        for a in t.after:
            pred = by_id.get(a)
            if pred is None:
                raise ConfigError(f"transfer {t.id} after", a, "ids of transfers in the recording")
            if pred.dst != t.src:
                raise ConfigError(
                    f"transfer {t.id} after",
                    a,
                    f"transfers arriving at {t.src}, where it leaves (transfer {a} arrives at "
                    f"{pred.dst})",
                )
    order(transfers)  # raises on a cycle


def order(transfers: Sequence[Transfer]) -> list[Transfer]:
    """The transfers in an order where every predecessor comes first (ConfigError on a cycle)."""
    by_id = {t.id: t for t in transfers}
    done: set[int] = set()
    out: list[Transfer] = []
    for start in sorted(by_id, key=lambda i: (by_id[i].start_s, i)):
        stack = [(start, False)]
        onpath: set[int] = set()
        while stack:
            tid, expanded = stack.pop()
            if tid in done:
                continue
            if expanded:
                onpath.discard(tid)
                done.add(tid)
                out.append(by_id[tid])
                continue
            if tid in onpath:
                raise ConfigError("transfer after", tid, "a chain without cycles")
            onpath.add(tid)
            stack.append((tid, True))
            for a in by_id[tid].after:
                if a not in done:
                    if a in onpath:
                        raise ConfigError("transfer after", a, "a chain without cycles")
                    stack.append((a, False))
    return out


def read(path: Path) -> Recording:
    """A recording from its JSON lines (the first line its head: hosts and meta)."""
    if not path.exists():
        raise ConfigError(
            "recording",
            str(path),
            f"a run folder with {RECORDING} (runs record their transfers since issue 45; "
            f"`zcube-lab replay --record RUN` writes one from an older run's logs)",
        )
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    if not lines:
        raise ConfigError("recording", str(path), "a file with a head line")
    head = json.loads(lines[0])
    if "recording" not in head:
        raise ConfigError("recording", str(path), "a head line with a 'recording' key")
    hosts = tuple(head.pop("hosts", ()))
    head.pop("recording")
    ts = tuple(Transfer.from_json(json.loads(ln)) for ln in lines[1:])
    return Recording(ts, hosts, head)


def busiest_window(rec: Recording, width_s: float, cls: str = "kv") -> tuple[float, float]:
    """The window of `width_s` whose released `cls` bytes are the most (starting at a transfer's
    release): production's busiest second, the one with the most KV bytes in flight."""
    ts = sorted((t for t in rec.transfers if t.cls == cls), key=lambda t: t.start_s)
    if not ts:
        raise ConfigError("window", cls, f"a recording with {cls} transfers")
    best, best_start = -1.0, ts[0].start_s
    j, total = 0, 0.0
    for i, t in enumerate(ts):
        while j < len(ts) and ts[j].start_s < t.start_s + width_s:
            total += ts[j].bytes
            j += 1
        if total > best:
            best, best_start = total, t.start_s
        total -= ts[i].bytes
    return best_start, best_start + width_s
