"""Exact KV pull and all-to-all exchange times, from the engines' own logs (pure, apart from
reading the files): the figures of `TransferFigures` (`zcube_lab.emulator.results.run.summary`).

The logs, one JSON line per event, in the run's `logs/`:
- `kv-<decode engine id>.jsonl`: every KV pull attempt (`zcube_lab.serving.decode_engine`): `start`
  and `end` wall-clock seconds, `ok`, `bytes`, and `engine_id`, the prefill engine pulled from.
- `ep-<engine id>.jsonl`: every expert-parallel exchange: `start`, `end`, `seconds`,
  `bytes_sent`, `bytes_received`, `peers`, `failures`, `step`.
- `requests-gateway.jsonl`: the gateway's record of every request (`zcube_lab.serving.requestlog`),
  with the `request_id` it passed to decode, which decode's KV log repeats, and its `ttft_s`.

The fabric fraction (the BMWG draft's T_transfer / TTFT, its section 6.1) is per request: the
time of all its pull attempts over its TTFT at the gateway, both on the wall clock (a ratio,
the same at every dilation); its quantiles are over the requests in both logs with a TTFT.

TTFT's parts (the draft's §6.1: T_prefill, T_transfer, T_decode_init) are per request too, on
the wall clock of the one machine every log is written on: T_prefill from the gateway's arrival
to the first pull's start (routing, prefill's queue and compute, the hand-over to decode),
T_transfer from the first pull's start to the last pull's end (retries included), T_decode_init
from that end to the first token at the gateway (decode's first step and the stream back). The
three sum to the gateway's TTFT; a request whose parts do not line up (a clock step, a pull
logged outside its request) is left out and counted.

The Prometheus histograms of the same times stay for Grafana; their quantiles are exact only to
their buckets (0.25-1 s and 1-5 s at the top), which hides the 1 s stalls the issue is about.

A pull's path rate is the lower of the two hosts' NIC rates (the sum of the emulated rates of
each host's links): a pull spreads its lanes over every port of the prefill's NIC (ZCube's two
ports, every ROFT plane) and lands on every port of the decode's, so an uncontended pull is
bounded by the NICs, not by the trunks. Its ideal time is `bytes * 8 / rate`.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.stats import quantile
from zcube_lab.emulator.results.run.figures import read_jsonl
from zcube_lab.emulator.results.run.summary import TransferFigures

KV_LOG_PREFIX = "kv-"
EP_LOG_PREFIX = "ep-"
GATEWAY_LOG = "requests-gateway.jsonl"
# A pull slower than this many times its ideal time, plus this slack (connect, framing, first
# byte; modelled seconds, so x k on the logs' wall clock), is "stalled": a lost segment waiting
# for a retransmission, or a deep queue.
STALL_FACTOR = 2.0
STALL_SLACK_S = 0.1

Row = Mapping[str, Any]
RateOf = Callable[[str, str], float | None]  # (prefill engine, decode engine) -> bit/s


def nic_rate_bps(fabric: Fabric, scale: Scale, host: str) -> float:
    """The emulated rate in bit/s of a host's NIC: the sum of its links' rates."""
    return sum(
        scale.link_mbps(fabric, lk.gbps) * 1e6
        for lk in fabric.links
        if host in (lk.node1, lk.node2)
    )


def pull_rate_bps(fabric: Fabric, scale: Scale, src: str, dst: str) -> float | None:
    """The ideal rate of a KV pull from host `src` to host `dst` (see the module docstring);
    None when either host has no link."""
    rate = min(nic_rate_bps(fabric, scale, src), nic_rate_bps(fabric, scale, dst))
    return rate or None


def engine_rates(fabric: Fabric, scale: Scale, engine_hosts: Mapping[str, str]) -> RateOf:
    """Path rate by (prefill engine id, decode engine id), from where each engine runs; None
    for an engine it does not know."""

    def rate(src: str, dst: str) -> float | None:
        if src not in engine_hosts or dst not in engine_hosts:
            return None
        return pull_rate_bps(fabric, scale, engine_hosts[src], engine_hosts[dst])

    return rate


def read_logs(log_dir: Path, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    """(engine id from the file name, row) for every line of `<prefix><engine>.jsonl`."""
    return [
        (path.stem[len(prefix) :], row)
        for path in sorted(log_dir.glob(f"{prefix}*.jsonl"))
        for row in read_jsonl(path)
    ]


def _seconds(row: Row) -> float | None:
    if row.get("seconds") is not None:
        return float(row["seconds"])
    if row.get("start") is None or row.get("end") is None:
        return None
    return float(row["end"]) - float(row["start"])


def _spread(values: list[float], name: str) -> dict[str, float | None]:
    """`name_p50`, `_p90`, `_p99` and `_max` of values (None for none); `name` may end in `_s`,
    which then ends each key."""
    stem, unit = (name[:-2], "_s") if name.endswith("_s") else (name, "")
    out: dict[str, float | None] = {
        f"{stem}_p{q}{unit}": quantile(values, q / 100) for q in (50, 90, 99)
    }
    out[f"{stem}_max{unit}"] = max(values, default=None)
    return out


def kv_figures(
    attempts: Iterable[tuple[str, Row]], rate_of: RateOf, clock: Clock | None = None
) -> dict[str, Any]:
    """The KV part of `TransferFigures` from (decode engine, pull attempt) rows, in the logs'
    wall seconds; `clock` dilates the stall slack (None: undilated)."""
    slack_s = (clock or Clock()).wall(STALL_SLACK_S)
    seconds: list[float] = []
    sizes: list[float] = []
    ratios: list[float] = []
    stalled: list[float] = []
    failed = 0
    for decode, row in attempts:
        took = _seconds(row)
        if not row.get("ok") or took is None:
            failed += 1
            continue
        size = float(row.get("bytes") or 0)
        seconds.append(took)
        sizes.append(size)
        rate = rate_of(str(row.get("engine_id", "")), decode)
        if rate and size > 0:
            ideal = size * 8 / rate
            ratios.append(took / ideal)
            if took > STALL_FACTOR * ideal + slack_s:
                stalled.append(took)
    return {
        "kv_pulls": len(seconds),
        "kv_attempts_failed": failed,
        **_spread(seconds, "kv_xfer_s"),
        **_spread(sizes, "kv_xfer_bytes"),
        **_spread(ratios, "kv_xfer_ratio"),
        "kv_pulls_rated": len(ratios),
        "kv_pulls_stalled": len(stalled),
        "kv_stalled_max_s": max(stalled, default=None),
        "kv_bytes_total": sum(sizes) if sizes else None,
        "kv_xfer_total_s": sum(seconds) if seconds else None,
    }


def kv_ratio_p50(
    attempts: Iterable[tuple[str, Row]], rate_of: RateOf, fixed_s: float = 0.0
) -> tuple[int, float | None]:
    """How many successful pulls have a known ideal, and the p50 of `(time - fixed_s) /
    ideal` over them: the ratio `bench/kv_fidelity.py` reports, with the fixed cost of a pull
    (connect, request, framing, first byte) taken off."""
    ratios = []
    for decode, row in attempts:
        took = _seconds(row)
        size = float(row.get("bytes") or 0)
        rate = rate_of(str(row.get("engine_id", "")), decode)
        if row.get("ok") and took is not None and rate and size > 0:
            ratios.append(max(0.0, took - fixed_s) / (size * 8 / rate))
    return len(ratios), quantile(ratios, 0.5)


def ep_figures(exchanges: Iterable[Row] | None) -> dict[str, Any]:
    """The all-to-all part of `TransferFigures`; None figures when there is no exchange log.
    Times are of exchanges in which every peer answered; failures are counted apart."""
    rows = list(exchanges or ())
    clean = [r for r in rows if not r.get("failures")]
    times = [t for t in map(_seconds, clean) if t is not None]
    sent = [float(r.get("bytes_sent") or 0) for r in clean]
    received = [float(r.get("bytes_received") or 0) for r in clean]
    return {
        "alltoall_exchanges": len(rows),
        **_spread(times, "alltoall_s"),
        "alltoall_bytes_sent_p50": quantile(sent, 0.5),
        "alltoall_bytes_received_p50": quantile(received, 0.5),
        "alltoall_exchange_failures": (
            sum(int(r.get("failures") or 0) for r in rows) if exchanges is not None else None
        ),
        "alltoall_bytes_total": sum(sent) if exchanges is not None else None,
    }


def fabric_fraction(attempts: Iterable[tuple[str, Row]], gateway: Iterable[Row]) -> dict[str, Any]:
    """The fabric fraction's p50 and p99 and the requests they are over: per request that
    decode pulled for and the gateway timed to a first token, the summed time of its pull
    attempts over its TTFT (see the module docstring)."""
    pulled: dict[str, float] = {}
    for _, row in attempts:
        took = _seconds(row)
        rid = row.get("request_id")
        if rid and took is not None:
            pulled[rid] = pulled.get(rid, 0.0) + took
    ratios = [
        pulled[r["request_id"]] / float(r["ttft_s"])
        for r in gateway
        if r.get("request_id") in pulled and r.get("ttft_s")
    ]
    return {
        "fabric_fraction_p50": quantile(ratios, 0.5),
        "fabric_fraction_p99": quantile(ratios, 0.99),
        "fabric_fraction_requests": len(ratios),
    }


def request_parts(
    attempts: Iterable[tuple[str, Row]], gateway: Iterable[Row]
) -> tuple[list[tuple[float, float, float]], int]:
    """Per request, TTFT's three parts (T_prefill, T_transfer, T_decode_init) in wall seconds
    (see the module docstring), in the gateway log's order; and the requests left out."""
    spans: dict[str, tuple[float, float]] = {}
    for _, row in attempts:
        rid = row.get("request_id")
        if not rid or row.get("start") is None or row.get("end") is None:
            continue
        a, b = float(row["start"]), float(row["end"])
        lo, hi = spans.get(rid, (a, b))
        spans[rid] = (min(lo, a), max(hi, b))
    out: list[tuple[float, float, float]] = []
    left_out = 0
    for r in gateway:
        rid = r.get("request_id")
        if rid not in spans or r.get("arrival") is None or r.get("first_token") is None:
            continue
        start, end = spans[rid]
        arrival, first = float(r["arrival"]), float(r["first_token"])
        if not arrival <= start <= end <= first:
            left_out += 1
            continue
        out.append((start - arrival, end - start, first - end))
    return out, left_out


def ttft_parts(attempts: Iterable[tuple[str, Row]], gateway: Iterable[Row]) -> dict[str, Any]:
    """TTFT's three parts' p50 and p99 in wall seconds (`request_parts`), and the requests
    they are over and those left out."""
    per_request, left_out = request_parts(attempts, gateway)
    parts = {
        name: [p[i] for p in per_request]
        for i, name in enumerate(("prefill", "transfer", "decode_init"))
    }
    out: dict[str, Any] = {}
    for name, values in parts.items():
        for q in (50, 99):
            out[f"ttft_{name}_p{q}_s"] = quantile(values, q / 100)
    out["ttft_parts_requests"] = len(per_request)
    out["ttft_parts_left_out"] = left_out
    return out


def kv_path_busy(
    fabric: Fabric,
    sent: Mapping[tuple[str, int], float],
    received: Mapping[tuple[str, int], float],
    hosts: Iterable[str],
) -> float | None:
    """The busiest mean load (0-1) of a link a KV pull between `hosts` can cross: each of
    their NIC links in both directions (a switch port's share of its rate sent toward the
    host, and received from it) and every switch-to-switch port's sent share. `sent` and
    `received` are per (switch, port), as
    `zcube_lab.emulator.results.fabric.linkstats.link_utilization` gives
    them; None when no such port was counted."""
    wanted = set(hosts)
    nic = {(a.switch, a.port) for (host, _), a in fabric.attachments.items() if host in wanted}
    trunk = {
        (node, port)
        for lk in fabric.links
        if fabric.is_switch(lk.node1) and fabric.is_switch(lk.node2)
        for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2))
    }
    loads = [v for k, v in sent.items() if k in nic or k in trunk]
    loads += [v for k, v in received.items() if k in nic]
    return max(loads, default=None)


Samples = list[tuple[float, float]]  # (time, counter value), ascending
PortKey = tuple[str, int]  # (switch, port)
Direction = str  # "tx": the switch port sent it (toward a host); "rx": it received it


def span_rate(
    samples: Samples, t0: float, t1: float, times: Sequence[float] | None = None
) -> float | None:
    """A counter's mean rate (units/s) over the shortest span of its samples that covers
    [t0, t1]: from the last sample at or before t0 to the first at or after t1; None when the
    samples do not cover it. `times`: the samples' times, when the caller keeps them."""
    times = [t for t, _ in samples] if times is None else times
    i, j = bisect.bisect_right(times, t0) - 1, bisect.bisect_left(times, t1)
    if i < 0 or j >= len(samples) or samples[j][0] <= samples[i][0]:
        return None
    (a, va), (b, vb) = samples[i], samples[j]
    return max(0.0, vb - va) / (b - a)


def pull_links(
    fabric: Fabric, engine_hosts: Mapping[str, str]
) -> Callable[[str, str], list[tuple[Direction, PortKey]]]:
    """The links a KV pull from a prefill engine to a decode engine loads, as switch ports: the
    decode host's NIC links toward it (`tx`), the prefill host's from it (`rx`), and every
    switch-to-switch port (`tx`; which trunk a lane took is not logged). Unknown engines: the
    trunks alone."""
    trunk = [
        ("tx", (node, port))
        for lk in fabric.links
        if fabric.is_switch(lk.node1) and fabric.is_switch(lk.node2)
        for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2))
    ]

    def nic(host: str | None, direction: Direction) -> list[tuple[Direction, PortKey]]:
        return [
            (direction, (a.switch, a.port)) for (h, _), a in fabric.attachments.items() if h == host
        ]

    @functools.cache
    def links(prefill: str, decode: str) -> list[tuple[Direction, PortKey]]:
        return [
            *nic(engine_hosts.get(decode), "tx"),
            *nic(engine_hosts.get(prefill), "rx"),
            *trunk,
        ]

    return links


def kv_seen_busy(
    attempts: Iterable[tuple[str, Row]],
    links_of: Callable[[str, str], list[tuple[Direction, PortKey]]],
    samples: Mapping[Direction, Mapping[PortKey, Samples]],
    capacity_bps: Mapping[PortKey, float],
    margin_s: float = 0.0,
) -> float | None:
    """The load the pulls saw: per successful pull, the busiest of its links (`links_of`, by
    prefill and decode engine) over the pull's time widened by `margin_s` each side (the
    counters move once per stats poll, so a span of one poll would read 0 or 2 of them), each a
    byte counter's rate (`samples`, by direction and port) over the port's `capacity_bps`; the
    p50 over the pulls, None when no pull's links were counted. A hotspot loads a decode NIC
    for seconds and then leaves it: its mean over the load is a fraction of what the pulls
    crossing it met."""
    seen = []
    times = {
        (direction, port): [t for t, _ in values]
        for direction, by_port in samples.items()
        for port, values in by_port.items()
    }
    for decode, row in attempts:
        if not row.get("ok") or row.get("start") is None or row.get("end") is None:
            continue
        t0, t1 = float(row["start"]) - margin_s, float(row["end"]) + margin_s
        loads = []
        for direction, port in links_of(str(row.get("engine_id", "")), decode):
            if (direction, port) not in times or not capacity_bps.get(port):
                continue
            values = samples[direction][port]
            rate = span_rate(values, t0, t1, times[(direction, port)])
            if rate is not None:
                loads.append(rate * 8 / capacity_bps[port])
        if loads:
            seen.append(max(loads))
    return quantile(seen, 0.5)


def transfer_figures(
    log_dir: Path, fabric: Fabric, scale: Scale, engine_hosts: Mapping[str, str]
) -> TransferFigures:
    """A run's exact transfer figures from the engine logs in `log_dir`; `engine_hosts` maps
    each engine id to its GPU host (the placement)."""
    kv = read_logs(log_dir, KV_LOG_PREFIX)
    ep_files = list(log_dir.glob(f"{EP_LOG_PREFIX}*.jsonl"))
    ep = [row for _, row in read_logs(log_dir, EP_LOG_PREFIX)] if ep_files else None
    gateway = read_jsonl(log_dir / GATEWAY_LOG)
    return TransferFigures(
        **kv_figures(kv, engine_rates(fabric, scale, engine_hosts), scale.clock),
        **ep_figures(ep),
        **fabric_fraction(kv, gateway),
        **ttft_parts(kv, gateway),
    )
