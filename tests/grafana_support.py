"""Helpers for the Grafana tests: the committed dashboards, their queries with Grafana's
variables substituted, the metric names a PromQL expression reads, and the names our code
exports (from the metric classes and constants themselves, so a renamed metric fails a test)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from zcube_lab.serving.vllm_metrics import ALLTOALL_TIME

ROOT = Path(__file__).resolve().parents[1]
GRAFANA = ROOT / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))

# What Grafana puts in for its built-in variables when the tests evaluate a query. The lab
# scrapes every second; 15 s holds enough scrapes for rate() and is shorter than any run.
BUILTINS = {"__rate_interval": "15s", "__interval": "5s", "__range": "60s"}

_PROMQL_WORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
    | {"and", "or", "unless", "inf", "nan", "atan2"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])\s*(\()?")


def load_build() -> ModuleType:
    """grafana/build.py as a module (grafana/ is not an installed package)."""
    spec = importlib.util.spec_from_file_location("grafana_build", GRAFANA / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panel_targets(dashboard: Mapping[str, Any]) -> Iterator[tuple[dict, dict]]:
    """(panel, target) for every query of every panel."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


def variable_queries(dashboard: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(name, metric selector, label) of every `label_values(selector, label)` variable."""
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["query"]["query"])
            assert m, var["query"]
            yield var["name"], m.group(1), m.group(2)


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with `$name` and `${name}` replaced from `values` and Grafana's built-ins."""
    merged = {**BUILTINS, **values}

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in merged:
            raise KeyError(f"no value for Grafana variable ${name} in {expr!r}")
        return merged[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def metric_names(expr: str) -> set[str]:
    """Metric names an expression (Grafana variables already substituted) reads."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range durations
    text = _GROUPING.sub("", text)
    names = set()
    for m in _IDENT.finditer(text):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in _PROMQL_WORDS:
            continue
        names.add(word)
    return names


def exported_metric_names() -> set[str]:
    """Every series name our code exports, as Prometheus stores it (counters with `_total`,
    histograms as `_bucket`, `_sum`, `_count`)."""
    from prometheus_client import CollectorRegistry

    import zcube_lab.controller.port_metrics as controller_metrics
    import zcube_lab.core.fault_schedule as faults
    import zcube_lab.emulator.lab.health as health
    from zcube_lab.serving.vllm_metrics import EngineMetrics, GatewayMetrics
    from zcube_lab.workloads.client_metrics import ClientMetrics

    registry = CollectorRegistry()
    EngineMetrics(registry, "m", "0")
    gateway = CollectorRegistry()  # its rejected counter shares the engines' name
    GatewayMetrics(gateway, "m")
    ClientMetrics(registry, "m", "w")
    names: set[str] = set()
    for reg in (registry, gateway):
        for family in reg.collect():
            if family.type == "counter":
                names.add(f"{family.name}_total")
            elif family.type == "histogram":
                names.update(f"{family.name}{s}" for s in ("_bucket", "_sum", "_count"))
            else:
                names.add(family.name)
    names.update(
        value
        for key, value in vars(controller_metrics).items()
        if key.isupper() and isinstance(value, str) and value.startswith("zcube_")
    )
    names.update({health.CPU_METRIC, health.PROCESS_METRIC, faults.ACTIVE_METRIC})
    return names


# vLLM's example Grafana dashboard, examples/online_serving/prometheus_grafana/grafana.json in
# github.com/vllm-project/vllm (commit 004f771f3a6b49597546b05c7d83686d1e121fa0, Apache-2.0):
# only the series names its panels query, extracted by hand; the file itself is not copied here.
VLLM_DASHBOARD_METRICS = frozenset(
    {
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_sum",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_per_output_token_seconds_bucket",
        "vllm:time_per_output_token_seconds_sum",
        "vllm:time_per_output_token_seconds_count",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_sum",
        "vllm:time_to_first_token_seconds_count",
        "vllm:gpu_cache_usage_perc",
        "vllm:request_prompt_tokens_bucket",
        "vllm:request_generation_tokens_bucket",
        "vllm:request_success_total",
        "vllm:request_queue_time_seconds_sum",
        "vllm:request_prefill_time_seconds_sum",
        "vllm:request_decode_time_seconds_sum",
        "vllm:request_max_num_generation_tokens_sum",
    }
)
# Its variable: label_values({__name__=~"vllm:.*"}, model_name); every panel filters on
# model_name="$model_name" and uses the datasource variable DS_PROMETHEUS.
VLLM_DASHBOARD_VARIABLE = 'label_values({__name__=~"vllm:.*"}, model_name)'

# Names that dashboard queries which the lab does not export, and why (docs/GRAFANA.md).
# Every series vLLM's example dashboard reads is exported (the two renamed ones as duplicates
# under vLLM's former names, see zcube_lab/serving/vllm_metrics.py).
VLLM_DASHBOARD_NOT_EXPORTED: dict[str, str] = {}


def run_window(run_dir: Path) -> tuple[float, float]:
    """Start and end (unix seconds) of a finished run's load, from its series.json."""
    series = json.loads((run_dir / "series.json").read_text())
    return float(series["start"]), float(series["end"])


def copy_tsdb(run_dir: Path, dest: Path) -> Path:
    """A copy of a finished run's TSDB in `dest/tsdb` (a run's results are never modified)."""
    import shutil

    shutil.copytree(
        run_dir / "prometheus" / "tsdb",
        dest / "tsdb",
        ignore=shutil.ignore_patterns("snapshots", "lock", "queries.active"),
    )
    return dest


# A quantile of a histogram nobody observed is NaN by definition: without expert parallelism
# (`--ep-servers 1`, the default) the all-to-all time has no samples.
ALLTOALL_TIME_SERIES = f"{ALLTOALL_TIME}_bucket"


def check_dashboards_against(
    prom: Any, run: str, fabric: str, start: float, end: float, *, alltoall: bool = True
) -> list[str]:
    """Every panel query and variable of every dashboard evaluated over [start, end] on `prom`
    (a started PrometheusServer holding the run): the problems found, empty when all is well.
    A query passes when it answers without error with at least one finite sample; with
    `alltoall=False` (a run without expert parallelism) all-to-all time quantiles need only
    return series."""
    import math

    values = {"run": run, "fabric": fabric, "link_mbps": "100"}
    problems: list[str] = []
    for path in DASHBOARDS:
        dashboard = load(path)
        for name, selector, label in variable_queries(dashboard):
            sel = substitute(selector, {**values, "model_name": ".*"})
            found = prom._api(
                f"/api/v1/label/{label}/values",
                {"match[]": sel, "start": repr(start), "end": repr(end)},
            )
            wanted = {**values, "model_name": None}.get(name)
            if not found or (wanted is not None and wanted not in found):
                problems.append(f"{path.stem} variable {name}: {sel} gave {found}")
            if name == "model_name" and found:
                values["model_name"] = found[0]
        for panel, target in panel_targets(dashboard):
            expr = substitute(target["expr"], values)
            where = f"{path.stem} panel {panel['id']} {panel['title']!r} {target['refId']}"
            try:
                series = prom.query_range(expr, start, end, 5.0)
            except Exception as exc:
                problems.append(f"{where}: error {exc}")
                continue
            finite = [
                float(v)
                for s in series
                for _, v in s["values"]
                if not math.isnan(float(v)) and not math.isinf(float(v))
            ]
            nan_ok = not alltoall and ALLTOALL_TIME_SERIES in metric_names(expr)
            if not series or (not finite and not nan_ok):
                problems.append(f"{where}: no data ({len(series)} series, none finite): {expr}")
    return problems
