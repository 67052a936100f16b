"""What one run measured, as typed data: `RunSummary` and its sections, read from and written
to `summary.json` (pure, apart from `read`/`write`).

The JSON is the file format users and scripts already read, so every class writes exactly the
keys, nesting and value types the runner has always written: a flat section is a dataclass
whose field names are its keys, in the same order (`zcube_lab.emulator.results.run.sections`). The
client, server, transfer and lossless sections are here; the fabric's (`FabricStats`, `LinkLoad`)
are in `zcube_lab.emulator.results.run.fabricfigures`, the faults' (`FaultReport`) in
`zcube_lab.emulator.results.run.faultfigures`, and the IETF BMWG draft's KPIs (`DraftKpis`, key
`bmwg`) in `zcube_lab.emulator.results.ietf.kpis`; all are importable from here. Sections that older
runs lack (`label`, `policy`, `faults`, `link_util`, `transfers`, `lossless`, `bmwg`, `victims`: the
victim accounting of `zcube_lab.emulator.results.lossless.victims`, `class_bytes`: EP and KV bytes
per switch port) are None and stay absent when written again; a key missing inside a section reads
as None.

Links are named by direction: `a0:3->h5` (switch a0's port 3 transmitting to host h5),
`h5->a0:3` (h5 transmitting into that port), `a0:6->b1:5` between switches.

A time-dilated run (docs/DOMAIN.md §4) writes `dilation` k (absent: 1) and its figures in
modelled seconds (`zcube_lab.emulator.results.run.dilation`); `window_s` and the health verdict stay
in wall seconds: they describe the emulator.

Names: `*_s` seconds, `*_bytes` bytes, `*_util_*` fractions of capacity (0-1), `p50/p90/p99`
quantiles on the 0-1 scale of `zcube_lab.core.stats.quantile`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.emulator.results.ietf.kpis import DraftKpis
from zcube_lab.emulator.results.lossless.victims import VictimReport
from zcube_lab.emulator.results.run.fabricfigures import (
    DirectedUtilization,
    FabricStats,
    HotPort,
    LinkLoad,
    Utilization,
)
from zcube_lab.emulator.results.run.faultfigures import FaultRecovery, FaultReport, InjectedFault
from zcube_lab.emulator.results.run.sections import Span
from zcube_lab.emulator.results.run.sections import flat as _flat
from zcube_lab.emulator.results.run.sections import from_flat as _from_flat
from zcube_lab.emulator.results.run.sections import pairs as _pairs
from zcube_lab.emulator.verdict.judge import HealthVerdict

# The sections that live in their own modules, importable from here as before.
__all__ = [
    "QUANTILES",
    "SUMMARY_FILE",
    "ClientFigures",
    "DirectedUtilization",
    "DraftKpis",
    "FabricStats",
    "FaultRecovery",
    "FaultReport",
    "HotPort",
    "InjectedFault",
    "LinkLoad",
    "LosslessFigures",
    "PortPauses",
    "RunSummary",
    "ServerFigures",
    "Span",
    "TransferFigures",
    "Utilization",
]

SUMMARY_FILE = "summary.json"
QUANTILES = (50, 90, 99)


# --- client and server figures ---------------------------------------------------------------


@dataclass(frozen=True)
class ClientFigures:
    """Throughput and latency as the load generator saw them (`requests.jsonl`)."""

    requests: int
    completed: int
    failed: int
    requests_per_s: float | None
    output_tokens_per_s: float | None
    output_tokens: int
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    ttft_mean_s: float | None
    tpot_p50_s: float | None
    tpot_p90_s: float | None
    tpot_p99_s: float | None
    tpot_mean_s: float | None
    itl_p50_s: float | None
    itl_p90_s: float | None
    itl_p99_s: float | None
    itl_mean_s: float | None
    e2e_p50_s: float | None
    e2e_p90_s: float | None
    e2e_p99_s: float | None
    e2e_mean_s: float | None


@dataclass(frozen=True)
class ServerFigures:
    """What the servers exported, from Prometheus over the run window (histogram quantiles are
    exact only to their buckets; NaN when a histogram saw nothing), but the KV and all-to-all
    times, which come from the engines' exact logs (`TransferFigures`)."""

    gateway_ttft_p50_s: float | None
    gateway_ttft_p90_s: float | None
    gateway_ttft_p99_s: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p90_s: float | None
    itl_p99_s: float | None
    # Exact since runs have a `transfers` section (the same figures, from the engines' logs);
    # bucketed histogram quantiles in older runs.
    kv_xfer_p50_s: float | None
    kv_xfer_p90_s: float | None
    kv_xfer_p99_s: float | None
    alltoall_p50_s: float | None
    alltoall_p90_s: float | None
    alltoall_p99_s: float | None
    client_ttft_p50_s: float | None
    client_ttft_p90_s: float | None
    client_ttft_p99_s: float | None
    kv_bytes: float | None
    alltoall_bytes: float | None
    kv_failed: float | None
    alltoall_failed: float | None
    alltoall_subflows_retired: float | None

    @property
    def reported_bytes(self) -> float:
        """Bytes the servers say they sent over the fabric: KV pulls and all-to-all."""
        return (self.kv_bytes or 0) + (self.alltoall_bytes or 0)


@dataclass(frozen=True)
class TransferFigures:
    """KV pulls and all-to-all exchanges timed exactly, one log line each (`logs/kv-*.jsonl`,
    `logs/ep-*.jsonl`; `zcube_lab.emulator.results.fabric.transfers`). KV times are of completed
    pull attempts; `kv_xfer_ratio_*` is a pull's time over its ideal `bytes * 8 / path rate`, and a
    pull is stalled when it took more than `STALL_FACTOR` times that plus `STALL_SLACK_S`.
    All-to-all
    figures are None in a run without an exchange log."""

    kv_pulls: int
    kv_attempts_failed: int
    kv_xfer_p50_s: float | None
    kv_xfer_p90_s: float | None
    kv_xfer_p99_s: float | None
    kv_xfer_max_s: float | None
    kv_xfer_bytes_p50: float | None
    kv_xfer_bytes_p90: float | None
    kv_xfer_bytes_p99: float | None
    kv_xfer_bytes_max: float | None
    kv_xfer_ratio_p50: float | None
    kv_xfer_ratio_p90: float | None
    kv_xfer_ratio_p99: float | None
    kv_xfer_ratio_max: float | None
    kv_pulls_rated: int  # pulls whose path rate was known (the ratio's count)
    kv_pulls_stalled: int
    kv_stalled_max_s: float | None
    alltoall_exchanges: int
    alltoall_p50_s: float | None
    alltoall_p90_s: float | None
    alltoall_p99_s: float | None
    alltoall_max_s: float | None
    alltoall_bytes_sent_p50: float | None  # bytes one engine sent in one exchange
    alltoall_bytes_received_p50: float | None
    alltoall_exchange_failures: int | None
    # Newer, absent (None) in older runs: the totals behind the BMWG draft's bandwidths, and
    # the fabric fraction: per request, its KV pull time over its TTFT at the gateway.
    kv_bytes_total: float | None = None  # bytes of the completed pulls
    kv_xfer_total_s: float | None = None  # their times, summed
    alltoall_bytes_total: float | None = None  # bytes engines sent in clean exchanges
    fabric_fraction_p50: float | None = None
    fabric_fraction_p99: float | None = None
    fabric_fraction_requests: int | None = None  # requests in both logs, with a TTFT
    # TTFT's parts (the draft's §6.1), per request from the gateway's and the KV logs
    # (`zcube_lab.emulator.results.fabric.transfers.ttft_parts`).
    ttft_prefill_p50_s: float | None = None
    ttft_prefill_p99_s: float | None = None
    ttft_transfer_p50_s: float | None = None
    ttft_transfer_p99_s: float | None = None
    ttft_decode_init_p50_s: float | None = None
    ttft_decode_init_p99_s: float | None = None
    ttft_parts_requests: int | None = None
    ttft_parts_left_out: int | None = None


# --- the run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PortPauses:
    """How often one port was paused under the lossless mode, and for how long in all."""

    pauses: int
    paused_s: float


@dataclass(frozen=True)
class LosslessFigures:
    """The lossless mode's record (`--lossless`, zcube_lab.emulator.lab.lossless), over the agent's
    life (bring-up to the end of the load): each paused port (the upstream end of a link into a
    congested switch: the fabric's pauses, not judged) and the agent's own reaction time,
    poll period and CPU (the emulator's, judged by the verdict). Times are modelled seconds
    (wall / the dilation k, `runner.lossless_figures`)."""

    ports: Mapping[str, PortPauses]
    reactions: int
    reaction_p50_s: float | None
    reaction_p99_s: float | None
    reaction_max_s: float | None
    poll_p99_s: float | None
    agent_cores: float
    errors: int

    @property
    def pauses(self) -> int:
        return sum(p.pauses for p in self.ports.values())

    @property
    def paused_s(self) -> float:
        return sum(p.paused_s for p in self.ports.values())

    def brief(self) -> dict[str, Any]:
        """The few figures a run prints."""
        ms = None if self.reaction_p99_s is None else round(self.reaction_p99_s * 1e3, 3)
        return {
            "pauses": self.pauses,
            "paused_s": round(self.paused_s, 3),
            "paused_ports": len(self.ports),
            "agent_reaction_p99_ms": ms,
            "agent_cores": self.agent_cores,
        }

    def to_dict(self) -> dict[str, Any]:
        out = _flat(self)
        out["ports"] = {k: _flat(v) for k, v in sorted(self.ports.items())}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LosslessFigures:
        ports = {k: _from_flat(PortPauses, v) for k, v in (data.get("ports") or {}).items()}
        return _from_flat(cls, data, ports=ports)


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """One run's `summary.json`: what ran, and what it measured."""

    run: str  # the run folder's name
    label: str | None = None  # `zcube`, `zcube/spray`, `roft-2planes`; older runs have none
    policy: str | None = None
    fabric: str  # the fabric kind
    fabric_params: Mapping[str, Any]
    workload: str
    model: str
    seed: int
    window_s: float
    client: ClientFigures
    loadgen: Mapping[str, Any]  # the load generator's own summary, as it wrote it
    server: ServerFigures
    fabric_stats: FabricStats
    port_util: Mapping[str, float]  # "switch:port" -> transmit utilization
    throughput_series: tuple[tuple[float, float], ...]  # (s since load start, completed/s)
    faults: FaultReport | None = None
    health: HealthVerdict
    # Newer sections, absent in older runs: every link by direction, and exact transfer times.
    link_util: Mapping[str, LinkLoad] | None = None
    transfers: TransferFigures | None = None
    trustworthy: bool
    dilation: float = 1.0  # time dilation k; written only when not 1
    lossless: LosslessFigures | None = None  # pauses and the agent, under --lossless only
    bmwg: DraftKpis | None = (
        None  # the IETF BMWG draft's KPIs by name (zcube_lab.emulator.results.ietf.bmwg)
    )
    # EP and KV behind pauses, per class (zcube_lab.emulator.results.lossless.victims), when the
    # agent's episodes were recorded
    victims: VictimReport | None = None
    # Per switch port, per traffic class (`ep`, `kv`: DSCP-marked), bytes into its queue
    # (--lossless: zcube_lab.emulator.lab.classcounterproc)
    class_bytes: Mapping[str, Mapping[str, int]] | None = None
    # Where it was read from (not written): the report finds the run's other files there.
    dir: Path | None = field(default=None, compare=False, repr=False)

    @property
    def clock(self) -> Clock:
        """The run's clock: its figures are modelled seconds, `window_s` wall seconds."""
        return Clock(self.dilation)

    @property
    def variant(self) -> str:
        """What the comparison groups runs by: the label, or the fabric in runs without one."""
        return self.label or self.fabric

    def to_dict(self) -> dict[str, Any]:
        """The summary.json object, key for key as the runner has always written it."""
        head: dict[str, Any] = {"run": self.run, "label": self.label, "policy": self.policy}
        out = {k: v for k, v in head.items() if v is not None or k == "run"}
        out.update(
            fabric=self.fabric,
            fabric_params=dict(self.fabric_params),
            workload=self.workload,
            model=self.model,
            seed=self.seed,
            window_s=self.window_s,
            **({"dilation": self.dilation} if self.dilation != 1 else {}),
            client=_flat(self.client),
            loadgen=dict(self.loadgen),
            server=_flat(self.server),
            fabric_stats=self.fabric_stats.to_dict(),
            port_util=dict(self.port_util),
            throughput_series=[list(p) for p in self.throughput_series],
        )
        if self.faults is not None:
            out["faults"] = self.faults.to_dict()
        out.update(health=self.health.to_dict(), trustworthy=self.trustworthy)
        if self.link_util is not None:
            out["link_util"] = {k: _flat(v) for k, v in self.link_util.items()}
        if self.transfers is not None:
            out["transfers"] = _flat(self.transfers)
        if self.lossless is not None:
            out["lossless"] = self.lossless.to_dict()
        if self.bmwg is not None:
            out["bmwg"] = self.bmwg.to_dict()
        if self.victims is not None:
            out["victims"] = self.victims.to_dict()
        if self.class_bytes is not None:
            out["class_bytes"] = {p: dict(c) for p, c in self.class_bytes.items()}
        return out

    def class_totals(self) -> dict[str, int] | None:
        """Per traffic class, the bytes into every counted switch port together (a byte counts
        once per switch port it crosses); None without the counters."""
        if self.class_bytes is None:
            return None
        out: dict[str, int] = {}
        for counts in self.class_bytes.values():
            for c, n in counts.items():
                out[c] = out.get(c, 0) + n
        return dict(sorted(out.items()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], dir: Path | None = None) -> RunSummary:
        """A summary from its JSON object."""
        faults = data.get("faults")
        links = data.get("link_util")
        transfers = data.get("transfers")
        return cls(
            run=data["run"],
            label=data.get("label"),
            policy=data.get("policy"),
            fabric=data["fabric"],
            fabric_params=dict(data.get("fabric_params") or {}),
            workload=data["workload"],
            model=data["model"],
            seed=data["seed"],
            window_s=data["window_s"],
            dilation=data.get("dilation", 1.0),
            client=_from_flat(ClientFigures, data["client"]),
            loadgen=dict(data.get("loadgen") or {}),
            server=_from_flat(ServerFigures, data["server"]),
            fabric_stats=FabricStats.from_dict(data["fabric_stats"]),
            port_util=dict(data.get("port_util") or {}),
            throughput_series=_pairs(data.get("throughput_series")),
            faults=FaultReport.from_dict(faults) if faults is not None else None,
            health=HealthVerdict.from_dict(data["health"]),
            trustworthy=data["trustworthy"],
            link_util=(
                {k: _from_flat(LinkLoad, v) for k, v in links.items()}
                if links is not None
                else None
            ),
            transfers=_from_flat(TransferFigures, transfers) if transfers is not None else None,
            lossless=(
                LosslessFigures.from_dict(data["lossless"]) if data.get("lossless") else None
            ),
            bmwg=DraftKpis.from_dict(data["bmwg"]) if data.get("bmwg") is not None else None,
            victims=(
                VictimReport.from_dict(data["victims"]) if data.get("victims") is not None else None
            ),
            class_bytes=data.get("class_bytes"),
            dir=dir,
        )

    def to_json(self) -> str:
        """summary.json's text."""
        return json.dumps(self.to_dict(), indent=2, default=str) + "\n"

    def write(self, run_dir: Path) -> Path:
        """Write `run_dir/summary.json`; its path."""
        path = run_dir / SUMMARY_FILE
        path.write_text(self.to_json())
        return path

    @classmethod
    def read(cls, run_dir: Path) -> RunSummary:
        """The summary of the run folder `run_dir` (which it remembers as `dir`)."""
        return cls.from_dict(json.loads((run_dir / SUMMARY_FILE).read_text()), dir=run_dir)
