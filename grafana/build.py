"""Generates the lab's Grafana dashboards (`grafana/dashboards/*.json`) from panel definitions
kept here as plain data. One dashboard per concern: `serving`, `fabric`, `kv-alltoall`.

    python grafana/build.py           # rewrite the JSON files
    python grafana/build.py --check   # exit 1 if a committed file differs from this output

Conventions every dashboard follows (tests/unit/test_grafana_dashboards.py checks them):
- the Prometheus datasource is the template variable `datasource`; every panel and query uses
  `${datasource}`, so the same JSON works against any Prometheus (the VM's, a run's TSDB);
- template variables `run`, `fabric` and `model_name` select series by the target labels every
  run's Prometheus attaches (`run`, `fabric`) and by vLLM's `model_name` label (the load
  generator's own metrics call it `model`); they are multi-value regex matchers (`=~`);
- every metric a query names is one our code exports (serving, controller, workloads, emulator).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DASHBOARD_DIR = HERE / "dashboards"
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24

# Label matchers shared by the queries.
RUN = 'run=~"$run", fabric=~"$fabric"'
SRV = f'{RUN}, model_name=~"$model_name"'
CLIENT = f'{RUN}, model=~"$model_name"'
RATE = "[$__rate_interval]"


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    """A panel: a visualization of one or more queries; laid out left to right, 24 columns."""

    title: str
    description: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8


@dataclass(frozen=True)
class Variable:
    """A `label_values(metric, label)` template variable."""

    name: str
    label: str
    metric: str
    depends: str = ""  # matchers on earlier variables


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    panels: tuple[Panel, ...]
    link_mbps: bool = False  # adds the custom variable used to turn bit/s into utilization


def quantiles(metric: str, matchers: str, by: str = "") -> tuple[Query, ...]:
    """p50, p90 and p99 of a histogram over the rate interval (optionally kept apart `by`)."""
    group = f"le, {by}" if by else "le"
    prefix = "{{" + by + "}} " if by else ""
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by ({group}) "
            f"(rate({metric}_bucket{{{matchers}}}{RATE})))",
            f"{prefix}p{round(q * 100)}",
        )
        for q in (0.5, 0.9, 0.99)
    )


def _serving() -> Dashboard:
    run_var = Variable("run", "Run", "vllm:num_requests_running")
    return Dashboard(
        uid="zcube-serving",
        title="zcube-lab / Serving",
        description="What users of the emulated cluster see: latency, throughput, queues, KV "
        "cache. Engines export vLLM's metric names; the gateway and client add their own.",
        variables=(
            run_var,
            Variable("fabric", "Fabric", "vllm:num_requests_running", 'run=~"$run"'),
            Variable("model_name", "Model", "vllm:num_requests_running", RUN),
        ),
        panels=(
            Panel(
                "TTFT at the gateway",
                "Time to first token measured at the gateway (what an API user sees), p50/p90/p99 "
                "over the rate interval. vLLM's TTFT buckets, so quantiles are exact to a bucket.",
                quantiles("zcube:gateway_time_to_first_token_seconds", SRV),
                unit="s",
            ),
            Panel(
                "TTFT per engine role (vllm:time_to_first_token_seconds)",
                "vLLM's own TTFT histogram, as prefill and decode engines record it.",
                quantiles("vllm:time_to_first_token_seconds", SRV, by="job"),
                unit="s",
            ),
            Panel(
                "Inter-token latency (ITL)",
                "Gaps between output tokens at the decode engines, p50/p90/p99.",
                quantiles("vllm:inter_token_latency_seconds", f'{SRV}, job="decode"'),
                unit="s",
            ),
            Panel(
                "End-to-end request latency",
                "Request latency at the decode engines (prefill, KV transfer and decode), "
                "p50/p90/p99.",
                quantiles("vllm:e2e_request_latency_seconds", f'{SRV}, job="decode"'),
                unit="s",
            ),
            Panel(
                "Requests/s",
                "Answered requests at the gateway by HTTP status, and finished requests at the "
                "decode engines by finish reason.",
                (
                    Query(
                        f"sum by (status) (rate(zcube:gateway_requests_total{{{SRV}}}{RATE}))",
                        "gateway {{status}}",
                    ),
                    Query(
                        "sum by (finished_reason) (rate(vllm:request_success_total"
                        f'{{{SRV}, job="decode"}}{RATE}))',
                        "decode {{finished_reason}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "Tokens/s",
                "Prompt tokens prefilled (prefill engines) and tokens generated (decode engines).",
                (
                    Query(
                        f'sum(rate(vllm:prompt_tokens_total{{{SRV}, job="prefill"}}{RATE}))',
                        "prompt (prefill)",
                    ),
                    Query(
                        f'sum(rate(vllm:generation_tokens_total{{{SRV}, job="decode"}}{RATE}))',
                        "generation (decode)",
                    ),
                ),
            ),
            Panel(
                "Running and waiting requests",
                "Requests in engine batches and in their waiting queues, summed per role; "
                "requests in flight through the gateway.",
                (
                    Query(f"sum by (job) (vllm:num_requests_running{{{SRV}}})", "running {{job}}"),
                    Query(f"sum by (job) (vllm:num_requests_waiting{{{SRV}}})", "waiting {{job}}"),
                    Query(f"sum(zcube:gateway_outstanding_requests{{{SRV}}})", "gateway in flight"),
                ),
            ),
            Panel(
                "KV-cache usage per engine",
                "vllm:kv_cache_usage_perc of every engine (1 = full).",
                (Query(f"vllm:kv_cache_usage_perc{{{SRV}}}", "{{job}} {{engine}}"),),
                unit="percentunit",
            ),
            Panel(
                "TTFT at the client",
                "Time to first token as the load generator measured it, p50/p90/p99.",
                quantiles("zcube_client_ttft_seconds", CLIENT),
                unit="s",
            ),
            Panel(
                "Client outcomes/s",
                "Finished requests at the load generator by outcome.",
                (
                    Query(
                        f"sum by (outcome) (rate(zcube_client_requests_total{{{CLIENT}}}{RATE}))",
                        "{{outcome}}",
                    ),
                ),
                unit="reqps",
            ),
        ),
    )


TX = f"sum by (switch, port, peer) (rate(zcube_port_tx_bytes_total{{{RUN}}}{RATE}))"


def _fabric() -> Dashboard:
    return Dashboard(
        uid="zcube-fabric",
        title="zcube-lab / Fabric",
        description="The emulated fabric: per-link load from the controller's OpenFlow port "
        "counters, drops, ECMP select-group buckets, and whether the emulator kept up.",
        variables=(
            Variable("run", "Run", "zcube_port_tx_bytes_total"),
            Variable("fabric", "Fabric", "zcube_port_tx_bytes_total", 'run=~"$run"'),
            Variable("model_name", "Model", "vllm:num_requests_running", RUN),
        ),
        link_mbps=True,
        panels=(
            Panel(
                "Per-link utilization, sorted",
                "Transmit rate of every switch port over the emulated link rate ($link_mbps "
                "Mb/s: 50 on ZCube, 100 on ROFT/Clos at --nic-mbps 100), hottest first. "
                "Label: switch:port -> peer.",
                (
                    Query(
                        f"sort_desc({TX} * 8 / ($link_mbps * 1000000))",
                        "{{switch}}:{{port}} -> {{peer}}",
                        instant=True,
                    ),
                ),
                kind="bargauge",
                unit="percentunit",
                height=12,
            ),
            Panel(
                "Per-link utilization over time",
                "One row per switch port, coloured by its utilization (a heatmap of links).",
                (Query(f"{TX} * 8 / ($link_mbps * 1000000)", "{{switch}}:{{port}} -> {{peer}}"),),
                kind="status-history",
                unit="percentunit",
                height=12,
            ),
            Panel(
                "Hottest links",
                "The five switch ports sending the most, in bit/s.",
                (Query(f"topk(5, {TX} * 8)", "{{switch}}:{{port}} -> {{peer}}"),),
                unit="bps",
            ),
            Panel(
                "Drops and errors",
                "Packets dropped (rx + tx) and port errors, per switch port.",
                (
                    Query(
                        f"sum by (switch, port) (rate(zcube_port_rx_dropped_total{{{RUN}}}{RATE})"
                        f" + rate(zcube_port_tx_dropped_total{{{RUN}}}{RATE}))",
                        "dropped {{switch}}:{{port}}",
                    ),
                    Query(
                        f"sum(rate(zcube_port_rx_errors_total{{{RUN}}}{RATE})"
                        f" + rate(zcube_port_tx_errors_total{{{RUN}}}{RATE}))",
                        "errors (all ports)",
                    ),
                ),
                unit="pps",
            ),
            Panel(
                "Select-group buckets (ECMP spread)",
                "Bytes per OpenFlow select-group bucket: how evenly each switch spreads flows "
                "over its equal-cost ports. Label: switch group/bucket -> peer.",
                (
                    Query(
                        "sum by (switch, group, bucket, peer) "
                        f"(rate(zcube_group_bucket_bytes_total{{{RUN}}}{RATE})) * 8",
                        "{{switch}} g{{group}}/b{{bucket}} -> {{peer}}",
                    ),
                ),
                unit="bps",
            ),
            Panel(
                "Select-group bucket packets",
                "Packets per select-group bucket, summed over groups.",
                (
                    Query(
                        "sum by (switch, bucket, peer) "
                        f"(rate(zcube_group_bucket_packets_total{{{RUN}}}{RATE}))",
                        "{{switch}} b{{bucket}} -> {{peer}}",
                    ),
                ),
                unit="pps",
            ),
            Panel(
                "Fabric load vs. what the servers sent",
                "Bytes entering the fabric at host ports (switch rx from peers h*) against the KV "
                "and all-to-all bytes the engines report; the gap is headers and framing.",
                (
                    Query(
                        f'sum(rate(zcube_port_rx_bytes_total{{{RUN}, peer=~"h[0-9]+"}}{RATE})) * 8',
                        "fabric ingress from hosts",
                    ),
                    Query(
                        f"(sum(rate(vllm:nixl_bytes_transferred_sum{{{SRV}}}{RATE}))"
                        f" + sum(rate(zcube:ep_alltoall_bytes_total{{{SRV}}}{RATE}))) * 8",
                        "KV + all-to-all reported by engines",
                    ),
                ),
                unit="bps",
            ),
            Panel(
                "Emulator health",
                "Machine CPU (busy share) and the busiest processes in cores. Near 1 core for "
                "ovs-vswitchd or any engine, the emulator, not the fabric, sets the numbers.",
                (
                    Query(f"zcube_emulator_cpu_utilization{{{RUN}}}", "machine CPU (0-1)"),
                    Query(
                        f"topk(5, zcube_emulator_process_cpu_cores{{{RUN}}})",
                        "{{process}} (cores)",
                    ),
                ),
            ),
            Panel(
                "Failures: links down and injected faults",
                "Switch port ends whose link is down (from OpenFlow port-status, zcube_link_up) "
                "and the faults `--fail` holds at the moment (zcube_fault_active). The same "
                "windows are annotations on every dashboard.",
                (
                    Query(f"count(zcube_link_up{{{RUN}}} == 0) or vector(0)", "link ends down"),
                    Query(f"sum(zcube_fault_active{{{RUN}}}) or vector(0)", "faults active"),
                ),
                width=24,
                height=6,
            ),
            Panel(
                "Switches and rules",
                "Switches connected and the share of expected flow rules installed.",
                (
                    Query(f"sum(zcube_switch_up{{{RUN}}})", "switches up"),
                    Query(
                        f"sum(zcube_switch_rules_installed{{{RUN}}})"
                        f" / sum(zcube_switch_rules_expected{{{RUN}}})",
                        "rules installed / expected",
                    ),
                ),
                width=24,
                height=6,
            ),
        ),
    )


def _kv_alltoall() -> Dashboard:
    return Dashboard(
        uid="zcube-kv-alltoall",
        title="zcube-lab / KV transfer and all-to-all",
        description="The traffic that crosses the fabric: KV-cache pulls between prefill and "
        "decode (vLLM's NIXL metric names) and expert-parallel all-to-all (ours). Bytes are "
        "the lab's, i.e. full-scale bytes divided by bandwidth_scale.",
        variables=(
            Variable("run", "Run", "vllm:nixl_xfer_time_seconds_count"),
            Variable("fabric", "Fabric", "vllm:nixl_xfer_time_seconds_count", 'run=~"$run"'),
            Variable("model_name", "Model", "vllm:nixl_xfer_time_seconds_count", RUN),
        ),
        panels=(
            Panel(
                "KV bytes/s",
                "KV-cache bytes pulled by decode engines (vllm:nixl_bytes_transferred).",
                (
                    Query(
                        f"sum by (job) (rate(vllm:nixl_bytes_transferred_sum{{{SRV}}}{RATE})) * 8",
                        "{{job}}",
                    ),
                ),
                unit="bps",
            ),
            Panel(
                "KV transfer time",
                "vllm:nixl_xfer_time_seconds p50/p90/p99: one KV pull, all its streams.",
                quantiles("vllm:nixl_xfer_time_seconds", SRV),
                unit="s",
            ),
            Panel(
                "KV transfers/s and size",
                "Transfers per second and the median transfer size.",
                (
                    Query(
                        f"sum(rate(vllm:nixl_xfer_time_seconds_count{{{SRV}}}{RATE}))",
                        "transfers/s",
                    ),
                    Query(
                        "histogram_quantile(0.5, sum by (le) "
                        f"(rate(vllm:nixl_bytes_transferred_bucket{{{SRV}}}{RATE})))",
                        "median bytes per transfer",
                    ),
                ),
            ),
            Panel(
                "KV failures",
                "Failed KV transfers and requests whose KV expired before decode pulled it.",
                (
                    Query(
                        f"sum(increase(vllm:nixl_num_failed_transfers_total{{{SRV}}}{RATE}))",
                        "failed transfers",
                    ),
                    Query(
                        f"sum(increase(vllm:nixl_num_kv_expired_reqs_total{{{SRV}}}{RATE}))",
                        "expired KV",
                    ),
                ),
            ),
            Panel(
                "All-to-all bytes/s",
                "Expert-parallel all-to-all bytes sent and received by engines (zero unless a "
                "run spans instances over servers: --ep-servers 2).",
                (
                    Query(
                        f"sum by (job) (rate(zcube:ep_alltoall_bytes_total{{{SRV}}}{RATE})) * 8",
                        "{{job}}",
                    ),
                ),
                unit="bps",
            ),
            Panel(
                "All-to-all time per step",
                "zcube:ep_alltoall_seconds p50/p90/p99: one engine step's exchange.",
                quantiles("zcube:ep_alltoall_seconds", SRV),
                unit="s",
            ),
            Panel(
                "Failover at the end hosts",
                "What the senders did about dead paths (docs/FAILURES.md): KV subflows retired "
                "and KV pulls retried by decode, all-to-all subflows retired and per-peer "
                "exchanges that failed (timed out or refused). All zero on a healthy fabric.",
                tuple(
                    Query(f"sum(increase({metric}{{{SRV}}}{RATE}))", legend)
                    for metric, legend in (
                        ("zcube:kv_lanes_retired_total", "KV subflows retired"),
                        ("zcube:kv_pull_retries_total", "KV pulls retried"),
                        ("zcube:ep_subflows_retired_total", "all-to-all subflows retired"),
                        ("zcube:ep_alltoall_failures_total", "all-to-all exchanges failed"),
                    )
                ),
                width=24,
                height=6,
            ),
            Panel(
                "Engine step overrun",
                "How late engine steps ended (event-loop lag), p99 per role: high values mean "
                "the emulator host, not the fabric, slowed the run.",
                (
                    Query(
                        "histogram_quantile(0.99, sum by (le, job) "
                        f"(rate(zcube:engine_step_overrun_seconds_bucket{{{SRV}}}{RATE})))",
                        "{{job}} p99",
                    ),
                ),
                unit="s",
                width=24,
                height=6,
            ),
        ),
    )


DASHBOARDS = {"serving": _serving, "fabric": _fabric, "kv-alltoall": _kv_alltoall}


# --- rendering ------------------------------------------------------------------------------


def _variable(v: Variable) -> dict[str, object]:
    selector = f"{v.metric}{{{v.depends}}}" if v.depends else v.metric
    query = f"label_values({selector}, {v.name})"
    return {
        "name": v.name,
        "label": v.label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor"},
        "refresh": 2,  # on time-range change: a new run appears without reloading
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 2 if v.name == "run" else 1,  # newest run first (names start with the time)
        "regex": "",
        "hide": 0,
        "options": [],
        "skipUrlSync": False,
    }


def _datasource_variable() -> dict[str, object]:
    return {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def _link_mbps_variable() -> dict[str, object]:
    return {
        "name": "link_mbps",
        "label": "Link Mb/s",
        "description": "Emulated rate of one fabric link: ZCube ports 50, ROFT/Clos 100 "
        "(at --nic-mbps 100).",
        "type": "custom",
        "query": "50,100,200",
        "current": {"selected": True, "text": "100", "value": "100"},
        "options": [
            {"selected": value == "100", "text": value, "value": value}
            for value in ("50", "100", "200")
        ],
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "skipUrlSync": False,
    }


def _panel(panel: Panel, pid: int, x: int, y: int) -> dict[str, object]:
    targets = [
        {
            "datasource": DS,
            "refId": chr(ord("A") + i),
            "expr": q.expr,
            "legendFormat": q.legend or "__auto",
            "range": not q.instant,
            "instant": q.instant,
            "editorMode": "code",
        }
        for i, q in enumerate(panel.queries)
    ]
    options: dict[str, object]
    defaults: dict[str, object] = {"unit": panel.unit}
    if panel.kind == "bargauge":
        options = {
            "displayMode": "gradient",
            "orientation": "horizontal",
            "showUnfilled": True,
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        }
        defaults.update({"min": 0, "max": 1})
    elif panel.kind == "status-history":
        options = {"showValue": "never", "rowHeight": 0.9, "legend": {"showLegend": False}}
        defaults.update({"min": 0, "max": 1, "color": {"mode": "continuous-GrYlRd"}})
    else:
        options = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    return {
        "id": pid,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DS,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": targets,
    }


# Failure windows on every dashboard: injected faults (the run's injector) and links the
# controller saw go down (OpenFlow port-status).
ANNOTATIONS: tuple[dict[str, object], ...] = (
    {
        "name": "Injected faults",
        "datasource": DS,
        "enable": True,
        "iconColor": "red",
        "expr": f"max by (fault) (zcube_fault_active{{{RUN}}}) > 0",
        "step": "1s",
        "titleFormat": "fault: {{fault}}",
        "tagKeys": "fault",
    },
    {
        "name": "Links down",
        "datasource": DS,
        "enable": True,
        "iconColor": "orange",
        "expr": f"count by (switch, peer) (zcube_link_up{{{RUN}}} == 0)",
        "step": "1s",
        "titleFormat": "link down: {{switch}} -> {{peer}}",
        "tagKeys": "switch,peer",
    },
)


def render(d: Dashboard) -> dict[str, object]:
    """The Grafana dashboard model (schemaVersion 39) of one dashboard."""
    panels = []
    x = y = row_height = 0
    for pid, panel in enumerate(d.panels, start=1):
        if x + panel.width > GRID_COLUMNS:
            x, y, row_height = 0, y + row_height, 0
        panels.append(_panel(panel, pid, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    variables = [_datasource_variable(), *(_variable(v) for v in d.variables)]
    if d.link_mbps:
        variables.append(_link_mbps_variable())
    return {
        "uid": d.uid,
        "title": d.title,
        "description": d.description,
        "tags": ["zcube-lab"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "5s",
        "time": {"from": "now-15m", "to": "now"},
        "timezone": "utc",
        "annotations": {"list": list(ANNOTATIONS)},
        "links": [],
        "templating": {"list": variables},
        "panels": panels,
    }


def dashboard_text(name: str) -> str:
    """The JSON text committed as `dashboards/<name>.json`."""
    return json.dumps(render(DASHBOARDS[name]()), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the dashboards, or with --check report the ones that differ."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    stale = []
    for name in DASHBOARDS:
        path = DASHBOARD_DIR / f"{name}.json"
        text = dashboard_text(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            DASHBOARD_DIR.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        print("out of date (run python grafana/build.py):", *stale, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
