"""The draft's reference configurations CFG-A..E (zcube_lab.core.bmwg.configs): S_KV by the
formula against hand answers and against the draft's table, CFG-E against the lab's GLM-5.1
profile, and what one transfer of each is in the lab."""

from __future__ import annotations

import pytest

from zcube_lab.core.bmwg import configs
from zcube_lab.core.errors import ConfigError


def test_the_drafts_worked_70b_example() -> None:
    # appendix: 2 x 80 x 8 x 128 x 4,096 x 2, step by step
    assert configs.s_kv(80, 8, 128, 4096, 2) == 1_342_177_280
    assert configs.size_of(configs.config_of("CFG-B"), 4096) == 1_342_177_280


@pytest.mark.parametrize(
    ("cfg", "per_token", "at_4k", "at_32k", "at_128k"),
    [
        # 2 x 32 x 8 x 128 x 2 = 131,072 B a token
        ("CFG-A", 131_072, 536_870_912, 4_294_967_296, 17_179_869_184),
        # 2 x 80 x 8 x 128 x 2 = 327,680
        ("CFG-B", 327_680, 1_342_177_280, 10_737_418_240, 42_949_672_960),
        # 2 x 96 x 64 x 128 x 2 = 3,145,728
        ("CFG-C", 3_145_728, 12_884_901_888, 103_079_215_104, 412_316_860_416),
        # INT8: half of CFG-B
        ("CFG-D", 163_840, 671_088_640, 5_368_709_120, 21_474_836_480),
        # GLM-5.1: 78 x (512 + 64) x 2 = 89,856
        ("CFG-E", 89_856, 368_050_176, 2_944_401_408, 11_777_605_632),
    ],
)
def test_s_kv_of_each_configuration(
    cfg: str, per_token: int, at_4k: int, at_32k: int, at_128k: int
) -> None:
    c = configs.config_of(cfg)
    assert c.bytes_per_token == per_token
    got = [configs.size_of(c, n) for n in configs.CONTEXTS.values()]
    assert got == [at_4k, at_32k, at_128k]


def test_the_formula_against_the_drafts_table() -> None:
    # CFG-B, -C, -D: within 5% of the draft's GB figures
    for cfg in ("CFG-B", "CFG-C", "CFG-D"):
        c = configs.config_of(cfg)
        for ctx in configs.CONTEXTS:
            if ctx in c.draft_floor:
                continue
            assert configs.draft_ratio(c, ctx) == pytest.approx(1.0, abs=0.05), (cfg, ctx)
    # CFG-C at 128K: the draft says "> 300 GB"
    c = configs.config_of("CFG-C")
    assert c.draft_floor == ("128K",)
    assert configs.size_of(c, 131072) > 300e9
    # CFG-A: the draft lists half the formula's GiB (0.5, 4, 16 GiB as 0.25, 2, 8)
    a = configs.config_of("a")
    for ctx, n in configs.CONTEXTS.items():
        assert configs.size_of(a, n) / 2**30 == 2 * a.draft_gb[ctx]
        assert configs.draft_ratio(a, ctx) == pytest.approx(2.147, abs=1e-3)
    assert configs.draft_ratio(configs.LAB, "4K") is None


def test_cfg_e_is_the_labs_glm_profile() -> None:
    import dataclasses

    from zcube_lab.serving.config import DecodeConfig
    from zcube_lab.serving.models import get_profile

    glm = get_profile("glm-5.1")
    att = glm.attention
    assert att.kind == "mla" and configs.LAB.layers == att.layers == 78
    # the formula's 2 x H_kv x D is the latent's elements a layer a token
    assert 2 * configs.LAB.kv_heads * configs.LAB.head_dim == att.kv_lora_rank + att.rope_dim
    assert configs.LAB.p_bytes == att.bytes_per_element
    assert configs.LAB.bytes_per_token == glm.kv_bytes_per_token == 89_856
    assert "H_kv=1, D=288" in configs.describe(configs.LAB)
    assert "not heads" in configs.describe(configs.LAB)
    # the pull timeout is the decode engine's default
    timeout = {f.name: f.default for f in dataclasses.fields(DecodeConfig)}["kv_timeout_s"]
    assert timeout == configs.KV_TIMEOUT_S


def test_one_transfer_in_the_lab() -> None:
    # 1,342,177,280 real bytes at 4,000 a lab byte: 335,544.32 -> 335,545 B, 224 frames;
    # 1,342,177,280 x 8 / 400e9 = 26.84 ms at the NIC
    t = configs.lab_transfer(1_342_177_280, 4000.0)
    assert (t.lab_bytes, t.frames) == (335_545, 224)
    assert t.pull_s == pytest.approx(0.02684354560)
    assert t.carried and t.verdict().startswith("yes")
    # CFG-C at 128K: 8.25 s, within the 10 s timeout but with little headroom
    big = configs.lab_transfer(configs.size_of(configs.config_of("c"), 131072), 4000.0)
    assert big.carried and "little headroom" in big.verdict()
    # twice that is not carried
    over = configs.lab_transfer(2 * 412_316_860_416, 4000.0)
    assert not over.carried and over.verdict().startswith("no")
    # a tiny message is still a byte and a frame
    assert (configs.lab_transfer(10, 4000.0).lab_bytes, configs.lab_transfer(10, 4000.0).frames) \
        == (1, 1)  # fmt: skip
    with pytest.raises(ConfigError, match="bandwidth_scale"):
        configs.lab_transfer(10, 0)


def test_the_table_and_bad_names() -> None:
    rows = configs.table_rows(4000.0)
    assert [r[0] for r in rows] == ["CFG-A", "CFG-B", "CFG-C", "CFG-D", "CFG-E"]
    b = rows[1]
    assert b[3].startswith("1.34 GB (draft 1.3); lab 335,545 B; yes")
    assert "(draft >300)" in rows[2][5]
    assert "draft" not in rows[4][3]  # CFG-E: computed, the draft lists none
    with pytest.raises(ConfigError, match="CFG-A, CFG-B"):
        configs.config_of("CFG-F")
    with pytest.raises(ConfigError, match="H_kv"):
        configs.s_kv(80, 0, 128, 4096, 2)


def test_bmwg_list_params_prints_the_configurations(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from zcube_lab.cli.commands.bmwg import ListConfig, list_tests

    assert list_tests(ListConfig(params=True)) == 0
    out = capsys.readouterr().out
    assert "reference configurations (S_KV = 2 x L x H_kv x D x C x P_bytes" in out
    assert "    4K: 1.34 GB (draft 1.3); lab 335,545 B; yes" in out
    assert "CFG-E (GLM-5.1 (the lab's model), MLA): L=78, H_kv=1, D=288" in out
    assert list_tests(ListConfig(params=False)) == 0
    assert "reference configurations" not in capsys.readouterr().out
    assert list_tests(ListConfig(json=True, params=True)) == 0
    doc = json.loads(capsys.readouterr().out)
    b = next(c for c in doc["configurations"] if c["id"] == "CFG-B")
    assert b["s_kv"]["4K"] == 1_342_177_280 and b["bytes_per_token"] == 327_680
