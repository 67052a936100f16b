"""Workload profiles and Mooncake traces: shipped data loads, bad data names its field."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.placement import LAYOUTS
from zcube_lab.workloads import mooncake
from zcube_lab.workloads.profiles import (
    PLACEMENTS,
    PROFILE_DIR,
    load_profile,
    parse_profile,
    profile_names,
)

TRACE = (
    Path(__file__).resolve().parents[2]
    / "zcube_lab"
    / "workloads"
    / "traces"
    / "synthetic-mooncake.jsonl"
)


def _chat() -> dict[str, Any]:
    return json.loads((PROFILE_DIR / "chat.json").read_text())


def test_shipped_profiles_load() -> None:
    assert profile_names() == [
        "chat",
        "coding-agent",
        "hotspot",
        "kv-heavy",
        "production",
        "rail-aligned",
        "trace",
    ]
    for name in profile_names():
        p = load_profile(name)
        assert p.name == name
    agent = load_profile("coding-agent")
    assert agent.placement == "default" and agent.session is not None
    assert agent.prompt is not None and agent.prompt.median >= 10_000
    assert agent.output is not None and agent.output.median < 50
    chat = load_profile("chat")
    assert chat.endpoint == "chat"
    assert chat.prompt is not None and 100 <= chat.prompt.median < 1000
    assert chat.output is not None and 100 <= chat.output.median < 1000


def test_rail_aligned_is_coding_agent_with_another_placement() -> None:
    agent, aligned = load_profile("coding-agent"), load_profile("rail-aligned")
    assert aligned.placement == "rail-aligned"
    for f in ("model", "endpoint", "length_scale", "arrival", "prompt", "output", "session"):
        assert getattr(aligned, f) == getattr(agent, f), f


def test_placements_are_the_orchestrators_layout_names() -> None:
    assert set(PLACEMENTS) == set(LAYOUTS)
    assert {load_profile(n).placement for n in profile_names()} <= set(LAYOUTS)


def test_trace_profile_points_at_the_shipped_trace() -> None:
    p = load_profile("trace")
    assert p.trace is not None and p.trace.resolve() == TRACE.resolve()
    assert p.arrival.process == "trace"


def test_overrides() -> None:
    p = load_profile("chat", length_scale=0.1, model="tiny")
    assert (p.length_scale, p.model) == (0.1, "tiny")
    assert p.scaled_prompt().median == pytest.approx(25.0)
    with pytest.raises(ConfigError) as e:
        load_profile("chat", trace=TRACE)
    assert e.value.field == "trace"
    with pytest.raises(ConfigError) as e:
        load_profile("chat", length_scale=0)
    assert e.value.field == "length_scale"


def test_profile_from_path(tmp_path: Path) -> None:
    f = tmp_path / "mine.json"
    data = _chat() | {"name": "mine"}
    f.write_text(json.dumps(data))
    assert load_profile(str(f)).name == "mine"
    with pytest.raises(ConfigError) as e:
        load_profile("no-such-profile")
    assert e.value.field == "workload" and "coding-agent" in e.value.allowed
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError) as e:
        load_profile(str(bad))
    assert e.value.field == "workload"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"colour": "blue"}, "profile.colour"),
        ({"endpoint": "embeddings"}, "chat.endpoint"),
        ({"placement": "everywhere"}, "chat.placement"),
        ({"length_scale": -1}, "chat.length_scale"),
        ({"model": ""}, "chat.model"),
        ({"arrival": {"process": "poisson", "rate": 0}}, "chat.arrival.rate"),
        ({"arrival": {"process": "lumpy"}}, "chat.arrival.process"),
        ({"arrival": {"speed": 1}}, "chat.arrival.speed"),
        ({"arrival": {"process": "staged", "stages": [[1]]}}, "chat.arrival.stages[0]"),
        ({"prompt": {"median": 10, "min": 20, "max": 30}}, "chat.prompt.median"),
        ({"prompt": {"median": 100, "min": 20}}, "chat.prompt.max"),
        ({"prompt": {"median": 100, "min": 0, "max": 300}}, "chat.prompt.min"),
        ({"prompt": {"median": 9, "min": 2, "max": 30}}, "chat.prompt.min"),
        ({"output": {"median": 9, "min": 2, "max": 30, "mode": 3}}, "chat.output.mode"),
        ({"output": {"median": 9, "min": 2, "max": 1.5}}, "chat.output.max"),
        ({"session": {"steps_min": 0, "append": {}}}, "chat.session.steps_min"),
        ({"trace": "x.jsonl"}, "chat.arrival.process"),
    ],
)
def test_bad_profiles_name_the_field(edit: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_profile(_chat() | edit)
    assert e.value.field == field


def test_shipped_trace_parses_and_matches_its_generator() -> None:
    records = mooncake.load_trace(TRACE)
    assert len(records) == 240
    assert [r.timestamp for r in records] == sorted(r.timestamp for r in records)
    # The shipped file is exactly what the documented command writes.
    regenerated = mooncake.synthesize(random.Random(7))
    assert mooncake.dumps(regenerated) == TRACE.read_text()
    # Prefix sharing: some block ids recur across requests.
    seen: dict[int, int] = {}
    for r in records:
        for h in r.hash_ids:
            seen[h] = seen.get(h, 0) + 1
    assert sum(1 for n in seen.values() if n > 1) > 20


def test_trace_round_trip() -> None:
    recs = mooncake.synthesize(random.Random(1), n=10)
    assert mooncake.parse_trace(mooncake.dumps(recs).splitlines()) == recs


GOOD = {"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("{oops", "t:1"),
        ("[1, 2]", "t:1"),
        (json.dumps(GOOD | {"priority": 1}), "t:1.priority"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "hash_ids"}), "t:1.hash_ids"),
        (json.dumps(GOOD | {"timestamp": -5}), "t:1.timestamp"),
        (json.dumps(GOOD | {"timestamp": 1.5}), "t:1.timestamp"),
        (json.dumps(GOOD | {"input_length": 0}), "t:1.input_length"),
        (json.dumps(GOOD | {"output_length": "5"}), "t:1.output_length"),
        (json.dumps(GOOD | {"hash_ids": [1, "a"]}), "t:1.hash_ids"),
        (json.dumps(GOOD | {"hash_ids": [1, 2, 3]}), "t:1.hash_ids"),
    ],
)
def test_bad_trace_lines_name_line_and_field(line: str, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        mooncake.parse_trace([line], source="t")
    assert e.value.field == field


def test_trace_errors_point_at_the_right_line(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(GOOD | {"input_length": -1}) + "\n")
    with pytest.raises(ConfigError) as e:
        mooncake.load_trace(f)
    assert e.value.field == "t.jsonl:3.input_length"
    with pytest.raises(ConfigError) as e:
        mooncake.load_trace(tmp_path / "missing.jsonl")
    assert e.value.field == "trace"
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ConfigError):
        mooncake.load_trace(tmp_path / "empty.jsonl")


def test_coding_agent_carries_its_prefix_cache_hit_rate() -> None:
    from zcube_lab.workloads.profiles import load_profile, parse_profile

    assert load_profile("coding-agent").prefix_cache_hit_rate == 0.75
    assert load_profile("chat").prefix_cache_hit_rate == 0.0
    data = json.loads((PROFILE_DIR / "chat.json").read_text())
    data["prefix_cache_hit_rate"] = 1.0
    with pytest.raises(ConfigError) as info:
        parse_profile(data)
    assert info.value.field == "chat.prefix_cache_hit_rate"


def test_kv_heavy_hints_three_prefill_servers_and_a_high_hit_rate() -> None:
    import argparse

    from zcube_lab.cli.commands.run import add_arguments, config_from_args

    kv = load_profile("kv-heavy")
    assert (kv.prefill_servers, kv.prefix_cache_hit_rate) == (3, 0.9)
    assert load_profile("coding-agent").prefill_servers is None
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    hinted = config_from_args(parser.parse_args(["--workload", "kv-heavy"]))
    # 3 of the profile's 4 servers, kept as a share of the default fabric's 8
    assert (hinted.layout.prefill_servers, hinted.prefix_cache_hit_rate) == (6, 0.9)
    given = config_from_args(
        parser.parse_args(["--workload", "kv-heavy", "--prefill-servers", "2"])
    )
    assert given.layout.prefill_servers == 2
    default = config_from_args(parser.parse_args(["--workload", "coding-agent"]))
    assert default.layout.prefill_servers == 2  # 1 of 4, 2 of 8
    old = config_from_args(parser.parse_args(["--workload", "kv-heavy", "--gpus-per-server", "4"]))
    assert old.layout.prefill_servers == 3  # the old size: the profile's 4 servers


def test_prefill_servers_hint_must_be_a_positive_integer() -> None:
    data = json.loads((PROFILE_DIR / "kv-heavy.json").read_text())
    for bad in (0, 1.5, True, "3"):
        with pytest.raises(ConfigError, match="prefill_servers"):
            parse_profile({**data, "prefill_servers": bad})


def test_hotspot_profile_hints_reach_the_gateway_and_flags_win() -> None:
    import argparse

    from zcube_lab.cli.commands.run import add_arguments, config_from_args
    from zcube_lab.emulator.experiment.plan import plan_run

    hot = load_profile("hotspot")
    assert (hot.hotspot.decodes, hot.hotspot.period_s, hot.prefill_servers) == (2, 5.0, 2)
    assert load_profile("kv-heavy").hotspot is None
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    hinted = config_from_args(parser.parse_args(["--workload", "hotspot"]))
    assert (hinted.decode_hotspot, hinted.hotspot_period_s) == (2, 5.0)
    argv = plan_run(hinted).role_launches(8000, Path("/tmp/x"))[-1].argv
    assert argv[argv.index("--decode-hotspot") + 1] == "2"
    assert "--hotspot-period-s" not in argv  # 5 s is the gateway's default
    given = config_from_args(parser.parse_args(["--workload", "hotspot", "--hotspot-period", "2"]))
    argv = plan_run(given).role_launches(8000, Path("/tmp/x"))[-1].argv
    assert argv[argv.index("--hotspot-period-s") + 1] == "2.0"
    off = config_from_args(parser.parse_args(["--workload", "hotspot", "--decode-hotspot", "0"]))
    assert off.decode_hotspot == 0
    plain = config_from_args(parser.parse_args(["--workload", "coding-agent"]))
    assert plain.decode_hotspot == 0
    assert "--decode-hotspot" not in plan_run(plain).role_launches(8000, Path("/tmp/x"))[-1].argv
    too_many = config_from_args(
        parser.parse_args(["--workload", "hotspot", "--decode-hotspot", "9"])
    )
    with pytest.raises(ConfigError, match="decode_hotspot") as info:
        plan_run(too_many)
    assert "8" in info.value.allowed  # the hotspot run decodes on 2 servers of 4 GPUs


def test_hotspot_hint_names_a_bad_field() -> None:
    data = json.loads((PROFILE_DIR / "hotspot.json").read_text())
    for bad, field in (
        ({"decodes": 0}, "hotspot.decodes"),
        ({"decodes": 2, "period_s": -1}, "hotspot.period_s"),
        ({"decodes": 2, "hot": 1}, "hotspot"),
        ("2", "hotspot"),
    ):
        with pytest.raises(ConfigError) as info:
            parse_profile({**data, "hotspot": bad})
        assert info.value.field.startswith(f"hotspot.{field}"), info.value.field
