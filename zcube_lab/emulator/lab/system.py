"""Running the lab's system programs (`ip`, `sysctl`, `ethtool`, `modprobe`, `ovs-*`).

Always an argument list, never a shell string, always with a timeout. Two ways to run one:
`run` for a step the lab needs (with `check`, a failure raises `LabError` naming the command and
what it printed), and `attempt` for a probe that must not raise (a missing program or a timeout
is an answer too: return code None). `LabError` is the lab's one error type.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence


class LabError(RuntimeError):
    """The lab could not be brought up (the message says which phase and why)."""


def run(
    argv: Sequence[str], check: bool = True, timeout: float = 30, input: str | None = None
) -> str:
    """Run a program (with `input` on its stdin) and return its stdout; with `check`, a non-zero
    exit raises LabError."""
    done = subprocess.run(
        list(argv), input=input, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise LabError(f"{' '.join(argv)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def attempt(argv: Sequence[str], timeout: float = 10.0) -> tuple[int | None, str]:
    """Run a program and return (return code, stdout and stderr stripped); the return code is
    None when the program is missing, cannot run, or timed out (the output then says which)."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        return None, f"{argv[0]}: not found"
    except OSError as exc:  # e.g. an unreadable PATH entry: as good as missing
        return None, f"{argv[0]}: cannot run: {exc.strerror}"
    except subprocess.TimeoutExpired:
        return None, f"{argv[0]}: timed out after {timeout:g}s"
    output = "\n".join(s.strip() for s in (done.stdout, done.stderr) if s.strip())
    return done.returncode, output
