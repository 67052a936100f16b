"""`zcube-lab clean` without a lab: what it prints and returns around the shared stale-state
sweep, the namespaces it takes for a dead process's, and the sweep's refusal while a run is up
(nothing removed, not even a dead run's file checked before it)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zcube_lab.cli import main
from zcube_lab.cli.commands import clean
from zcube_lab.emulator.lab import state
from zcube_lab.emulator.lab.state import LabState, netns_names, remove_stale_state, stale_namespaces
from zcube_lab.emulator.lab.system import LabError


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_netns_list_names_with_and_without_ids() -> None:
    text = "zcl-doctor-123 (id: 0)\nzcl-tun-77\n\nother\n"
    assert netns_names(text) == ["zcl-doctor-123", "zcl-tun-77", "other"]


def test_only_our_namespaces_whose_process_is_gone_are_stale() -> None:
    names = ["zcl-doctor-10", "zcl-tun-11", "zcl-doctor-12", "zcl-doctor-x", "h1", "zcl-tun-11b"]
    alive = {12}.__contains__
    assert stale_namespaces(names, alive) == ["zcl-doctor-10", "zcl-tun-11"]
    assert stale_namespaces([f"zcl-doctor-{os.getpid()}"], lambda _p: False) == []  # ours, live


def test_the_sweep_refuses_while_a_run_is_up_and_removes_nothing(tmp_path: Path) -> None:
    dead = tmp_path / "lab-0.json"  # sorted first: a sweep that went file by file would take it
    dead.write_text(LabState(_dead_pid(), interfaces=("zcl-nothing",)).to_json())
    live = tmp_path / "lab-9.json"
    live.write_text(LabState(os.getppid()).to_json())
    with pytest.raises(LabError, match=f"pid {os.getppid()}"):
        remove_stale_state(tmp_path)
    assert dead.exists() and live.exists()


def _clean(
    monkeypatch: pytest.MonkeyPatch, removed: list[str] | Exception, peer: int | None
) -> list[bool]:
    monkeypatch.setattr(os, "geteuid", lambda: 0)

    def sweep(_dir: Path) -> list[str]:
        if isinstance(removed, Exception):
            raise removed
        return list(removed)

    monkeypatch.setattr(state, "remove_stale_state", sweep)
    monkeypatch.setattr(clean, "peer_running", lambda: peer)
    stopped: list[bool] = []
    monkeypatch.setattr(clean, "stop_peer", lambda: stopped.append(True) or "[peer] stopped")
    return stopped


def test_clean_prints_each_thing_it_removed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean(monkeypatch, ["process 41", "bridge a0", "interface zcl-mgmt"], None)
    assert main(["clean"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "removed process 41",
        "removed bridge a0",
        "removed interface zcl-mgmt",
    ]


def test_a_second_clean_finds_nothing_and_still_succeeds(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean(monkeypatch, [], None)
    assert main(["clean"]) == 0
    assert capsys.readouterr().out.startswith("nothing to remove")


def test_clean_refused_while_a_run_is_up(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean(monkeypatch, LabError("another zcube-lab run (pid 7) is up; stop it first"), None)
    assert main(["clean"]) == 1
    assert "nothing removed: another zcube-lab run (pid 7) is up" in capsys.readouterr().out


def test_a_running_peer_is_named_and_stopped_only_with_peer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped = _clean(monkeypatch, [], 4321)
    assert main(["clean"]) == 0
    out = capsys.readouterr().out
    assert "the peer machine is running (pid 4321)" in out and "--peer" in out and not stopped
    assert main(["clean", "--peer"]) == 0
    assert capsys.readouterr().out.splitlines() == ["removed peer machine (pid 4321)"]
    assert stopped == [True]


def test_clean_needs_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert clean.run(argparse.Namespace(peer=False)) == 1
    assert "needs root" in capsys.readouterr().out


def test_peer_running_reads_the_pidfile(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    assert clean.peer_running(pidfile) is None  # no file: not started
    pidfile.write_text(f"{os.getpid()}\n")
    assert clean.peer_running(pidfile) == os.getpid()
    pidfile.write_text(f"{_dead_pid()}\n")
    assert clean.peer_running(pidfile) is None


def test_the_peer_script_is_the_repositorys() -> None:
    """`clean --peer` stops scripts/peer.sh of this checkout (it pointed one folder above the
    checkout while the CLI was a top-level package)."""
    repo = Path(__file__).resolve().parents[2]
    assert repo / "scripts" / "peer.sh" == clean.PEER_SCRIPT
    assert clean.PEER_SCRIPT.is_file()
