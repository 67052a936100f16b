"""Workload profiles: validated, frozen descriptions of a traffic mix, loaded from data files.

A profile is a JSON file in `zcube_lab/workloads/profiles/` (named by its file stem: `coding-agent`,
`chat`, `rail-aligned`, `trace`) or any path to such a file. Keys:

- `name`, `description`: identity and one line for humans;
- `model`: the served model name requests carry; `endpoint`: `completions` or `chat`;
- `placement`: the layout hint for the orchestrator, named as
  `zcube_lab.core.fabric.placement.LAYOUTS`: `default` (the lab's default layout: the router
  pairs any prefill with any decode, so KV transfers usually cross rails) or `rail-aligned`
  (each prefill is paired with a decode on its own rail, so KV traffic stays on rail switches:
  the case a rail-optimised fabric is built for);
- `length_scale`: multiplies every token length (prompts, outputs, session growth, trace
  lengths); tests and small emulated clusters shrink profiles with it;
- `arrival`: default arrival process (`process`, `rate`, `burstiness`, `stages`);
- `prompt`, `output`: lognormal length distributions (`median`, `sigma`, `min`, `max` tokens);
- `session` (optional): multi-step sessions whose context grows (`steps_min`, `steps_max`,
  `append`: tokens a step adds besides the previous answer, `concurrent`: sessions in flight);
- `trace` (trace profiles only): a Mooncake JSONL file, relative to the profile file;
- `prefix_cache_hit_rate`: share of each prompt served from prefill's prefix cache;
- `prefill_servers` (optional): how many servers prefill, a hint the orchestrator uses when
  the run does not say (`--prefill-servers`); the rest decode;
- `hotspot` (optional): `{"decodes": N, "period_s": S}`, the shifting incast: the gateway
  sends each request's decode to one of N hot decode instances, redrawn every S seconds
  (`zcube_lab.serving.routing.HotSet`), a hint the run passes on unless `--decode-hotspot` says
  otherwise;
- `expert_parallel` (optional): `{"servers": N, "alltoall": "rail"|"all"}`, each prefill and
  decode instance spans N servers whose engines exchange every step (the placement's
  `ep_servers` and `alltoall`), a hint unless `--ep-servers` / `--alltoall` say otherwise;
- `lossless` (optional, default false): the run's lossless (PFC-like) switch ports, a hint
  unless `--lossless` / `--no-lossless` say otherwise.

Unknown keys and bad values raise `ConfigError(field, value, allowed)`.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.workloads.arrivals import PROCESSES, ArrivalSpec, Stage

PROFILE_DIR = Path(__file__).parent / "profiles"
ENDPOINTS = ("completions", "chat")
# The same names as zcube_lab.core.fabric.placement.LAYOUTS, so the orchestrator can pass the hint
# through.
PLACEMENTS = ("default", "rail-aligned")
# A chat prompt carries 7 tokens of framing (4 for the message, 3 priming the reply).
CHAT_FRAMING_TOKENS = 7


@dataclass(frozen=True)
class LengthDist:
    """A lognormal token-length distribution with a median, a log-space sigma and clip bounds."""

    median: float
    sigma: float
    min: int
    max: int

    def scaled(self, scale: float) -> LengthDist:
        """The same shape with every length multiplied by `scale` (at least 1 token)."""
        return LengthDist(
            self.median * scale,
            self.sigma,
            max(1, round(self.min * scale)),
            max(1, round(self.max * scale)),
        )

    def draw(self, rng: random.Random) -> int:
        """One length, clipped to [min, max]."""
        value = rng.lognormvariate(math.log(self.median), self.sigma) if self.sigma else self.median
        return max(self.min, min(self.max, round(value)))


@dataclass(frozen=True)
class SessionSpec:
    """Multi-step sessions: each step resends the context plus the last answer and new tokens."""

    steps_min: int
    steps_max: int
    append: LengthDist
    concurrent: int


@dataclass(frozen=True)
class HotspotSpec:
    """The shifting incast: decodes go to `decodes` hot instances, redrawn every `period_s`."""

    decodes: int
    period_s: float


@dataclass(frozen=True)
class ExpertParallelSpec:
    """Expert parallelism across servers: each instance spans `servers` whole servers, its
    engines exchanging with the same-rank GPU (`rail`) or every GPU (`all`) of the others."""

    servers: int
    alltoall: str


@dataclass(frozen=True)
class Profile:
    """A validated workload profile (see the module docstring for the meaning of each key)."""

    name: str
    description: str
    model: str
    endpoint: str
    placement: str
    length_scale: float
    arrival: ArrivalSpec
    prompt: LengthDist | None
    output: LengthDist | None
    session: SessionSpec | None = None
    trace: Path | None = None
    # Share of each prompt the prefill engines serve from their prefix cache (coding agents:
    # 70-80%, docs/DOMAIN.md §3): no compute for it, but its KV still crosses the fabric.
    prefix_cache_hit_rate: float = 0.0
    prefill_servers: int | None = None  # the orchestrator's hint; None: the run's default
    hotspot: HotspotSpec | None = None  # the gateway's hot decode set; None: every decode
    expert_parallel: ExpertParallelSpec | None = None  # None: the run's default (no EP)
    lossless: bool = False  # the run's lossless switch ports, unless the run says

    def scaled_prompt(self) -> LengthDist:
        """The prompt distribution after `length_scale` (not for trace profiles)."""
        assert self.prompt is not None
        return self.prompt.scaled(self.length_scale)

    def scaled_output(self) -> LengthDist:
        """The output distribution after `length_scale` (not for trace profiles)."""
        assert self.output is not None
        return self.output.scaled(self.length_scale)


_TOP_KEYS = {
    "name",
    "description",
    "model",
    "endpoint",
    "placement",
    "length_scale",
    "arrival",
    "prompt",
    "output",
    "session",
    "trace",
    "prefix_cache_hit_rate",
    "prefill_servers",
    "hotspot",
    "expert_parallel",
    "lossless",
}
ALLTOALLS = ("rail", "all")  # zcube_lab.core.fabric.placement.ALLTOALL's names


def parse_profile(data: Mapping[str, Any], base_dir: Path = PROFILE_DIR) -> Profile:
    """A `Profile` from decoded JSON; `base_dir` resolves a relative `trace` path."""
    if not isinstance(data, Mapping):
        raise ConfigError("profile", data, "a JSON object")
    _no_unknown("profile", data, _TOP_KEYS)
    name = _str(data, "name", "profile")
    where = name
    model = _str(data, "model", where)
    endpoint = _choice(data.get("endpoint", "completions"), f"{where}.endpoint", ENDPOINTS)
    placement = _choice(data.get("placement", "default"), f"{where}.placement", PLACEMENTS)
    scale = _number(data.get("length_scale", 1.0), f"{where}.length_scale", positive=True)
    hit = _number(data.get("prefix_cache_hit_rate", 0.0), f"{where}.prefix_cache_hit_rate")
    if not 0 <= hit < 1:
        raise ConfigError(f"{where}.prefix_cache_hit_rate", hit, "0 <= rate < 1")
    prefill_servers = data.get("prefill_servers")
    if prefill_servers is not None and (
        isinstance(prefill_servers, bool)
        or not isinstance(prefill_servers, int)
        or prefill_servers < 1
    ):
        raise ConfigError(f"{where}.prefill_servers", prefill_servers, "an integer >= 1")
    arrival = _arrival(data.get("arrival", {}), f"{where}.arrival")
    hotspot = _hotspot(data["hotspot"], f"{where}.hotspot") if "hotspot" in data else None
    ep = (
        _expert_parallel(data["expert_parallel"], f"{where}.expert_parallel")
        if ("expert_parallel" in data)
        else None
    )
    lossless = data.get("lossless", False)
    if not isinstance(lossless, bool):
        raise ConfigError(f"{where}.lossless", lossless, "true or false")
    trace = None
    prompt = output = None
    session = None
    if arrival.process == "trace" or "trace" in data:
        if "trace" not in data:
            raise ConfigError(f"{where}.trace", None, "a Mooncake JSONL path for trace arrivals")
        if arrival.process != "trace":
            raise ConfigError(f"{where}.arrival.process", arrival.process, "trace (has a trace)")
        for key in ("prompt", "output", "session"):
            if key in data:
                raise ConfigError(f"{where}.{key}", data[key], "absent: the trace sets lengths")
        trace = base_dir / _str(data, "trace", where)
    else:
        prompt = _length(data.get("prompt"), f"{where}.prompt")
        output = _length(data.get("output"), f"{where}.output")
        if "session" in data:
            session = _session(data["session"], f"{where}.session")
        if endpoint == "chat" and prompt.min * scale < CHAT_FRAMING_TOKENS + 1:
            raise ConfigError(
                f"{where}.prompt.min",
                prompt.min,
                f"at least {CHAT_FRAMING_TOKENS + 1} tokens after length_scale for chat",
            )
    return Profile(
        name=name,
        description=str(data.get("description", "")),
        model=model,
        endpoint=endpoint,
        placement=placement,
        length_scale=scale,
        arrival=arrival,
        prompt=prompt,
        output=output,
        session=session,
        trace=trace,
        prefix_cache_hit_rate=hit,
        prefill_servers=prefill_servers,
        hotspot=hotspot,
        expert_parallel=ep,
        lossless=lossless,
    )


def profile_names() -> list[str]:
    """Names of the profiles shipped in `zcube_lab/workloads/profiles/`."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(
    name_or_path: str | Path,
    length_scale: float | None = None,
    model: str | None = None,
    trace: Path | None = None,
) -> Profile:
    """A shipped profile by name, or a profile file by path, with optional overrides."""
    text = str(name_or_path)
    if text in profile_names():
        path = PROFILE_DIR / f"{text}.json"
    elif text.endswith(".json") or "/" in text:
        path = Path(text)
    else:
        raise ConfigError("workload", text, "one of " + ", ".join(profile_names()) + " or a path")
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError("workload", text, f"a readable profile file ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError("workload", text, f"valid JSON ({exc.msg}, line {exc.lineno})") from None
    profile = parse_profile(data, base_dir=path.parent)
    if length_scale is not None:
        profile = replace(
            profile, length_scale=_number(length_scale, "length_scale", positive=True)
        )
    if model is not None:
        profile = replace(profile, model=model)
    if trace is not None:
        if profile.trace is None:
            raise ConfigError("trace", str(trace), "only with a trace profile (--workload trace)")
        profile = replace(profile, trace=Path(trace))
    return profile


# -- validation helpers ------------------------------------------------------------------------


def _no_unknown(where: str, obj: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}", obj[unknown[0]], "keys " + ", ".join(sorted(allowed))
        )


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}.{key}", value, "a non-empty string")
    return value


def _choice(value: object, field: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(field, value, "one of " + ", ".join(allowed))
    return str(value)


def _number(value: object, field: str, positive: bool = False) -> float:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        raise ConfigError(field, value, "a finite number " + ("> 0" if positive else ">= 0"))
    return float(value)


def _int(value: object, field: str, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ConfigError(field, value, f"an integer >= {least}")
    return value


def _length(obj: object, where: str) -> LengthDist:
    if not isinstance(obj, Mapping):
        raise ConfigError(where, obj, "an object with median, sigma, min, max")
    _no_unknown(where, obj, {"median", "sigma", "min", "max"})
    for key in ("median", "min", "max"):
        if key not in obj:
            raise ConfigError(f"{where}.{key}", None, "a required field")
    median = _number(obj["median"], f"{where}.median", positive=True)
    sigma = _number(obj.get("sigma", 0.0), f"{where}.sigma")
    lo = _int(obj["min"], f"{where}.min", 1)
    hi = _int(obj["max"], f"{where}.max", lo)
    if not lo <= median <= hi:
        raise ConfigError(f"{where}.median", median, f"between min {lo} and max {hi}")
    return LengthDist(median, sigma, lo, hi)


def _session(obj: object, where: str) -> SessionSpec:
    if not isinstance(obj, Mapping):
        raise ConfigError(where, obj, "an object with steps_min, steps_max, append, concurrent")
    _no_unknown(where, obj, {"steps_min", "steps_max", "append", "concurrent"})
    lo = _int(obj.get("steps_min", 1), f"{where}.steps_min", 1)
    hi = _int(obj.get("steps_max", lo), f"{where}.steps_max", lo)
    append = _length(obj.get("append"), f"{where}.append")
    concurrent = _int(obj.get("concurrent", 8), f"{where}.concurrent", 1)
    return SessionSpec(lo, hi, append, concurrent)


def _hotspot(obj: object, where: str) -> HotspotSpec:
    if not isinstance(obj, Mapping):
        raise ConfigError(where, obj, "an object with decodes and period_s")
    _no_unknown(where, obj, {"decodes", "period_s"})
    decodes = _int(obj.get("decodes", 1), f"{where}.decodes", 1)
    period = _number(obj.get("period_s", 5.0), f"{where}.period_s", positive=True)
    return HotspotSpec(decodes, period)


def _expert_parallel(obj: object, where: str) -> ExpertParallelSpec:
    if not isinstance(obj, Mapping):
        raise ConfigError(where, obj, "an object with servers and alltoall")
    _no_unknown(where, obj, {"servers", "alltoall"})
    servers = _int(obj.get("servers", 1), f"{where}.servers", 1)
    alltoall = _choice(obj.get("alltoall", "rail"), f"{where}.alltoall", ALLTOALLS)
    return ExpertParallelSpec(servers, alltoall)


def _arrival(obj: object, where: str) -> ArrivalSpec:
    if not isinstance(obj, Mapping):
        raise ConfigError(where, obj, "an object with process, rate, burstiness, stages")
    _no_unknown(where, obj, {"process", "rate", "burstiness", "stages"})
    process = _choice(obj.get("process", "poisson"), f"{where}.process", PROCESSES)
    rate = _number(obj.get("rate", 1.0), f"{where}.rate", positive=True)
    burst = _number(obj.get("burstiness", 1.0), f"{where}.burstiness", positive=True)
    stages_raw = obj.get("stages", [])
    if not isinstance(stages_raw, list):
        raise ConfigError(f"{where}.stages", stages_raw, "a list of [duration, rate] pairs")
    stages = []
    for i, st in enumerate(stages_raw):
        if not (isinstance(st, list) and len(st) == 2):
            raise ConfigError(f"{where}.stages[{i}]", st, "a [duration, rate] pair")
        stages.append(
            Stage(
                _number(st[0], f"{where}.stages[{i}].duration", positive=True),
                _number(st[1], f"{where}.stages[{i}].rate"),
            )
        )
    return ArrivalSpec(process=process, rate=rate, burstiness=burst, stages=tuple(stages))
