"""An `unset` switch: `--flag` sets it, `--no-flag` clears it, left out the caller's value
applies; written back, a False value says `--no-flag` so the caller's cannot override it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from zcube_lab.core.options import add_flags, from_args, option, to_argv


@dataclass(frozen=True)
class _Cfg:
    paused: bool = option(False, switch=True, unset=True, help="h")
    plain: bool = option(False, switch=True, help="h")


def _parse(argv: list[str], fallback: dict) -> _Cfg:
    parser = argparse.ArgumentParser()
    add_flags(parser, _Cfg)
    return from_args(_Cfg, parser.parse_args(argv), fallback)


def test_given_cleared_or_the_callers() -> None:
    assert _parse(["--paused"], {"paused": False}).paused
    assert not _parse(["--no-paused"], {"paused": True}).paused
    assert _parse([], {"paused": True}).paused
    assert not _parse([], {}).paused  # no fallback: the field's default


def test_written_back_it_parses_to_the_same_value_whatever_the_caller_says() -> None:
    for cfg in (_Cfg(paused=True), _Cfg(paused=False, plain=True)):
        assert _parse(to_argv(cfg), {"paused": not cfg.paused}) == cfg
    assert to_argv(_Cfg()) == ["--no-paused"]
