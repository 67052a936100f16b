"""Placeholder: filled in by the fabric foundation work."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options yet."""


def run(args: argparse.Namespace) -> int:
    """Not built yet."""
    print("not built yet")
    return 1
