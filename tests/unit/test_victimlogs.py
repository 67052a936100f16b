"""Victim accounting from a run's files: EP and KV logs to transfers with their ports, the
agent's episodes, times in modelled seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zcube_lab.core.clock import Clock
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.pauseepisodes import EPISODES_FILE, PauseEpisode
from zcube_lab.core.fabric.placement import LayoutSpec, place
from zcube_lab.emulator.results.lossless.victimlogs import run_victims

ROFT = build_fabric(FabricSpec.of("roft", servers=4, gpus_per_server=2))
PLACE = place(ROFT, LayoutSpec(prefill_servers=2, ep_servers=2))


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_kv_raised_pause_delays_an_exchange_on_its_port(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    decode = PLACE.role("decode")[0]
    prefill = PLACE.role("prefill")[0]
    peer = decode.ep_peers[0]
    # the decode's exchange from 10.0 to 10.4 s (wall), and one outside any pause
    _write(logs / f"ep-{decode.engine_id}.jsonl", [
        {"start": 10.0, "end": 10.4, "bytes_sent": 600, "bytes_received": 400},
        {"start": 20.0, "end": 20.2, "bytes_sent": 600, "bytes_received": 400},
    ])  # fmt: skip
    _write(logs / f"kv-{decode.engine_id}.jsonl", [
        {"start": 9.8, "end": 10.6, "bytes": 8000, "ok": True, "engine_id": prefill.engine_id},
        {"start": 30.0, "end": 31.0, "bytes": 0, "ok": False, "engine_id": prefill.engine_id},
    ])  # fmt: skip
    # the KV incast congested the decode host's last-hop port; its feeders include the
    # peer's NIC port, on the exchange's route back
    paused = frozenset({f"{peer}-eth0"})
    episode = PauseEpisode(f"leaf{decode.rail}-eth9", 10.1, 10.3, paused, "kv")
    _write(tmp_path / "logs" / EPISODES_FILE, [episode.to_dict()])
    r = run_victims(tmp_path, ROFT, PLACE, Clock(2.0))
    assert r is not None
    assert (r.ep_exchanges, r.ep_victims) == (2, 1)
    assert r.classes["ep"].seconds_behind == pytest.approx(0.1)  # 0.2 wall s / k = 2
    assert r.classes["ep"].bytes_behind == pytest.approx(500)  # half its 0.4 s: half its bytes
    assert r.classes["kv"].transfers == 1 and r.classes["kv"].delayed == 0  # not on its route
    assert r.classes["kv"].pauses_raised == 1
    assert r.ep_p50_s == pytest.approx(0.15)  # (0.4 + 0.2) / 2 wall, / 2


def test_no_episode_log_no_accounting(tmp_path: Path) -> None:
    assert run_victims(tmp_path, ROFT, PLACE) is None
