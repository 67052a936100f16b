"""Options declared once: a frozen config's field carries its command-line flag, which drives the
parser, the parsed config and the command line that starts a process with it (pure).

A field declared with `option(default, help=...)` is an option named after the field
(`kv_streams` -> `--kv-streams`, or `flag=` to name it otherwise). From the dataclass:

- `add_flags(parser, cls, names)` adds the flags of the fields `names` (every option field
  when None) in that order, to a parser or an argument group;
- `from_args(cls, args, fallback, **given)` builds the config from the parsed flags (its
  `__post_init__` validates);
- `to_argv(cfg)` / `argv_of(cls, **values)` write the flags that parse back to those values.

The flags' argparse names (`dest`) follow the flag (`--duration` -> `duration`), so a field may
keep a name of its own (`duration_s`). An `unset` option's flag defaults to None and the field
then takes a value the caller works out (`fallback`, keyed by dest: a workload profile's hint).
A `nested` option is a dataclass-valued field whose own fields are flags (declared here, beside
the config that holds it). One machinery for every component: the run's config, the load's and
the serving roles' (`parse_with_file` reads a role's `--config` JSON file, whose keys are the
flags' argparse names: `kv_bind`, `prefill_url`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.errors import ConfigError

_KEY = "zcube_lab.option"


@dataclasses.dataclass(frozen=True)
class Option:
    """How one config field appears on the command line.

    `switch`: a flag without a value that sets the (bool) field True (with `unset` too, also
    `--no-<flag>` that sets it False, and left out, the caller's value). `repeat`: the flag may be
    given several times, one item each (the field holds a tuple; no item means the field's
    default). `unset`: the flag's default is None, and the field's value then comes from the
    caller (`from_args`' `fallback`). `required`: the parser refuses a command line without it.
    `parse(raw, field_name)` turns the argparse value (a repeated flag's list of items) into the
    field value, a ConfigError naming `field_name` when it cannot (default: as parsed); `item(v)`
    writes one value as flag text (default: `repr` for floats, `str` otherwise). With
    `omit_default` the flag is left out of the command line while the field has its default.
    `nested`: the options of a dataclass-valued field's own fields, in flag order."""

    flag: str = ""
    help: str | None = None
    type: Callable[[str], Any] | None = None
    choices: Sequence[Any] | None = None
    metavar: str | None = None
    switch: bool = False
    repeat: bool = False
    unset: bool = False
    required: bool = False
    omit_default: bool = False
    parse: Callable[[Any, str], Any] | None = None
    item: Callable[[Any], str] | None = None
    nested: tuple[tuple[str, Option], ...] = ()


def option(default: Any = dataclasses.MISSING, **spec: Any) -> Any:
    """A dataclass field with `default` (or `default_factory=`) that is also an option."""
    factory = spec.pop("default_factory", dataclasses.MISSING)
    return dataclasses.field(
        default=default, default_factory=factory, metadata={_KEY: Option(**spec)}
    )


@dataclasses.dataclass(frozen=True)
class _Flag:
    """One flag: the field (or nested field) it sets, its option and its default value."""

    name: str
    option: Option
    default: Any

    @property
    def flag(self) -> str:
        return self.option.flag or "--" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def parser_default(self) -> Any:
        if self.option.switch:
            return None if self.option.unset else False
        if self.option.repeat:
            return []
        return None if self.option.unset else self.default

    def scalar_type(self) -> Callable[[str], Any] | None:
        """The argparse type: as declared, else that of the default (`str` needs none)."""
        if self.option.type is not None or self.option.repeat or self.option.switch:
            return self.option.type
        kind = type(self.default)
        return kind if kind in (int, float) else None

    def value(self, args: Any, fallback: Mapping[str, Any]) -> Any:
        """The field value from the parsed flags (a missing dest reads as the flag's default)."""
        raw = getattr(args, self.dest, self.parser_default)
        if raw is None and self.option.unset:
            return fallback.get(self.dest, self.default)
        if self.option.parse is not None:
            value = self.option.parse(raw, self.name)
        else:
            value = tuple(raw or ()) if self.option.repeat else raw
        return self.default if self.option.repeat and not value else value

    def argv(self, value: Any) -> list[str]:
        """The flag and its text for `value` (nothing for None, a switch off, no items)."""
        opt = self.option
        if value is None or value == () or (opt.omit_default and value == self.default):
            return []
        if opt.switch:
            if opt.unset and not value:  # left out, the caller's value would apply
                return ["--no-" + self.flag.removeprefix("--")]
            return [self.flag] if value else []
        out: list[str] = []
        for one in value if opt.repeat else (value,):
            out += [self.flag, self._text(one)]
        return out

    def _text(self, value: Any) -> str:
        if self.option.item is not None:
            return self.option.item(value)
        return repr(value) if isinstance(value, float) else str(value)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _fields(cls_or_cfg: Any) -> dict[str, tuple[dataclasses.Field, Option]]:
    return {
        f.name: (f, f.metadata[_KEY]) for f in dataclasses.fields(cls_or_cfg) if _KEY in f.metadata
    }


def _flags_of(f: dataclasses.Field, opt: Option) -> Iterator[_Flag]:
    """The flags of one field: itself, or each of its nested fields."""
    if not opt.nested:
        yield _Flag(f.name, opt, _default(f))
        return
    inner = _default(f)
    for name, sub in opt.nested:
        yield _Flag(name, sub, getattr(inner, name))


def _chosen(cls: Any, names: Sequence[str] | None) -> list[tuple[dataclasses.Field, Option]]:
    table = _fields(cls)
    if names is None:
        return list(table.values())
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"{cls.__name__} has no option field {unknown}")
    return [table[n] for n in names]


def flag_names(cls: Any) -> list[str]:
    """Every flag the option fields of `cls` declare, in field order."""
    return [fl.flag for f, opt in _fields(cls).values() for fl in _flags_of(f, opt)]


def add_flags(
    parser: Any,
    cls: Any,
    names: Sequence[str] | None = None,
    *,
    hidden: Collection[str] = (),
    helps: Mapping[str, str] | None = None,
    env_prefix: str = "",
    config_file: bool = False,
) -> None:
    """Add the flags of the option fields `names` of `cls` (all, in field order, when None)
    to `parser` (a parser or an argument group). `hidden`: fields whose flag is accepted but
    left out of the help; `helps`: a command's own help text for some fields; `env_prefix`:
    each flag also read from the environment variable `<prefix><DEST>` (Locust's parser);
    `config_file`: first `--config`, a JSON file of any of them (`parse_with_file`)."""
    if config_file:
        parser.add_argument("--config", help="JSON file with any of these options (flags win)")
    for f, opt in _chosen(cls, names):
        for fl in _flags_of(f, opt):
            text = (helps or {}).get(f.name, fl.option.help)
            kwargs: dict[str, Any] = {
                "help": argparse.SUPPRESS if f.name in hidden else text,
                "default": fl.parser_default,
                "metavar": fl.option.metavar,
                "choices": fl.option.choices,
                "type": fl.scalar_type(),
            }
            if fl.option.switch and fl.option.unset:
                kwargs = {
                    "help": kwargs["help"],
                    "action": argparse.BooleanOptionalAction,
                    "default": None,
                }
            elif fl.option.switch:
                kwargs = {"help": kwargs["help"], "action": "store_true"}
            elif fl.option.repeat:
                kwargs["action"] = "append"
            if fl.option.required:
                kwargs["required"] = True
            if env_prefix:
                kwargs["env_var"] = env_prefix + fl.dest.upper()
            parser.add_argument(
                fl.flag, **{k: v for k, v in kwargs.items() if v is not None or k == "default"}
            )


def from_args(cls: Any, args: Any, fallback: Mapping[str, Any] | None = None, **given: Any) -> Any:
    """A `cls` config from parsed flags: `given` sets fields outright (those without a flag
    too), `fallback` (by dest) the `unset` flags left out; `cls.__post_init__` validates."""
    values: dict[str, Any] = dict(given)
    for f, opt in _fields(cls).values():
        if f.name in given:
            continue
        if opt.nested:
            values[f.name] = nested_from_args(cls, f.name, args, fallback)
        else:
            values[f.name] = _Flag(f.name, opt, _default(f)).value(args, fallback or {})
    return cls(**values)


def nested_from_args(
    cls: Any, name: str, args: Any, fallback: Mapping[str, Any] | None = None
) -> Any:
    """The value of the `nested` option field `name` of `cls` from parsed flags (its `unset`
    flags left out from `fallback`): a config's part, for a command that needs only that."""
    f, opt = _chosen(cls, [name])[0]
    if not opt.nested:
        raise ValueError(f"{cls.__name__}.{name} is not a nested option field")
    inner = {fl.name: fl.value(args, fallback or {}) for fl in _flags_of(f, opt)}
    return type(_default(f))(**inner)


def to_argv(cfg: Any, names: Sequence[str] | None = None) -> list[str]:
    """The flags (no program) of the option fields `names` (all when None) of `cfg` that parse
    back to its values."""
    argv: list[str] = []
    for f, opt in _chosen(cfg, names):
        value = getattr(cfg, f.name)
        for fl in _flags_of(f, opt):
            argv += fl.argv(getattr(value, fl.name) if opt.nested else value)
    return argv


def argv_of(cls: Any, **values: Any) -> list[str]:
    """The flags of `cls` that set these fields to these values (the rest left to their
    defaults), in field order: a command line written by a benchmark, say."""
    argv: list[str] = []
    for f, opt in _chosen(cls, [n for n in _fields(cls) if n in values]):
        for fl in _flags_of(f, opt):
            argv += fl.argv(getattr(values[f.name], fl.name) if opt.nested else values[f.name])
    unknown = sorted(set(values) - set(_fields(cls)))
    if unknown:
        raise ValueError(f"{cls.__name__} has no option field {unknown}")
    return argv


def parse_with_file(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> Any:
    """Parse flags; a `--config` JSON file (keys: the flags' argparse names) supplies the
    values of flags not given, a ConfigError naming a key no flag has."""
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
