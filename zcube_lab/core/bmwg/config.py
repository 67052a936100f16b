"""What `zcube-lab bmwg run` takes, declared once (pure): each field is its flag. The sections
come as the command's positional arguments; a list option left empty means the draft's values,
scaled to the fabric (`zcube_lab.core.bmwg.scaling`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zcube_lab.core.bmwg.balance import algorithms as balance_algorithms
from zcube_lab.core.bmwg.fairness import loads as jfi_levels
from zcube_lab.core.bmwg.throughput import rates as tps_ladder
from zcube_lab.core.bmwg.ttft import prompt_lengths
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.options import option

FABRIC_KINDS = ("zcube", "roft", "clos")
# The highest background level a run takes: the draft's §10.4 sweeps 0-95%, and a sender paced
# at its whole line rate leaves its pacing no slack.
MAX_LEVEL = 0.95


def numbers(text: str, name: str) -> tuple[float, ...]:
    """A comma-separated list of numbers ("4,8,15", "1e5,1e6"); ConfigError naming `name`."""
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(name, text, "comma-separated numbers, e.g. 4,8") from None


@dataclass(frozen=True)
class BmwgConfig:
    """A `bmwg run`'s choices."""

    fabrics: str = option("zcube,roft,clos", help="comma-separated fabric kinds to compare")
    gpus: int = option(16, help="GPU hosts of each fabric (its structure-keeping size)")
    trials: int = option(20, help="trials per configuration and fabric (the draft's 20)")
    trial_seconds: float = option(
        60.0,
        metavar="SECONDS",
        help="modelled seconds of traffic per trial (the draft's >= 60; at k = 120 a modelled "
        "second is about 2-6 wall minutes)",
    )
    resolution: str = option(
        "finest", help="frame time on the slowest host port for the fine-scale tests"
    )
    n_burst: str = option(
        "", metavar="N,...", help="8.2: concurrent transfers per burst (default: the draft's "
        "4, 8, 16, 32, capped to the hosts a fabric has)"
    )  # fmt: skip
    within_us: str = option(
        "", metavar="US,...", help="8.2: arrival windows in µs (default: the draft's 100, "
        "1000, 10000)"
    )  # fmt: skip
    xoff_bytes: str = option(
        "", metavar="BYTES,...", help="8.2: PFC thresholds in real bytes (default: the draft's "
        "1e4, 1e5, 1e6; one the time scale cannot hold is reported, not run)"
    )  # fmt: skip
    kv_load: str = option(
        "", metavar="FRACTION,...", help="7.4: KV load as a share of the EP members' NICs "
        "(default: the draft's 0.5, 0.75)"
    )  # fmt: skip
    pairs: str = option(
        "", metavar="N,...", help="5.3: concurrent pairs (default: the draft's 1-128, capped "
        "to half the hosts)"
    )  # fmt: skip
    sizes: str = option(
        "", metavar="BYTES,...", help="5.1, 5.2, 10.4: KV message sizes in real bytes (default: "
        "the draft's; 10.4: 1 MB; a size whose round does not fit the trial is reported, not run)"
    )  # fmt: skip
    qps: str = option(
        "", metavar="N,...", help="5.1: parallel transfers (QPs) of the pair (default: the "
        "draft's 1-128, capped to 8)"
    )  # fmt: skip
    loads: str = option(
        "", metavar="FRACTION,...", help="5.2: background load as a share of each background "
        "host's NIC, 0 to 0.95 (default: the draft's 0.25, 0.5, 0.75, 0.9)"
    )  # fmt: skip
    levels: str = option(
        "", metavar="FRACTION,...", help="10.4: background levels, 0 to 0.95 (default: the "
        "draft's 0 to 0.95 in steps of 0.05; fewer for a quick look)"
    )  # fmt: skip
    tokens: str = option(
        "", metavar="N,...", help="7.1, 7.3: tokens a GPU dispatches per exchange (default: "
        "7.1 8, 32, 128, 512; 7.3 the draft's 128; a dispatch under 2 frames is not run)"
    )  # fmt: skip
    ep_sizes: str = option(
        "", metavar="N,...", help="7.1, 7.3: EP group sizes, 2 to the GPU hosts (default: 7.1 "
        "8; 7.3 4, 8, 16, as far as the hosts reach)"
    )  # fmt: skip
    prompts: str = option(
        "", metavar="N,...", help="6.1, 10.1: prompt lengths in tokens (default: the draft's "
        "128, 512, 1024, 2048, 4096, 8192, 16384; 10.1 also 256)"
    )  # fmt: skip
    rate: float = option(1.0, help="6.1, 10.2: requests per modelled second of each live run")
    jfi_loads: str = option(
        "", metavar="SHARE,...", help="9.4: offered load as a share of the prefill pool's "
        "knee, 0.05 to 1.5 (default: 0.5, 0.9; the draft names no rate)"
    )  # fmt: skip
    balance: str = option(
        "", metavar="ALG,...", help="9.3: load-balancing algorithms, from static, ecmp, spray "
        "and mrc (default: static, ecmp, spray)"
    )  # fmt: skip
    xpyd: str = option(
        "", metavar="X,...", help="6.2: prefill GPU hosts of each split, whole servers "
        "(default: the draft's prefill shares of 12 nodes, to whole servers)"
    )  # fmt: skip
    tps_rates: str = option(
        "", metavar="SHARE,...", help="11.1: the ladder of offered rates as shares of the "
        "prefill knee, 0.05 to 2 (default: 0.1, 0.2, 0.4, 0.6, 0.8, 1, 1.2; the draft starts "
        "at 1 req/s)"
    )  # fmt: skip
    retries: int = option(
        2, help="6.1, 12.3: run a live run again (same seed) when the lab's verdict rejected it "
        "for the machine's reasons alone, up to this many times"
    )  # fmt: skip
    seed: int = option(1, help="seed of the bursts' and pulls' start times (trial i: seed + i)")
    results: Path = option(  # noqa: RUF009 (a field; a Path is immutable)
        Path("results"), type=Path, help="where bmwg-<time>/ goes"
    )

    def __post_init__(self) -> None:
        for kind in self.fabric_kinds:
            if kind not in FABRIC_KINDS:
                raise ConfigError("fabrics", kind, f"kinds from {list(FABRIC_KINDS)}")
        if not self.fabric_kinds:
            raise ConfigError("fabrics", self.fabrics, "at least one fabric kind")
        if self.trials < 1:
            raise ConfigError("trials", self.trials, "at least 1 (the draft asks 20)")
        if not self.trial_seconds > 0:
            raise ConfigError("trial_seconds", self.trial_seconds, "a positive duration")
        if self.gpus < 4:
            raise ConfigError("gpus", self.gpus, "at least 4 GPU hosts")
        for v in self.kv_loads or ():
            if not 0 < v < 1:
                raise ConfigError("kv_load", v, "a fraction above 0 and below 1")
        for name, vals in (("loads", self.bg_loads), ("levels", self.bg_levels)):
            for v in vals or ():
                if not 0 <= v <= MAX_LEVEL:
                    raise ConfigError(name, v, f"a fraction from 0 to {MAX_LEVEL:g}")
        for v in self.message_sizes or ():
            if v <= 0:
                raise ConfigError("sizes", v, "a positive number of bytes")
        for v in self.windows_us or ():
            if v < 0:
                raise ConfigError("within_us", v, "a window of 0 µs or more")
        for v in self.thresholds or ():
            if v <= 0:
                raise ConfigError("xoff_bytes", v, "a positive number of bytes")
        if self.retries < 0:
            raise ConfigError("retries", self.retries, "0 or more")
        if not self.rate > 0:
            raise ConfigError("rate", self.rate, "a positive rate in requests per second")
        prompt_lengths(self.prompts)  # a ConfigError naming the field
        jfi_levels(self.jfi_loads)
        tps_ladder(self.tps_rates)
        balance_algorithms(self.balance)
        for name in ("n_burst", "pairs", "qps", "tokens", "ep_sizes"):
            for v in numbers(getattr(self, name), name):
                if v != int(v):
                    raise ConfigError(name, v, "whole numbers")

    @property
    def fabric_kinds(self) -> list[str]:
        return [k for k in self.fabrics.split(",") if k]

    @property
    def bursts(self) -> tuple[int, ...] | None:
        return tuple(int(v) for v in numbers(self.n_burst, "n_burst")) or None

    @property
    def pair_counts(self) -> tuple[int, ...] | None:
        return tuple(int(v) for v in numbers(self.pairs, "pairs")) or None

    @property
    def windows_us(self) -> tuple[float, ...] | None:
        return numbers(self.within_us, "within_us") or None

    @property
    def thresholds(self) -> tuple[float, ...] | None:
        return numbers(self.xoff_bytes, "xoff_bytes") or None

    @property
    def kv_loads(self) -> tuple[float, ...] | None:
        return numbers(self.kv_load, "kv_load") or None

    @property
    def message_sizes(self) -> tuple[float, ...] | None:
        return numbers(self.sizes, "sizes") or None

    @property
    def qp_counts(self) -> tuple[int, ...] | None:
        return tuple(int(v) for v in numbers(self.qps, "qps")) or None

    @property
    def ep_tokens(self) -> tuple[int, ...] | None:
        return tuple(int(v) for v in numbers(self.tokens, "tokens")) or None

    @property
    def ep_group_sizes(self) -> tuple[int, ...] | None:
        return tuple(int(v) for v in numbers(self.ep_sizes, "ep_sizes")) or None

    @property
    def prompt_lengths(self) -> tuple[int, ...]:
        return prompt_lengths(self.prompts)

    @property
    def jfi_levels(self) -> tuple[float, ...]:
        return jfi_levels(self.jfi_loads)

    @property
    def tps_ladder(self) -> tuple[float, ...]:
        return tps_ladder(self.tps_rates)

    @property
    def balance_algorithms(self) -> tuple[str, ...]:
        return balance_algorithms(self.balance)

    @property
    def bg_loads(self) -> tuple[float, ...] | None:
        return numbers(self.loads, "loads") or None

    @property
    def bg_levels(self) -> tuple[float, ...] | None:
        return numbers(self.levels, "levels") or None
