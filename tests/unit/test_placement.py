"""Placing prefill and decode engines on GPU hosts."""

from __future__ import annotations

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_roft, build_zcube
from zcube_lab.core.fabric.placement import LayoutSpec, place


def test_default_layout_is_one_prefill_server_to_three_decode_servers() -> None:
    p = place(build_roft(), LayoutSpec())
    assert [e.host for e in p.role("prefill")] == ["h0", "h1", "h2", "h3"]
    assert [e.host for e in p.role("decode")] == [f"h{i}" for i in range(4, 16)]
    assert {e.engine_id for e in p.engines} == {f"prefill-{i}" for i in range(4)} | {
        f"decode-{i}" for i in range(4, 16)
    }
    # Instances of one server: their all-to-all rides NVLink, not the fabric.
    assert all(e.ep_peers == () for e in p.engines)
    assert p.ep_hosts == ()


def test_same_gids_get_the_same_roles_on_zcube_and_roft() -> None:
    z = place(build_zcube(n=4), LayoutSpec())
    r = place(build_roft(), LayoutSpec())
    assert [(e.role, e.host, e.rail) for e in z.engines] == [
        (e.role, e.host, e.rail) for e in r.engines
    ]


def test_instances_across_servers_exchange_rail_aligned_or_with_all() -> None:
    f = build_roft(servers=4, gpus_per_server=4)
    rail = place(f, LayoutSpec(prefill_servers=2, ep_servers=2))
    h1 = next(e for e in rail.engines if e.host == "h1")
    assert h1.ep_peers == ("h5",)  # same rank, the other server of its instance
    assert {e.instance for e in rail.role("prefill")} == {0}
    assert {e.instance for e in rail.role("decode")} == {1}
    full = place(f, LayoutSpec(prefill_servers=2, ep_servers=2, alltoall="all"))
    assert next(e for e in full.engines if e.host == "h1").ep_peers == ("h4", "h5", "h6", "h7")
    assert set(full.ep_hosts) == {f"h{i}" for i in range(16)}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (LayoutSpec(prefill_servers=4), "prefill_servers"),
        (LayoutSpec(prefill_servers=1, ep_servers=2), "ep_servers"),
    ],
)
def test_layouts_that_do_not_fit_name_the_field(spec: LayoutSpec, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        place(build_roft(), spec)
    assert info.value.field == field


def test_layout_names_are_validated() -> None:
    with pytest.raises(ConfigError) as info:
        LayoutSpec(layout="diagonal")
    assert info.value.field == "layout" and "rail-aligned" in str(info.value)
