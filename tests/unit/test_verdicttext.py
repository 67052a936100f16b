"""The verdict paragraph's sentences (zcube_lab.emulator.results.compare.verdicttext): by how much,
whether
the difference exceeds the spread over repeats, and only then which variant did better."""

from __future__ import annotations

from zcube_lab.emulator.results.compare.verdicttext import (
    Attempt,
    Excluded,
    Headline,
    figure_sentence,
    health_rows,
    health_summary,
    verdict_sentences,
)


def _ttft(zcube: list[float], roft: list[float]) -> Headline:
    return Headline("TTFT p99", "s", True, {"zcube": zcube, "roft": roft})


def test_a_difference_beyond_the_ranges_exceeds_the_spread() -> None:
    assert figure_sentence(_ttft([1.0, 1.1, 1.2], [1.5, 1.6, 1.7]), "zcube", "roft") == (
        "TTFT p99: zcube 31% lower than roft (1.10 s vs 1.60 s); "
        "exceeds the spread over repeats (1.00-1.20 s vs 1.50-1.70 s do not overlap), "
        "so zcube better."
    )


def test_overlapping_ranges_are_within_the_spread_and_name_no_winner() -> None:
    assert figure_sentence(_ttft([0.4, 0.5, 0.9], [0.6, 0.7, 0.8]), "zcube", "roft") == (
        "TTFT p99: zcube 29% lower than roft (500 ms vs 700 ms); "
        "within the spread over repeats (400-900 ms vs 600-800 ms overlap), so no winner."
    )
    # the sentence: medians equal to the shown precision are the same, not "0.0% higher"
    same = _ttft([0.6251, 0.6, 0.7], [0.6249, 0.6, 0.7])
    same_text = figure_sentence(same, "zcube", "roft")
    assert same_text == "TTFT p99: the same on zcube and roft (625 ms)."
    tiny = _ttft([9.999, 9, 11], [10.0, 9, 11])  # shown 10.00 s vs 10.0 s
    assert "less than 0.1% lower" in (figure_sentence(tiny, "zcube", "roft") or "")
    assert (figure_sentence(tiny, "zcube", "roft") or "").endswith("so no winner.")


def test_the_baseline_is_named_when_it_won_beyond_the_spread() -> None:
    slow = _ttft([1.5, 1.6], [1.0, 1.1])
    assert (figure_sentence(slow, "zcube", "roft") or "").endswith(", so roft better.")


def test_figures_where_lower_is_not_better_are_described_not_judged() -> None:
    rate = Headline("Throughput", "req/s", False, {"zcube": [3.0, 3.1], "roft": [4.0, 4.1]})
    sentence = figure_sentence(rate, "zcube", "roft")
    assert sentence == (
        "Throughput: zcube 25% lower than roft (3.05 req/s vs 4.05 req/s); exceeds the spread "
        "over repeats (3.00-3.10 req/s vs 4.00-4.10 req/s do not overlap) "
        "(not judged: lower is not better here)."
    )
    peak = Headline("Busiest link peak", "%", None, {"zcube": [0.5, 0.6], "roft": [0.1, 0.0]})
    text = figure_sentence(peak, "zcube", "roft") or ""
    assert text.startswith("Busiest link peak: zcube 1000% higher than roft (55.0% vs 5.00%);")
    assert text.endswith("(not judged: lower is not better here).")
    assert "so zcube" not in text and "so roft" not in text and "worse" not in text


def test_a_single_repeat_leaves_the_spread_unknown() -> None:
    out = verdict_sentences([_ttft([1.0], [1.2])], {"zcube": 1, "roft": 1}, "roft")
    assert out == [
        "zcube against the baseline roft, one trustworthy run each.",
        "Every run was trustworthy.",
        "TTFT p99: zcube 17% lower than roft (1.00 s vs 1.20 s); "
        "spread over repeats unknown (a single repeat), so no winner.",
    ]
    # one repeat on one side is enough not to know
    assert "unknown" in (figure_sentence(_ttft([1.0, 1.1], [1.2]), "zcube", "roft") or "")


def test_an_untrustworthy_run_is_named_with_its_first_reason() -> None:
    out = verdict_sentences(
        [_ttft([1.0, 1.2], [1.0, 1.1, 1.2])],
        {"zcube": 2, "roft": 3},
        "roft",
        [Excluded("zcube", "zcube-r3", "CPU above 90%")],
    )
    assert out[:2] == [
        "zcube against the baseline roft, medians of the trustworthy repeats (zcube 2, roft 3).",
        "Left out as not trustworthy: zcube-r3 (zcube: CPU above 90%).",
    ]
    assert out[2] == "TTFT p99: the same on zcube and roft (1.10 s)."


def test_no_trustworthy_run_no_verdict_and_a_missing_figure_no_sentence() -> None:
    kv = Headline("KV transfer p50", "s", True, {"zcube": [0.06], "roft": []})
    out = verdict_sentences([_ttft([], [1.0]), kv], {"zcube": 0, "roft": 1}, "roft")
    assert out[0] == (
        "zcube against the baseline roft, medians of the trustworthy repeats (roft 1)."
        " No trustworthy run of zcube, so no verdict for it."
    )
    assert len(out) == 2
    out = verdict_sentences([_ttft([1.0], [])], {"zcube": 1, "roft": 0}, "roft")
    assert (
        out[0]
        == "zcube against the baseline roft: no trustworthy run of the baseline, so no verdict."
    )
    assert figure_sentence(kv, "zcube", "roft") is None


def test_health_rows_put_a_rejected_attempt_before_the_run_that_replaced_it() -> None:
    steal = ("CPU steal averaged 23% (allowed 5%)", "engine steps: 40 of 1000 (4.0%) woke late")
    rows = health_rows(
        [
            ("zcube", Attempt("z1-retry1", True), [Attempt("z1", False, steal, retried=True)]),
            ("zcube", Attempt("z2", False, ("h3: 2 TCP retransmission timeouts",)), []),
            ("roft", Attempt("r1-retry2", False, steal[:1], machine=True), [
                Attempt("r1", False, steal, retried=True),
                Attempt("r1-retry1", False, steal[:1], retried=True),
            ]),
        ]
    )  # fmt: skip
    assert [r.cells() for r in rows] == [
        ["zcube", "z1", "rejected (machine), run again", steal[0], "+1 more"],
        ["zcube", "z1-retry1", "trusted (retry 1)", "-", ""],
        ["zcube", "z2", "not trusted", "h3: 2 TCP retransmission timeouts", ""],
        ["roft", "r1", "rejected (machine), run again", steal[0], "+1 more"],
        ["roft", "r1-retry1", "rejected (machine), run again", steal[0], ""],
        ["roft", "r1-retry2", "not trusted (machine) (retry 2)", steal[0], ""],
    ]
    assert health_summary(rows) == (
        "1 of 3 runs trusted; 2 rejected for the machine were run again (1 trusted on a "
        "retry); 1 rejected for the machine alone (steal, other processes' load): the machine "
        "is too noisy now: run later, or with a higher --dilation."
    )
    assert health_summary(rows[1:3]) == (
        "1 of 2 runs trusted; 1 rejected for the machine was run again (1 trusted on a retry)."
    )
