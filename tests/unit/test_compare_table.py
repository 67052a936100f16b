"""The console table `compare` prints: only rows the runs have data for (no fault rows without a
fault, no all-to-all rows without EP, no row empty in every run), readable in 100 columns."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from zcube_lab.cli.commands.compare import comparison_table
from zcube_lab.emulator.results.compare.compare_metrics import EP, FAULT, METRICS, shown_metrics
from zcube_lab.emulator.results.compare.report import (
    aggregate,
    headline_columns,
    table_rows,
    ttft_p99_interval,
    with_interval_row,
    write_report,
)
from zcube_lab.emulator.results.run.figures import read_jsonl
from zcube_lab.emulator.results.run.summary import DirectedUtilization, RunSummary, TransferFigures
from zcube_lab.emulator.results.sweep.sweeppoints import sample_intervals

DATA = Path(__file__).parent / "data"
REASON = "ovs-vswitchd thread handler12 above 0.85 core in 35% of samples"


def _transfers(scale: float, exchanges: int = 0) -> TransferFigures:
    """Exact transfer figures as a run logs them; all-to-all ones only with `exchanges`."""
    ep = 0.004 * scale if exchanges else None
    return TransferFigures(
        kv_pulls=1200, kv_attempts_failed=0,
        kv_xfer_p50_s=0.063 * scale, kv_xfer_p90_s=0.1, kv_xfer_p99_s=0.19 * scale,
        kv_xfer_max_s=0.41, kv_xfer_bytes_p50=524288.0, kv_xfer_bytes_p90=1.2e6,
        kv_xfer_bytes_p99=4e6, kv_xfer_bytes_max=8e6, kv_xfer_ratio_p50=1.31 * scale,
        kv_xfer_ratio_p90=1.8, kv_xfer_ratio_p99=3.2, kv_xfer_ratio_max=9.0, kv_pulls_rated=1200,
        kv_pulls_stalled=3, kv_stalled_max_s=1.2, alltoall_exchanges=exchanges,
        alltoall_p50_s=ep, alltoall_p90_s=ep, alltoall_p99_s=ep, alltoall_max_s=ep,
        alltoall_bytes_sent_p50=65536.0 if exchanges else None,
        alltoall_bytes_received_p50=65536.0 if exchanges else None,
        alltoall_exchange_failures=0 if exchanges else None,
    )  # fmt: skip


def _run(label: str, repeat: int, scale: float, fault: bool, ok: bool = True) -> RunSummary:
    """One repeat of a 16-host run as the runner writes it (tests/unit/data), its figures spread
    over repeats and scaled per fabric."""
    name = "summary-zcube-ff.json" if fault else "summary-zcube.json"
    base = RunSummary.from_dict(json.loads((DATA / name).read_text()))
    client = replace(
        base.client,
        requests_per_s=3.08 + 0.04 * repeat,
        output_tokens_per_s=1288.2 * (1 + 0.01 * repeat),
        ttft_p50_s=0.501 * scale * (1 + 0.03 * repeat),
        ttft_p99_s=1.414 * scale * (1 + 0.05 * repeat),
    )
    peak = 0.9 * scale - 0.01 * repeat
    link = "h5->a1:2"
    directed = DirectedUtilization(link, 0.42 * scale, peak, link, peak, 0.4, 0.1, 64, 1)
    health = replace(base.health, trustworthy=ok, reasons=() if ok else (REASON, "CPU above 90%"))
    return replace(
        base,
        run=f"{label}-r{repeat + 1}",
        label=label,
        client=client,
        fabric_stats=replace(base.fabric_stats, directed=directed, drops=1234.0 * repeat),
        transfers=_transfers(scale),
        health=health,
        trustworthy=ok,
    )


def _runs(fault: bool = False) -> list[RunSummary]:
    """2 fabrics x 3 repeats; ZCube's third repeat not trustworthy."""
    return [
        _run(label, i, scale, fault, ok=(label, i) != ("zcube", 2))
        for i in range(3)
        for label, scale in (("zcube", 0.9), ("roft", 1.0))
    ]


def _render(runs: list[RunSummary]) -> list[str]:
    """The table as a 100-column terminal shows it, lines not cropped to the width."""
    console = Console(width=100, record=True, color_system=None)
    console.print(comparison_table(runs, "roft", "coding-agent", 3), crop=False)
    return console.export_text().splitlines()


def _labels(kind: str) -> list[str]:
    return [m.label for m in METRICS if m.only_with == kind]


def test_the_table_fits_100_columns_with_numbers_whole_and_the_reason_cut() -> None:
    for fault in (False, True):
        lines = _render(_runs(fault))
        assert max(len(line) for line in lines) <= 100
        text = "\n".join(lines)
        assert "0.464 [0.451-0.478]" in text  # ZCube's TTFT p50 on one line
        assert "1,301 [1,288-1,314]" in text
        cut = [line for line in lines if "…" in line]
        assert len(cut) == 1 and "first reason" in cut[0] and "ovs-vswitchd thread" in cut[0]


def test_fault_rows_only_with_a_fault() -> None:
    without = "\n".join(_render(_runs(fault=False)))
    with_fault = "\n".join(_render(_runs(fault=True)))
    for label in ("TTFT p99 during fault (s)", "failed during fault", "KV bytes never delivered"):
        assert label not in without
        assert label in with_fault
    shown = {m.label for m in shown_metrics(_runs(fault=True))}
    assert set(_labels(FAULT)) <= shown
    assert not set(_labels(FAULT)) & {m.label for m in shown_metrics(_runs())}
    assert "TTFT p99 client (s)" in without and "OpenFlow port drops" in without


def test_a_fault_counter_shows_without_a_fault_when_it_counted_something() -> None:
    runs = _runs()
    runs[0] = replace(runs[0], faults=replace(runs[0].faults, kv_retried=2))
    shown = {m.label for m in shown_metrics(runs)}
    assert "KV transfers retried" in shown and "KV subflows retired" not in shown


def test_all_to_all_rows_only_with_ep() -> None:
    assert not any(label in "\n".join(_render(_runs())) for label in _labels(EP))
    runs = [replace(r, transfers=_transfers(1.0, exchanges=500)) for r in _runs()]
    text = "\n".join(_render(runs))
    assert all(label in text for label in _labels(EP))


def test_a_row_empty_in_every_run_is_dropped() -> None:
    label = "TTFT p50 bucket-interp. (s)"
    runs = [replace(r, server=replace(r.server, gateway_ttft_p50_s=None)) for r in _runs()]
    rows = table_rows(aggregate(runs), ["zcube", "roft"], "roft", shown_metrics(runs))
    assert label not in [row[0] for row in rows]
    assert label not in "\n".join(_render(runs))
    runs[1] = _runs()[1]  # one ROFT repeat has it
    rows = table_rows(aggregate(runs), ["zcube", "roft"], "roft", shown_metrics(runs))
    assert [row for row in rows if row[0] == label] == [[label, "-", "0.527", "-"]]


def test_many_variants_leave_fault_columns_out_without_a_fault() -> None:
    runs = [replace(r, label=f"{r.label}/{p}") for r in _runs() for p in ("ff", "spray")]
    assert "TTFT p99 during fault (s)" not in headline_columns(aggregate(runs), runs)
    table = comparison_table(runs, "roft/ff", "coding-agent", 3)
    heads = [str(c.header) for c in table.columns]
    assert heads[:2] == ["run", "trustworthy"] and "TTFT p99 in fault (s)" not in heads
    faulty = [replace(r, label=f"{r.label}/{p}") for r in _runs(True) for p in ("ff", "spray")]
    assert "TTFT p99 during fault (s)" in headline_columns(aggregate(faulty), faulty)


def _with_records(run: RunSummary, folder: Path, ttfts: list[float]) -> RunSummary:
    """The run read from `folder`, whose requests.jsonl holds completed requests with `ttfts`."""
    folder.mkdir()
    rows = [{"outcome": "ok", "ttft_s": t, "tpot_s": 0.02} for t in ttfts]
    (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    client = replace(run.client, requests=len(ttfts))
    return replace(run, dir=folder, client=client)


def test_a_run_below_1000_requests_adds_the_ttft_p99_interval_after_the_p99(
    tmp_path: Path,
) -> None:
    gen = random.Random(4)
    z = [
        _with_records(
            _run("zcube", i, 0.9, False),
            tmp_path / f"z{i}",
            [gen.expovariate(2.0) for _ in range(150 + 50 * i)],
        )
        for i in range(2)
    ]
    r = [_with_records(_run("roft", 0, 1.0, False), tmp_path / "r0",
                       [gen.expovariate(1.0) for _ in range(1000)])]  # fmt: skip
    rows = with_interval_row(table_rows(aggregate(z + r), ["zcube", "roft"], "roft"), z + r,
                             ["zcube", "roft"], "roft")  # fmt: skip
    labels = [row[0] for row in rows]
    at = labels.index("TTFT p99 client (s)")
    assert labels[at + 1] == "TTFT p99 95% CI (s)"
    cis = [sample_intervals(read_jsonl(run.dir / "requests.jsonl"))["ttft_p99_s"] for run in z]
    # 150 and 200 requests cannot bound a p99 from above at 95%; the low end is the lower of
    # the two runs' (their order statistics of rank 146 of 150 and 195 of 200).
    ttfts = [sorted(x["ttft_s"] for x in read_jsonl(run.dir / "requests.jsonl")) for run in z]
    assert cis == [(ttfts[0][145], None), (ttfts[1][194], None)]
    low = min(c[0] for c in cis if c[0] is not None)
    assert rows[at + 1][1] == ttft_p99_interval(z)
    assert low >= 1  # shown with two decimals
    assert rows[at + 1][1] == f"[{low:.2f}, unbounded) (few samples: 150)"
    assert rows[at + 1][2:] == ["-", ""]  # roft had 1,000: no interval
    bounded = [_with_records(_run("zcube", 3, 0.9, False), tmp_path / "z3",
                             [float(v) for v in range(1, 501)])]  # fmt: skip
    # 500 can: P(K >= 500) = 0.99^500 = 0.66% <= 2.5% < P(K >= 499) = 3.98%; ranks 490 and 500
    assert ttft_p99_interval(bounded) == "[490, 500] (few samples: 500)"
    assert with_interval_row(table_rows(aggregate(r), ["roft"], "roft"), r, ["roft"], "roft") == (
        table_rows(aggregate(r), ["roft"], "roft")
    )  # every run with enough samples: no row


def test_report_html_shows_an_unbounded_interval_end(tmp_path: Path) -> None:
    gen = random.Random(5)
    ttfts = [gen.expovariate(2.0) for _ in range(120)]
    z = _with_records(_run("zcube", 0, 0.9, False), tmp_path / "z0", ttfts)
    r = _with_records(_run("roft", 0, 1.0, False), tmp_path / "r0", [1.0] * 1000)
    for run in (z, r):
        (run.dir / "config.json").write_text(json.dumps({"fabric_summary": {"hosts": 16}}))
    page = write_report([z, r], tmp_path / "report", "roft", {}).read_text()
    # 120 samples: P(K <= 115) = 0.74% <= 2.5% < P(K <= 116) = 3.3%, so ranks 116 and none above
    low = sorted(ttfts)[115]
    row = f"<tr><td>TTFT p99 95% CI (s)</td><td>[{low:.2f}, unbounded) (few samples: 120)</td>"
    assert row + "<td>-</td><td></td></tr>" in page


def test_the_title_says_one_run_each_for_a_single_repeat() -> None:
    runs = [r for r in _runs() if r.run.endswith("-r1")]
    assert comparison_table(runs, "roft", "coding-agent", 1).title == "coding-agent: one run each"
    assert comparison_table(_runs(), "roft", "coding-agent", 3).title == (
        "coding-agent: medians of 3 repeats \\[min-max]"
    )


def test_switch_queue_drops_count_the_switch_ports_qdiscs_not_the_host_nics() -> None:
    from zcube_lab.emulator.results.compare.compare_metrics import switch_queue_drops
    from zcube_lab.emulator.verdict.netstats import QueueFigures

    runs = _runs()
    base = runs[0]
    qdisc = {
        "leaf1-eth8": QueueFigures(rate_mbps=50.0, drops=98),
        "a0-eth3": QueueFigures(rate_mbps=50.0, drops=2),
        "h12-eth0": QueueFigures(rate_mbps=100.0, drops=5),  # a host NIC: judged, not counted
    }
    run = replace(base, health=replace(base.health, qdisc=qdisc))
    assert switch_queue_drops(run) == 100
    assert switch_queue_drops(replace(base, health=replace(base.health, qdisc={}))) is None
    assert "switch queue drops" not in "\n".join(_render(runs))  # no run read its qdiscs
    assert "switch queue drops" in "\n".join(_render([run, *runs[1:]]))
