"""The EV state machine (zcube_lab/serving/kvwire/evstate.py) against the OCP MRC spec's rules, and
the
sender's loss rules that feed it: a pause is not a loss, a cut is."""

from __future__ import annotations

import pytest

from zcube_lab.core.clock import Clock
from zcube_lab.serving.kvwire import mrcsender
from zcube_lab.serving.kvwire import mrcwire as w
from zcube_lab.serving.kvwire.evstate import TRANSITIONS, EvEvent, EvSet, EvState, next_state

G, SK, BAD, DEN = EvState.GOOD, EvState.SKIP, EvState.ASSUMED_BAD, EvState.DENIED
CONG, PASS, TO, OK = EvEvent.CONGESTION, EvEvent.PASSED, EvEvent.TIMEOUT, EvEvent.PROBE_OK
DENY, ALLOW = EvEvent.DENY, EvEvent.ALLOW

# Every (state, event) pair and what it leads to; the floor's column is a TIMEOUT at it.
TABLE = [
    (G, CONG, SK), (G, PASS, G), (G, TO, BAD), (G, OK, G), (G, DENY, DEN), (G, ALLOW, G),
    (SK, CONG, SK), (SK, PASS, G), (SK, TO, BAD), (SK, OK, SK), (SK, DENY, DEN), (SK, ALLOW, SK),
    (BAD, CONG, BAD), (BAD, PASS, BAD), (BAD, TO, BAD), (BAD, OK, G), (BAD, DENY, DEN),
    (BAD, ALLOW, BAD),
    (DEN, CONG, DEN), (DEN, PASS, DEN), (DEN, TO, DEN), (DEN, OK, DEN), (DEN, DENY, DEN),
    (DEN, ALLOW, G),
]  # fmt: skip


@pytest.mark.parametrize(("state", "event", "after"), TABLE)
def test_every_transition_of_the_spec(state: EvState, event: EvEvent, after: EvState) -> None:
    assert next_state(state, event) is after


def test_the_table_covers_every_state_and_event() -> None:
    assert {(s, e) for s, e, _ in TABLE} == {(s, e) for s in EvState for e in EvEvent}
    assert set(TRANSITIONS.items()) <= {((s, e), a) for s, e, a in TABLE}


@pytest.mark.parametrize("state", [G, SK])
def test_a_timeout_at_the_floor_leaves_a_usable_ev_as_it_is(state: EvState) -> None:
    assert next_state(state, TO, at_floor=True) is state


def _set(legs: int = 2, evs: int = 4, **kw: int) -> EvSet:
    s = EvSet(**kw)
    for leg in range(legs):
        s.add_leg(leg, [100 * (leg + 1) + k for k in range(evs)])
    return s


def test_the_rotation_alternates_legs_and_skips_a_congested_ev_once() -> None:
    s = _set()
    picks = [s.pick() for _ in range(8)]
    assert len(set(picks)) == 8 and [k[0] for k in picks[:4]] == [1, 0, 1, 0]
    target = picks[0]
    assert s.congestion(target) and s.state(target) is SK
    nxt = [s.pick() for _ in range(8)]
    assert target not in nxt[:7] and nxt[7] == target  # one rotation without it
    assert s.state(target) is G and s.counts[(G, SK)] == 1 and s.counts[(SK, G)] == 1


def test_a_timeout_marks_assumed_bad_until_a_probe_answers() -> None:
    s = _set()
    key = (0, 100)
    assert s.timeout(key) is None  # no spare: marked bad, not replaced
    assert s.state(key) is BAD and s.bad() == [key]
    assert key not in {s.pick() for _ in range(16)}
    assert s.timeout(key) is False  # already bad
    assert s.probe_ok(key) and s.state(key) is G and s.bad() == []
    assert s.transitions(BAD) == 1 and s.transitions(G) == 1


def test_ev_min_active_holds_the_last_usable_evs_good() -> None:
    s = _set(legs=1, evs=4, min_active=2)
    assert s.timeout((0, 100)) is None and s.timeout((0, 101)) is None
    assert s.timeout((0, 102)) is False and s.state((0, 102)) is G  # 2 usable: the floor
    assert s.held_by_floor == 1 and s.usable() == 2


def test_a_bad_ev_is_replaced_by_a_spare_of_the_same_leg() -> None:
    s = _set(legs=2, evs=4, active_per_leg=3)
    assert s.rotation().count((0, 103)) == 0 and len(s.rotation()) == 6
    assert s.timeout((0, 101)) == (0, 103)  # leg 0's spare, not leg 1's
    assert (0, 103) in s.rotation() and (0, 101) not in s.rotation()
    assert s.spares[0] == [(0, 101)] and s.replaced == 1
    assert s.timeout((0, 102)) is None  # no spare left on leg 0: bad, not replaced
    assert s.probe_ok((0, 101)) and (0, 101) in s.spares[0]  # back as a spare


def test_a_denied_ev_is_never_picked_nor_probed_until_allowed() -> None:
    s = _set(legs=1, evs=2)
    assert s.deny((0, 100))
    assert {s.pick() for _ in range(6)} == {(0, 101)}
    assert s.bad() == [] and not s.probe_ok((0, 100))
    assert s.allow((0, 100)) and (0, 100) in {s.pick() for _ in range(4)}


def test_with_every_active_ev_denied_nothing_is_picked() -> None:
    s = _set(legs=1, evs=2)
    s.deny((0, 100))
    s.deny((0, 101))
    assert s.pick() is None


# -- the sender: a pause is not a loss ------------------------------------------------------------
def _sender(bound: float = 0.0, evs: int = 2, k: float = 1.0) -> mrcsender.SenderState:
    st = mrcsender.SenderState(
        100 * 100, mss=100, window=800, rate=0, now=0.0, clock=Clock(k), delay_bound=bound
    )
    st.add_leg(0, [1000 + i for i in range(evs)])
    return st


def _drain(st: mrcsender.SenderState, now: float) -> list[mrcsender.Send]:
    out = []
    while (s := st.next_send(now)) is not None:
        out.append(s)
    return out


def test_a_datagram_held_by_a_pause_within_the_delay_bound_is_not_lost() -> None:
    # EV a's path is paused for 0.3 s (nothing of it arrives, nothing overtakes it); the
    # delay bound (full paused queues) is 0.4 s: no timeout before it, whatever the RTO.
    st = _sender(bound=0.4)
    sends = _drain(st, 0.0)
    a = sends[0].ev
    others = [s for s in sends if s.ev is not a]
    ack = w.Ack(0, others[-1].seq, others[-1].ev.port, 0, ((100, 200), (300, 400), (500, 600)))
    st.on_ack(ack, 0.002)
    st.on_timer(0.3)
    assert st.retired_log == [] and a.state is G
    st.on_timer(0.002 + 0.4 + 0.01)  # past the bound: a loss, the EV's TIMEOUT
    assert st.retired_log == [a.key] and a.state is BAD


def test_without_a_bound_the_same_pause_is_taken_for_a_loss() -> None:
    st = _sender(bound=0.0)
    _drain(st, 0.0)
    st.on_timer(0.3)
    assert st.retired_log  # the 50 ms retransmission timeout fired
    assert st.leg_limits(0)[1] == pytest.approx(st.rto)


def test_the_delay_bound_is_modelled_time() -> None:
    assert _sender(bound=0.4, k=2.0).leg_limits(0)[1] == pytest.approx(
        2 * _sender(bound=0.4).leg_limits(0)[1], rel=0.05
    )


def test_a_datagram_overtaken_on_its_own_ev_is_lost_whatever_the_bound() -> None:
    st = _sender(bound=5.0)
    sends = _drain(st, 0.0)
    lost = sends[0]
    later = next(s for s in sends[1:] if s.ev is lost.ev)
    st.on_ack(w.Ack(0, later.seq, later.ev.port, 0, ((100, 800),)), 0.002)
    st.on_timer(0.002 + st.loss_after + 0.001)
    assert st.retired_log == [lost.ev.key]


def test_an_offset_a_partial_ack_left_unreported_is_not_judged_overtaken() -> None:
    st = _sender(bound=5.0, evs=3)
    sends = _drain(st, 0.0)
    middle = sends[4]  # offset 400; its EV's later datagram (offset 700) is acknowledged
    later = sends[7]
    assert later.ev is middle.ev and (middle.offset, later.offset) == (400, 700)
    # The ack's two halves, (200, 400) and (500, 800): 400-500 unreported (PARTIAL).
    ack = w.Ack(200, later.seq, later.ev.port, 0, ((200, 400), (500, 800)), partial=True)
    assert ack.unreported() == (400, 500)
    st.on_ack(ack, 0.002)
    st.on_timer(0.002 + st.loss_after + 0.001)
    assert st.retired_log == [] and middle.seq in st.inflight
    # The same ack whole (not PARTIAL) reports 400-500 as a hole: overtaken, lost.
    st.on_ack(w.Ack(200, later.seq, later.ev.port, 0, ((200, 400), (500, 800))), 0.04)
    assert st.retired_log == [middle.ev.key]
