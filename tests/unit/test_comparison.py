"""Comparison of variants (zcube_lab.emulator.experiment.comparison): plans, no runs."""

from __future__ import annotations

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.experiment.comparison import (
    check_fault_prefixes,
    fabric_specs,
    interleave,
    plan_variants,
    resolve_baseline,
)
from zcube_lab.emulator.experiment.plan import RunConfig


def _base(specs: dict) -> RunConfig:
    return RunConfig(fabric=specs["zcube"], duration_s=10, prefix_cache_hit_rate=0.75)


def test_variants_are_fabric_major_and_runs_repeat_major() -> None:
    specs = fabric_specs(["zcube", "roft"], 16, 2)
    variants = plan_variants(_base(specs), specs, ["ff", "spray"])
    assert [v.label for v in variants] == ["zcube/ff", "zcube/spray", "roft/ff", "roft/spray"]
    plan = interleave(variants, repeat=2)
    assert [(p.number, p.repeat, p.variant.label) for p in plan[:5]] == [
        (1, 1, "zcube/ff"),
        (2, 1, "zcube/spray"),
        (3, 1, "roft/ff"),
        (4, 1, "roft/spray"),
        (5, 2, "zcube/ff"),
    ]
    assert {p.total for p in plan} == {8} and {p.repeats for p in plan} == {2}
    assert plan[4].config.tag == "ff-r2" and plan[4].config.policy == "ff"
    assert plan[4].config.fabric == specs["zcube"]
    assert plan[4].config.prefix_cache_hit_rate == 0.75  # the rest of the base config is kept


def test_one_policy_tags_only_the_repeat_unless_asked() -> None:
    specs = fabric_specs(["zcube"], 16, 2)
    variants = plan_variants(_base(specs), specs, ["ecmp"])
    assert [p.config.tag for p in interleave(variants, 2)] == ["r1", "r2"]
    assert [p.config.tag for p in interleave(variants, 1, tag_policy=True)] == ["ecmp-r1"]
    with pytest.raises(ConfigError) as info:
        interleave(variants, 0)
    assert info.value.field == "repeat"


def test_faults_per_fabric_replace_the_base_faults() -> None:
    specs = fabric_specs(["zcube", "roft"], 16, 2)
    faults = {"zcube": ("link a0-b1 at 2s for 2s",), "roft": ("link leaf0-spine0 at 2s for 2s",)}
    variants = plan_variants(_base(specs), specs, ["ff"], faults=faults)
    assert [v.config.faults for v in variants] == [faults["zcube"], faults["roft"]]


def test_baseline_names_a_label_or_a_fabric() -> None:
    labels = ["zcube/ff", "roft/ff", "roft/spray"]
    assert resolve_baseline("roft/spray", labels) == "roft/spray"
    assert resolve_baseline("roft", labels) == "roft/ff"
    with pytest.raises(ConfigError) as info:
        resolve_baseline("clos", labels)
    assert info.value.field == "baseline"


def test_the_default_baseline_finds_a_roft_that_a_size_option_labels() -> None:
    # `compare --planes 2` labels ROFT `roft-2planes`; the default baseline `roft` is that one.
    labels = ["zcube", "zcube/spray", "roft-2planes", "roft-2planes/spray"]
    assert resolve_baseline("roft", labels) == "roft-2planes"
    assert resolve_baseline("roft-2planes/spray", labels) == "roft-2planes/spray"


def test_fault_prefixes_must_name_a_compared_fabric() -> None:
    check_fault_prefixes(["zcube: link a0-b1 at 5s", "link a0-b1 at 5s"], ["zcube", "roft"])
    with pytest.raises(ConfigError) as info:
        check_fault_prefixes(["clos: link leaf0-spine0 at 5s"], ["zcube", "roft"])
    assert info.value.field == "fail"


def test_fabric_specs_need_a_square_and_a_known_kind() -> None:
    specs = fabric_specs(["zcube", "roft", "clos"], 36, 2, planes=2)
    assert dict(specs["zcube"].params)["n"] == 6
    assert dict(specs["roft"].params)["planes"] == 2
    for kinds, gpus, field in ((["zcube"], 15, "gpus"), (["torus"], 16, "fabrics")):
        with pytest.raises(ConfigError) as info:
            fabric_specs(kinds, gpus, 2)
        assert info.value.field == field


def test_oversubscribed_leaves_have_fewer_uplinks_and_zcube_is_unchanged() -> None:
    from zcube_lab.core.fabric.builders import build_fabric
    from zcube_lab.core.fabric.description import FabricSpec

    def uplinks(spec: FabricSpec) -> int:
        fabric = build_fabric(spec)
        return sum(1 for link in fabric.links if "spine" in link.node1 + link.node2)

    # 2 servers per rail leaf: 2 uplinks at 1:1, 1 at 2:1 (one spine), none whole at 4:1
    flat = fabric_specs(["zcube", "roft"], 16, 2)
    over = fabric_specs(["zcube", "roft"], 16, 1, oversubscription=2.0)
    assert over["zcube"] == flat["zcube"]
    assert uplinks(flat["roft"]) == 16 and uplinks(over["roft"]) == 8
    with pytest.raises(ConfigError, match="spines"):
        build_fabric(fabric_specs(["roft"], 16, 2, oversubscription=2)["roft"])  # 1 uplink
    with pytest.raises(ConfigError, match="oversubscription"):
        build_fabric(fabric_specs(["roft"], 16, 1, oversubscription=4)["roft"])
    # the old sizes (4 servers per leaf) take 4:1 on one spine
    old = {"gpus_per_server": 4, "servers_per_leaf": 4}
    assert uplinks(fabric_specs(["roft"], 16, 1, oversubscription=4, sizes=old)["roft"]) == 4


def test_without_a_baseline_roft_is_taken_when_compared_else_the_first_fabric() -> None:
    # `sweep --fabrics zcube` alone had failed on the default baseline `roft`.
    assert resolve_baseline(None, ["zcube", "roft-2planes", "clos"]) == "roft-2planes"
    assert resolve_baseline(None, ["zcube"]) == "zcube"
    assert resolve_baseline(None, ["clos/ff", "zcube/ff"]) == "clos/ff"
    with pytest.raises(ConfigError, match="baseline"):
        resolve_baseline(None, [])
