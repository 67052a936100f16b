"""The health verdict in the comparison: the table leads with it, the report marks untrustworthy
runs with their reasons and the checks beyond CPU, and `compare` prints yes/no per variant."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from zcube_lab.emulator.results.compare.report import (
    aggregate,
    busiest_link,
    headline_rows,
    health_rows_of,
    run_health,
    trust,
    verdict_checks,
    verdict_paragraph,
    verdict_rows,
    write_report,
)
from zcube_lab.emulator.results.run.summary import DirectedUtilization, RunSummary
from zcube_lab.emulator.verdict.judge import HealthVerdict
from zcube_lab.emulator.verdict.retry import RETRY_FILE, Rejected, retries_json

DATA = Path(__file__).parent / "data" / "summary-zcube.json"


@dataclass(frozen=True)
class NewerVerdict(HealthVerdict):
    """A verdict with the fidelity fields another change adds (read without knowing them)."""

    tcp_timeouts: Mapping[str, int] = field(default_factory=dict)
    qdisc_drops: int = 0


def _run(label: str, ok: bool, reasons: tuple[str, ...] = (), name: str = "r") -> RunSummary:
    base = RunSummary.from_dict(json.loads(DATA.read_text()))
    health = NewerVerdict(
        **{**base.health.__dict__, "trustworthy": ok, "reasons": reasons},
        tcp_timeouts={"h3": 2, "h4": 0} if not ok else {},
    )
    return replace(base, run=name, label=label, health=health, trustworthy=ok)


def _runs() -> list[RunSummary]:
    bad = ("retransmission timeouts on [h3] with no fault", "CPU above 90%")
    return [
        _run("zcube", True, name="z1"),
        _run("zcube", False, bad, name="z2"),
        _run("roft", True, name="r1"),
    ]


def test_verdict_rows_say_yes_or_how_many_were_not_and_the_first_reason() -> None:
    rows = verdict_rows(_runs(), ["zcube", "roft"], "roft")
    assert rows == [
        ["trustworthy", "no (1 of 2 trusted)", "yes", ""],
        ["first reason", "retransmission timeouts on [h3] with no fault", "-", ""],
    ]
    head = headline_rows(aggregate(_runs()), ["zcube", "roft"], _runs())
    assert head[0][-2:] == ["no (1 of 2 trusted)", "retransmission timeouts on [h3] with no fault"]
    assert head[1][-2:] == ["yes", "-"]


def test_trust_lists_every_reason_of_every_untrustworthy_run_by_variant() -> None:
    runs = [*_runs(), _run("zcube", False, name="z3")]
    assert trust(runs) == {
        "zcube": [
            "z2: retransmission timeouts on [h3] with no fault",
            "z2: CPU above 90%",
            "z3: no reason given",
        ],
        "roft": [],
    }


def test_checks_beyond_cpu_are_shown_without_knowing_their_names() -> None:
    bad = _runs()[1]
    assert verdict_checks(bad) == ["tcp_timeouts: h3 2"]  # zeros left out
    assert verdict_checks(_runs()[0]) == []


def test_busiest_link_is_named_with_mean_and_peak() -> None:
    r = _runs()[0]
    assert busiest_link(r) == "-"  # an old run counted transmit only
    d = DirectedUtilization("h5->a1:2", 0.42, 0.9, "h5->a1:2", 0.9, 0.42, 0.1, 64, 1.0)
    r = replace(r, fabric_stats=replace(r.fabric_stats, directed=d))
    assert busiest_link(r) == "h5->a1:2 mean 42% peak 90%"


def test_the_report_marks_untrustworthy_runs_and_prints_their_reasons(tmp_path: Path) -> None:
    runs = []
    for r in _runs():
        d = tmp_path / r.run
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"fabric_summary": {"hosts": 16}}))
        runs.append(replace(r, dir=d))
    page = write_report(runs, tmp_path / "report", "roft", {}).read_text()
    verdict = page.index("<p><b>Verdict.</b> zcube against the baseline roft")
    assert verdict < page.index("<h2>") and verdict < page.index("<table")
    assert "<th class='bad'>zcube (not trustworthy)</th>" in page
    # one health row per run: the verdict, the first reason, how many more; all folded below
    health = page[page.index("<h2>Emulator health</h2>") : page.index("<h2>Results</h2>")]
    assert "<p>2 of 3 runs trusted.</p>" in health
    assert (
        "<td>zcube</td><td>z2</td><td class='bad'>not trusted</td>"
        "<td>retransmission timeouts on [h3] with no fault</td><td>+1 more</td>"
    ) in health
    assert health.count("<td class='ok'>trusted</td>") == 2
    assert (
        "<details><summary>z2: every reason (2)</summary><ul><li>retransmission timeouts on "
        "[h3] with no fault</li><li>CPU above 90%</li></ul></details>"
    ) in health
    assert "NOT TRUSTWORTHY" not in page  # no paragraph of every reason any more
    runs_section = page[page.index("<h2>Runs</h2>") :]
    assert "<details><summary>z2: checks beyond CPU</summary><ul><li>tcp_timeouts: h3 2" in (
        runs_section
    )
    assert "{'" not in page  # no raw Python dicts as running text


def test_the_health_section_lists_a_retried_run_and_its_rejected_attempt(tmp_path: Path) -> None:
    """The run loop ran z1 again after steal spoiled it: the report shows both attempts, the
    rejected one first with its reason, read from the retry's retry.json."""
    runs = []
    for r in _runs():
        d = tmp_path / r.run
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"fabric_summary": {"hosts": 16}}))
        runs.append(replace(r, dir=d))
    earlier = Rejected(str(tmp_path / "z1-first"), ("CPU steal averaged 23% (allowed 5%)",), "x")
    (tmp_path / "z1" / RETRY_FILE).write_text(json.dumps(retries_json([earlier])))
    page = write_report(runs, tmp_path / "report", "roft", {}).read_text()
    health = page[page.index("<h2>Emulator health</h2>") : page.index("<h2>Results</h2>")]
    first = health.index(
        "<td>zcube</td><td>z1-first</td><td class='bad'>rejected (machine), run again</td>"
        "<td>CPU steal averaged 23% (allowed 5%)</td><td></td>"
    )
    assert first < health.index("<td>zcube</td><td>z1</td><td class='ok'>trusted (retry 1)</td>")
    assert "1 rejected for the machine was run again (1 trusted on a retry)" in health
    data = json.loads((tmp_path / "report" / "comparison.json").read_text())
    assert data["retried"] == {str(tmp_path / "z1"): [earlier.to_dict()]}


def test_the_verdict_paragraph_leaves_out_untrustworthy_runs_and_names_them() -> None:
    assert verdict_paragraph(_runs(), ["zcube", "roft"], "roft") == [
        "zcube against the baseline roft, one trustworthy run each.",
        "Left out as not trustworthy: z2 (zcube: retransmission timeouts on [h3] with no fault).",
        "TTFT p50: the same on zcube and roft (501 ms).",
        "TTFT p99: the same on zcube and roft (1.41 s).",
        "Throughput: the same on zcube and roft (3.08 req/s).",
    ]  # the fixture has no exact KV times and no per-direction link figures
    faster = replace(_runs()[0], client=replace(_runs()[0].client, ttft_p50_s=0.25))
    sentences = verdict_paragraph([faster, *_runs()[1:]], ["zcube", "roft"], "roft")
    assert sentences[2] == (
        "TTFT p50: zcube 50% lower than roft (250 ms vs 501 ms); "
        "spread over repeats unknown (a single repeat), so no winner."
    )


def test_compare_prints_the_verdict_per_variant(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from zcube_lab.cli.commands.compare import _print_table

    monkeypatch.setenv("COLUMNS", "300")  # one table row per line, whatever the terminal

    args = argparse.Namespace(workload="coding-agent", repeat=2)
    _print_table(_runs(), "roft", args)
    out = capsys.readouterr()
    assert "trustworthy" in out.out and "no (1 of 2 trusted)" in out.out
    assert "retransmission timeouts on [h3]" in out.out  # brackets are not eaten as markup
    # the health section: a row per run with its first reason and how many more, not a
    # paragraph of every reason
    assert "NOT TRUSTWORTHY" not in out.err and "CPU above 90%" not in out.err
    assert "emulator health: 2 of 3 runs trusted." in out.err
    (z2,) = [line for line in out.err.splitlines() if " z2 " in line]
    assert "not trusted" in z2 and "retransmission timeouts on [h3] with no fault" in z2
    assert "+1 more" in z2


def test_a_run_rejected_for_the_machine_alone_says_so() -> None:
    steal = _run("zcube", False, ("CPU steal averaged 23% (allowed 5%)",), name="z4")
    _variant, last, earlier = run_health(steal)
    assert last.machine and earlier == ()
    (row,) = health_rows_of([steal], ["zcube"])
    assert row.verdict == "not trusted (machine)"
    _variant, fabric, _ = run_health(_runs()[1])  # TCP timeouts: the fabric's
    assert not fabric.machine
