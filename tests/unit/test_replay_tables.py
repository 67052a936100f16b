"""The fine-scale page's tables and the answer's fine-scale figures regenerate from the
committed JSON (bench/results/replay/), and say what the data say."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench.replay_tables import BEGIN, DATA, PAGE, fine_figures, rewrite, table


def test_the_page_is_what_the_data_give():
    doc = PAGE.read_text()
    names = [m.group(1) for m in BEGIN.finditer(doc)]
    assert {"resolution", "victim", "mix", "pfc", "production"} <= set(names)
    assert rewrite(doc) == doc, "run: python -m bench.replay_tables --write"
    for name in names:
        assert len(table(name)) > 2, name


def test_the_victim_figures_follow_the_data(tmp_path: Path):
    for f in DATA.glob("*.json"):
        shutil.copy(f, tmp_path / f.name)
    before = fine_figures(tmp_path)
    victim = json.loads((tmp_path / "victim.json").read_text())
    victim["victim"][0]["keeps_of_its_rate"] = 0.9  # one fabric's victim now keeps far more
    (tmp_path / "victim.json").write_text(json.dumps(victim))
    after = fine_figures(tmp_path)
    assert after["fine_victim_way"] == "differing by fabric"
    assert after["fine_victim"].endswith("0.90") and after["fine_victim"] != before["fine_victim"]


def test_a_rung_that_could_not_hold_the_threshold_says_so():
    ladder = [n for n in (m.group(1) for m in BEGIN.finditer(PAGE.read_text()))
              if n.startswith("ladder-")]  # fmt: skip
    assert ladder
    rows = table(ladder[0])
    raised = [r for r in rows if "| 720 |" in r]
    assert raised and all("raised to 2 frames" in r for r in raised)


def _mixed(fabric: str, port: dict, switch: int, unlocated: int, trusted: bool) -> dict:
    lost = sum(port.values()) + switch + unlocated
    return {
        "fabric": fabric,
        "losses": {
            "lost_datagrams": lost,
            "datagrams": {"host_send_queue": 0, "switch_queue": switch,
                          "port": sum(port.values()), "receiver": 0},
            "unlocated": unlocated,
            "detail": {"port": {"ports": {}, "softnet": 0, **port}},
        },
        "verdict": {"trusted": trusted, "reasons": [] if trusted else ["x"]},
        "classes": {},
    }  # fmt: skip


def test_the_answer_says_where_the_mixed_replays_lost_datagrams_and_how_many_were_trusted():
    from bench.replay_tables import mix_lost

    order = ("zcube", "roft", "clos")
    rows = [
        _mixed("zcube", {}, 0, 0, True),
        _mixed("roft", {"leaf4-eth1 socket drops": 90}, 2, 8, False),
    ]
    text = mix_lost(rows, order)
    assert text.startswith(", datagrams lost on ROFT: 90% at the datapath's receive sockets")
    assert "8% where no counter saw" in text and "a switch queue" not in text  # 2% left out
    assert "1 of 2 replays trusted" in text
    # a port drop that is not a socket's is named as a port
    rows[1] = _mixed("roft", {"leaf4-eth1 socket drops": 50, "send errors logged": 50}, 0, 0, False)
    assert "100% at a port or the datapath" in mix_lost(rows, order)
    assert mix_lost(rows[:1], order).startswith(", no datagram lost, 1 of 1 replays trusted")
