"""Shared gates for integration tests: they need root, a running Open vSwitch and Mininet.
They skip only where the machine truly lacks one, and say which."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

import pytest


def lab_missing() -> str | None:
    """Why the lab cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (Mininet creates namespaces and links)"
    if not shutil.which("mnexec"):
        return "needs Mininet (mnexec not on PATH): run scripts/setup.sh"
    try:
        import mininet  # noqa: F401
    except ImportError:
        return "needs Mininet's Python library: run scripts/setup.sh"
    probe = subprocess.run(
        ["ovs-vsctl", "--timeout=5", "show"], capture_output=True, check=False, timeout=10
    )
    if probe.returncode != 0:
        return "needs Open vSwitch running: /usr/share/openvswitch/scripts/ovs-ctl start"
    return None


@pytest.fixture(scope="session")
def lab_available() -> None:
    """Skip (with the reason) when the machine cannot run Mininet on Open vSwitch."""
    reason = lab_missing()
    if reason:
        pytest.skip(reason)


# A run's verdict can fail for the machine's sake alone: on a virtual machine whose host takes
# CPU time back (steal), the lab runs slower than its clock says, and the verdict says so. That
# is the verdict working, and says nothing of the lab; a test that needs a trustworthy run
# runs once more, and skips (saying why) when the host is still taking CPU back.
MACHINE_ONLY_REASONS = ("CPU steal averaged",)


def machine_only(reasons: list[str]) -> bool:
    """True when every reason a run was not trusted is the host's, not the lab's."""
    return bool(reasons) and all(r.startswith(MACHINE_ONLY_REASONS) for r in reasons)


def run_trusted(
    run: Callable[[], dict], attempts: int = 2, once_more: tuple[str, ...] = ()
) -> dict:
    """The summary of `run()`, run again when only the host made it untrustworthy; skips when
    every attempt was spoiled by the host alone. `once_more`: reasons (prefixes) a test may also
    run again for, whose last attempt is then returned as it is (a test fails on it)."""
    again = MACHINE_ONLY_REASONS + once_more
    for _ in range(attempts):
        summary = run()
        reasons = summary["health"]["reasons"]
        if summary["trustworthy"] or not all(r.startswith(again) for r in reasons):
            return summary
    if not machine_only(reasons):
        return summary
    pytest.skip(f"the host took CPU back in {attempts} runs: {summary['health']['reasons']}")
