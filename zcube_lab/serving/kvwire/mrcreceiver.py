"""The MRC-style KV transport, pure: decode's side of one pull, and the byte ranges both sides
keep.

`ReceiverState` places every DATA payload by its offset (reordering costs nothing), discards
and counts duplicates and payloads past the end, and builds the ACK for what it holds: the
cumulative offset, up to `MAX_SACK_RANGES` SACK ranges above it, and the echo of the datagram
that prompted it. `RangeSet` is the set of half-open byte ranges the receiver holds and the
sender (`zcube_lab.serving.kvwire.mrcsender`) has learned arrived. No socket and no clock here
(`zcube_lab.serving.kvwire.mrc` does the I/O); the datagrams are
`zcube_lab.serving.kvwire.mrcwire`'s.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from zcube_lab.serving.kvwire.mrcwire import MAX_SACK_RANGES, Ack, Data


# -- byte ranges ----------------------------------------------------------------------------
class RangeSet:
    """Disjoint, sorted half-open byte ranges; adjacent ones merge."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def add(self, start: int, end: int) -> int:
        """Cover [start, end); returns how many bytes were not covered before."""
        if end <= start:
            return 0
        i = bisect.bisect_left(self._ends, start)  # first range ending at or after start
        j = bisect.bisect_right(self._starts, end)  # ranges starting at or before end
        covered = sum(
            max(0, min(e, end) - max(s, start))
            for s, e in zip(self._starts[i:j], self._ends[i:j], strict=True)
        )
        new = (end - start) - covered
        if i < j:
            start = min(start, self._starts[i])
            end = max(end, self._ends[j - 1])
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]
        return new

    def covers(self, start: int, end: int) -> bool:
        """Whether every byte of [start, end) is covered."""
        if end <= start:
            return True
        i = bisect.bisect_right(self._starts, start) - 1
        return i >= 0 and self._ends[i] >= end

    def missing(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of [start, end) not covered, in order."""
        out = []
        pos = start
        i = max(0, bisect.bisect_right(self._starts, start) - 1)
        while pos < end and i < len(self._starts):
            s, e = self._starts[i], self._ends[i]
            if e <= pos:
                i += 1
                continue
            if s > pos:
                out.append((pos, min(s, end)))
            pos = max(pos, e)
            i += 1
        if pos < end:
            out.append((pos, end))
        return out

    def span(self, pos: int) -> tuple[int, int] | None:
        """The range that holds byte `pos`, or None."""
        i = bisect.bisect_right(self._starts, pos) - 1
        if i >= 0 and self._ends[i] > pos:
            return self._starts[i], self._ends[i]
        return None

    @property
    def prefix(self) -> int:
        """End of the range that starts at 0 (0 if none)."""
        return self._ends[0] if self._starts and self._starts[0] == 0 else 0

    @property
    def total(self) -> int:
        return sum(e - s for s, e in zip(self._starts, self._ends, strict=True))

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))


# -- the receiver ---------------------------------------------------------------------------
@dataclass
class ReceiverState:
    """Decode's side of one pull: places DATA payloads by offset and builds the SACKs."""

    num_bytes: int
    buf: bytearray = field(init=False)
    got: RangeSet = field(default_factory=RangeSet)
    datagrams: int = 0
    duplicates: int = 0
    out_of_range: int = 0
    placed_bytes: int = 0

    def __post_init__(self) -> None:
        self.buf = bytearray(self.num_bytes)

    def on_data(self, d: Data) -> bool:
        """Place a payload; False for a duplicate (every byte already held) or one that
        does not fit the buffer, both discarded and counted."""
        self.datagrams += 1
        end = d.offset + len(d.payload)
        if d.probe or not d.payload:
            return True
        if end > self.num_bytes:
            self.out_of_range += 1
            return False
        if self.got.covers(d.offset, end):
            self.duplicates += 1
            return False
        self.buf[d.offset : end] = d.payload
        self.placed_bytes += self.got.add(d.offset, end)
        return True

    @property
    def complete(self) -> bool:
        return self.got.prefix >= self.num_bytes

    def ack(self, d: Data | None) -> Ack:
        """The ACK for what is held now, echoing `d` (the datagram that prompted it)."""
        cum = self.got.prefix
        above = [(s, e) for s, e in self.got.ranges() if s > 0]
        partial = len(above) > MAX_SACK_RANGES
        if partial:
            # The lowest ranges (the holes the sender must fill) and the highest (where new
            # data lands); the echoed datagram is acknowledged by its echo in any case.
            half = MAX_SACK_RANGES // 2
            above = above[:half] + above[-half:]
        ranges = tuple(above)
        if d is None:
            return Ack(cum, 0, 0, 0, ranges, self.complete, partial)
        return Ack(cum, d.seq, d.ev, d.sent_us, ranges, self.complete, partial)
