"""Run figures from raw records, and the comparison's aggregation (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zcube_lab.core.fabric.builders import build_roft, build_zcube
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.results.compare.report import aggregate, difference_pct, table_rows
from zcube_lab.emulator.results.fabric.linkstats import link_utilization, utilization_summary
from zcube_lab.emulator.results.run.figures import (
    client_summary,
    host_ingress_bytes,
    throughput_series,
)
from zcube_lab.emulator.results.run.summary import HotPort, RunSummary


def _rec(i: int, ttft: float, ok: bool = True) -> dict:
    return {
        "outcome": "ok" if ok else "http_error",
        "sent_s": float(i),
        "ttft_s": ttft,
        "tpot_s": 0.03,
        "e2e_s": ttft + 0.3,
        "itl_s": [0.03] * 10,
        "output_tokens": 11,
    }


def test_client_summary_counts_and_quantiles() -> None:
    recs = [_rec(i, 0.1 * (i + 1)) for i in range(10)] + [_rec(10, 9.0, ok=False)]
    s = client_summary(recs, window_s=5.0)
    assert (s.requests, s.completed, s.failed) == (11, 10, 1)
    # Throughput counts only the requests that arrived in the window (sent at 0-4 s of 0-9 s);
    # the quantiles keep every completed one.
    assert s.requests_per_s == 1.0
    assert s.output_tokens_per_s == 11.0 and s.output_tokens == 110
    assert s.ttft_p50_s == pytest.approx(0.55)
    assert s.ttft_p99_s < 1.0  # the failed request's 9 s does not count
    assert s.itl_p50_s == pytest.approx(0.03)


def test_throughput_series_bins_completions() -> None:
    recs = [_rec(i, 0.2) for i in range(10)]  # complete at i + 0.5 s
    series = throughput_series(recs, bin_s=5.0)
    assert series == [(0.0, 1.0), (5.0, 1.0)]


def test_link_utilization_uses_emulated_capacity() -> None:
    f = build_zcube(n=4)
    scale = Scale(nic_mbps=100)
    # a0 port 5 (to b0) is a 50 Mb/s link: 62.5 MB in 20 s is 25 Mb/s, half of it.
    util = link_utilization(f, scale, {("a0", 5): 62_500_000}, window_s=20)
    assert util[("a0", 5)] == pytest.approx(0.5)
    assert util[("a0", 1)] == 0.0
    s = utilization_summary(util, f)
    assert s.link_util_max == pytest.approx(0.5)
    assert s.trunk_util_max == pytest.approx(0.5)
    assert s.hottest_ports[0] == HotPort(switch="a0", port=5, util=pytest.approx(0.5))


def test_host_ingress_counts_only_host_ports() -> None:
    f = build_roft()
    rx = {("leaf0", 1): 100.0, ("leaf0", 5): 1_000.0, ("spine0", 1): 7.0}  # port 5: an uplink
    assert host_ingress_bytes(f, rx) == 100.0


# A run summary as the runner writes it (tests/unit/data), with the figures a test varies.
_BASE = json.loads((Path(__file__).parent / "data" / "summary-zcube.json").read_text())


def _summary(fabric: str, ttft: float, rps: float) -> dict:
    client = {**_BASE["client"], "ttft_p99_s": ttft, "requests_per_s": rps}
    data = {**_BASE, "fabric": fabric, "client": client}
    del data["label"]
    return data


def _run(fabric: str, ttft: float, rps: float) -> RunSummary:
    return RunSummary.from_dict(_summary(fabric, ttft, rps))


def test_aggregate_medians_spread_and_differences() -> None:
    runs = [_run("zcube", t, 5.0) for t in (1.0, 2.0, 9.0)]
    runs += [_run("roft", t, 4.0) for t in (2.0, 4.0, 3.0)]
    agg = aggregate(runs)
    cell = agg["zcube"]["TTFT p99 client (s)"]
    assert (cell.median, cell.low, cell.high, cell.n) == (2.0, 1.0, 9.0, 3)
    assert difference_pct(2.0, 3.0) == pytest.approx(-33.333, abs=1e-3)
    assert difference_pct(1.0, 0.0) is None
    rows = {r[0]: r for r in table_rows(agg, ["zcube", "roft"], "roft")}
    assert rows["TTFT p99 client (s)"] == [
        "TTFT p99 client (s)",
        "2 [1-9]",
        "3 [2-4]",
        "-33.3%",
    ]
    assert rows["completed requests/s"][-1] == "+25.0%"


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--workload", "nonexist"], "workload"),
        (["--ep-servers", "3"], "ep_servers"),  # 2 prefill servers of 8: not whole instances
        (["--gpus", "15"], "gpus"),
        (["--fabrics", "zcube,torus"], "fabrics"),
        (["--rate", "-1"], "rate"),
        (["--layout", "diagonal"], "layout"),
        (["--nic-mbps", "0"], "nic_mbps"),
        (["--drain", "-5"], "drain"),
        (["--policy", "flood"], "policy"),
        (["--policies", "ff,flood"], "policy"),
        (["--fail", "link a0-b9 at 5s"], "fail.link"),
        (["--fail", "roft: link leaf0-spine7 at 5s"], "fail.link"),
        (["--policies", "ff,spray", "--baseline", "clos"], "baseline"),
        (["--planes", "9"], "planes"),
        (["--fabrics", "zcube,clos", "--planes", "2"], "planes"),
        (["--fail", "clos: link leaf0-spine0 at 5s"], "fail"),
    ],
)
def test_compare_rejects_bad_options_before_any_run(
    argv: list[str],
    field: str,
    tmp_path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from zcube_lab.cli import main
    from zcube_lab.emulator.experiment.runner import Experiment

    def refuse(*_a: object, **_k: object) -> None:
        pytest.fail("a unit test tried to start a real run")

    monkeypatch.setattr(Experiment, "run", refuse)
    assert main(["compare", *argv, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {field}=" in err
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_runs_are_grouped_by_their_label(tmp_path) -> None:
    from zcube_lab.emulator.results.run.summary import RunSummary

    for name, label in (("a", "zcube/ff"), ("b", "zcube/spray"), ("c", None)):
        d = tmp_path / name
        d.mkdir()
        summary = _summary("zcube", 1.0, 2.0)
        if label:
            summary["label"] = label
        (d / "summary.json").write_text(json.dumps(summary))
    runs = [RunSummary.read(tmp_path / n) for n in "abc"]
    assert [r.variant for r in runs] == ["zcube/ff", "zcube/spray", "zcube"]
    assert {r.fabric for r in runs} == {"zcube"}
    assert [r.dir for r in runs] == [tmp_path / n for n in "abc"]
    assert set(aggregate(runs)) == {"zcube/ff", "zcube/spray", "zcube"}
