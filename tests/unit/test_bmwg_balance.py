"""§9.3 (ECMP and dynamic load balancing under inference traffic) worked out before any lab: the
switch tier's links and each one's utilization from hand-made counters, Jain's index, max, min
and max/mean over them against hand answers, the structural oversubscription, the scenarios'
profiles and run flags, the algorithms, a trial's row from a run folder, the comparison and the
page (zcube_lab.core.bmwg.balance, zcube_lab.emulator.bmwg.balance, bench.bmwg_balance)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bmwg_balance
from bench.bmwg_tables import _cell, _table
from zcube_lab.cli import main
from zcube_lab.core.bmwg import balance as b93
from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.trials import HIGHER, LOWER, OUT_OF_REACH, WITHIN
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec, Link, Switch
from zcube_lab.emulator.bmwg import balance as live93
from zcube_lab.emulator.bmwg.live import build


def _zcube() -> Fabric:
    return build_fabric(FabricSpec.of("zcube", n=4, gpus_per_server=2))


def _clos() -> Fabric:
    return build_fabric(FabricSpec.of("clos", servers=8, gpus_per_server=2, servers_per_leaf=2))


def test_the_tier_is_every_switch_to_switch_link_named_as_the_run_names_its_directions() -> None:
    z = b93.tier_links(_zcube())
    # ZCube n=4: K(4,4) between A and B, one link per pair
    assert len(z) == 16
    assert {(lk.name.split("<->")[0].split(":")[0][0], lk.name.split("<->")[1][0])
            for lk in z} == {("a", "b")}  # fmt: skip
    first = z[0]
    a, b = first.name.split("<->")
    assert first.forward == f"{a}->{b}" and first.back == f"{b}->{a}"
    c = b93.tier_links(_clos())
    assert len(c) == 16 and all("leaf" in lk.name and "spine" in lk.name for lk in c)
    roft = build_fabric(FabricSpec.of("roft", servers=8, gpus_per_server=2, servers_per_leaf=2))
    assert len(b93.tier_links(roft)) == 16  # 8 leaves x 2 spines


def test_a_fabric_of_several_tiers_keeps_the_one_with_the_most_links() -> None:
    sw = (Switch("l0", 1, "leaf", 0, 8), Switch("l1", 2, "leaf", 1, 8),
          Switch("s0", 3, "spine", 0, 8), Switch("c0", 4, "core", 0, 8))  # fmt: skip
    links = (Link("l0", 1, "s0", 1, 400), Link("l1", 1, "s0", 2, 400),
             Link("s0", 3, "c0", 1, 400))  # fmt: skip
    f = Fabric(FabricSpec.of("file"), 400, (), sw, links)
    assert [lk.name for lk in b93.tier_links(f)] == ["l0:1<->s0:1", "l1:1<->s0:2"]


def test_a_link_is_as_loaded_as_its_busier_direction_and_a_missing_one_counts_zero() -> None:
    links = [b93.TierLink("x<->y", "x->y", "y->x"), b93.TierLink("u<->v", "u->v", "v->u")]
    util = {"x->y": {"mean": 0.30, "peak": 0.9}, "y->x": {"mean": 0.02},
            "v->u": {"mean": 0.10, "peak": None}}  # fmt: skip
    assert b93.link_utilization(util, links) == {"x<->y": 0.30, "u<->v": 0.10}
    # a run whose summary names none of the links has no figures (not zeros)
    assert b93.link_utilization({"h0->a0:1": {"mean": 0.5}}, links) is None


def test_jfi_max_min_mean_and_max_over_mean_by_hand() -> None:
    # utilizations 0.1, 0.2, 0.3, 0.4: JFI (1.0)^2 / (4 * 0.30) = 0.8333, mean 0.25
    f = b93.link_figures({"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4})
    assert f["JFI"] == pytest.approx(1.0 / 1.2)
    assert f["Link_utilization_max_pct"] == pytest.approx(40.0)
    assert f["Link_utilization_min_pct"] == pytest.approx(10.0)
    assert f["Link_utilization_mean_pct"] == pytest.approx(25.0)
    assert f["max_mean_ratio"] == pytest.approx(1.6)
    # one of four links carries everything: JFI 1/4, max/mean 4
    one = b93.link_figures({"a": 0.2, "b": 0.0, "c": 0.0, "d": 0.0})
    assert one["JFI"] == pytest.approx(0.25) and one["max_mean_ratio"] == pytest.approx(4.0)
    assert one["Link_utilization_min_pct"] == 0.0
    # even: 1 and 1
    even = b93.link_figures({"a": 0.05, "b": 0.05})
    assert even["JFI"] == pytest.approx(1.0) and even["max_mean_ratio"] == pytest.approx(1.0)
    # an idle tier has no index or ratio (0/0), and no links no figures at all
    idle = b93.link_figures({"a": 0.0, "b": 0.0})
    assert idle["JFI"] is None and idle["max_mean_ratio"] is None
    assert idle["Link_utilization_max_pct"] == 0.0
    assert set(b93.link_figures(None).values()) == {None}


def test_structural_oversubscription_is_host_facing_over_switch_facing_capacity() -> None:
    assert b93.structural_oversubscription(_zcube()) == 1.0
    assert b93.structural_oversubscription(_clos()) == 1.0
    # a leaf with 4 hosts at 400 and 2 uplinks at 400: 2:1
    over = build_fabric(FabricSpec.of("clos", servers=8, gpus_per_server=2, servers_per_leaf=2,
                                      oversubscription=2))  # fmt: skip
    assert b93.structural_oversubscription(over) == 2.0
    sw = (Switch("l0", 1, "leaf", 0, 8), Switch("s0", 2, "spine", 0, 8))
    links = (Link("h0", 0, "l0", 1, 400), Link("h1", 0, "l0", 2, 400),
             Link("h2", 0, "l0", 3, 400), Link("l0", 4, "s0", 1, 100))  # fmt: skip
    assert b93.structural_oversubscription(Fabric(FabricSpec.of("f"), 400, (), sw, links)) == 12


def _summary(util: dict, trusted: bool = True, kv: float = 5e6, ep: float = 0.0) -> dict:
    return {"link_util": util, "trustworthy": trusted,
            "server": {"kv_bytes": kv, "alltoall_bytes": ep},
            "bmwg": {"TTFT": {"p50": 300.0, "p99": 900.0}},
            "client": {"completed": 70}}  # fmt: skip


def test_a_trial_s_figures_come_from_the_run_s_link_counters_on_its_fabric() -> None:
    fab = _zcube()
    links = b93.tier_links(fab)
    # hand-made counters: link i's forward direction at (i + 1)%, its back at 0.5%; host links
    # busier than any, which must not count
    util = {lk.forward: {"mean": (i + 1) / 100} for i, lk in enumerate(links)}
    util.update({lk.back: {"mean": 0.005} for lk in links})
    util["h0->a0:1"] = {"mean": 0.9}
    f = b93.trial_figures(_summary(util), fab)
    xs = [(i + 1) / 100 for i in range(16)]
    assert f["links"] == 16 and f["oversubscription_ratio"] == 1.0
    assert f["Link_utilization_max_pct"] == pytest.approx(16.0)
    assert f["Link_utilization_min_pct"] == pytest.approx(1.0)
    assert f["JFI"] == pytest.approx(sum(xs) ** 2 / (16 * sum(x * x for x in xs)))
    assert f["max_mean_ratio"] == pytest.approx(0.16 / (sum(xs) / 16))
    assert f["KV_bytes_lab"] == 5e6 and f["EP_bytes_lab"] == 0.0
    assert f["TTFT_p99_ms"] == 900.0 and f["requests"] == 70 and f["untrusted"] == 0
    assert b93.trial_figures(_summary(util, trusted=False), fab)["untrusted"] == 1


def test_a_trial_row_reads_the_run_folder_s_summary_and_fabric(tmp_path: Path) -> None:
    fab = _clos()
    links = b93.tier_links(fab)
    util = {lk.forward: {"mean": 0.04} for lk in links[:8]}
    util.update({lk.back: {"mean": 0.02} for lk in links[8:]})
    (tmp_path / "summary.json").write_text(json.dumps(_summary(util)))
    spec = {"kind": "clos", "params": dict(fab.spec.params)}
    (tmp_path / "config.json").write_text(json.dumps({"fabric": spec}))
    row = live93.trial_row(tmp_path)
    f = row["figures"]
    # eight links at 4%, eight at 2%: JFI (48)^2 / (16 * (8*16 + 8*4)) = 2304 / 2560 = 0.9
    assert f["JFI"] == pytest.approx(0.9)
    assert f["Link_utilization_max_pct"] == pytest.approx(4.0)
    assert f["Link_utilization_min_pct"] == pytest.approx(2.0)
    assert f["max_mean_ratio"] == pytest.approx(4 / 3)
    assert len(row["link_util_pct"]) == 16 and row["link_util_pct"][links[0].name] == 4.0


def test_the_scenarios_profiles_and_flags_shape_the_traffic_they_name() -> None:
    kv, ep, mixed = (b93.SCENARIOS[s] for s in ("kv", "ep", "mixed"))
    p = b93.profile(kv)
    assert p["prompt"]["median"] == 16384 and p["prompt"]["sigma"] == 0.0
    assert p["prefix_cache_hit_rate"] == 0.97 and p["arrival"] == {"process": "poisson",
                                                                  "rate": 6.0}  # fmt: skip
    # the draft's 16 MB+ KV flows: 16,384 tokens x 89,856 B
    assert kv.prompt_tokens * b93.KV_BYTES_PER_TOKEN == 1_472_200_704 > b93.DRAFT_KV_BYTES
    assert kv.argv == ("--ep-servers", "1")
    assert "--kv-off" in ep.argv and "--kv-off" not in mixed.argv
    assert ep.argv[:4] == mixed.argv == ("--ep-servers", "4", "--alltoall", "all")
    assert b93.profile(ep)["prefix_cache_hit_rate"] == 0.0
    # EP-only dispatches stay under the draft's 1 MB per peer and layer
    d = live93.ep_dispatch_bytes()
    assert d["prefill_ep"] < b93.DRAFT_EP_BYTES and d["decode_8"] < d["prefill_ep"]
    assert d["decode_8"] == pytest.approx(8 * d["per_token"])
    with pytest.raises(ConfigError, match="rate"):
        b93.profile(kv, rate=0)


def test_algorithms_default_parse_and_refuse_and_the_ep_scenario_skips_kv_only_ones() -> None:
    assert b93.algorithms("") == ("static", "ecmp", "spray")
    assert b93.algorithms("spray, ecmp") == ("ecmp", "spray")  # the catalogue's order
    with pytest.raises(ConfigError, match=r"balance.*static"):
        b93.algorithms("flowlet")
    with pytest.raises(ConfigError, match="balance"):
        BmwgConfig(balance="ecmp,hash")
    assert BmwgConfig(balance="mrc").balance_algorithms == ("mrc",)
    pairs = [(s.name, a) for s, a in b93.cases(("static", "ecmp", "spray", "mrc"))]
    assert ("ep", "spray") not in pairs and ("ep", "mrc") not in pairs
    assert len(pairs) == 4 + 2 + 4
    assert b93.case_argv(b93.SCENARIOS["kv"], "mrc") == (
        "--ep-servers", "1", "--policy", "ecmp", "--kv-transport", "mrc")  # fmt: skip
    assert b93.case_label(b93.SCENARIOS["mixed"], "spray") == "traffic=mixed, balance=spray"


def test_the_section_builds_a_case_per_scenario_and_algorithm_with_its_flags() -> None:
    sec = build("9.3", BmwgConfig(trials=2, trial_seconds=10, balance="static,ecmp"))
    assert [c.key for c in sec.cases] == ["kv-static", "kv-ecmp", "ep-static", "ep-ecmp",
                                          "mixed-static", "mixed-ecmp"]  # fmt: skip
    by = {c.key: c for c in sec.cases}
    assert by["ep-ecmp"].argv == (*b93.SCENARIOS["ep"].argv, "--policy", "ecmp")
    assert by["kv-static"].params == {"traffic": "kv", "balance": "static"}
    assert sec.head["algorithms"] == ["static", "ecmp"] and sec.head["ep_servers"] == 4
    lines = "\n".join(sec.parameter_lines)
    assert "trials: 20 x 60 s -> 2 x 10 s" in lines and "1.47 GB" in lines
    with pytest.raises(ConfigError, match="gpus"):
        build("9.3", BmwgConfig(gpus=9))


def _row(fabric: str, trial: int, case: str, jfi: float, mx: float, untrusted: int = 0) -> dict:
    traffic, alg = (x.split("=")[1] for x in case.split(", "))
    figs = {"JFI": jfi, "Link_utilization_max_pct": mx, "Link_utilization_min_pct": mx / 4,
            "Link_utilization_mean_pct": mx / 2, "max_mean_ratio": 2.0,
            "oversubscription_ratio": 1.0, "links": 16, "untrusted": untrusted}  # fmt: skip
    return {"section": "9.3", "case": case, "params": {"traffic": traffic, "balance": alg},
            "fabric": fabric, "trial": trial, "figures": figs}  # fmt: skip


def _doc(rows: list[dict]) -> dict:
    summary = report.summarize(rows)
    d = {"sections": ["9.3"], "fabrics": ["zcube", "roft"], "rows": rows, "summary": summary,
         "comparison": report.compare(summary), "trials": 2, "trial_seconds": 10.0,
         "draft_trials": {"9.3": [20, 60.0]}}  # fmt: skip
    sec = build("9.3", BmwgConfig(trials=2, trial_seconds=10))
    return {**d, **json.loads(json.dumps(sec.head))}


def test_the_comparison_judges_the_draft_s_figures_and_the_page_shows_every_case() -> None:
    case = "traffic=kv, balance=ecmp"
    tie = _doc([_row("zcube", 0, case, 0.90, 10), _row("zcube", 1, case, 0.92, 11),
                _row("roft", 0, case, 0.91, 10.5), _row("roft", 1, case, 0.89, 10.2)])  # fmt: skip
    assert {c["figure"] for c in tie["comparison"]} == set(report.HEADLINE["9.3"])
    assert "Link_utilization_min_pct" in report.HIGHER_IS_BETTER
    by = {c["figure"]: c["verdict"] for c in tie["comparison"]}
    assert by["JFI"] == WITHIN and by["Link_utilization_max_pct"] == WITHIN
    apart = _doc([_row("zcube", 0, case, 0.98, 6), _row("zcube", 1, case, 0.97, 6.2),
                  _row("roft", 0, case, 0.70, 14), _row("roft", 1, case, 0.71, 14.5)])  # fmt: skip
    by = {c["figure"]: c["verdict"] for c in apart["comparison"]}
    assert by["JFI"] == HIGHER and by["Link_utilization_max_pct"] == LOWER
    words = bmwg_balance.verdict_words(apart)
    assert "ZCube's JFI higher than ROFT's at traffic=kv, balance=ecmp" in words
    spoiled = _doc([_row("zcube", 0, case, 0.98, 6, untrusted=1),
                    _row("zcube", 1, case, 0.97, 6), _row("roft", 0, case, 0.70, 14),
                    _row("roft", 1, case, 0.71, 14.5)])  # fmt: skip
    assert {c["verdict"] for c in spoiled["comparison"]} == {OUT_OF_REACH}
    text = "\n".join(bmwg_balance.balance_section(apart, _table, _cell))
    assert "| (a) KV cache transfers only | large flows, 16 MB+ | KV pulls of 1.47 GB" in text
    assert "| trials | 20 x 60 s | 2 x 10 s |" in text
    assert "| kv | ecmp | ZCube | 0.975 ± " in text and "| kv | ecmp | ROFT | 0.705 ± " in text
    assert "| 2 of 2 |" in text


def test_9_3_is_run_by_bmwg_run(capsys) -> None:
    assert cat.test_of("9.3").runner and "9.3" in cat.RUNNERS
    assert main(["bmwg", "list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("9.3"))
    assert "  run  " in line


def test_a_trial_is_untrusted_as_its_verdict_says_with_no_rule_set_aside_here(
    tmp_path: Path,
) -> None:
    """The KV-pull rule under --kv-off is the verdict's business now (it does not judge the
    one-byte pulls, and says so in `not_judged`): §9.3 takes the verdict as it is and carries
    its note into the row."""
    kv_rule = ("KV pulls: p50 22028.33x their ideal after 5 ms of fixed cost each over 40 pulls "
               "(allowed 1.5x) while the median pull's busiest link was 2% busy as it ran "
               "(under 20%): an end-host artifact, not the fabric")  # fmt: skip
    fab = _zcube()
    util = {lk.forward: {"mean": 0.01} for lk in b93.tier_links(fab)}
    rejected = {**_summary(util, trusted=False), "health": {"reasons": [kv_rule]}}
    assert b93.trial_figures(rejected, fab)["untrusted"] == 1
    note = "KV pulls: not judged over 40 pulls: the run turned KV transfer off (--kv-off)"
    kept = {**_summary(util), "health": {"reasons": [], "not_judged": [note]}}
    assert b93.trial_figures(kept, fab)["untrusted"] == 0
    (tmp_path / "summary.json").write_text(json.dumps(kept))
    spec = {"kind": "zcube", "params": dict(fab.spec.params)}
    (tmp_path / "config.json").write_text(json.dumps({"fabric": spec}))
    row = live93.trial_row(tmp_path)
    assert row["not_judged"] == [note] and "reasons_set_aside" not in row
