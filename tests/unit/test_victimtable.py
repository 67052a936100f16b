"""The report's victim table: per variant medians of the runs that carry the section."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.test_summary import _full
from zcube_lab.emulator.results.lossless.victims import PauseEpisode, Transfer, account
from zcube_lab.emulator.results.lossless.victimtable import ROWS, victim_rows, victim_section


def test_rows_per_variant_and_nothing_without_the_section() -> None:
    ep = Transfer("ep", 0.0, 1.0, 100, frozenset({"x"}))
    hit = account([ep], [PauseEpisode("p", 0.2, 0.4, frozenset({"x"}), "kv")])
    clear = account([ep], [])
    runs = [
        replace(_full(), victims=hit, label="zcube"),
        replace(_full(), victims=clear, label="roft"),
    ]
    rows = {r[0]: r[1:] for r in victim_rows(runs, ["zcube", "roft"])}
    assert len(rows) == len(ROWS)
    assert rows["EP exchanges delayed by another class's pause (share)"] == ["1", "0"]
    assert rows["pauses raised by KV"] == ["1", "-"]
    assert rows["EP seconds behind pauses"] == ["0.2", "0"]
    assert victim_section([_full()], [_full().variant]) == []
    assert "Victim accounting" in victim_section(runs, ["zcube", "roft"])[0]
