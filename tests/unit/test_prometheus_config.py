"""The generated prometheus.yml: structure parsed back, validation naming the field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.prometheus.config import ScrapePlan, scrape_config, scrape_plan

JOBS = {
    "gateway": ["10.0.0.1:8000"],
    "prefill": ["10.0.0.2:8001", "10.0.0.3:8001"],
    "decode": ["10.0.0.4:8002"],
    "controller": ["127.0.0.1:9101"],
    "loadgen": ["localhost:9646"],
}


def _parse(text: str) -> dict:
    # JSON is a subset of YAML; parsing with json proves the text is both.
    doc = json.loads(text)
    try:
        import yaml
    except ImportError:
        return doc
    assert yaml.safe_load(text) == doc
    return doc


def test_one_job_per_component_with_its_static_targets() -> None:
    doc = _parse(scrape_config(JOBS, labels={"run": "r1", "fabric": "zcube"}))
    jobs = {c["job_name"]: c for c in doc["scrape_configs"]}
    assert list(jobs) == list(JOBS)
    for name, targets in JOBS.items():
        (static,) = jobs[name]["static_configs"]
        assert static["targets"] == targets
        assert static["labels"] == {"run": "r1", "fabric": "zcube"}


def test_interval_and_timeout_are_set_everywhere() -> None:
    doc = _parse(scrape_config(JOBS, interval_s=0.5))
    assert doc["global"]["scrape_interval"] == "500ms"
    # Prometheus refuses a config whose timeout (10 s by default) exceeds the interval.
    assert doc["global"]["scrape_timeout"] == "500ms"
    for job in doc["scrape_configs"]:
        assert job["scrape_interval"] == "500ms"
        assert job["scrape_timeout"] == "500ms"


def test_default_interval_is_one_second_and_labels_optional() -> None:
    doc = _parse(scrape_config({"gateway": ["h:1"]}))
    assert doc["global"]["scrape_interval"] == "1000ms"
    assert doc["global"]["external_labels"] == {}
    assert doc["scrape_configs"][0]["static_configs"][0]["labels"] == {}


def test_run_labels_are_external_labels_too() -> None:
    doc = _parse(scrape_config(JOBS, labels={"run": "2026-11-29T1725-zcube", "fabric": "zcube"}))
    assert doc["global"]["external_labels"] == {"run": "2026-11-29T1725-zcube", "fabric": "zcube"}


def test_plan_is_frozen() -> None:
    plan = scrape_plan(JOBS)
    assert isinstance(plan, ScrapePlan)
    with pytest.raises(AttributeError):
        plan.interval_s = 2.0  # type: ignore[misc]


@pytest.mark.parametrize("interval", [0.1, 1, 2.0])
def test_interval_bounds_are_inclusive(interval: float) -> None:
    assert scrape_plan(JOBS, interval).interval_s == interval


@pytest.mark.parametrize("interval", [0.05, 2.5, 0, -1, math.nan, math.inf, True, "1s", None])
def test_bad_interval_names_the_field(interval: object) -> None:
    with pytest.raises(ConfigError) as err:
        scrape_config(JOBS, interval_s=interval)  # type: ignore[arg-type]
    assert err.value.field == "interval_s"
    assert "interval_s" in str(err.value)


@pytest.mark.parametrize(
    "target",
    [
        "10.0.0.1",  # no port
        "10.0.0.1:0",
        "10.0.0.1:65536",
        "10.0.0.1:http",
        ":8000",
        "http://10.0.0.1:8000",
        "10.0.0.1:8000/metrics",
        "host name:80",
        "",
        8000,
    ],
)
def test_bad_target_names_the_job(target: object) -> None:
    with pytest.raises(ConfigError) as err:
        scrape_config({"decode": ["10.0.0.4:8002", target]})  # type: ignore[list-item]
    assert err.value.field == "jobs.decode"
    assert err.value.value == target


@pytest.mark.parametrize("target", ["h1:1", "[::1]:9090", "gpu-3.mgmt.lab:65535", "127.0.0.1:80"])
def test_good_targets(target: str) -> None:
    doc = _parse(scrape_config({"gateway": [target]}))
    assert doc["scrape_configs"][0]["static_configs"][0]["targets"] == [target]


def test_a_bare_string_of_targets_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        scrape_config({"gateway": "10.0.0.1:8000"})  # type: ignore[dict-item]
    assert err.value.field == "jobs.gateway"


@pytest.mark.parametrize(
    ("jobs", "field"),
    [
        ({}, "jobs"),
        ({"gateway": []}, "jobs.gateway"),
        ({"bad job": ["h:1"]}, "jobs"),
        ({"gateway": ["h:1", "h:1"]}, "jobs.gateway"),
        ([("gateway", ["h:1"])], "jobs"),
    ],
)
def test_bad_jobs_name_the_field(jobs: object, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        scrape_config(jobs)  # type: ignore[arg-type]
    assert err.value.field == field


@pytest.mark.parametrize(
    ("labels", "field"),
    [
        ({"job": "x"}, "labels.job"),
        ({"instance": "x"}, "labels.instance"),
        ({"__name__": "x"}, "labels"),
        ({"fab-ric": "x"}, "labels"),
        ({"run": ""}, "labels.run"),
        ({"run": 3}, "labels.run"),
    ],
)
def test_bad_labels_name_the_field(labels: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        scrape_config(JOBS, labels=labels)
    assert err.value.field == field


def test_waiting_for_targets_skips_the_jobs_not_started_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zcube_lab.emulator.prometheus.server import PrometheusError, PrometheusServer, TargetHealth

    def target(job: str, health: str) -> TargetHealth:
        return TargetHealth(job, f"{job}:1", health, "", f"http://{job}:1/metrics")

    prom = PrometheusServer("global: {}\n", tmp_path)
    seen = [target("gateway", "up"), target("loadgen", "down")]
    monkeypatch.setattr(prom, "targets", lambda: seen)
    assert prom.wait_for_targets_up(timeout=0.1, ignore_jobs=("loadgen",)) == seen[:1]
    with pytest.raises(PrometheusError, match="loadgen"):
        prom.wait_for_targets_up(timeout=0.1)
