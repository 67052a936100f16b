"""The load generator's options, declared once (pure): `LoadConfig`.

Each field carries its flag, default and help (`zcube_lab.core.options`), and drives both ends:
Locust's parser (`zcube_lab.workloads.locust_ext.add_arguments`, each flag also read from a
`ZCUBE_*` environment variable) and the command line the lab starts Locust with
(`zcube_lab.emulator.experiment.locustplan`, through `load_argv`). The field names are the flags'
argparse names, so Locust's parsed options read the same (`options.request_timeout`).

Defaults are the load generator's own (`--workload chat`, `--seed 0`, as when Locust is run by
hand); the lab always writes the run's workload and seed. Times are modelled seconds: with
`--dilation K` the load is sent K times slower (`clock`) and reported in modelled seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zcube_lab.core.clock import Clock, check_dilation
from zcube_lab.core.options import add_flags, from_args, option, to_argv
from zcube_lab.workloads.arrivals import PROCESSES

ENV_PREFIX = "ZCUBE_"  # `--seed` is also read from ZCUBE_SEED


@dataclass(frozen=True)
class LoadConfig:
    """One load generator's options (see the module docstring); validated at construction."""

    workload: str = option("chat", help="profile name or path to a profile JSON file")
    seed: int = option(0, help="seed of the request plan")
    arrival: str | None = option(
        None, choices=PROCESSES, help="arrival process (default: profile's)"
    )
    rate: float | None = option(None, type=float, help="mean requests/s (default: profile's)")
    burstiness: float | None = option(
        None, type=float, help="gamma shape k (1 = Poisson, <1 burstier)"
    )
    stages: str | None = option(None, help="staged load, DURATION:RATE[,DURATION:RATE...]")
    model: str | None = option(None, help="served model name (default: profile's)")
    trace: str | None = option(None, help="Mooncake JSONL trace for --workload trace")
    length_scale: float | None = option(None, type=float, help="multiply all token lengths")
    duration: float | None = option(None, type=float, help="plan length, s (default: --run-time)")
    metrics_port: int = option(0, omit_default=True, help="Prometheus exporter port (0: none)")
    metrics_addr: str = option("127.0.0.1", omit_default=True, help="Prometheus exporter address")
    metrics_linger: float = option(
        0.0, omit_default=True, help="keep the exporter up after the run, s"
    )
    requests_out: str | None = option(None, help="per-request JSONL output file")
    summary_out: str | None = option(None, help="run summary JSON output file")
    max_in_flight: int = option(
        4096, omit_default=True, help="driver safety limit on open requests"
    )
    request_timeout: float = option(600.0, omit_default=True, help="per-request network timeout, s")
    keep_running: bool = option(False, switch=True, help="do not end the run when the plan is done")
    dilation: float = option(1.0, omit_default=True, help="send K times slower, report / K")
    plan_shard: str | None = option(None, help="K/W: send only requests with index %% W == K")

    def __post_init__(self) -> None:
        check_dilation(self.dilation)

    @property
    def clock(self) -> Clock:
        """The load's modelled and wall seconds (`--dilation`)."""
        return Clock(self.dilation)


def add_load_flags(parser: Any) -> None:
    """Every `LoadConfig` flag on `parser` (Locust's configargparse parser or a group of it),
    each also read from its `ZCUBE_*` environment variable."""
    add_flags(parser, LoadConfig, env_prefix=ENV_PREFIX)


def load_config(options: Any) -> LoadConfig:
    """The `LoadConfig` of parsed options (an option they lack has its default)."""
    return from_args(LoadConfig, options)


def load_argv(cfg: LoadConfig) -> list[str]:
    """The flags that parse back to `cfg` (the run's workload and seed always among them)."""
    return to_argv(cfg)
