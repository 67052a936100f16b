"""TCP congestion control as a stated choice (`--cc`): the host sysctl, the lab's check of what
the kernel has and lets a namespace choose, and the run config that records it."""

from __future__ import annotations

from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_zcube
from zcube_lab.core.fabric.hostplan import DEFAULT_CONGESTION_CONTROL, sysctls
from zcube_lab.core.fabric.linkplan import LinkSettings, host_setup
from zcube_lab.emulator.lab import machineprep
from zcube_lab.emulator.lab.machineprep import ensure_congestion_control
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.system import LabError


def test_host_sysctls_set_the_chosen_congestion_control() -> None:
    host = build_zcube(n=2).hosts[0]
    assert "net.ipv4.tcp_congestion_control=reno" in sysctls(host, "reno")
    assert not any("congestion" in s for s in sysctls(host))  # None: the inherited one
    with pytest.raises(ConfigError, match=r"congestion control.*bbr.*cubic.*reno"):
        sysctls(host, "dctcp")
    fabric = build_zcube(n=2)
    setup = host_setup(fabric, host, LinkSettings(mtu=9000, congestion_control="cubic"), "/x")
    assert any("net.ipv4.tcp_congestion_control=cubic" in text for _, text in setup.files)


def test_lab_options_default_and_refusal() -> None:
    assert LabOptions(datapath="user").congestion_control == DEFAULT_CONGESTION_CONTROL == "bbr"
    with pytest.raises(ConfigError, match="congestion control"):
        LabOptions(datapath="user", congestion_control="vegas")


def _proc(tmp_path: Path, available: str, allowed: str) -> Path:
    (tmp_path / "tcp_available_congestion_control").write_text(available + "\n")
    (tmp_path / "tcp_allowed_congestion_control").write_text(allowed + "\n")
    return tmp_path


def test_an_allowed_algorithm_changes_nothing(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "reno bbr cubic", "reno bbr")
    assert ensure_congestion_control("bbr", proc) == []
    assert (proc / "tcp_allowed_congestion_control").read_text() == "reno bbr\n"


def test_a_restricted_algorithm_is_added_to_the_allowed_list(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "reno bbr cubic", "reno bbr")
    changed = ensure_congestion_control("cubic", proc)
    assert changed == ["added cubic to net.ipv4.tcp_allowed_congestion_control"]
    assert (proc / "tcp_allowed_congestion_control").read_text() == "reno bbr cubic\n"


def test_a_missing_algorithm_is_loaded_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = _proc(tmp_path, "reno cubic", "reno cubic")
    calls: list[list[str]] = []

    def loads(argv: list[str], timeout: float = 10.0) -> tuple[int, str]:
        calls.append(argv)
        (proc / "tcp_available_congestion_control").write_text("reno cubic bbr\n")
        return 0, ""

    monkeypatch.setattr(machineprep, "attempt", loads)
    assert ensure_congestion_control("bbr", proc) == [
        "loaded tcp_bbr",
        "added bbr to net.ipv4.tcp_allowed_congestion_control",
    ]
    assert calls == [["modprobe", "-q", "tcp_bbr"]]

    proc = _proc(tmp_path, "reno cubic", "reno cubic")
    monkeypatch.setattr(machineprep, "attempt", lambda argv, timeout=10.0: (1, "not found"))
    with pytest.raises(LabError, match=r"'bbr' is not in this kernel.*choose one of cubic, reno"):
        ensure_congestion_control("bbr", proc)


def test_run_options_record_the_congestion_control() -> None:
    from zcube_lab.cli import build_parser
    from zcube_lab.cli.commands.run import config_from_args

    config = config_from_args(build_parser().parse_args(["run", "--cc", "cubic"]))
    assert config.to_dict()["congestion_control"] == "cubic"
    assert config_from_args(build_parser().parse_args(["run"])).congestion_control == "bbr"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--cc", "dctcp"])
