"""Pause episodes and the class that raised each (pure): what the lossless agent records
for victim accounting (docs/LOSSLESS.md, "Victim accounting";
`zcube_lab.emulator.results.lossless.victims` accounts for them).

An *episode* is one congestion of a watched switch egress port: from the reading that found its
queue at XOFF to the one that found it back at XON, with the feeder ports its congestion asked
to pause. Its *raiser* is the traffic class with the most bytes into the port over the window
before the onset: per-class byte counters at the port (`classcounters`) read every `window_s`
or so, and once more at the onset; the difference between the onset's reading and the last
periodic one at least `window_s` older is what filled the queue (a default switch queue holds
46-92 ms of its port's traffic, so a window of 100 ms covers what it holds).

`EpisodeRecorder` is fed by the agent after each `PauseMachine.observe` (the congested set, and
counters only where it has them) and by its periodic counter readings; it never reads a clock or
a counter itself. Names: ports are interface names, classes `ep`/`kv`
(`zcube_lab.serving.trafficclass`'s names, kept as plain strings here), times seconds passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

WINDOW_S = 0.1  # counter readings this far apart bound the bytes that filled a queue
EPISODES_FILE = "lossless-episodes.jsonl"  # the agent writes it beside its report
ClassBytes = Mapping[str, int]


@dataclass(frozen=True)
class PauseEpisode:
    """One congestion of `congested` from `start` to `end`: the ports it paused and the class
    that raised it (None: unknown, no counter moved or none was read)."""

    congested: str
    start: float
    end: float
    paused: frozenset[str]
    raised_by: str | None

    def to_dict(self) -> dict[str, object]:
        return {
            "congested": self.congested,
            "start": self.start,
            "end": self.end,
            "paused": sorted(self.paused),
            "raised_by": self.raised_by,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> PauseEpisode:
        return cls(
            congested=str(d["congested"]),
            start=float(d["start"]),  # type: ignore[arg-type]
            end=float(d["end"]),  # type: ignore[arg-type]
            paused=frozenset(d["paused"]),  # type: ignore[arg-type]
            raised_by=None if d.get("raised_by") is None else str(d["raised_by"]),
        )


def counter_deltas(before: ClassBytes, after: ClassBytes) -> dict[str, int]:
    """Per class, bytes counted between two readings of a port's counters (a counter that went
    back, as after a filter was replaced, counts from zero)."""
    out = {}
    for c, v in after.items():
        was = before.get(c, 0)
        out[c] = v - was if v >= was else v
    return out


def raiser(bytes_in: ClassBytes, least: int = 1) -> str | None:
    """The class with the most bytes into a congested port over the window before its onset;
    None when none moved `least` bytes. A tie goes to the class first in sorted order, so the
    answer does not depend on the mapping's order."""
    best = max(sorted(bytes_in), key=lambda c: bytes_in[c], default=None)
    if best is None or bytes_in[best] < least:
        return None
    return best


@dataclass
class _Open:
    start: float
    raised_by: str | None


@dataclass
class EpisodeRecorder:
    """Turns the agent's congested sets and counter readings into `PauseEpisode`s."""

    feeds: Mapping[str, frozenset[str]]
    window_s: float = WINDOW_S
    episodes: list[PauseEpisode] = field(default_factory=list)
    _open: dict[str, _Open] = field(default_factory=dict)
    # per port: the readings kept (time, counters), oldest first, only as far back as needed
    _readings: dict[str, list[tuple[float, ClassBytes]]] = field(default_factory=dict)

    def reading(self, now: float, counters: Mapping[str, ClassBytes]) -> None:
        """A periodic reading of some ports' per-class counters."""
        for port, value in counters.items():
            kept = self._readings.setdefault(port, [])
            kept.append((now, dict(value)))
            # keep the newest reading at least a window old, and everything after it
            while len(kept) > 1 and kept[1][0] <= now - self.window_s:
                kept.pop(0)

    def _baseline(self, port: str, now: float) -> ClassBytes | None:
        """The newest reading of `port` at least a window before `now` (else the oldest)."""
        kept = self._readings.get(port)
        if not kept:
            return None
        old = [value for t, value in kept if t <= now - self.window_s]
        return old[-1] if old else kept[0][1]

    def observe(
        self, now: float, congested: Iterable[str], onset: Mapping[str, ClassBytes] | None = None
    ) -> None:
        """The machine's congested ports after a reading at `now`; `onset`: the counters read
        at the ports that just became congested. A port without one is attributed from its
        periodic readings alone (the newest against the newest a window older than it), or
        not at all when it has fewer than two."""
        current = set(congested)
        for port in sorted(current - set(self._open)):
            raised_by = None
            at = (onset or {}).get(port)
            kept = self._readings.get(port, [])
            if at is None and len(kept) >= 2:
                newest_t, at = kept[-1]
                before = self._baseline(port, newest_t)
                if before is at:  # nothing a window older: the oldest against the newest
                    before = kept[0][1]
            else:
                before = self._baseline(port, now)
            if before is not None and at is not None:
                raised_by = raiser(counter_deltas(before, at))
            self._open[port] = _Open(now, raised_by)
        for port in sorted(set(self._open) - current):
            self._close(port, now)

    def snapshot(self, now: float) -> list[PauseEpisode]:
        """The episodes so far, the open ones as if they ended at `now` (nothing changes)."""
        open_now = [
            PauseEpisode(port, ep.start, now, frozenset(self.feeds.get(port, frozenset())),
                         ep.raised_by)
            for port, ep in sorted(self._open.items())
        ]  # fmt: skip
        return [*self.episodes, *open_now]

    def close_all(self, now: float) -> None:
        """End every open episode (the agent stopping)."""
        for port in sorted(self._open):
            self._close(port, now)

    def _close(self, port: str, now: float) -> None:
        ep = self._open.pop(port)
        paused = self.feeds.get(port, frozenset())
        self.episodes.append(PauseEpisode(port, ep.start, now, frozenset(paused), ep.raised_by))
