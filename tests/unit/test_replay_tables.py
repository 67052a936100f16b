"""The fine-scale page's tables and the answer's fine-scale figures regenerate from the
committed JSON (bench/results/replay/), and say what the data say."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

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


def test_production_windows_figures_known_answer(tmp_path: Path):
    """A run's busiest 0.1 s, replayed mixed and with EP alone, to the page's production row and
    the answer's production figures; every number below worked out by hand."""
    from bench.replay_tables import production_table
    from zcube_lab.core.replay.figures import class_figures, contention, outcomes
    from zcube_lab.core.replay.recording import Recording, Transfer, busiest_window

    kv = lambda i, t, src, dst, b: Transfer(i, "kv", t, src, dst, b)  # noqa: E731
    ep = lambda i, t, src, dst, after, ex: Transfer(i, "ep", t, src, dst, 1e5, after, 0.0, ex)  # noqa: E731
    rec = Recording((
        kv(0, 0.00, "h2", "h0", 1e6), kv(1, 0.05, "h3", "h0", 1e6),
        ep(2, 0.01, "h0", "h1", (), "a"), ep(3, 0.01, "h1", "h0", (2,), "a"),
        kv(4, 0.12, "h2", "h0", 5e6),
        ep(5, 0.13, "h0", "h1", (), "b"), ep(6, 0.13, "h1", "h0", (5,), "b"),
        ep(7, 0.13, "h1", "h0", (), "b"), ep(8, 0.13, "h0", "h1", (7,), "b"),
        kv(9, 0.15, "h3", "h1", 5e6), kv(10, 0.21, "h2", "h1", 2e6),
    ), ("h0", "h1", "h2", "h3"))  # fmt: skip
    # KV bytes released in 0.1 s from each KV release: from 0.00 2 MB (0 and 1), from 0.05 6 MB
    # (1 and 4), from 0.12 12 MB (4, 9, 10), from 0.15 7 MB, from 0.21 2 MB: [0.12, 0.22)
    a, b = busiest_window(rec, 0.1)
    assert (a, b) == (pytest.approx(0.12), pytest.approx(0.22))
    win = rec.window(a, b)
    assert sorted(t.id for t in win.transfers) == [4, 5, 6, 7, 8, 9, 10]

    def lines(sent: dict[int, float], arrived: dict[int, float]) -> list[dict]:
        """Agent lines from sends and arrivals in µs of the replay."""
        return [{"id": i, "sent_s": s * 1e-6, "sent_bytes": 1} for i, s in sent.items()] + [
            {"id": i, "arrived_s": x * 1e-6, "first_s": 0.0, "bytes": 1, "want": 1}
            for i, x in arrived.items()
        ]

    # mixed: KV 4 takes 0 -> 40,000 µs, 9 30,000 -> 95,000 (65,000, the slowest), 10 90,000 ->
    # 128,000; the exchange's dispatches leave at 10,000 and 10,002, its combines arrive last at
    # 10,181: 181 µs
    mixed_lines = lines(
        {4: 0, 9: 30_000, 10: 90_000, 5: 10_000, 7: 10_002, 8: 10_080, 6: 10_090},
        {4: 40_000, 9: 95_000, 10: 128_000, 5: 10_090, 7: 10_080, 8: 10_150, 6: 10_181},
    )
    # EP alone: both dispatches at 10,000, the last combine (6) arrives at 10,082: 82 µs
    alone_lines = lines(
        {5: 10_000, 7: 10_000, 6: 10_030, 8: 10_035},
        {5: 10_030, 7: 10_035, 6: 10_082, 8: 10_070},
    )
    ideal = lambda t: 1e-6  # noqa: E731
    mixed = class_figures(win.transfers, *outcomes(mixed_lines), ideal)
    iso = {"ep": class_figures(win.of_class(["ep"]).transfers, *outcomes(alone_lines), ideal)["ep"]}
    lab = {"htb_burst_bytes": 3000, "lossless_priority": 10, "lossless_poll_s": 0.001}
    entry = {
        "mixed": {"classes": mixed, "pauses": {"pause_frames": 2351},
                  "pause_reaction_p99_us": 21.4, "recording": dict(win.meta), "lab": lab},
        "isolated": iso,
        "contention": contention(iso, mixed),
    }  # fmt: skip
    for f in DATA.glob("*.json"):
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "production-busiest.json").write_text(json.dumps({"fabrics": {"zcube": entry}}))
    # 181 / 82 = 2.207...: 2.21x, 99 µs added to the exchange's p99 (ITL_fabric), over the
    # window's 1 exchange; KV was not replayed alone here: no TTFT_fabric ratio
    assert production_table(tmp_path)[2] == (
        "| ZCube | 65,000 | 82 / 181 | 2.21x | 99 | 1 | - | 2,351 | 21 |"
    )
    figs = fine_figures(tmp_path)
    assert figs["prod_window"] == "0.1" and figs["prod_fabrics"] == "ZCube"
    assert figs["prod_ep"] == "2.21x" and figs["prod_fine_pauses"] == "2,351"


def _losses(switch: int, unlocated: int, port: int = 0) -> dict:
    return {
        "datagrams": {"host_send_queue": 0, "switch_queue": switch, "port": port, "receiver": 0},
        "unlocated": unlocated,
        "still_queued": {},
        "lost_datagrams": switch + unlocated + port,
    }


def test_the_long_incasts_paragraph_quotes_the_data_known_answer():
    from bench.replay_tables import incast_shape, long_incast, long_incast_text, where_lost

    assert incast_shape("incast15x100MB") == (15, 100e6, 16)
    assert incast_shape("incast8x16MB-64gpus-2us") == (8, 16e6, 64)
    with pytest.raises(ValueError):
        incast_shape("run-20261207")
    # 4 senders of 50 MB into a 400 Gb/s NIC: 200 MB x 8 / 400e9 b/s = 4 ms at line rate;
    # two rungs (7 and 2 µs) on two fabrics, one row short of bytes
    ladder = {
        "scenario": "incast4x50MB",
        "rows": [
            {"fabric": f, "frame_us": fr, "incomplete": n}
            for f, fr, n in (
                ("zcube", 7.0, 0),
                ("zcube", 2.0, 3),
                ("clos", 7.0, 0),
                ("clos", 2.0, 0),
            )
        ],
    }
    rerun = {
        "scenario": "incast4x50MB-64gpus-2us",
        "rows": [{"fabric": "roft", "frame_us": 2.0, "incomplete": 3,
                  "losses": _losses(switch=1200, unlocated=34)}],
    }  # fmt: skip
    f = long_incast(ladder, rerun)
    assert {k: f[k] for k in ("senders", "mb", "line_ms", "rungs", "short_rows")} == {
        "senders": "4", "mb": "50", "line_ms": "4", "rungs": "7,2", "short_rows": "1 of 4",
    }  # fmt: skip
    # the re-run: 1,200 + 34 = 1,234 lost, 3 of its 4 transfers short: 1 completed
    assert f["rerun_lost"] == "1,234" and f["rerun_done"] == "1 of its 4"
    assert f["rerun_where"] == "1,200 at switch queues, 34 where no counter saw them"
    assert f["rerun_gpus"] == "64" and f["rerun_fabric"] == "ROFT" and f["rerun_frame"] == "2"
    assert f["counted_span"] == ""  # these rows ran before replays counted losses
    rerun["rows"][0]["incomplete"] = 4
    assert long_incast(ladder, rerun)["rerun_done"] == "none of its 4 transfers"
    # rows that counted their losses say how many, 0 to 5 a replay
    for r, n in zip(ladder["rows"], (0, 5, 0, 2), strict=True):
        r["losses"] = _losses(switch=n, unlocated=0)
    assert long_incast(ladder, rerun)["counted_span"] == "0-5"
    del ladder["rows"][0]["losses"]
    with pytest.raises(ValueError, match="some rows counted"):
        long_incast(ladder, rerun)
    assert where_lost(_losses(0, 0, port=7)) == "7 at ports"
    assert where_lost(_losses(0, 0)) == "none placed by a counter"
    # the committed data's own figures, as the page quotes them
    text = " ".join(long_incast_text())
    assert "lost 7,276 datagrams (278 at switch queues, 6,998 where no counter saw them)" in text
    assert "none of its 15 transfers completed" in text and "3 of 6 rows" in text
    assert "(30 ms at line rate)" in text
    assert all(len(line) <= 96 for line in long_incast_text())


def test_the_pace_table_shows_each_runs_k_and_the_load_it_planned_for(tmp_path: Path):
    from bench.replay_tables import mix_pace_table

    for f in DATA.glob("mix*.json"):
        shutil.copy(f, tmp_path / f.name)
    data = json.loads((tmp_path / "mix-load.json").read_text())
    for r in data["rows"]:
        if r["fabric"] == "clos" and r["replayed"] == "mixed":
            r["load"]["of_ceiling"] = 0.5
            r["resolution"]["dilation"] = 200.0
    (tmp_path / "mix-load.json").write_text(json.dumps(data))
    rows = [ln for ln in mix_pace_table(tmp_path) if ln.startswith("| mix-load.json | Clos |")]
    assert len(rows) == 1 and "| 200 | 50% |" in rows[0]
    # rows from before replays recorded their load show none
    before = [ln for ln in mix_pace_table(tmp_path) if ln.startswith("| mix.json | Clos |")]
    assert "| 120 | - |" in before[0]


def test_the_paced_mix_names_its_k_losses_by_fabric_and_trusted_replays(tmp_path: Path):
    from bench.replay_tables import mix_paced

    def row(fabric, replayed, lost, trusted):
        return {"fabric": fabric, "replayed": replayed, "resolution": {"dilation": 185.0},
                "losses": {"lost_datagrams": lost}, "verdict": {"trusted": trusted}}  # fmt: skip

    rows = [row("zcube", "mixed", 0, False), row("zcube", "mixed", 0, False),
            row("roft", "mixed", 1968, False), row("roft", "mixed", 407, False),
            row("roft", "kv", 3836, False),  # KV alone: not a mixed replay
            row("clos", "mixed", 0, True)]  # fmt: skip
    (tmp_path / "mix-load.json").write_text(json.dumps({"rows": rows}))
    assert mix_paced(tmp_path) == (
        "; paced to the datapath's load (k = 185), datagrams lost a mixed replay "
        "ZCube 0 / ROFT 407-1,968 / Clos 0, 1 of 5 trusted"
    )
    assert mix_paced(tmp_path, "absent") == ""


def test_the_finer_rungs_paragraph_counts_untrusted_replays_known_answer():
    from bench.replay_tables import finer_rungs, finer_rungs_text

    def row(fabric: str, frame: float, k: float, trusted: bool, lost: int = 0, switch: int = 0,
            incomplete: int = 0) -> dict:  # fmt: skip
        losses = _losses(switch=switch, unlocated=lost - switch)
        losses["lost_datagrams"] = lost
        return {"fabric": fabric, "frame_us": frame, "dilation": k, "incomplete": incomplete,
                "verdict": {"trusted": trusted}, "losses": losses}  # fmt: skip

    ladder = {"scenario": "incast8x16MB-sub2us", "rows": [
        row("zcube", 2.0, 120, True), row("zcube", 1.0, 240, False, 141, 25, 2),
        row("clos", 2.0, 120, True), row("clos", 1.0, 240, True),
        row("clos", 0.5, 480, False, 483, 20, 4),
    ]}  # fmt: skip
    f = finer_rungs(ladder)
    assert f["rungs"] == "1 and 0.5" and f["ks"] == "240 and 480"
    assert (f["replays"], f["untrusted"], f["trusted"]) == ("3", "2", "Clos at 1 µs")
    assert (f["lost"], f["switch"], f["incomplete"]) == ("141-483", "20-25", "2-4")
    assert f["finest_all"] == "2 µs"  # at 1 µs ZCube's replay was not trusted
    ladder["rows"][0]["verdict"]["trusted"] = False
    assert finer_rungs(ladder)["finest_all"] == "none"
    with pytest.raises(ValueError, match="no rung finer"):
        finer_rungs({"scenario": "x", "rows": [row("zcube", 2.0, 120, True)]})
    # the committed data's own figures, as the page quotes them
    text = " ".join(finer_rungs_text())
    assert "5 of 6 replays were not trusted" in text and "Trusted: Clos at 1 µs" in text
    assert "carried trusted is 2 µs" in text


def test_the_production_victims_table_reads_each_trials_victims_known_answer(tmp_path: Path):
    from bench.replay_tables import production_victims_table

    def trial(victims: int, behind_s: float, kv: int, unknown: int, busy: float,
              reasons: list[str]) -> dict:  # fmt: skip
        return {"mixed": {
            "victims": {"ep_victims": victims, "ep_exchanges": 4, "pauses": kv + unknown,
                        "pauses_unattributed": unknown,
                        "classes": {"ep": {"seconds_behind": behind_s, "pauses_raised": 0},
                                    "kv": {"pauses_raised": kv}}},
            "cpu": {"busy": busy},
            "verdict": {"trusted": not reasons, "reasons": reasons},
        }}  # fmt: skip

    doc = {"fabrics": {"zcube": {"trials": [
        trial(1, 17e-6, 773, 13, 0.93, ["the machine's CPUs averaged 93% busy (allowed 90%)"]),
        trial(0, 0.0, 10, 0, 0.5, []),
    ]}}}  # fmt: skip
    (tmp_path / "production-busiest-trials.json").write_text(json.dumps(doc))
    rows = production_victims_table(tmp_path)[2:]
    assert rows == [
        "| ZCube | 1 | 1 of 4 | 17 | 786 (773 / 0 / 13) | 93% | no: the machine's CPUs "
        "averaged 93% busy (allowed 90%) |",
        "| ZCube | 2 | 0 of 4 | 0 | 10 (10 / 0 / 0) | 50% | yes |",
    ]


def test_the_answer_says_the_production_windows_victims_known_answer():
    from bench.replay_tables import production_victims

    def t(victims: int, trusted: bool) -> dict:
        return {"mixed": {"victims": {"ep_victims": victims, "ep_exchanges": 4},
                          "verdict": {"trusted": trusted}}}  # fmt: skip

    agree = {"fabrics": {"zcube": {"trials": [t(1, True), t(1, False)]},
                         "roft": {"trials": [t(1, False), t(1, False)]}}}  # fmt: skip
    assert production_victims(agree, ["zcube", "roft", "clos"]) == (
        "1 of its 4 EP exchanges waited behind a KV-raised pause in each of 2 trials on every "
        "fabric (1 of 4 replays trusted)"
    )
    differ = {"fabrics": {"zcube": {"trials": [t(0, True), t(2, True)]},
                          "roft": {"trials": [t(1, True), t(1, True)]}}}  # fmt: skip
    assert production_victims(differ, ["zcube", "roft"]) == (
        "EP exchanges behind a KV-raised pause 0-2 / 1 (ZCube / ROFT) (4 of 4 replays trusted)"
    )


def test_the_settings_say_whether_the_agent_paused_at_ingress():
    from bench.replay_tables import settings

    lab = {"htb_burst_bytes": 3000, "lossless_priority": 10, "lossless_poll_s": 0.001}
    old, on, off = (
        settings([{"lab": dict(lab, **extra)}])[1]
        for extra in ({}, {"lossless_ingress": True}, {"lossless_ingress": False})
    )
    assert old.endswith("polling every 1 ms of wall time.")  # recorded before: unchanged
    assert "pausing at ingress too" in on and "egress queues only" in off
