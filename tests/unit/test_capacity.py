"""The capacity rule (zcube_lab.emulator.results.sweep.capacity): a repeat's walk up the ladder,
censoring,
the median over repeats with its interval, and ratios as numbers or bounds."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.results.sweep.capacity import (
    Capacity,
    Ratio,
    capacity,
    check_resolution,
    fabric_capacities,
    ratio,
    refine_rate,
    refines_needed,
    repeat_capacity,
)


@dataclass(frozen=True)
class T:
    """A trial: one run of a variant at a rate."""

    rate: float
    slo_met: bool = True
    trustworthy: bool = True
    repeat: int = 1
    variant: str = "zcube"


def ladder(*steps: str, repeat: int = 1, variant: str = "zcube") -> list[T]:
    """Trials at 1, 2, 4, 8 ... from `m` (met), `x` (missed), `u` (untrustworthy, met) and
    `U` (untrustworthy, missed)."""
    out = []
    for i, s in enumerate(steps):
        out.append(T(2.0**i, s in "mu", s in "mx", repeat, variant))
    return out


def test_met_missed_met_gives_the_first_not_the_last() -> None:
    c = repeat_capacity(1, ladder("m", "x", "m"))
    assert (c.rate, c.censored, c.stopped_at) == (1.0, None, 2.0)
    assert c.text() == "1"
    # The same with the trials handed over in any order.
    assert repeat_capacity(1, reversed(ladder("m", "x", "m"))) == c


def test_an_untrustworthy_run_censors_whether_it_met_or_missed() -> None:
    met = repeat_capacity(1, ladder("m", "m", "u", "m"))
    assert (met.rate, met.stopped_at, met.text()) == (2.0, 4.0, ">=2")
    assert met.censored == "not trustworthy at 4 (met)"
    missed = repeat_capacity(1, ladder("m", "m", "U"))
    assert missed.rate == 2.0 and missed.censored == "not trustworthy at 4 (missed)"
    # A miss below the untrustworthy run decides first: exact.
    assert repeat_capacity(1, ladder("m", "x", "u")).censored is None
    first = repeat_capacity(1, ladder("U", "m"))
    assert first.rate == 0.0 and first.censored and first.upper == math.inf


def test_the_ladders_top_met_is_only_a_lower_bound_and_a_miss_at_the_bottom_is_zero() -> None:
    top = repeat_capacity(1, ladder("m", "m", "m"))
    assert top.rate == 4.0 and top.censored == "met at every rate tried (up to 4)"
    bottom = capacity(ladder("x", "m"))
    assert (bottom.rate, bottom.censored, bottom.text()) == (0.0, False, "0 (below the ladder)")


def test_the_figure_is_the_median_of_the_repeats_with_their_spread() -> None:
    trials = [*ladder("m", "m", "x", repeat=1), *ladder("m", "m", "m", "x", repeat=2),
              *ladder("m", "x", repeat=3)]  # fmt: skip
    c = capacity(trials)
    assert (c.rate, c.upper, c.low, c.high) == (2.0, 2.0, 1.0, 4.0)
    assert not c.censored and c.text() == "2 [1-4]"
    assert [r.rate for r in c.repeats] == [2.0, 4.0, 1.0]
    two = capacity([*ladder("m", "m", "x", repeat=1), *ladder("m", "m", "m", "x", repeat=2)])
    assert two.rate == 3.0 and not two.censored  # even count: the two middle ones' mean


def test_a_censored_repeat_censors_the_median_only_when_it_could_move_it() -> None:
    far = capacity([*ladder("m", "m", "x", repeat=1), *ladder("m", "m", "x", repeat=2),
                    *ladder("m", "m", "m", "u", repeat=3)])  # fmt: skip
    assert far.rate == 2.0 and not far.censored  # at least 4 cannot move a median of 2
    near = capacity([*ladder("m", "m", "x", repeat=1), *ladder("u", repeat=2),
                     *ladder("m", "m", "m", "m", "x", repeat=3)])  # fmt: skip
    # 2, at least 0, 8: the median lies in [2, 8].
    assert (near.rate, near.upper, near.censored) == (2.0, 8.0, True)
    assert near.text() == ">= 2 (<= 8) [0-8]"
    one = capacity(ladder("m", "u"))
    assert one.text() == ">= 1" and one.upper == math.inf


def _cap(*steps: str) -> Capacity:
    return capacity(ladder(*steps))


@pytest.mark.parametrize(
    ("value", "base", "text"),
    [
        # 8-16 against 2-4: the knees' brackets allow 2x to 8x.
        (_cap("m", "m", "m", "m", "x"), _cap("m", "m", "x"), "2.00x-8.00x"),
        # The same rung on both, 4-8: a tie to within the rung (1/2x to 2x), never "1.00x".
        (_cap("m", "m", "m", "x"), _cap("m", "m", "m", "x"), "within 100%"),
        (_cap("m", "m", "m", "m"), _cap("m", "m", "x"), ">= 2.00x"),  # the value censored
        (_cap("m", "m", "x"), _cap("m", "m", "m", "u"), "<= 1.00x"),  # the baseline censored
        (_cap("m", "u"), _cap("m", "m", "u"), "unknown"),  # both censored
        (_cap("m", "m", "x"), _cap("x"), "unknown"),  # the baseline met no rate
        (_cap("x"), _cap("m", "m", "x"), "<= 0.50x"),  # the value met none: below 1/2
    ],
)
def test_a_ratio_is_the_interval_the_knee_brackets_allow(
    value: Capacity, base: Capacity, text: str
) -> None:
    r = ratio(value, base)
    assert r.text() == text
    assert r.exact is None  # a ladder of rungs never pins a ratio to one number


def test_within_is_the_largest_departure_from_one_an_interval_allows() -> None:
    assert Ratio(0.8, 1.25).within == pytest.approx(0.25)
    assert Ratio(0.95, 1.02).text() == "within 5%"
    assert Ratio(1.05, 1.3).within is None and Ratio(1.05, 1.3).text() == "1.05x-1.30x"
    assert Ratio(0.0, 1.2).within is None  # unbounded below: a bound, not a tie
    assert Ratio(2.0, 2.0).text() == "2.00x"  # a point stays a number


def test_the_knee_bracket_is_the_median_of_the_repeats_missed_rates() -> None:
    two = capacity([*ladder("m", "m", "x", repeat=1), *ladder("m", "m", "m", "x", repeat=2),
                    *ladder("m", "m", "m", "x", repeat=3)])  # fmt: skip
    assert (two.rate, two.knee_top) == (4.0, 8.0)
    assert capacity(ladder("m", "u")).knee_top == math.inf


def test_a_ladder_resolves_a_share_after_enough_bisections() -> None:
    assert refines_needed([1, 2, 4, 8], 0.10) == 4  # a rung of +100%: 1/16 = 6.25% after 4
    assert refines_needed([32, 40], 0.10) == 2  # +25%: 12.5% after 1, 6.25% after 2
    assert refines_needed([100, 105], 0.10) == 0
    assert refines_needed([10, 11], 0.10) == 0  # exactly 10% needs none
    check_resolution([32, 40], 2, 0.10)
    check_resolution([1, 2, 4], 0, None)  # nothing asked
    with pytest.raises(ConfigError, match=r"refine.*at least 2 to resolve 10%"):
        check_resolution([32, 40], 1, 0.10)
    with pytest.raises(ConfigError, match="resolution"):
        check_resolution([32, 40], 5, 1.5)


def test_fabric_capacities_per_variant_with_ratios_stops_and_plain_json() -> None:
    trials = [
        *ladder("m", "m", "m", "x", variant="zcube"),
        *ladder("m", "m", "x", variant="roft"),
        *ladder("m", "u", variant="clos"),
    ]
    rows = fabric_capacities(trials, "roft", {"roft": 4.0})
    assert [r.variant for r in rows] == ["zcube", "roft", "clos"]
    z, r, c = rows
    # zcube 4-8 against roft 2-4: between 1x and 4x.
    assert z.rate == 4.0 and z.ratio == Ratio(1.0, 4.0) and z.ratio.exact is None
    assert r.ratio is None and r.stopped_after == 4.0 and z.stopped_after is None
    assert c.ratio is not None and c.ratio.text() == ">= 0.25x"
    data = json.loads(json.dumps([x.to_dict() for x in rows], allow_nan=False))
    assert data[0]["ratio"] is None and data[0]["ratio_text"] == "within 300%"
    assert (data[0]["ratio_low"], data[0]["ratio_high"]) == (1.0, 4.0)
    assert data[2]["ratio"] is None and data[2]["censored"] and data[2]["upper"] is None
    assert data[2]["per_repeat"]["1"]["censored"] == "not trustworthy at 2 (met)"
    assert data[1]["ratio_text"] == "baseline" and data[1]["text"] == "2"
    # Without the baseline's runs every ratio is unknown.
    (alone,) = fabric_capacities(ladder("m", "x"), "roft")
    assert alone.ratio is not None and alone.ratio.text() == "unknown"


def test_refinement_bisects_between_the_last_rate_every_repeat_met_and_the_next() -> None:
    two = [*ladder("m", "m", "x", repeat=1), *ladder("m", "m", "m", "x", repeat=2)]
    assert refine_rate(two) == 3.0  # 2 met by both, 4 missed by one: try 3
    assert refine_rate([*two, T(3.0, repeat=1), T(3.0, repeat=2)]) == 3.5
    assert refine_rate([*two, T(3.0, False, repeat=1), T(3.0, repeat=2)]) == 2.5
    assert refine_rate(ladder("x")) == 0.5  # below the lowest rate: from 0
    assert refine_rate(ladder("m", "u", "x")) is None  # censored: refining cannot help
    assert refine_rate(ladder("m", "m")) is None  # nothing missed: no bracket
    # Rounded to 3 decimals; a bracket that no longer splits ends the refinement.
    assert refine_rate([T(1.0), T(1.001, False)]) is None
    assert refine_rate([T(1.0), T(1.5, False)]) == 1.25
