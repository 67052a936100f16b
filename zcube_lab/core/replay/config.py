"""What `zcube-lab replay` takes, declared once (pure): each field is its flag."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zcube_lab.core.clock import check_fine_dilation
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.queues import CHIPS
from zcube_lab.core.options import option
from zcube_lab.core.replay.recording import CLASSES

FABRIC_KINDS = ("zcube", "roft", "clos")
# How a replay spreads a KV transfer's bytes over its lanes (`zcube_lab.emulator.replay.agent`).
STRIPINGS = ("even", "shared")


@dataclass(frozen=True)
class ReplayConfig:
    """A replay's choices (the recording itself comes as the command's positional argument)."""

    incast: int | None = option(
        None,
        type=int,
        metavar="N",
        help="instead of a run: N senders into one host (the IETF draft's §8.2 burst)",
    )
    fabrics: str = option(
        "",
        help="comma-separated fabric kinds to replay on (zcube, roft, clos), each at the "
        "recording's GPU count and structure-keeping size (default: the run's own fabric; "
        "for --incast: zcube,roft)",
    )
    gpus: int = option(16, help="GPU hosts of an --incast's fabrics")
    resolution: str = option(
        "finest",
        help="the modelled duration of one frame on the slowest host port: a preset "
        "(coarse 720 µs, medium 70, fine 7, finest 2), a time (7us, 0.5ms), or 'run' "
        "(the recorded run's own scale)",
    )
    mtu: int = option(1500, help="MTU at a chosen resolution")
    striping: str = option(
        "auto",
        choices=["auto", *STRIPINGS],
        help="how a KV transfer's bytes go over its lanes: 'even' (an equal share a NIC port, "
        "as an RDMA NIC's static multi-rail split), 'shared' (the live pull's chunks dealt from "
        "one queue, so a loaded path carries fewer), 'auto' (shared at --resolution run, "
        "where the replay is set against the live pulls; even otherwise)",
    )
    dilation: float | None = option(
        None,
        type=float,
        metavar="K",
        help="the time dilation k, instead of the one chosen from the datapath load (the "
        "smallest that keeps every fabric's busiest 0.3 wall s within 0.7 of the datapath's "
        "measured packets/s, one k for all fabrics); a k that leaves a fabric above that is "
        "warned of and run; below the per-port budget's k it is refused",
    )
    window: str = option(
        "", help="START:END modelled seconds of the run to replay (default: all, or --busiest)"
    )
    busiest: float = option(
        0.0, metavar="SECONDS", help="replay the window of this length with the most KV bytes"
    )
    classes: str = option("kv,ep,other", help="traffic classes to replay (kv, ep, other)")
    isolate: bool = option(
        False,
        switch=True,
        help="also replay each class alone, and report the contended / isolated p99 per class "
        "(the draft's §7.4)",
    )
    trials: int = option(
        1,
        help="replay each N times on the same lab (mixed and, with --isolate, each class "
        "alone); the figures as the median and [min-max] of the trials, every trial kept",
    )
    xoff_bytes: float | None = option(
        None,
        type=float,
        help="PFC XOFF in real bytes (the draft's 10 KB-1 MB); default: the chip's per-port "
        "buffer share",
    )
    chip: str = option("51.2t", choices=list(CHIPS), help="switch chip of the buffer share")
    ep_split: int = option(1, help="exchanges per recorded EP frame (re-records from the logs)")
    bytes: float = option(16e6, help="bytes per --incast transfer")
    within_us: float = option(0.0, help="--incast starts spread over this window (µs)")
    seed: int = option(1, help="seed of --incast's start times")
    results: Path = option(  # noqa: RUF009 (a field; a Path is immutable)
        Path("results"), type=Path, help="where replay-<time>/ goes"
    )

    def __post_init__(self) -> None:
        for kind in self.fabric_kinds:
            if kind not in FABRIC_KINDS:
                raise ConfigError("fabrics", kind, f"kinds from {list(FABRIC_KINDS)}")
        for cls in self.class_list:
            if cls not in CLASSES:
                raise ConfigError("classes", cls, f"classes from {list(CLASSES)}")
        if self.window and self.busiest:
            raise ConfigError("window", self.window, "either --window or --busiest, not both")
        if self.busiest < 0:
            raise ConfigError("busiest", self.busiest, "a positive number of seconds")
        if self.ep_split < 1:
            raise ConfigError("ep_split", self.ep_split, "a whole number >= 1")
        if self.trials < 1:
            raise ConfigError("trials", self.trials, "a whole number >= 1")
        if self.dilation is not None:
            check_fine_dilation(self.dilation)
        if self.incast is not None and self.incast < 1:
            raise ConfigError("incast", self.incast, "at least 1 sender")
        if self.window:
            self.window_s  # noqa: B018 (parsed here, refused here)

    @property
    def kv_striping(self) -> str:
        """The striping of KV transfers: 'auto' resolved by the resolution."""
        if self.striping != "auto":
            return self.striping
        return "shared" if self.resolution == "run" else "even"

    @property
    def fabric_kinds(self) -> list[str]:
        return [k for k in self.fabrics.split(",") if k]

    @property
    def class_list(self) -> list[str]:
        return [c for c in self.classes.split(",") if c]

    @property
    def window_s(self) -> tuple[float, float]:
        try:
            a, b = (float(x) for x in self.window.split(":"))
        except ValueError:
            raise ConfigError(
                "window", self.window, "START:END in modelled seconds, e.g. 2.0:2.5"
            ) from None
        return a, b
