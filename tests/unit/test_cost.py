"""The full-scale cost model: docs/DOMAIN.md §2's figures, 3 tiers, rounding, validation, CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from zcube_lab.cli import main
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.cost import compare, compare_planes
from zcube_lab.core.fabric.pricing import (
    CostInputs,
    roft_cost,
    roft_three_tier_max_gpus,
    roft_two_tier_max_gpus,
    zcube_cost,
    zcube_max_gpus,
    zcube_shape,
)


def roles(fabric) -> dict[str, int]:
    return {g.role: g.count for g in fabric.switch_groups}


def test_1024_gpus_on_64x400g() -> None:
    c = compare(CostInputs(gpus=1024, nic_gbps=400, switch_ports=64, port_gbps=400))
    assert roles(c.roft) == {"leaf": 32, "spine": 16}
    assert c.roft.switches == 48
    assert roles(c.zcube) == {"A": 16, "B": 16}
    assert c.zcube.switches == 32
    # ZCube runs the same 25.6T chip as 128 x 200G.
    assert (c.zcube.ports_per_switch, c.zcube.switch_port_gbps) == (128, 200)
    assert c.roft.transceiver_ends_400g == 4096
    assert c.zcube.transceiver_ends_400g == 3072
    assert c.diff_pct(c.zcube, "switches") == pytest.approx(-100 / 3)


def test_1024_gpus_on_128x400g() -> None:
    c = compare(CostInputs(gpus=1024, nic_gbps=400, switch_ports=128, port_gbps=400))
    assert roles(c.roft) == {"leaf": 16, "spine": 8}
    assert c.roft.switches == 24
    assert roles(c.zcube) == {"A": 8, "B": 8}
    assert c.zcube.switches == 16
    assert c.roft.transceiver_ends_400g == 4096
    assert c.zcube.transceiver_ends_400g == 3072


def test_16k_gpus_on_128_ports_needs_3_tier_roft() -> None:
    c = compare(CostInputs(gpus=16384, nic_gbps=400, switch_ports=128, port_gbps=400))
    assert c.roft.tiers == 3
    assert roles(c.roft) == {"leaf": 256, "aggregation": 256, "core": 128}
    assert c.roft.switches == 640
    assert c.roft.diameter_hops == 5
    assert c.zcube.switches == 256
    assert roles(c.zcube) == {"A": 128, "B": 128}
    assert c.diff_pct(c.zcube, "switches") == pytest.approx(-60)
    # Three switch tiers of 1:1 fat tree: 5 N B of switching, 3 N links.
    assert c.roft.switching_gbps == 5 * 16384 * 400
    assert c.roft.link_count == 3 * 16384
    assert any("3 tiers" in note for note in c.roft.notes)


@pytest.mark.parametrize(
    ("gpus", "ports"), [(1024, 64), (1024, 128), (2048, 64), (512, 128), (8192, 128)]
)
def test_capacity_and_optics_ratios_at_two_tiers(gpus: int, ports: int) -> None:
    b = 400
    c = compare(CostInputs(gpus=gpus, nic_gbps=b, switch_ports=ports, port_gbps=400))
    assert c.roft.tiers == 2
    assert c.roft.switching_gbps == 3 * gpus * b
    assert c.zcube.switching_gbps == 2 * gpus * b
    assert c.diff_pct(c.zcube, "switching_tbps") == pytest.approx(-100 / 3)
    assert c.diff_pct(c.zcube, "transceiver_ends_400g") == pytest.approx(-25)
    # Exact fits: every port of every switch is used, no rounding note.
    assert c.zcube.switch_ports_used == c.zcube.switch_ports_installed == 4 * gpus
    assert c.roft.switch_ports_used == c.roft.switch_ports_installed == 3 * gpus
    assert len(c.zcube.notes) == 1


def test_clos_has_roft_counts_and_says_so() -> None:
    c = compare(CostInputs(gpus=1024, nic_gbps=400, switch_ports=64, port_gbps=400))
    assert c.clos.switch_groups == c.roft.switch_groups
    assert c.clos.links == c.roft.links
    assert c.diff_pct(c.clos, "switches") == 0
    assert any("same counts as ROFT" in note for note in c.clos.notes)
    assert not any("same counts as ROFT" in note for note in c.roft.notes)


def test_transceiver_ends_count_both_ends_of_every_link() -> None:
    z = zcube_cost(CostInputs(gpus=1024, nic_gbps=400, switch_ports=64, port_gbps=400))
    by_role = {g.role: (g.count, g.gbps) for g in z.links}
    assert by_role == {"nic-A": (1024, 200), "nic-B": (1024, 200), "A-B": (1024, 200)}
    assert z.transceiver_ends == 6144


def test_size_limits_of_the_radix() -> None:
    i64 = CostInputs(gpus=1, nic_gbps=400, switch_ports=64, port_gbps=400)
    i128 = CostInputs(gpus=1, nic_gbps=400, switch_ports=128, port_gbps=400)
    assert roft_two_tier_max_gpus(i64) == 2048
    assert roft_two_tier_max_gpus(i128) == 8192
    assert roft_three_tier_max_gpus(i64) == 65536
    assert zcube_max_gpus(i64) == 4096
    assert zcube_max_gpus(i128) == 16384


def test_two_tier_boundary() -> None:
    at = roft_cost(CostInputs(gpus=2048, nic_gbps=400, switch_ports=64, port_gbps=400))
    over = roft_cost(CostInputs(gpus=2049, nic_gbps=400, switch_ports=64, port_gbps=400))
    assert (at.tiers, roles(at)) == (2, {"leaf": 64, "spine": 32})
    assert over.tiers == 3


def test_nic_faster_than_a_port_takes_several_ports() -> None:
    # 800G NIC on 400G ports: two ROFT ports per GPU; ZCube runs 400G ports, same 64x400G chip.
    c = compare(CostInputs(gpus=512, nic_gbps=800, switch_ports=64, port_gbps=400))
    assert roles(c.roft) == {"leaf": 32, "spine": 16}
    assert (c.zcube.ports_per_switch, c.zcube.switch_port_gbps) == (64, 400)
    assert c.zcube.switches == 4 * 512 // 64


def test_zcube_rounds_up_when_gpus_do_not_split() -> None:
    z = zcube_cost(CostInputs(gpus=1000, nic_gbps=400, switch_ports=128, port_gbps=400))
    assert roles(z) == {"A": 8, "B": 8}
    assert any("rounded up" in note for note in z.notes)
    # 3072 GPUs on radix 128: n=48 would need 2 links per pair (192 ports); n=56, m=1 fits.
    assert zcube_shape(3072, 128) == (56, 1)
    n, m = zcube_shape(3072, 128)
    assert m * n * n >= 3072 and 2 * n * m <= 128


def test_roft_rounds_up_partial_leaves() -> None:
    r = roft_cost(CostInputs(gpus=1000, nic_gbps=400, switch_ports=64, port_gbps=400))
    assert roles(r) == {"leaf": 32, "spine": 16}
    assert r.switch_ports_used == 3000
    assert any("rounded up" in note for note in r.notes)


def test_capex_uses_400g_equivalent_optic_price() -> None:
    c = compare(
        CostInputs(
            gpus=1024,
            nic_gbps=400,
            switch_ports=64,
            port_gbps=400,
            switch_price=10_000,
            optic_price=100,
        )
    )
    assert c.roft.capex_switches == 480_000
    assert c.roft.capex_optics == 409_600
    assert c.zcube.capex_optics == 307_200  # 6144 ends at 200G = 3072 x 400G price
    assert c.zcube.capex_total == 320_000 + 307_200
    assert c.diff_pct(c.zcube, "capex_total") == pytest.approx((627_200 - 889_600) / 889_600 * 100)


def test_no_prices_no_capex() -> None:
    r = roft_cost(CostInputs(gpus=1024, nic_gbps=400, switch_ports=64, port_gbps=400))
    assert r.capex_total is None
    only_switches = roft_cost(
        CostInputs(gpus=1024, nic_gbps=400, switch_ports=64, port_gbps=400, switch_price=1)
    )
    assert (only_switches.capex_optics, only_switches.capex_total) == (None, 48)


@pytest.mark.parametrize(
    ("overrides", "field", "hint"),
    [
        ({"gpus": 0}, "gpus", "positive"),
        ({"gpus": True}, "gpus", "positive"),
        ({"switch_ports": 63}, "switch_ports", "even"),
        ({"port_gbps": -400}, "port_gbps", "positive"),
        ({"nic_gbps": 200}, "nic_gbps", "multiple of port_gbps=400"),
        ({"nic_gbps": 600}, "nic_gbps", "multiple of port_gbps=400"),
        ({"nic_gbps": 1200}, "nic_gbps", "divide switch_ports=64"),
        ({"nic_gbps": 25, "port_gbps": 25, "switch_ports": 64}, "nic_gbps", "even"),
        ({"switch_price": -1.0}, "switch_price", ">= 0"),
        ({"optic_price": float("nan")}, "optic_price", ">= 0"),
        ({"optic_price": "cheap"}, "optic_price", "number"),
        ({"planes": 0}, "planes", "positive"),
        ({"planes": True}, "planes", "positive"),
        ({"planes": 3}, "planes", "divisor of nic_gbps=400"),
        # 400G / 32 = 12.5G is no whole rate; the hint lists the counts up to 16 that fit.
        ({"planes": 32}, "planes", "one of [1, 2, 4, 5, 8, 10, 16]"),
    ],
)
def test_invalid_inputs_name_the_field(overrides: dict, field: str, hint: str) -> None:
    args = {"gpus": 1024, "nic_gbps": 400, "switch_ports": 64, "port_gbps": 400, **overrides}
    with pytest.raises(ConfigError) as err:
        CostInputs(**args)
    assert err.value.field == field
    assert hint in err.value.allowed


def test_too_many_gpus_for_zcube_names_the_limit() -> None:
    with pytest.raises(ConfigError) as err:
        compare(CostInputs(gpus=4097, nic_gbps=400, switch_ports=64, port_gbps=400))
    assert err.value.field == "gpus"
    assert "4096" in err.value.allowed


def test_too_many_gpus_for_three_tiers() -> None:
    with pytest.raises(ConfigError) as err:
        roft_cost(CostInputs(gpus=65537, nic_gbps=400, switch_ports=64, port_gbps=400))
    assert err.value.field == "gpus"
    assert "65536" in err.value.allowed


def test_cli_default_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost"]) == 0
    out = capsys.readouterr().out
    assert "1,024 GPUs" in out
    cells = {
        parts[1]: parts[2:-1]
        for parts in ([c.strip() for c in line.split("│")] for line in out.splitlines())
        if len(parts) == 8
    }
    # label: ROFT, Clos, ZCube, Clos vs ROFT, ZCube vs ROFT
    assert cells["switches"] == ["48", "48", "32", "+0.0%", "-33.3%"]
    assert cells["transceiver ends (400G-eq)"] == ["4,096", "4,096", "3,072", "+0.0%", "-25.0%"]
    assert cells["switching capacity (Tb/s)"][4] == "-33.3%"
    assert "CapEx" not in out  # no prices given


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cost", "--gpus", "16384", "--switch-ports", "128", "--json"]
    assert main([*argv, "--switch-price", "1000", "--optic-price", "10"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fabrics"]["roft"]["switches_by_role"] == {
        "leaf": 256,
        "aggregation": 256,
        "core": 128,
    }
    assert data["fabrics"]["zcube"]["switches"] == 256
    assert data["fabrics"]["clos"]["switches"] == 640
    assert data["diff_vs_roft_pct"]["zcube"]["switches"] == pytest.approx(-60)
    assert data["fabrics"]["roft"]["capex_switches"] == 640_000
    assert data["limits"]["zcube_max_gpus"] == 16384


def test_cli_bad_input_exits_2_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--switch-ports", "63"]) == 2
    err = capsys.readouterr().err
    assert "switch_ports=63" in err
    assert "even" in err


def test_cli_help_lists_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["cost", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for option in ("--gpus", "--nic-gbps", "--switch-ports", "--port-gbps", "--optic-price"):
        assert option in out
    assert "400G transceiver end" in out


def test_counts_agree_with_the_fabric_description_at_small_size() -> None:
    """Where the builder can make the same fabric, the cost model counts what it builds."""
    from zcube_lab.core.fabric.builders import build_roft, build_zcube

    # ZCube n=8: 64 dual-port NICs, radix 16 at 200G, i.e. the ASIC of 8 x 400G.
    fabric = build_zcube(n=8, m=1, nic_gbps=400)
    cost = zcube_cost(CostInputs(gpus=64, nic_gbps=400, switch_ports=8, port_gbps=400))
    summary = fabric.summary()
    assert cost.switches == summary["switches"]
    assert roles(cost) == {"A": 8, "B": 8}
    assert summary["switches_by_role"] == {"A": 8, "B": 8}
    assert cost.link_count == summary["links"]
    assert cost.switch_ports_used == sum(fabric.ports_used().values())
    assert cost.switch_ports_used * cost.switch_port_gbps == fabric.switching_capacity_gbps()

    # ROFT 4 servers x 4 GPUs, 2 spines, 1:1: four rail leaves of 4 down + 4 up (8 ports).
    fabric = build_roft(servers=4, gpus_per_server=4, spines=2, nic_gbps=400)
    cost = roft_cost(CostInputs(gpus=16, nic_gbps=400, switch_ports=8, port_gbps=400))
    summary = fabric.summary()
    assert roles(cost) == summary["switches_by_role"] == {"leaf": 4, "spine": 2}
    assert cost.link_count == summary["links"]
    assert cost.switch_ports_used == sum(fabric.ports_used().values())
    assert cost.switch_ports_used * cost.switch_port_gbps == fabric.switching_capacity_gbps()


# -- multi-plane ROFT (MRC: an 800G NIC as 8 x 100G into 8 planes) ---------------------------
MRC = CostInputs(gpus=131072, nic_gbps=800, switch_ports=64, port_gbps=800, planes=8)


def test_mrc_two_tiers_reach_131072_gpus_in_8_planes() -> None:
    # The 51.2T chip as 512 x 100G: a 2-tier leaf-spine plane holds 512 * 512 / 2 GPUs.
    assert (MRC.roft_switch_ports, MRC.roft_port_gbps) == (512, 100)
    assert roft_two_tier_max_gpus(MRC) == 512 * 512 // 2 == 131072
    r = roft_cost(MRC)
    assert (r.tiers, r.diameter_hops, r.planes) == (2, 3, 8)
    assert roles(r) == {"leaf": 8 * 512, "spine": 8 * 256}
    assert (r.ports_per_switch, r.switch_port_gbps) == (512, 100)
    assert r.switch_ports_used == r.switch_ports_installed  # every port of every plane used
    assert r.transceiver_ends_400g == 2 * 2 * 131072 * 800 / 400
    assert roft_cost(replace(MRC, gpus=131073)).tiers == 3
    # One plane of the same chip would need a fourth tier: beyond what the model prices.
    c = compare_planes(MRC)
    assert c.one_plane is None
    assert c.one_plane_error is not None and "65536" in c.one_plane_error
    assert c.diff_pct("switches") is None


def test_8_planes_vs_1_plane_at_16k_gpus() -> None:
    c = compare_planes(replace(MRC, gpus=16384))
    assert c.one_plane is not None
    assert roles(c.one_plane) == {"leaf": 512, "aggregation": 512, "core": 256}
    assert roles(c.planes) == {"leaf": 512, "spine": 256}
    assert (c.one_plane.switches, c.planes.switches) == (1280, 768)
    assert c.diff_pct("switches") == pytest.approx(-40)
    # Same bandwidth in thinner lanes: 8x the links, a third fewer 400G-equivalent ends.
    assert c.planes.link_count == 8 * 2 * 16384
    assert (c.one_plane.transceiver_ends_400g, c.planes.transceiver_ends_400g) == (196608, 131072)
    assert c.diff_pct("transceiver_ends_400g") == pytest.approx(-100 / 3)
    # Each plane is one 16K-GPU ROFT of 100G NICs on 512 x 100G switches.
    plane = roft_cost(CostInputs(gpus=16384, nic_gbps=100, switch_ports=512, port_gbps=100))
    assert c.planes.switches == 8 * plane.switches
    assert c.planes.link_count == 8 * plane.link_count
    assert c.planes.switching_gbps == 8 * plane.switching_gbps


def test_planes_no_slower_than_a_port_change_nothing_but_wiring() -> None:
    # 800G NICs on 64 x 400G: one plane takes 2 ports per NIC, two planes 1 port in each.
    one = roft_cost(CostInputs(gpus=1024, nic_gbps=800, switch_ports=64, port_gbps=400))
    two = roft_cost(CostInputs(gpus=1024, nic_gbps=800, switch_ports=64, port_gbps=400, planes=2))
    assert (one.switch_groups, one.links, one.ports_per_switch) == (
        two.switch_groups,
        two.links,
        two.ports_per_switch,
    )


def test_one_plane_is_the_default_and_leaves_output_as_it_was() -> None:
    inputs = CostInputs(gpus=1024, nic_gbps=400, switch_ports=64, port_gbps=400)
    assert inputs.planes == 1
    assert replace(inputs, planes=1) == inputs
    data = compare(inputs).to_dict()
    assert "planes" not in data["inputs"]
    assert all("planes" not in f for f in data["fabrics"].values())
    assert roles(roft_cost(inputs)) == {"leaf": 32, "spine": 16}


def test_compare_prices_roft_and_clos_in_planes() -> None:
    c = compare(CostInputs(gpus=4096, nic_gbps=400, switch_ports=64, port_gbps=400, planes=8))
    assert c.roft.planes == c.clos.planes == 8
    assert c.clos.switch_groups == c.roft.switch_groups
    assert c.zcube.planes == 1


def test_planes_count_what_the_builder_builds_at_small_size() -> None:
    from zcube_lab.core.fabric.builders import build_roft

    # 2 planes of 4 rail leaves (4 down + 4 up at 200G) and 2 spines: an 8 x 200G chip, 4 x 400G.
    fabric = build_roft(servers=4, gpus_per_server=4, spines=2, nic_gbps=400, planes=2)
    cost = roft_cost(CostInputs(gpus=16, nic_gbps=400, switch_ports=4, port_gbps=400, planes=2))
    summary = fabric.summary()
    assert roles(cost) == summary["switches_by_role"] == {"leaf": 8, "spine": 4}
    assert cost.link_count == summary["links"]
    assert cost.switch_ports_used == sum(fabric.ports_used().values())
    assert cost.switch_ports_used * cost.switch_port_gbps == fabric.switching_capacity_gbps()


def test_cli_planes_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cost", "--gpus", "16384", "--nic-gbps", "800", "--switch-ports", "64"]
    assert main([*argv, "--port-gbps", "800", "--planes", "8"]) == 0
    out = capsys.readouterr().out
    assert "1 plane vs 8 planes of 100G" in out
    cells = {
        parts[1]: parts[2:-1]
        for parts in ([c.strip() for c in line.split("│")] for line in out.splitlines())
        if len(parts) == 6
    }
    # label: one plane, 8 planes, 8 planes vs 1
    assert cells["switches"] == ["1,280", "768", "-40.0%"]
    assert cells["switch ports"] == ["64x800G", "512x100G", ""]
    assert cells["transceiver ends (400G-eq)"] == ["196,608", "131,072", "-33.3%"]
    assert "131,072 in 8 planes of 512x100G" in out


def test_cli_planes_json_reaches_131072_where_one_plane_cannot(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["cost", "--gpus", "131072", "--nic-gbps", "800", "--switch-ports", "64"]
    assert main([*argv, "--port-gbps", "800", "--planes", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["inputs"]["planes"] == 8
    assert data["fabrics"]["roft"] is None
    assert "65536" in data["one_plane_error"]
    planes = data["fabrics"]["roft_planes"]
    assert (planes["planes"], planes["tiers"], planes["switches"]) == (8, 2, 6144)
    assert data["limits"]["planes_two_tier_max_gpus"] == 131072
    assert data["diff_vs_one_plane_pct"]["switches"] is None


def test_cli_bad_planes_exits_2_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--planes", "3"]) == 2
    assert "planes=3" in capsys.readouterr().err
