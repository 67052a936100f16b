"""The victim accounting of a run from its files: EP exchanges and KV pulls from the engines'
exact logs as `victims.Transfer`s, pause episodes from the lossless agent's episode log, and
`victims.account` over them (reads files; the accounting is
`zcube_lab.emulator.results.lossless.victims`).

Files in the run's folder: `logs/ep-<engine id>.jsonl` (one line per engine step: `start`,
`end` wall-clock seconds, `bytes_sent`, `bytes_received`), `logs/kv-<decode engine id>.jsonl`
(one line per pull attempt: `start`, `end`, `bytes`, `ok`, `engine_id` the prefill engine), and
`logs/lossless-episodes.jsonl` (one `PauseEpisode` per line, wall-clock times: what the agent's hook
writes, docs/LOSSLESS.md). An exchange crosses the ports of every route between its engine's
host and its EP peers, both ways; a pull those between the prefill's host and the decode's.
The times the report gives are divided by the run's dilation (modelled seconds).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.pauseepisodes import EPISODES_FILE, PauseEpisode
from zcube_lab.core.fabric.placement import Placement
from zcube_lab.emulator.results.fabric.transfers import EP_LOG_PREFIX, KV_LOG_PREFIX, read_logs
from zcube_lab.emulator.results.lossless.victims import (
    Transfer,
    VictimReport,
    account,
    exchange_ports,
)
from zcube_lab.emulator.results.run.figures import read_jsonl
from zcube_lab.serving.trafficclass import EP, KV


def ep_transfers(
    rows: Iterable[tuple[str, Mapping[str, Any]]], fabric: Fabric, placement: Placement
) -> list[Transfer]:
    """The EP exchanges of (engine id, exchange row) rows; rows of unknown engines skipped."""
    engines = {e.engine_id: e for e in placement.engines}
    ports: dict[str, frozenset[str]] = {}
    out = []
    for engine_id, row in rows:
        e = engines.get(engine_id)
        if e is None or row.get("start") is None or row.get("end") is None:
            continue
        if engine_id not in ports:
            ports[engine_id] = exchange_ports(fabric, e.host, e.ep_peers)
        moved = int(row.get("bytes_sent") or 0) + int(row.get("bytes_received") or 0)
        out.append(Transfer(EP, float(row["start"]), float(row["end"]), moved, ports[engine_id]))
    return out


def kv_transfers(
    rows: Iterable[tuple[str, Mapping[str, Any]]], fabric: Fabric, placement: Placement
) -> list[Transfer]:
    """The completed KV pulls of (decode engine id, attempt row) rows."""
    hosts = {e.engine_id: e.host for e in placement.engines}
    out = []
    for decode, row in rows:
        src, dst = hosts.get(str(row.get("engine_id"))), hosts.get(decode)
        if src is None or dst is None or not row.get("ok") or row.get("end") is None:
            continue
        out.append(
            Transfer(
                KV,
                float(row["start"]),
                float(row["end"]),
                int(row.get("bytes") or 0),
                exchange_ports(fabric, dst, [src]),
            )
        )
    return out


def read_episodes(path: Path) -> list[PauseEpisode]:
    """The agent's episodes (none when it wrote no file)."""
    return [PauseEpisode.from_dict(r) for r in read_jsonl(path)] if path.is_file() else []


def run_victims(
    run_dir: Path, fabric: Fabric, placement: Placement, clock: Clock | None = None
) -> VictimReport | None:
    """The run's victim accounting, times in modelled seconds; None when it has no episode
    log (the agent did not record episodes, or the run was lossy)."""
    logs = run_dir / "logs"
    episodes_file = logs / EPISODES_FILE  # the lab's folder of a run: beside the agent's report
    if not episodes_file.is_file():
        return None
    transfers = ep_transfers(read_logs(logs, EP_LOG_PREFIX), fabric, placement)
    transfers += kv_transfers(read_logs(logs, KV_LOG_PREFIX), fabric, placement)
    report = account(transfers, read_episodes(episodes_file))
    return modelled(report, clock or Clock())


def modelled(report: VictimReport, clock: Clock) -> VictimReport:
    """The report's times (wall seconds, the logs') in modelled seconds."""

    def m(s: float | None) -> float | None:
        return None if s is None else clock.modelled(s)

    classes = {
        c: replace(t, seconds_behind=round(clock.modelled(t.seconds_behind), 6))
        for c, t in report.classes.items()
    }
    return replace(
        report, classes=classes, ep_p50_s=m(report.ep_p50_s), ep_p99_s=m(report.ep_p99_s)
    )
