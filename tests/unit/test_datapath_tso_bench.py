"""bench/datapath_tso.py without a datapath: its variants parse or name what is allowed, and its
table puts each variant's CPU per Mb beside today's and says what a hop adds at its GSO size."""

from __future__ import annotations

import pytest

from bench.datapath_tso import Variant, Window, parse_variant, table


def test_variants_parse_and_bad_ones_name_the_allowed_forms() -> None:
    assert parse_variant("off") == Variant("off", False, None)
    assert parse_variant("tso-36000") == Variant("tso-36000", True, 36000)
    for bad in ("tso", "tso-100", "tso-70000", "gso-36000"):
        with pytest.raises(ValueError, match="off or tso-N"):
            parse_variant(bad)


def test_the_table_compares_with_off_and_gives_each_hop_s_store_and_forward_time() -> None:
    variants = [parse_variant("off"), parse_variant("tso-65536")]
    windows = [
        Window("off", 50.0, 0.10, 5500, 0),
        Window("off", 50.0, 0.12, 5500, 0),
        Window("tso-65536", 50.0, 0.08, 1100, 1),
        Window("tso-65536", 50.0, 0.08, 1100, 0),
    ]
    rows = table(windows, variants, rate=50.0).splitlines()
    off, tso = rows[2], rows[3]
    assert "| 2.20 [2.00-2.40] |" in off and "| +0% |" in off and "| 1.44 ms |" in off
    assert "| 1.60 [1.60-1.60] |" in tso and "| -27% |" in tso and "| 10.49 ms |" in tso
    assert tso.endswith("| 1 |")
