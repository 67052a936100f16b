"""Every limit the emulator health verdict judges a run by, in one frozen object (pure).

`Limits` is what `zcube_lab.emulator.verdict.judge.judge` and
`zcube_lab.emulator.verdict.network.judge_network` read, and what a run writes to `health.json`
beside its verdict (`Limits.to_dict`), so a verdict can be read with the limits it was judged by.
The CPU limits are explained in `zcube_lab.emulator.verdict.judge`, the network ones in
`zcube_lab.emulator.verdict.network`; the rules added for issue 20:

- KV pulls against their ideal (`bytes * 8 / path rate`,
  `zcube_lab.emulator.results.fabric.transfers`): a p50 above `kv_ratio_p50` (1.5x) while the
  busiest NIC link of the hosts that pulled or served KV was under `kv_path_busy` (20%) busy over
  the load is an end-host artifact (Python, the CPU, the loop), not the fabric: at 20% load a pull
  finds its NIC busy about a fifth of the time, and an M/D/1 queue at that load waits about an
  eighth of a service time on average, so contention alone does not lift the median pull by 30%, let
  alone 50%. Each pull's time is taken less `kv_fixed_s` (5 ms), the fixed cost of a pull (connect,
  request, framing, first byte) that `bench/kv_fidelity.py` measures apart (2.2-6 ms,
  docs/BENCHMARKS.md). Why 1.5x and not 1.3x: at k=1 the lab's own per-pull overhead is not gone
  (kept connections left 12-16 ms per pull in full runs, three to five times the isolated fixed
  cost: quiet clean runs came out at 1.16-1.32x after 5 ms, and the dilation ladder's pulls at
  1.04-1.36x raw, falling to 1.00-1.04x from k=2 on), so a 1.3x limit would fail clean runs at k=1
  by chance; at 1.5x the rule catches the gross artifact it was made for (the 64-GPU kv-heavy runs
  at k=1: 2.0-2.2x on 2%-busy links, 1.05x at k=4) and the report must say that KV figures at k=1
  may carry up to that inflation (docs/EXPERIMENTS.md). On by default since 2026-12-04
  (`judge_kv_pulls`). Fewer than `kv_min_pulls` rated pulls are not judged (a median of a handful of
  pulls says little). The load judged, since 2026-12-06, is the one the pulls met as they ran
  (`transfers.kv_seen_busy`: per pull the busiest of its own NIC links and the trunks over its
  time, widened by a scrape interval each side; the p50 over the pulls), where it had been the
  busiest link's mean over the whole load: a hotspot loads a decode NIC for a few seconds and
  moves on, so that mean was 19-21% while the median pull met 48-53% (`bench/kv_seen.py`,
  docs/RESULTS.md), and three runs whose pulls were slowed by the hotspot itself were rejected
  as an end-host artifact. Not judged, since 2026-12-07, in a run that turned KV transfer off
  (`--kv-off`, the run's config): each pull moves one byte, so its time is all fixed cost and
  its ratio to the ideal is huge whatever the hosts did (22,028x in the first §9.3 EP-only run);
  the verdict says so in `not_judged` instead of a reason.
- Engine lateness relative to the modelled step: a step whose compute sleep woke more than
  `late_share` (25%) of its modelled step time late stretches that step, and every token of it,
  by as much; more than `late_fraction` (1%) of all engine steps so late reaches the p99 (over
  all tokens) the report leads with. A steady 15 ms late wake on a 30 ms decode step is 50% and
  fails, where the fixed `overrun_s` (20 ms) rule alone let it pass. Judged over the steps of
  every engine together: one engine runs 100-400 steps in the default comparison, where 1% is
  two to four steps, and on a quiet machine 2-5 isolated slow wake-ups on one of 12 engines
  decided the verdict although 0.3-0.4% of all steps were late (docs/EXPERIMENTS.md).
- The gateway's event-loop lag (`zcube:gateway_loop_lag_seconds`: a timer the gateway sets every
  0.1 s, and how late it fires) above `loop_lag_s` (20 ms) in more than `loop_lag_fraction`
  (1%) of its samples: every request and every streamed token crosses that loop.
- The load generator's send lag (actual minus planned send time of each request,
  `zcube_lab.workloads.openloop`) above `send_lag_s` (20 ms) for more than `send_lag_fraction` (1%)
  of the requests: its greenlets woke late, so it also read answers late, and its TTFT and ITL
  carry its own lag.
- The lossless agent (`--lossless`, docs/LOSSLESS.md): its reaction (queue past XOFF -> the feeding
  ports paused, an upper bound without the idle interval's slack) above `lossless_reaction_s` (5 ms)
  at p99. One watched port reacted in 1.3 ms at p50 and 2.0 ms at p99 with its 1 ms poll
  (bench/lossless_reaction.py), 1-2 frame times of a 9,000-byte frame at 100 Mb/s; 5 ms is about 7
  frame times at 100 Mb/s (3.5 at a 50 Mb/s ZCube port): past it a queue overshoots XOFF by several
  frames more than PFC's headroom would hold, and the pauses the run reports are the agent's
  slowness as much as the fabric's. Its pauses themselves are the fabric's: not judged. In modelled
  seconds (the agent's wall reaction / k): at k=2 a frame takes twice as long in wall time, so 7
  frame times are 10 wall ms.
- CPU rules are judged over the load window only (from the load's start to the load
  generator's exit), not from monitoring start to collection.
- A source of evidence that did not answer (an engine's or the gateway's metrics, reads of the
  network sampler, the load generator's record, a registered process never sampled in the
  load) makes the run not trustworthy, naming the source: what was not seen was not checked.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.verdict.netstats import RateLimits

# Shares between 0 and 1, positive numbers of cores, seconds >= 0, positive ratios.
_SHARES = (
    "machine_cpu", "machine_fraction", "datapath_fraction", "process_fraction", "steal_mean",
    "core_busy", "core_fraction", "overrun_fraction", "late_fraction", "kv_path_busy",
    "loop_lag_fraction", "send_lag_fraction", "rate_under",
)  # fmt: skip
_CORES = ("datapath_cores", "process_cores")
_SECONDS = (
    "overrun_s", "fault_grace_s", "loop_lag_s", "send_lag_s", "kv_fixed_s", "lossless_reaction_s",
)  # fmt: skip
_RATIOS = ("late_share", "kv_ratio_p50", "rate_over")
_COUNTS = ("min_samples", "kv_min_pulls")


@dataclass(frozen=True)
class Limits:
    """Limits beyond which a run is not trustworthy; the module docstrings say why these."""

    # CPU (zcube_lab.emulator.verdict.judge), over the load window
    machine_cpu: float = 0.90  # share of all CPUs
    machine_fraction: float = 0.05  # of samples above machine_cpu (i.e. a p95 rule)
    datapath_cores: float = 0.85  # ovs-vswitchd, in cores
    datapath_fraction: float = 0.20
    process_cores: float = 0.90  # any registered process, in cores
    process_fraction: float = 0.20
    steal_mean: float = 0.05
    min_samples: int = 3
    require_datapath: bool = True  # no ovs-vswitchd samples: the datapath is unchecked
    core_busy: float = 0.95  # any one core
    core_fraction: float = 0.20
    # Network (zcube_lab.emulator.verdict.network)
    fault_grace_s: float = 10.0
    judge_qdisc_drops: bool = True  # False: qdisc drops are the modelled ports' own, reported
    rate_over: float = 1.05  # a shaped link above this x its rate over a window
    rate_under: float = 0.5  # a backlogged shaped link below this x its rate over a window
    # Engine steps
    overrun_s: float = 0.02  # a step woke this late (modelled seconds: wall / k) ...
    overrun_fraction: float = 0.01  # ... in more than this share of an engine's steps
    late_share: float = 0.25  # a step woke this share of its modelled step late ...
    late_fraction: float = 0.01  # ... in more than this share of an engine's steps
    # KV pulls against bytes / path rate
    kv_ratio_p50: float = 1.5  # of (time - kv_fixed_s) / (bytes * 8 / path rate)
    kv_fixed_s: float = 0.005  # a pull's fixed cost, as bench/kv_fidelity.py takes it off
    kv_path_busy: float = 0.20  # judged only while the pulls' NIC links were less busy
    kv_min_pulls: int = 10
    # On since 2026-12-04, at 1.5x (the module's docstring says why not 1.3x); older health.json
    # files keep the limits they were judged by (False and 1.3 then).
    judge_kv_pulls: bool = True
    # Event loops outside the engines
    loop_lag_s: float = 0.02  # the gateway's loop (modelled seconds, as overrun_s) ...
    loop_lag_fraction: float = 0.01  # ... in more than this share of its samples
    send_lag_s: float = 0.02  # the load generator's sends ...
    send_lag_fraction: float = 0.01  # ... for more than this share of its requests
    # The lossless agent (--lossless): queue past XOFF -> feeders paused, p99 (docs/LOSSLESS.md)
    lossless_reaction_s: float = 0.005  # modelled seconds (wall / k), as overrun_s

    def __post_init__(self) -> None:
        checks = (
            (_SHARES, lambda v: _number(v) and 0 <= v <= 1, "a share between 0 and 1"),
            (_CORES, lambda v: _number(v) and v > 0, "a positive number of cores"),
            (_SECONDS, lambda v: _number(v) and v >= 0, "seconds >= 0"),
            (_RATIOS, lambda v: _number(v) and v > 0, "a positive ratio"),
            (_COUNTS, lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= 1,
             "an integer >= 1"),
        )  # fmt: skip
        for names, ok, allowed in checks:
            for name in names:
                value = getattr(self, name)
                if not ok(value):
                    raise ConfigError(f"limits.{name}", value, allowed)

    @property
    def rates(self) -> RateLimits:
        """The shaping limits as `zcube_lab.emulator.verdict.netstats.window_events` takes them."""
        return RateLimits(over=self.rate_over, under=self.rate_under)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for health.json."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Limits:
        """The limits as `to_dict` wrote them; a limit an older file lacks takes its default,
        one a newer file added is ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)
