"""Failure specifications and their schedule (pure: no root, no clock).

- `parse_faults(texts, fabric, duration_s, seed)` reads `--fail` specifications into `Fault`s:
    `link A1-B2 at 30s for 10s`      one link (all parallel links of the pair; `#k` picks one)
    `switch leaf1 at 20s for 5s`     every port of one switch
    `flaps 3 seed 7 for 4s from 10s to 40s`   3 random switch-to-switch links, onsets drawn
                                     uniformly in the window (default 20%-70% of the run)
    `engine decode-3 at 20s`         one engine process (prefill or decode, by its plan name)
                                     killed for the rest of the run
    `controller at 20s for 10s`      the controller stopped, then started again
    `vswitchd at 20s`                ovs-vswitchd killed and started again (the run is then
                                     not trustworthy)
  Times count from the start of the load; without `for` a fault lasts until the run ends
  (an engine or vswitchd fault takes no `for`: the engine stays dead, vswitchd comes back at
  once).
  A `zcube:` (or `roft:`, `clos:`) prefix applies a specification to that fabric only, so one
  `compare` can break a comparable link on each fabric.
- `schedule(faults)` turns them into ordered interface transitions. Breaking a link sets the
  root-namespace (switch) ends of its veth pair down; a veth whose peer is down loses its
  carrier, so both switches (and a host at the far end) see the link go down. Overlapping faults
  on one interface are counted, so it comes back up only when the last one ends. A process
  fault (engine, controller, vswitchd) changes no interface: its transitions carry its kind and
  target for the injector.

The injector that carries a schedule out is `zcube_lab.emulator.lab.injector`; the fault report a
run's records give is `zcube_lab.emulator.results.run.fault_report`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import BUILDERS
from zcube_lab.core.fabric.description import Fabric, Link

GRAMMAR = (
    "'link X-Y[#k] at T [for D]', 'switch X at T [for D]', "
    "'flaps N [seed S] [for D] [from T1 to T2]', 'engine NAME at T', "
    "'controller at T [for D]' or 'vswitchd at T' (times like 30s, 1.5s or 500ms)"
)
FAULT_KINDS = ("link", "switch", "engine", "controller", "vswitchd")
PROCESS_KINDS = ("engine", "controller", "vswitchd")  # faults of a process, not of links
FLAP_DEFAULT_S = 5.0
ACTIVE_METRIC = "zcube_fault_active"


@dataclass(frozen=True)
class Fault:
    """One failure: a label for reports, when it starts and ends (seconds since load start; end
    None = until the run ends), and the fabric links it cuts."""

    label: str
    kind: str  # one of FAULT_KINDS
    at_s: float
    for_s: float | None
    links: tuple[Link, ...]
    target: str = ""  # the engine a process fault kills ("" for the others)

    @property
    def end_s(self) -> float | None:
        return None if self.for_s is None else self.at_s + self.for_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "kind": self.kind,
            "at_s": self.at_s,
            "for_s": self.for_s,
            "links": [f"{lk.node1}:{lk.port1}-{lk.node2}:{lk.port2}" for lk in self.links],
        }


def _seconds(token: str, field: str, text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)?", token)
    if m is None:
        raise ConfigError(f"fail.{field}", text, f"a time like 30s, 1.5s or 500ms in {GRAMMAR}")
    value = float(m.group(1))
    return value / 1000 if m.group(2) == "ms" else value


def _options(tokens: list[str], allowed: set[str], text: str) -> dict[str, str]:
    """Keyword-value pairs (`at 30s for 10s`), each keyword at most once."""
    out: dict[str, str] = {}
    if len(tokens) % 2:
        raise ConfigError("fail", text, GRAMMAR)
    for key, value in zip(tokens[::2], tokens[1::2], strict=True):
        if key not in allowed or key in out:
            raise ConfigError("fail", text, f"keywords {sorted(allowed)} once each; {GRAMMAR}")
        out[key] = value
    return out


def switch_links(fabric: Fabric) -> list[Link]:
    """Links between two switches (the ones flaps choose from)."""
    return [lk for lk in fabric.links if fabric.is_switch(lk.node1) and fabric.is_switch(lk.node2)]


def _links_between(fabric: Fabric, a: str, b: str) -> list[Link]:
    return [lk for lk in fabric.links if {lk.node1, lk.node2} == {a, b}]


def _timing(opts: Mapping[str, str], text: str, duration_s: float) -> tuple[float, float | None]:
    if "at" not in opts:
        raise ConfigError("fail.at", text, f"a start time ('at 30s'); {GRAMMAR}")
    at = _seconds(opts["at"], "at", text)
    if at >= duration_s:
        raise ConfigError("fail.at", text, f"a start before the end of the load ({duration_s:g}s)")
    length = _seconds(opts["for"], "for", text) if "for" in opts else None
    if length is not None and length <= 0:
        raise ConfigError("fail.for", text, "a duration > 0")
    return at, length


def parse_fault(
    text: str,
    fabric: Fabric,
    duration_s: float,
    seed: int = 1,
    engines: Sequence[str] = (),
) -> list[Fault]:
    """One `--fail` specification as faults (flaps expand to several); `engines` are the
    plan's engine names an `engine` fault may name."""
    tokens = text.strip().lower().split()
    if not tokens:
        raise ConfigError("fail", text, GRAMMAR)
    kind, rest = tokens[0], tokens[1:]
    if kind == "engine":
        if not rest:
            raise ConfigError("fail.engine", text, f"an engine name after 'engine'; {GRAMMAR}")
        name = rest[0]
        if name not in engines:
            raise ConfigError("fail.engine", name, f"one of this run's engines {list(engines)}")
        opts = _options(rest[1:], {"at"}, text)
        at, _ = _timing(opts, text, duration_s)
        return [Fault(f"engine {name}", "engine", at, None, (), name)]
    if kind in ("controller", "vswitchd"):
        opts = _options(rest, {"at", "for"} if kind == "controller" else {"at"}, text)
        at, length = _timing(opts, text, duration_s)
        return [Fault(kind, kind, at, length, ())]
    if kind == "link":
        if not rest:
            raise ConfigError("fail", text, GRAMMAR)
        target, opts = rest[0], _options(rest[1:], {"at", "for"}, text)
        name, _, which = target.partition("#")
        ends = name.split("-")
        if len(ends) != 2:
            raise ConfigError("fail.link", target, "two node names joined by '-', e.g. a1-b2")
        links = _links_between(fabric, *ends)
        if not links:
            raise ConfigError(
                "fail.link",
                target,
                f"a pair of linked nodes of this {fabric.kind} fabric, e.g. "
                + ", ".join(f"{lk.node1}-{lk.node2}" for lk in switch_links(fabric)[:4]),
            )
        if which:
            if not which.isdigit() or int(which) >= len(links):
                raise ConfigError("fail.link", target, f"#0..#{len(links) - 1} after the pair")
            links = [links[int(which)]]
        at, length = _timing(opts, text, duration_s)
        return [Fault(f"link {target}", "link", at, length, tuple(links))]
    if kind == "switch":
        if not rest:
            raise ConfigError("fail", text, GRAMMAR)
        name, opts = rest[0], _options(rest[1:], {"at", "for"}, text)
        if not fabric.is_switch(name):
            names = [s.name for s in fabric.switches]
            raise ConfigError("fail.switch", name, f"one of {names}")
        links = tuple(lk for lk in fabric.links if name in (lk.node1, lk.node2))
        at, length = _timing(opts, text, duration_s)
        return [Fault(f"switch {name}", "switch", at, length, links)]
    if kind == "flaps":
        if not rest or not rest[0].isdigit() or int(rest[0]) < 1:
            raise ConfigError("fail.flaps", text, f"a count >= 1 after 'flaps'; {GRAMMAR}")
        count = int(rest[0])
        opts = _options(rest[1:], {"seed", "for", "from", "to"}, text)
        if "seed" in opts and not opts["seed"].isdigit():
            raise ConfigError("fail.seed", opts["seed"], "a non-negative integer")
        rng = random.Random(int(opts.get("seed", seed)))
        length = _seconds(opts["for"], "for", text) if "for" in opts else FLAP_DEFAULT_S
        lo = _seconds(opts["from"], "from", text) if "from" in opts else 0.2 * duration_s
        hi = _seconds(opts["to"], "to", text) if "to" in opts else 0.7 * duration_s
        if not 0 <= lo <= hi < duration_s or length <= 0:
            raise ConfigError(
                "fail.flaps", text, f"0 <= from <= to < the load's {duration_s:g}s and for > 0"
            )
        candidates = switch_links(fabric)
        if not candidates:
            raise ConfigError("fail.flaps", text, "a fabric with switch-to-switch links")
        out = []
        for _ in range(count):
            lk = rng.choice(candidates)
            at = round(rng.uniform(lo, hi), 3)
            out.append(Fault(f"flap {lk.node1}-{lk.node2}", "link", at, length, (lk,)))
        return sorted(out, key=lambda f: f.at_s)
    raise ConfigError("fail", text, GRAMMAR)


def parse_faults(
    texts: Iterable[str],
    fabric: Fabric,
    duration_s: float,
    seed: int = 1,
    engines: Sequence[str] = (),
) -> list[Fault]:
    """Every `--fail` specification that applies to this fabric, in start order (`engines`:
    the names an `engine` fault may use)."""
    faults = []
    for text in texts:
        head, sep, rest = text.partition(":")
        if sep and head.strip().lower() in BUILDERS:
            if head.strip().lower() != fabric.kind:
                continue
            text = rest
        faults += parse_fault(text, fabric, duration_s, seed, engines)
    # Labels key the records and the metric: a second fault on the same target gets "(2)".
    seen: dict[str, int] = {}
    unique = []
    for f in sorted(faults, key=lambda f: f.at_s):
        seen[f.label] = seen.get(f.label, 0) + 1
        if seen[f.label] > 1:
            f = Fault(f"{f.label} ({seen[f.label]})", f.kind, f.at_s, f.for_s, f.links, f.target)
        unique.append(f)
    return unique


@dataclass(frozen=True)
class Transition:
    """At `t_s`, fault `fault` starts ("down") or ends ("up"); `interfaces` actually change
    state then (an interface another fault still holds stays down)."""

    t_s: float
    action: str
    fault: str
    interfaces: tuple[str, ...]
    kind: str = "link"  # the fault's kind: a process fault's injector acts on it
    target: str = ""


def schedule(fabric: Fabric, faults: Sequence[Fault]) -> list[Transition]:
    """Ordered transitions; ends come before starts at the same instant."""
    events: list[tuple[float, int, Fault]] = []
    for f in faults:
        events.append((f.at_s, 1, f))
        if f.end_s is not None:
            events.append((f.end_s, 0, f))
    events.sort(key=lambda e: (e[0], e[1]))
    holders: dict[str, int] = {}
    out = []
    for t, starts, f in events:
        changed = []
        for name in fabric.switch_interfaces(f.links):
            before = holders.get(name, 0)
            holders[name] = before + (1 if starts else -1)
            if (before == 0) if starts else (holders[name] == 0):
                changed.append(name)
        action = "down" if starts else "up"
        out.append(Transition(t, action, f.label, tuple(changed), f.kind, f.target))
    return out
