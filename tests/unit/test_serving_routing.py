"""Gateway routing policies."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from zcube_lab.serving.routing import Backend, HotSet, LeastOutstanding, RoundRobin, make_balancer


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


def test_hot_set_is_seeded_per_period_and_moves() -> None:
    backends = [Backend(f"d{i}") for i in range(8)]
    hot = HotSet(2, period_s=5.0, seed=0)
    first = hot.members(backends, now=100.0)  # the first call starts period 0
    assert len(first) == 2 and len({b.url for b in first}) == 2
    assert hot.members(backends, now=104.9) == first  # same period, same set
    assert hot.window(105.0) == 1 and hot.window(99.0) == 0  # before the start: period 0
    again = HotSet(2, period_s=5.0, seed=0)
    sets = [tuple(again.indices(8, w)) for w in range(40)]
    assert sets == [tuple(hot.indices(8, w)) for w in range(40)]  # the same sequence
    assert len(set(sets)) > 10  # it moves
    assert {i for s in sets for i in s} == set(range(8))  # every decode gets its turn
    assert [HotSet(2, 5.0, seed=1).indices(8, w) for w in range(40)] != [list(x) for x in sets]
    assert hot.indices(2, 3) == [0, 1] and hot.indices(1, 0) == [0]  # fewer than the size: all


def test_hot_set_rejects_a_bad_size_or_period() -> None:
    for size, period in ((0, 5.0), (2, 0.0), (-1, 1.0)):
        with pytest.raises(ValueError, match="hot set"):
            HotSet(size, period)


async def test_gateway_sends_a_periods_decodes_to_its_hot_set(aiohttp_server) -> None:
    """Four real decode apps behind one gateway with one hot decode per 0.4 s period: the
    requests of a period all land on one decode, and over several periods the hot one moves."""
    from zcube_lab.adapters.ports import free_port
    from zcube_lab.serving.config import Address, DecodeConfig, GatewayConfig, PrefillConfig
    from zcube_lab.serving.decode import make_decode_app
    from zcube_lab.serving.gateway import make_gateway_app
    from zcube_lab.serving.prefill import make_prefill_app

    pcfg = PrefillConfig(kv_bind=(Address("127.0.0.1", free_port("127.0.0.1")),))
    prefill = await aiohttp_server(make_prefill_app(pcfg, CollectorRegistry()))
    registries = [CollectorRegistry() for _ in range(4)]
    decodes = [await aiohttp_server(make_decode_app(DecodeConfig(), r)) for r in registries]
    gcfg = GatewayConfig(
        prefill_urls=(str(prefill.make_url("")).rstrip("/"),),
        decode_urls=tuple(str(d.make_url("")).rstrip("/") for d in decodes),
        decode_hotspot=1,
        hotspot_period_s=0.4,
    )
    gateway = await aiohttp_server(make_gateway_app(gcfg, CollectorRegistry()))
    url = str(gateway.make_url("/v1/completions"))
    body = {"model": "tiny", "prompt": "a b c", "max_tokens": 2, "ignore_eos": True}
    # (send time, answer time, decode index), times since our start
    served: list[tuple[float, float, int]] = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with aiohttp.ClientSession() as s:
        while loop.time() - start < 2.6:
            before = [_successes(r) for r in registries]
            sent = loop.time() - start
            async with s.post(url, json=body) as r:
                assert r.status == 200, await r.text()
            after = [_successes(r) for r in registries]
            changed = [i for i in range(4) if after[i] != before[i]]
            assert len(changed) == 1
            served.append((sent, loop.time() - start, changed[0]))
    # The gateway picks a request's decode at some moment between its send and its answer, and
    # its periods start at its first pick, within the first request's send and answer. A request
    # surely fell in period k when every pick time and origin that allows keeps it inside k; a
    # loaded machine only makes fewer requests sure, never a wrong one.
    first_sent, first_answered = served[0][0], served[0][1]

    def sure_period(sent: float, answered: float) -> int | None:
        lo, hi = (sent - first_answered) / 0.4, (answered - first_sent) / 0.4
        return int(lo) if lo >= 0 and int(lo) == int(hi) and hi != int(hi) else None

    inner: dict[int, set[int]] = {}
    for sent, answered, i in served:
        k = sure_period(sent, answered)
        if k is not None:
            inner.setdefault(k, set()).add(i)
    assert len(inner) >= 3, served  # enough periods are told apart to judge
    assert all(len(s) <= 1 for s in inner.values()), inner
    assert len({i for _, _, i in served}) >= 2  # the hot decode moved


def _successes(registry: CollectorRegistry) -> float:
    return sum(
        s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == "vllm:request_success_total"
    )


def test_usable_leaves_out_tried_and_down_backends_but_never_all_untried() -> None:
    from zcube_lab.serving.routing import usable

    a, b, c = Backend("http://a"), Backend("http://b"), Backend("http://c")
    b.down_until = 10.0
    assert usable([a, b, c], now=5.0) == [a, c]
    assert usable([a, b, c], now=10.0) == [a, b, c]
    assert usable([a, b, c], now=5.0, tried={"http://a", "http://c"}) == [b]
    assert usable([a, b, c], now=5.0, tried={"http://a", "http://b", "http://c"}) == []
