"""The entropy-value (EV) state machine of the MRC-style transport, pure.

Names follow the OCP MRC specification (Rev 1.0) and its controller header (`mrc_ctl.h`): an EV
is GOOD (used), SKIP (passed over for one rotation after a congestion signal), ASSUMED_BAD (its
datagrams went unanswered past the loss rules; unused until a probe of it is answered) or
DENIED (the controller forbade it; never used, never probed, until the controller allows it
again). `ev_min_active` is the floor of EVs that stay usable (GOOD or SKIP): a timeout that
would take a connection below it does not mark the EV bad. An EV marked ASSUMED_BAD is
replaced, when its plane has one, by a spare EV of the same plane (a leg here: a plane of a
multi-plane ROFT, a NIC port pair on ZCube); an EV that a probe brings back becomes a spare
again if its plane already has its active count.

`next_state` is the transition table (`TRANSITIONS`), `EvSet` the EVs of one connection: their
states, the active ones of each leg, the spares, the rotation and the counts of every
transition. No clock, no socket: the sender (`zcube_lab.serving.kvwire.mrcsender`) decides when a
congestion signal, a timeout or a probe's answer happened and says so here.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

Key = tuple[int, int]  # (leg, EV source port)


class EvState(enum.Enum):
    GOOD = "good"
    SKIP = "skip"
    ASSUMED_BAD = "assumed_bad"
    DENIED = "denied"


class EvEvent(enum.Enum):
    CONGESTION = "congestion"  # an ECN echo or, here, queue delay in the echoed timestamps
    PASSED = "passed"  # the rotation reached the EV (and passed a SKIP one over)
    TIMEOUT = "timeout"  # a datagram on it judged lost
    PROBE_OK = "probe_ok"  # a probe of it was answered
    DENY = "deny"  # the controller forbids it
    ALLOW = "allow"  # the controller allows it again


S, E = EvState, EvEvent
# (state, event) -> next state; a pair not listed leaves the state as it is.
TRANSITIONS: dict[tuple[EvState, EvEvent], EvState] = {
    (S.GOOD, E.CONGESTION): S.SKIP,
    (S.SKIP, E.PASSED): S.GOOD,
    (S.GOOD, E.TIMEOUT): S.ASSUMED_BAD,
    (S.SKIP, E.TIMEOUT): S.ASSUMED_BAD,
    (S.ASSUMED_BAD, E.PROBE_OK): S.GOOD,
    (S.GOOD, E.DENY): S.DENIED,
    (S.SKIP, E.DENY): S.DENIED,
    (S.ASSUMED_BAD, E.DENY): S.DENIED,
    (S.DENIED, E.ALLOW): S.GOOD,
}
USABLE = frozenset({S.GOOD, S.SKIP})


def next_state(state: EvState, event: EvEvent, *, at_floor: bool = False) -> EvState:
    """The state after `event`; a TIMEOUT at the `ev_min_active` floor changes nothing."""
    if event is E.TIMEOUT and at_floor:
        return state
    return TRANSITIONS.get((state, event), state)


@dataclass
class EvSet:
    """The EVs of one connection, leg by leg: states, active sets, spares, the rotation.

    `min_active`: `ev_min_active`, the usable EVs (over all legs) below which a timeout does
    not mark an EV bad. `active_per_leg`: how many EVs of a leg are in the rotation at once
    (0: all of them; the rest are spares)."""

    min_active: int = 1
    active_per_leg: int = 0
    states: dict[Key, EvState] = field(default_factory=dict)
    active: dict[int, list[Key]] = field(default_factory=dict)
    spares: dict[int, list[Key]] = field(default_factory=dict)
    counts: Counter[tuple[EvState, EvState]] = field(default_factory=Counter)
    held_by_floor: int = 0
    replaced: int = 0
    # Bumped by every change of a state or of the active sets: what a caller derived from
    # them (the sender's live legs, whether any EV waits for a probe) is stale once it moves.
    version: int = 0
    _order: list[Key] = field(default_factory=list)
    _turn: int = 0

    def __post_init__(self) -> None:
        if self.min_active < 0 or self.active_per_leg < 0:
            raise ValueError(f"need min_active, active_per_leg >= 0: {self}")

    # -- membership ---------------------------------------------------------------------------
    def add_leg(self, leg: int, ports: list[int]) -> None:
        """Add a leg's EVs, all GOOD: the first `active_per_leg` active, the rest spares."""
        if leg in self.active:
            return
        keys = [(leg, p) for p in ports]
        n = self.active_per_leg or len(keys)
        self.active[leg], self.spares[leg] = keys[:n], keys[n:]
        for k in keys:
            self.states[k] = S.GOOD
        self.version += 1
        self._reorder()

    def _reorder(self) -> None:
        """The rotation: legs interleaved, so that successive picks alternate the legs."""
        legs = [self.active[lg] for lg in sorted(self.active)]
        width = max((len(x) for x in legs), default=0)
        self._order = [x[i] for i in range(width) for x in legs if i < len(x)]

    def rotation(self) -> list[Key]:
        """The active EVs in rotation order (any state)."""
        return list(self._order)

    def state(self, key: Key) -> EvState:
        return self.states[key]

    def usable(self) -> int:
        """Active EVs that are GOOD or SKIP."""
        return sum(1 for k in self._order if self.states[k] in USABLE)

    # -- transitions --------------------------------------------------------------------------
    def _move(self, key: Key, event: EvEvent, at_floor: bool = False) -> bool:
        before = self.states[key]
        after = next_state(before, event, at_floor=at_floor)
        if after is before:
            return False
        self.states[key] = after
        self.counts[(before, after)] += 1
        self.version += 1
        return True

    def congestion(self, key: Key) -> bool:
        """A congestion signal on `key`: GOOD -> SKIP (passed over once by the rotation)."""
        return self._move(key, E.CONGESTION)

    def timeout(self, key: Key) -> Key | bool | None:
        """A datagram on `key` judged lost. Returns False if the state did not change (already
        bad, denied, or held GOOD by the floor), else the spare that replaced it (or None)."""
        if self.states[key] not in USABLE:
            return False
        leg = key[0]
        spare = self._first_spare(leg) if key in self.active.get(leg, ()) else None
        at_floor = spare is None and key in self._order and self.usable() <= self.min_active
        if not self._move(key, E.TIMEOUT, at_floor=at_floor):
            self.held_by_floor += 1
            return False
        if spare is not None:
            i = self.active[leg].index(key)
            self.active[leg][i] = spare
            self.spares[leg].remove(spare)
            self.spares[leg].append(key)  # probed while bad; a spare again when it answers
            self.replaced += 1
            self._reorder()
        return spare

    def _first_spare(self, leg: int) -> Key | None:
        for k in self.spares.get(leg, ()):
            if self.states[k] is S.GOOD:
                return k
        return None

    def probe_ok(self, key: Key) -> bool:
        """A probe of `key` answered: ASSUMED_BAD -> GOOD (a spare if its leg is full)."""
        return self._move(key, E.PROBE_OK)

    def deny(self, key: Key) -> bool:
        """The controller forbids `key` (any state -> DENIED)."""
        return self._move(key, E.DENY)

    def allow(self, key: Key) -> bool:
        """The controller allows `key` again (DENIED -> GOOD)."""
        return self._move(key, E.ALLOW)

    # -- use ----------------------------------------------------------------------------------
    def pick(self) -> Key | None:
        """The next active EV to send on: GOOD ones in rotation; a SKIP one the rotation
        reaches is passed over this time and GOOD the next. None if no active EV is usable."""
        n = len(self._order)
        for _ in range(2 * n):
            self._turn = (self._turn + 1) % n
            key = self._order[self._turn]
            state = self.states[key]
            if state is S.GOOD:
                return key
            if state is S.SKIP:
                self._move(key, E.PASSED)
        return None

    def bad(self) -> list[Key]:
        """Every ASSUMED_BAD EV (active or spare): the ones to probe."""
        return [k for k, s in self.states.items() if s is S.ASSUMED_BAD]

    def transitions(self, to: EvState) -> int:
        """How many transitions into `to` there were."""
        return sum(n for (_a, b), n in self.counts.items() if b is to)
