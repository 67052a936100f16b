"""Gateway routing policies."""

from __future__ import annotations

from serving.routing import Backend, LeastOutstanding, RoundRobin, make_balancer


def test_least_outstanding_picks_least_load_and_rotates_ties() -> None:
    a, b, c = Backend("a", load=5), Backend("b", load=2), Backend("c", load=2)
    lo = LeastOutstanding()
    assert [lo.pick([a, b, c]).url for _ in range(4)] == ["b", "c", "b", "c"]
    b.load = 9
    assert lo.pick([a, b, c]) is c
    idle = [Backend(x) for x in "pqrs"]
    assert {LeastOutstanding().pick(idle).url} == {"p"}
    rotating = LeastOutstanding()
    assert [rotating.pick(idle).url for _ in range(4)] == ["p", "q", "r", "s"]


def test_round_robin_cycles() -> None:
    bs = [Backend("a"), Backend("b")]
    rr = RoundRobin()
    assert [rr.pick(bs).url for _ in range(5)] == ["a", "b", "a", "b", "a"]


def test_policies_by_name() -> None:
    assert isinstance(make_balancer("least-outstanding"), LeastOutstanding)
    assert isinstance(make_balancer("round-robin"), RoundRobin)
