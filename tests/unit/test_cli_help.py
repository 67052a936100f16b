"""Every subcommand's --help: one default per option, none that says nothing, and the options
that `compare` and `sweep` share with `up` and `run` declared once."""

from __future__ import annotations

import argparse
import re

import pytest

from zcube_lab.cli import COMMANDS, build_parser

# A default statement: "(default ...", "; default ...", ", default ..." (not "default or ...").
DEFAULT = re.compile(r"[(;,]\s*default\b")
EMPTY = ("(default: None)", "(default: [])", "(default: ())", "(default: False)", "(default: )")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _option_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each listed option's help as --help prints it (defaults expanded), whitespace folded."""
    formatter = parser._get_formatter()
    out = {}
    for action in parser._actions:
        if action.help is argparse.SUPPRESS or not action.option_strings:
            continue
        text = formatter._expand_help(action) if action.help is not None else ""
        out[action.option_strings[-1]] = " ".join(text.split())
    return out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_shows_one_default_at_most(command: str) -> None:
    sp = _subparsers()[command]
    doubled = {
        opt: text for opt, text in _option_help(sp).items() if len(DEFAULT.findall(text)) > 1
    }
    assert doubled == {}
    page = " ".join(sp.format_help().split())
    assert [e for e in EMPTY if e in page] == []


def test_the_check_would_catch_what_argparse_does_by_itself() -> None:
    plain = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    plain.add_argument("--rate", type=float, help="mean requests/s (default: the profile's)")
    plain.add_argument("--fail", action="append", default=[], help="inject a failure")
    texts = _option_help(plain)
    assert len(DEFAULT.findall(texts["--rate"])) == 2
    assert "(default: [])" in texts["--fail"]


def test_options_with_a_value_to_show_still_show_it() -> None:
    texts = _option_help(_subparsers()["run"])
    assert texts["--duration"].endswith("(default: 60.0)")
    assert texts["--rate"] == "mean requests/s (default: the profile's)"
    assert "default" not in texts["--burstiness"]  # None: nothing to show
    assert "default" not in _option_help(_subparsers()["up"])["--json"]  # a flag


def test_sweep_does_not_list_the_rate_it_refuses() -> None:
    sweep = _subparsers()["sweep"]
    assert "--rate " not in sweep.format_help().replace("--rates", "")
    assert "--rate" not in _option_help(sweep)  # hidden, so `--rate 5` is refused, not --rates


def test_compare_and_sweep_take_the_size_options_of_up_and_run() -> None:
    subs = _subparsers()
    sizes = set(_option_help(subs["up"])) & set(_option_help(subs["run"]))
    sizes &= {"--n", "--m", "--servers", "--gpus-per-server", "--spines", "--oversubscription"}
    sizes |= {"--servers-per-leaf", "--nic-gbps", "--planes"}
    for command in ("compare", "sweep"):
        assert sizes <= set(_option_help(subs[command])), command


def test_report_only_reads_the_same_in_compare_and_sweep() -> None:
    subs = _subparsers()
    compare = _option_help(subs["compare"])["--report-only"]
    sweep = _option_help(subs["sweep"])["--report-only"]
    for text in (compare, sweep):
        assert text.startswith("run nothing: rebuild the report (")
    assert "run folders" in compare and "sweep folder" in sweep


def test_slo_help_says_which_percentile_a_bare_target_is() -> None:
    texts = _option_help(_subparsers()["sweep"])
    assert "tpot's p90" in texts["--slo"]
    assert "tpot=50ms means tpot_p90=50ms" in texts["--attainment"]


def _specs(*argv: str) -> dict[str, dict[str, object]]:
    from zcube_lab.cli.commands.compare import variants_from_args

    _kinds, specs, _variants, _baseline = variants_from_args(build_parser().parse_args(argv))
    return {kind: dict(spec.params) for kind, spec in specs.items()}


def test_compare_sizes_apply_to_the_fabrics_that_take_them() -> None:
    # the structure-keeping default: 2 GPUs per server, 2 servers per A switch and per rail leaf
    assert _specs("compare") == {
        "zcube": {"n": 4, "gpus_per_server": 2},
        "roft": {"servers": 8, "gpus_per_server": 2, "servers_per_leaf": 2, "spines": 2},
    }
    # the old scale-down stays reachable: one server per A switch, one leaf per rail
    old = _specs("compare", "--gpus-per-server", "4", "--servers-per-leaf", "4")
    assert old == {
        "zcube": {"n": 4, "gpus_per_server": 4},
        "roft": {"servers": 4, "gpus_per_server": 4, "servers_per_leaf": 4, "spines": 2},
    }
    # 64 GPUs with 4 spines: one link per leaf-spine pair
    sized = _specs("compare", "--gpus", "64", "--spines", "4", "--m", "2")
    assert sized["roft"] == {
        "servers": 32,
        "gpus_per_server": 2,
        "servers_per_leaf": 4,
        "spines": 4,
    }
    assert sized["zcube"] == {"n": 8, "gpus_per_server": 2, "m": 2}
    argv = ("--fabrics", "roft,clos", "--servers", "2", "--gpus-per-server", "8")
    assert _specs("sweep", *argv, "--servers-per-leaf", "2")["clos"] == {
        "servers": 2,
        "gpus_per_server": 8,
        "spines": 2,
        "servers_per_leaf": 2,
    }


@pytest.mark.parametrize(
    ("argv", "field", "hint"),
    [
        (("compare", "--gpus", "16", "--n", "8"), "fabrics", "GPU hosts: zcube 64, roft 16"),
        (("sweep", "--fabrics", "roft,clos", "--m", "2"), "m", "a size option of zcube"),
        (("compare", "--fabrics", "zcube", "--planes", "2"), "planes", "of roft, none of them"),
        # sizes that cannot keep the structure: named, with the sizes that fit
        (("compare", "--gpus", "25"), "gpus", "one of [16, 36, 64, 81, 100, 144]"),
        (("compare", "--gpus-per-server", "3"), "gpus_per_server", "one of [1, 2, 4, 8, 16]"),
        (
            ("sweep", "--fabrics", "roft", "--servers", "2", "--gpus-per-server", "8"),
            "servers",
            "--servers-per-leaf",
        ),
        (("compare", "--gpus", "64", "--spines", "8"), "spines", "one of [1, 2, 4]"),
    ],
)
def test_compare_refuses_sizes_that_fit_no_fabric_or_differ(
    argv: tuple[str, ...], field: str, hint: str
) -> None:
    from zcube_lab.core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        _specs(*argv)
    assert err.value.field == field and hint in str(err.value)


def test_a_prefix_of_an_option_is_refused_not_read_as_the_longer_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as e:  # --gpus-per must not be read as --gpus-per-server
        parser.parse_args(["run", "--fabric", "zcube", "--gpus-per", "2"])
    assert e.value.code == 2
    assert "unrecognized arguments: --gpus-per 2" in capsys.readouterr().err
    assert parser.parse_args(["run", "--gpus", "16"]).gpus == 16
    assert parser.parse_args(["run", "--gpus-per-server", "2"]).gpus_per_server == 2
