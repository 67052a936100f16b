"""Failure injection: what to break, when, and what a run lost because of it.

Pure parts (no root, no clock):
- `parse_faults(texts, fabric, duration_s, seed)` reads `--fail` specifications into `Fault`s:
    `link A1-B2 at 30s for 10s`      one link (all parallel links of the pair; `#k` picks one)
    `switch leaf1 at 20s for 5s`     every port of one switch
    `flaps 3 seed 7 for 4s from 10s to 40s`   3 random switch-to-switch links, onsets drawn
                                     uniformly in the window (default 20%-70% of the run)
  Times count from the start of the load; without `for` a fault lasts until the run ends.
  A `zcube:` (or `roft:`, `clos:`) prefix applies a specification to that fabric only, so one
  `compare` can break a comparable link on each fabric.
- `schedule(faults)` turns them into ordered interface transitions. Breaking a link sets the
  root-namespace (switch) ends of its veth pair down; a veth whose peer is down loses its
  carrier, so both switches (and a host at the far end) see the link go down. Overlapping faults
  on one interface are counted, so it comes back up only when the last one ends.
- `analyze(...)` turns a run's records into the fault report: failed requests, retried KV
  transfers, TTFT p99 before, during and after, recovery times, KV integrity.

Adapter: `FaultInjector` runs a schedule in a thread (`ip link set dev X down|up`), writes every
transition to `faults.jsonl` with its wall time, exports `zcube_fault_active{fault=...}` (1 while
a fault holds) for Prometheus and Grafana annotations, and restores every link it broke on stop.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from zcube_lab.errors import ConfigError
from zcube_lab.fabric.description import Fabric, Link
from zcube_lab.stats import quantile

GRAMMAR = (
    "'link X-Y[#k] at T [for D]', 'switch X at T [for D]' or "
    "'flaps N [seed S] [for D] [from T1 to T2]' (times like 30s, 1.5s or 500ms)"
)
FLAP_DEFAULT_S = 5.0
FABRIC_KINDS = ("zcube", "roft", "clos")
ACTIVE_METRIC = "zcube_fault_active"


@dataclass(frozen=True)
class Fault:
    """One failure: a label for reports, when it starts and ends (seconds since load start; end
    None = until the run ends), and the fabric links it cuts."""

    label: str
    kind: str  # "link" or "switch"
    at_s: float
    for_s: float | None
    links: tuple[Link, ...]

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


def parse_fault(text: str, fabric: Fabric, duration_s: float, seed: int = 1) -> list[Fault]:
    """One `--fail` specification as faults (flaps expand to several)."""
    tokens = text.strip().lower().split()
    if not tokens:
        raise ConfigError("fail", text, GRAMMAR)
    kind, rest = tokens[0], tokens[1:]
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
    texts: Iterable[str], fabric: Fabric, duration_s: float, seed: int = 1
) -> list[Fault]:
    """Every `--fail` specification that applies to this fabric, in start order."""
    faults = []
    for text in texts:
        head, sep, rest = text.partition(":")
        if sep and head.strip().lower() in FABRIC_KINDS:
            if head.strip().lower() != fabric.kind:
                continue
            text = rest
        faults += parse_fault(text, fabric, duration_s, seed)
    # Labels key the records and the metric: a second fault on the same target gets "(2)".
    seen: dict[str, int] = {}
    unique = []
    for f in sorted(faults, key=lambda f: f.at_s):
        seen[f.label] = seen.get(f.label, 0) + 1
        if seen[f.label] > 1:
            f = Fault(f"{f.label} ({seen[f.label]})", f.kind, f.at_s, f.for_s, f.links)
        unique.append(f)
    return unique


def interfaces(fabric: Fabric, links: Iterable[Link]) -> tuple[str, ...]:
    """Root-namespace interface names of the switch ends of `links` (`<switch>-eth<port>`)."""
    names = set()
    for lk in links:
        for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2)):
            if fabric.is_switch(node):
                names.add(f"{node}-eth{port}")
    return tuple(sorted(names))


@dataclass(frozen=True)
class Transition:
    """At `t_s`, fault `fault` starts ("down") or ends ("up"); `interfaces` actually change
    state then (an interface another fault still holds stays down)."""

    t_s: float
    action: str
    fault: str
    interfaces: tuple[str, ...]


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
        for name in interfaces(fabric, f.links):
            before = holders.get(name, 0)
            holders[name] = before + (1 if starts else -1)
            if (before == 0) if starts else (holders[name] == 0):
                changed.append(name)
        out.append(Transition(t, "down" if starts else "up", f.label, tuple(changed)))
    return out


# -- analysis ----------------------------------------------------------------------------------
def fault_windows(
    events: Sequence[Mapping[str, Any]], end_wall: float
) -> list[tuple[float, float]]:
    """Merged [start, end) wall-time windows during which any fault held, from the recorded
    transitions (`faults.jsonl`: action, fault, wall)."""
    opened: dict[str, float] = {}
    spans = []
    for e in sorted(events, key=lambda e: e["wall"]):
        if e["action"] == "down":
            opened.setdefault(e["fault"], e["wall"])
        elif e["fault"] in opened:
            spans.append((opened.pop(e["fault"]), e["wall"]))
    spans += [(s, end_wall) for s in opened.values()]
    spans.sort()
    merged: list[tuple[float, float]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def analyze(
    events: Sequence[Mapping[str, Any]],
    requests: Sequence[Mapping[str, Any]],
    kv_attempts: Sequence[Mapping[str, Any]],
    end_wall: float,
    bin_s: float = 5.0,
) -> dict[str, Any]:
    """The fault report of one run.

    - requests: the client's records (`wall_time` = when sent, `outcome`, `ttft_s`, `e2e_s`);
      phases are by send time: before the first fault, during any fault, after the last one.
    - kv_attempts: decode's KV log (`request_id`, `start`, `end`, `ok`, `bytes`,
      `expected_bytes`, `checksum_ok`, `attempt`, `retired_lanes`).
    - A KV transfer is hit by a fault if an attempt of it was in flight at a fault's onset or
      started during a fault and took longer than the pre-fault p99 (+ 0.2 s), or needed a retry or
      retired a lane. Its recovery time runs from when it met the fault (the onset, or its own
      start if later) to its completion. `recovery_kv_first_s` is the shortest (the first
      transfer through: over another path, or when the link came back, `..._after_restore`
      says which) and `recovery_kv_all_s` the longest.
    - `recovery_throughput_s`: onset to the first 5 s window (by completion time) whose completed
      requests reach 90% of the pre-fault rate, counted from the first dip below it (0 when the
      rate never dipped).
    """
    windows = fault_windows(events, end_wall)
    out: dict[str, Any] = {"faults": len({e["fault"] for e in events}), "windows": windows}
    ok = [r for r in requests if r.get("outcome") == "ok"]
    out["failed_requests"] = sum(1 for r in requests if r.get("outcome") != "ok")
    errors: dict[str, int] = {}
    for r in requests:
        if r.get("outcome") != "ok":
            key = str(r.get("error") or r.get("outcome"))[:160]
            errors[key] = errors.get(key, 0) + 1
    out["errors"] = dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5])
    # KV: integrity and retries.
    by_request: dict[str, list[Mapping[str, Any]]] = {}
    for a in kv_attempts:
        by_request.setdefault(str(a["request_id"]), []).append(a)
    done = [a for a in kv_attempts if a.get("ok")]
    out["kv_transfers"] = len(by_request)
    out["kv_completed"] = len(done)
    out["kv_failed_attempts"] = sum(1 for a in kv_attempts if not a.get("ok"))
    out["kv_retried"] = sum(1 for v in by_request.values() if len(v) > 1)
    out["kv_lanes_retired"] = sum(int(a.get("retired_lanes") or 0) for a in kv_attempts)
    # A pull completes only with every byte and its checksum verified (kvwire), so integrity
    # is read from all attempts: corruption caught (and refused), completed transfers that do
    # not say they verified (must be 0), and the KV of transfers that never completed.
    out["kv_checksum_failures"] = sum(1 for a in kv_attempts if a.get("checksum_ok") is False)
    out["kv_completed_unverified"] = sum(
        1
        for a in done
        if a.get("checksum_ok") is not True
        or int(a.get("bytes") or 0) != int(a.get("expected_bytes") or 0)
    )
    unfinished = [v for v in by_request.values() if not any(a.get("ok") for a in v)]
    out["kv_unfinished_transfers"] = len(unfinished)
    out["kv_bytes_lost"] = sum(
        max(int(a.get("expected_bytes") or 0) for a in v) for v in unfinished
    )

    if not windows:
        return out
    first, last_end = windows[0][0], windows[-1][1]

    def phase(r: Mapping[str, Any]) -> str:
        t = float(r["wall_time"])
        if t < first:
            return "before"
        if any(s <= t < e for s, e in windows):
            return "during"
        return "after" if t >= last_end else "between"

    for name in ("before", "during", "after"):
        ttft = [float(r["ttft_s"]) for r in ok if phase(r) == name and r.get("ttft_s") is not None]
        out[f"ttft_p99_{name}_s"] = quantile(ttft, 0.99)
        out[f"requests_{name}"] = sum(1 for r in requests if phase(r) == name)
        out[f"failed_{name}"] = sum(
            1 for r in requests if phase(r) == name and r.get("outcome") != "ok"
        )

    # Recovery of KV transfers, per fault onset.
    base = [
        float(a["end"]) - float(a["start"]) for a in done if float(a["end"]) < first
    ]  # completed before any fault
    slow = (quantile(base, 0.99) or 0.0) + 0.2
    hit_done: list[tuple[float, float, float]] = []  # (met the fault, completed, restore)
    for v in by_request.values():
        v = sorted(v, key=lambda a: float(a["start"]))
        start = float(v[0]["start"])
        finished = [a for a in v if a.get("ok")]
        end = float(finished[-1]["end"]) if finished else None
        for s, e in windows:
            in_flight = start <= s and (end is None or end > s)
            started_during = s < start < e
            if not (in_flight or started_during):
                continue
            took = (end if end is not None else end_wall) - start
            troubled = len(v) > 1 or any(int(a.get("retired_lanes") or 0) for a in v)
            if troubled or took > slow:
                if end is not None:
                    hit_done.append((max(s, start), end, e))
                break
    out["kv_hit_transfers"] = len(hit_done)
    if hit_done:
        firsts = [end - s for s, end, _ in hit_done]
        out["recovery_kv_first_s"] = min(firsts)
        out["recovery_kv_all_s"] = max(firsts)
        earliest = min(hit_done, key=lambda h: h[1] - h[0])
        out["recovery_kv_first_after_restore"] = earliest[1] >= earliest[2]
    else:
        out["recovery_kv_first_s"] = out["recovery_kv_all_s"] = None
        out["recovery_kv_first_after_restore"] = None

    # Throughput recovery: completions per bin_s window.
    completions = sorted(
        float(r["wall_time"]) + float(r["e2e_s"]) for r in ok if r.get("e2e_s") is not None
    )
    starts = [float(r["wall_time"]) for r in requests]
    t_start = min(starts) if starts else first
    pre = [c for c in completions if c < first]
    pre_span = first - t_start
    out["recovery_throughput_s"] = None
    if pre and pre_span >= bin_s:
        target = 0.9 * len(pre) / pre_span * bin_s
        t = first
        dipped = False
        while t < end_wall:
            n = sum(1 for c in completions if t <= c < t + bin_s)
            if n < target:
                dipped = True
            elif dipped:
                out["recovery_throughput_s"] = t + bin_s - first
                break
            elif t - first > bin_s:  # never dipped below the target
                out["recovery_throughput_s"] = 0.0
                break
            t += 1.0
    return out


# -- adapter -----------------------------------------------------------------------------------
Runner = Callable[[list[str]], None]


def _ip_link(lines: list[str]) -> None:
    done = subprocess.run(
        ["ip", "-force", "-batch", "-"],
        input="\n".join(lines) + "\n",
        text=True,
        capture_output=True,
        check=False,
        timeout=10,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ip -batch failed ({done.returncode}): {done.stderr.strip()[:300]}")


class FaultInjector:
    """Runs a schedule in a background thread, from `t0` (wall time of the load start)."""

    def __init__(
        self,
        fabric: Fabric,
        faults: Sequence[Fault],
        log_path: Path,
        registry: Any = None,
        runner: Runner = _ip_link,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.fabric = fabric
        self.faults = list(faults)
        self.transitions = schedule(fabric, faults)
        self.log_path = log_path
        self._runner = runner
        self._progress = progress or (lambda _m: None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._down: set[str] = set()
        self._lock = threading.Lock()
        self._log: IO[str] | None = None
        self._gauge = None
        if registry is not None:
            from prometheus_client import Gauge

            self._gauge = Gauge(
                ACTIVE_METRIC, "1 while an injected fault holds.", ["fault"], registry=registry
            )
            for f in self.faults:
                self._gauge.labels(f.label).set(0)

    def start(self, t0: float) -> None:
        self._log = self.log_path.open("a")
        self._thread = threading.Thread(target=self._run, args=(t0,), daemon=True)
        self._thread.start()

    def _apply(self, tr: Transition, t0: float) -> None:
        lines = [f"link set dev {name} {tr.action}" for name in tr.interfaces]
        with self._lock:  # recorded first: stop() restores it even if the command half-ran
            if tr.action == "down":
                self._down.update(tr.interfaces)
        error = ""
        if lines:
            try:
                self._runner(lines)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        if tr.action == "up" and not error:
            with self._lock:
                self._down.difference_update(tr.interfaces)
        now = time.time()
        if self._gauge is not None:
            self._gauge.labels(tr.fault).set(1 if tr.action == "down" else 0)
        record = {
            "t_s": round(now - t0, 3),
            "planned_s": tr.t_s,
            "wall": now,
            "action": tr.action,
            "fault": tr.fault,
            "interfaces": list(tr.interfaces),
            "error": error,
        }
        if self._log is not None:
            self._log.write(json.dumps(record) + "\n")
            self._log.flush()
        if error:
            self._progress(f"fault: {tr.fault} {tr.action} FAILED at {now - t0:.1f}s: {error}")
        else:
            self._progress(f"fault: {tr.fault} {tr.action} at {now - t0:.1f}s")

    def _run(self, t0: float) -> None:
        for tr in self.transitions:
            if self._stop.wait(max(0.0, t0 + tr.t_s - time.time())):
                return
            self._apply(tr, t0)

    def stop(self) -> None:
        """Stop the schedule and bring back every interface this injector set down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        with self._lock:
            down = sorted(self._down)
            self._down.clear()
        if down:
            try:
                self._runner([f"link set dev {name} up" for name in down])
            except Exception as exc:
                self._progress(f"fault: restoring {down} failed: {exc}")
        if self._log is not None:
            self._log.close()
            self._log = None
