"""Role options declared once: a config dataclass field carries its flag, and drives the parser,
the parsed config and the command line.

A field declared with `option(default, help=...)` is a command-line option named after the
field (`kv_streams` -> `--kv-streams`, or `flag=` to name it otherwise). From the dataclass:
`add_flags(parser, cls)` adds every option's flag, `from_args(cls, namespace)` builds the
config (then validated by its `__post_init__`), and `to_argv(cfg)` writes the flags that parse
back to an equal config. `parse_with_file` reads a `--config` JSON file whose keys are the
flags' argparse names (`kv_bind`, `prefill_url`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.errors import ConfigError

_KEY = "zcube_option"


@dataclasses.dataclass(frozen=True)
class Option:
    """How one config field appears on the command line.

    `repeat`: the flag may be given several times (`action="append"`), each time one item; no
    item (or none that parses) means the field's default. `parse(raw, field_name)` turns the
    argparse value into the field value (default: as parsed); `item(v)` writes one flag value
    (default: `repr` for floats, `str` otherwise). With `omit_default` the flag is left out of
    the command line while the field has its default (an option that is off stays off)."""

    flag: str = ""
    help: str | None = None
    type: Callable[[str], Any] | None = None
    repeat: bool = False
    required: bool = False
    omit_default: bool = False
    parse: Callable[[Any, str], Any] | None = None
    item: Callable[[Any], str] | None = None


def option(default: Any, **spec: Any) -> Any:
    """A dataclass field with `default` that is also a command-line option (see `Option`)."""
    return dataclasses.field(default=default, metadata={_KEY: Option(**spec)})


def _options(cls_or_cfg: Any) -> list[tuple[dataclasses.Field, Option]]:
    return [(f, f.metadata[_KEY]) for f in dataclasses.fields(cls_or_cfg) if _KEY in f.metadata]


def _flag(f: dataclasses.Field, opt: Option) -> str:
    return opt.flag or "--" + f.name.replace("_", "-")


def _dest(f: dataclasses.Field, opt: Option) -> str:
    return _flag(f, opt).removeprefix("--").replace("-", "_")


def _scalar_type(f: dataclasses.Field, opt: Option) -> Callable[[str], Any] | None:
    """The argparse type: as declared, else that of the default (`str` needs none)."""
    if opt.type is not None or opt.repeat:
        return opt.type
    kind = type(f.default)
    return kind if kind in (int, float) else None


def add_flags(parser: argparse.ArgumentParser, cls: type, *, config_file: bool = True) -> None:
    """Add a flag for every option field of `cls`, in field order; first `--config` (a JSON
    file for `parse_with_file`) unless `config_file` is False."""
    if config_file:
        parser.add_argument("--config", help="JSON file with any of these options (flags win)")
    for f, opt in _options(cls):
        kwargs: dict[str, Any] = {"help": opt.help}
        if opt.repeat:
            kwargs.update(action="append", default=None)
        else:
            kwargs.update(default=f.default, type=_scalar_type(f, opt))
        if opt.required:
            kwargs["required"] = True
        parser.add_argument(_flag(f, opt), **{k: v for k, v in kwargs.items() if v is not None})


def from_args(cls: type, args: argparse.Namespace) -> Any:
    """A `cls` config from parsed flags (its `__post_init__` validates)."""
    values: dict[str, Any] = {}
    for f, opt in _options(cls):
        raw = getattr(args, _dest(f, opt))
        value = opt.parse(raw, f.name) if opt.parse is not None else raw
        if opt.repeat and not value:
            value = f.default
        values[f.name] = value
    return cls(**values)


def _write(f: dataclasses.Field, opt: Option, value: Any) -> str:
    if opt.item is not None:
        return opt.item(value)
    return repr(value) if _scalar_type(f, opt) is float else str(value)


def to_argv(cfg: Any) -> list[str]:
    """The flags (no program) that parse back to `cfg`."""
    argv: list[str] = []
    for f, opt in _options(cfg):
        value = getattr(cfg, f.name)
        if opt.omit_default and value == f.default:
            continue
        for item in value if opt.repeat else (value,):
            argv += [_flag(f, opt), _write(f, opt, item)]
    return argv


def parse_with_file(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace:
    """Parse flags; a `--config` JSON file supplies defaults for flags not given."""
    args = parser.parse_args(argv)
    if not getattr(args, "config", None):
        return args
    path = Path(args.config)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("config", str(path), f"a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError("config", str(path), "a JSON object")
    known = {a.dest for a in parser._actions}
    for key in data:
        if key not in known:
            raise ConfigError(key, data[key], "one of " + ", ".join(sorted(known - {"help"})))
    parser.set_defaults(**data)
    return parser.parse_args(argv)
