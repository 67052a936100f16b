"""The lossless mode in a run's results: the summary's section and the verdict's rules (the
agent is judged, the pauses are not)."""

from __future__ import annotations

from zcube_lab.core.clock import Clock
from zcube_lab.emulator.results.lossless.victimtable import lossless_fact
from zcube_lab.emulator.results.run.summary import LosslessFigures, PortPauses
from zcube_lab.emulator.verdict.limits import Limits
from zcube_lab.emulator.verdict.netstats import QDISC_DROPS, STALLED, NetEvent
from zcube_lab.emulator.verdict.network import LosslessEvidence, NetworkEvidence, judge_network


def test_summary_lossless_section_round_trips_and_reads_as_a_line() -> None:
    figures = LosslessFigures(
        ports={"b0-eth3": PortPauses(3, 0.5), "h2-eth1": PortPauses(1, 0.25)},
        reactions=4,
        reaction_p50_s=0.001,
        reaction_p99_s=0.0025,
        reaction_max_s=0.003,
        poll_p99_s=0.0012,
        agent_cores=0.08,
        errors=0,
    )
    assert LosslessFigures.from_dict(figures.to_dict()) == figures
    assert (figures.pauses, figures.paused_s) == (4, 0.75)
    assert lossless_fact(figures) == (
        "lossless: 4 pauses on 2 ports, 0.75 s paused in all; most paused b0-eth3 (3x, 0.50 s); "
        "agent reaction p99 2.50 ms, 0.08 cores"
    )
    assert figures.brief()["agent_reaction_p99_ms"] == 2.5


def test_verdict_judges_the_agent_not_the_pauses() -> None:
    stalled = NetEvent(0.0, 1.0, "b0-eth3", STALLED, 1, {"mbps": 0.0})
    drop = NetEvent(0.0, 1.0, "a0-eth1", QDISC_DROPS, 2, {})
    ok = LosslessEvidence(5, 0.002, 0, True, frozenset({"b0-eth3"}))
    judged = judge_network(
        NetworkEvidence(events=(stalled,), switch_ports=frozenset({"a0-eth1"}), lossless=ok),
        Limits(),
    )
    assert judged.reasons == ()  # a paused port's held queue is the fabric's
    slow = LosslessEvidence(5, 0.009, 1, False, frozenset(), "b0-eth3: gone")
    reasons = judge_network(
        NetworkEvidence(events=(drop,), switch_ports=frozenset({"a0-eth1"}), lossless=slow),
        Limits(lossless_reaction_s=0.005),
    ).reasons
    assert any(r.startswith("a0-eth1:") for r in reasons)  # a lossless port may not drop
    assert any("exited before the end" in r for r in reasons)
    assert any("1 netlink or socket errors (last: b0-eth3: gone)" in r for r in reasons)
    assert any("reaction p99 9.00 ms over 5 ms (5 congestions)" in r for r in reasons)
    lossy = judge_network(NetworkEvidence(events=(drop,), switch_ports=frozenset({"a0-eth1"})),
                          Limits())  # fmt: skip
    assert lossy.reasons == ()  # without the mode a switch port's drop is the fabric's


def test_lossless_option_reaches_the_run_config_and_config_json() -> None:
    from zcube_lab.cli import build_parser
    from zcube_lab.cli.commands.run import config_from_args
    from zcube_lab.core.errors import ConfigError
    from zcube_lab.emulator.experiment.plan import RunConfig

    parser = build_parser()
    assert config_from_args(parser.parse_args(["run", "--lossless"])).lossless is True
    config = config_from_args(parser.parse_args(["run"]))
    assert config.lossless is False and config.to_dict()["lossless"] is False
    compare = parser.parse_args(["compare", "--lossless"])
    assert compare.lossless is True
    assert parser.parse_args(["up", "--lossless"]).lossless is True
    lossless = config_from_args(parser.parse_args(["run", "--lossless"]))
    assert lossless.to_dict()["lossless"] is True
    try:
        RunConfig(fabric=lossless.fabric, lossless=True, machines=("198.19.254.1", "198.19.254.2"))
    except ConfigError as exc:
        assert "lossless" in str(exc)
    else:
        raise AssertionError("lossless over several machines was accepted")
    assert RunConfig(fabric=lossless.fabric, lossless=True, dilation=2.0).dilation == 2.0


def test_the_agents_times_are_reported_in_modelled_seconds() -> None:
    from zcube_lab.emulator.experiment.runner import lossless_figures
    from zcube_lab.emulator.lab.lossless import AgentReport

    report = AgentReport(
        ports={"b0-eth3": {"pauses": 3, "paused_s": 0.5}}, reactions=3,
        reaction_p50_s=0.001, reaction_p99_s=0.002, reaction_max_s=0.003,
    )  # fmt: skip
    at_k2 = lossless_figures(report, Clock(2.0))
    assert at_k2.ports["b0-eth3"] == PortPauses(3, 0.25)
    assert (at_k2.reaction_p50_s, at_k2.reaction_p99_s) == (0.0005, 0.001)
    assert lossless_figures(report).ports["b0-eth3"] == PortPauses(3, 0.5)


def test_lab_options_refuse_lossless_without_shaping() -> None:
    import pytest

    from zcube_lab.core.errors import ConfigError
    from zcube_lab.emulator.lab.options import LabOptions

    with pytest.raises(ConfigError):
        LabOptions(lossless=True, shaped=False)
    with pytest.raises(ConfigError):
        LabOptions(lossless=True, lossless_poll_s=0.0)
    assert LabOptions(lossless=True).lossless


def test_run_summary_takes_the_agents_report() -> None:
    from zcube_lab.emulator.experiment.runner import lossless_figures
    from zcube_lab.emulator.lab.lossless import AgentReport

    report = AgentReport(
        ports={"b0-eth3": {"pauses": 2, "paused_s": 0.4}},
        reactions=2,
        reaction_p50_s=0.001,
        reaction_p99_s=0.002,
        reaction_max_s=0.002,
        poll_p99_s=0.0011,
        cpu_s=0.5,
        wall_s=10.0,
    )
    figures = lossless_figures(report)
    assert figures.ports == {"b0-eth3": PortPauses(2, 0.4)}
    assert (figures.agent_cores, figures.reaction_p99_s, figures.errors) == (0.05, 0.002, 0)
