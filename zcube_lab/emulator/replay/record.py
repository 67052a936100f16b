"""A run folder's recording (issue 45 item 3): its transfers from the engines' logs and what
the run's `config.json` says of its fabric, scale, dilation and placement. Every run writes one
at the end (`transfers.jsonl`, `zcube_lab.emulator.experiment.runner`); `zcube-lab replay --record
RUN`
writes one for a run made before runs recorded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.replay.fromrun import recording_from_logs
from zcube_lab.core.replay.recording import RECORDING, Recording, read


@dataclass(frozen=True)
class RunClock:
    """The dilation a run's config.json records, and its clock."""

    dilation: float

    @property
    def clock(self) -> Clock:
        return Clock(self.dilation)


def run_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.json (ConfigError naming the folder when it is not a run's)."""
    path = run_dir / "config.json"
    if not path.exists():
        raise ConfigError("run", str(run_dir), "a run folder (with config.json), e.g. results/...")
    return json.loads(path.read_text())


def run_fabric(cfg: dict[str, Any]) -> Fabric:
    """The fabric the run ran on."""
    return build_fabric(FabricSpec.from_json(json.dumps(cfg["fabric"])))


def kv_fixed_s(run_dir: Path) -> float:
    """The fixed cost of a KV pull the run's verdict took off its pull times (its limits in
    health.json; the verdict's default when the run has none)."""
    from zcube_lab.emulator.verdict.limits import Limits

    try:
        limits = json.loads((run_dir / "health.json").read_text()).get("limits", {})
    except (OSError, ValueError):
        limits = {}
    return float(limits.get("kv_fixed_s", Limits().kv_fixed_s))


def record_run(run_dir: Path, split: int = 1) -> Recording:
    """The recording of the run in `run_dir`, from its logs."""
    from zcube_lab.emulator.results.fabric.transfers import EP_LOG_PREFIX, KV_LOG_PREFIX, read_logs

    cfg = run_config(run_dir)
    fabric = run_fabric(cfg)
    engines = cfg.get("placement", [])
    hosts = {e["engine_id"]: e["host"] for e in engines}
    peers = {e["engine_id"]: tuple(e.get("ep_peers", ())) for e in engines}
    logs = run_dir / "logs"
    meta = {
        "run": run_dir.name,
        "fabric": fabric.kind,
        "fabric_spec": cfg["fabric"],
        "nic_mbps": cfg.get("nic_mbps"),
        "mtu": cfg.get("link_mtu"),
        "lossless": bool(cfg.get("lossless")),
        "workload": cfg.get("workload"),
        "kv_fixed_s": kv_fixed_s(run_dir),
    }
    return recording_from_logs(
        read_logs(logs, KV_LOG_PREFIX),
        read_logs(logs, EP_LOG_PREFIX),
        hosts,
        peers,
        float(cfg["bandwidth_scale"]),
        RunClock(float(cfg.get("dilation", cfg.get("time_dilation", 1.0)))).clock,
        tuple(h.name for h in fabric.hosts),
        meta,
        split=split,
    )


def load_or_record(path: Path) -> Recording:
    """A recording file, or a run folder's (recorded now if the run did not write one)."""
    if path.is_file():
        return read(path)
    if (path / RECORDING).exists():
        return read(path / RECORDING)
    rec = record_run(path)
    rec.write(path / RECORDING)
    return rec
