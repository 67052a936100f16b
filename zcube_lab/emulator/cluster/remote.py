"""The lab's machines and how it runs things on them: locally on machine 0, over ssh elsewhere.

A lab machine is named by its *wire address*: the address the other machines reach it at, which
its tunnels use as their local end. Machine 0 is this machine (its address must be one of ours);
it runs the controller, Prometheus, the Locust master and keeps the run folder. The others are
reached as root over ssh with this machine's key (`scripts/peer.sh` makes one on this machine;
docs/SCALE.md says how to set up a real one), with the same checkout and venv at the same path,
so our own modules run there with `python_on`.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.lab.system import LabError, attempt

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=5")


@dataclass(frozen=True)
class Machine:
    """Lab machine `index` at wire address `address` (index 0: this machine)."""

    index: int
    address: str

    @property
    def local(self) -> bool:
        return self.index == 0

    @property
    def label(self) -> str:
        return f"machine {self.index} ({self.address})"


def local_addresses() -> set[str]:
    """This machine's IPv4 addresses (root namespace)."""
    _code, out = attempt(["ip", "-o", "-4", "addr", "show"], timeout=10)
    return {line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3}


def parse_machines(text: str, local: set[str] | None = None) -> list[Machine]:
    """`198.19.254.1,198.19.254.2`: this machine's wire address first, then the others'."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    allowed = "a comma-separated list of at least 2 IPv4 wire addresses, this machine's first"
    if len(parts) < 2 or len(set(parts)) != len(parts):
        raise ConfigError("machines", text, allowed)
    for p in parts:
        try:
            ipaddress.IPv4Address(p)
        except ValueError:
            raise ConfigError("machines", p, allowed) from None
    if any(ipaddress.IPv4Address(p).is_loopback for p in parts):
        raise ConfigError("machines", text, f"{allowed}; not loopback (tunnels need the wire)")
    mine = local_addresses() if local is None else local
    if parts[0] not in mine:
        raise ConfigError("machines", parts[0], f"one of this machine's addresses {sorted(mine)}")
    return [Machine(i, a) for i, a in enumerate(parts)]


def argv_on(machine: Machine, argv: list[str]) -> list[str]:
    """The command line that runs `argv` as root on `machine`."""
    if machine.local:
        return list(argv)
    return ["ssh", *SSH_OPTIONS, f"root@{machine.address}", shlex.join(argv)]


def run_on(machine: Machine, argv: list[str], timeout: float = 60.0) -> tuple[int | None, str]:
    """(exit code, output) of `argv` on `machine`, as `system.attempt` gives them: None when it
    could not run or timed out."""
    return attempt(argv_on(machine, argv), timeout=timeout)


def check_on(machine: Machine, argv: list[str], what: str, timeout: float = 60.0) -> str:
    """Run `argv` on `machine`; raise LabError naming `what` when it fails."""
    code, out = run_on(machine, argv, timeout)
    if code != 0:
        raise LabError(f"{what} on {machine.label} failed: {out[-2000:] or 'no output'}")
    return out


def python_on(machine: Machine, code: str, timeout: float = 60.0) -> object:
    """Run Python `code` with this venv's interpreter on `machine`; it prints one JSON value,
    which is returned. Our modules import there (same checkout, same path)."""
    out = check_on(machine, [sys.executable, "-c", code], "python", timeout)
    for line in reversed(out.splitlines()):  # a warning on stderr may follow the answer
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    raise LabError(f"{machine.label}: no JSON answer from python: {out[-500:]}")


def ship(machine: Machine, folder: Path) -> None:
    """Copy `folder` (the run's scripts) to the same path on `machine`."""
    if machine.local:
        return
    tar = subprocess.run(
        ["tar", "-C", str(folder), "-cf", "-", "."], capture_output=True, check=False
    )
    if tar.returncode != 0:
        raise LabError(f"packing {folder}: {tar.stderr.decode(errors='replace')}")
    remote = f"mkdir -p {shlex.quote(str(folder))} && tar -C {shlex.quote(str(folder))} -xf -"
    done = subprocess.run(
        ["ssh", *SSH_OPTIONS, f"root@{machine.address}", remote],
        input=tar.stdout,
        capture_output=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise LabError(
            f"copying {folder} to {machine.label}: {done.stderr.decode(errors='replace')}"
        )
