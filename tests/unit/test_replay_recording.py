"""Recordings, windows, chains and the recording of a run's logs, against hand answers
(issue 45 item 3)."""

from __future__ import annotations

import pytest

from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.replay.chains import HostChains, schedule
from zcube_lab.core.replay.fromrun import recording_from_logs
from zcube_lab.core.replay.recording import Recording, Transfer, busiest_window, read

HOSTS = ("h0", "h1", "h2", "h3")


def ep_chain() -> tuple[Transfer, ...]:
    # Leader h0 dispatches to h1 and h2 (ids 0, 2); each combines back (1, 3); the next
    # layer's dispatches (4, 5) follow both combines plus 0.5 s of compute.
    return (
        Transfer(0, "ep", 0.0, "h0", "h1", 10, exchange="x0"),
        Transfer(1, "ep", 0.0, "h1", "h0", 10, after=(0,), exchange="x0"),
        Transfer(2, "ep", 0.0, "h0", "h2", 10, exchange="x0"),
        Transfer(3, "ep", 0.0, "h2", "h0", 10, after=(2,), exchange="x0"),
        Transfer(4, "ep", 0.0, "h0", "h1", 10, after=(1, 3), gap_s=0.5, exchange="x1"),
        Transfer(5, "ep", 0.0, "h0", "h2", 10, after=(1, 3), gap_s=0.5, exchange="x1"),
    )


def test_host_chains_start_a_transfer_after_its_last_predecessor_plus_the_gap():
    t = Transfer(9, "ep", 1.0, "h0", "h1", 10, after=(1, 3), gap_s=0.5)
    hc = HostChains([t])
    assert hc.start_time(t) is None and hc.due(100.0) == []
    hc.arrival(1, 2.0)
    assert hc.start_time(t) is None  # 3 has not arrived
    hc.arrival(3, 2.25)
    assert hc.start_time(t) == pytest.approx(2.75)
    assert hc.due(2.7) == [] and hc.due(2.75) == [t] and hc.due(3.0) == []
    # a release time later than the chain wins
    late = Transfer(10, "ep", 5.0, "h0", "h1", 10, after=(1,), gap_s=0.1)
    hc2 = HostChains([late])
    hc2.arrival(1, 2.0)
    assert hc2.start_time(late) == 5.0


def test_schedule_keeps_the_chain_of_an_ep_step():
    timed = schedule(ep_chain(), lambda t: 1.0)
    # dispatch 0 -> 1, combine 1 -> 2, compute 0.5, next dispatch 2.5 -> 3.5
    assert (timed[0].start_s, timed[0].end_s) == (0.0, 1.0)
    assert (timed[1].start_s, timed[1].end_s) == (1.0, 2.0)
    assert timed[4].start_s == pytest.approx(2.5) and timed[5].end_s == pytest.approx(3.5)


def test_a_slow_combine_delays_the_next_layer_as_on_a_gpu():
    timed = schedule(ep_chain(), lambda t: 3.0 if t.id == 3 else 1.0)
    assert timed[4].start_s == pytest.approx(4.0 + 0.5)


def test_check_refuses_what_a_replay_could_not_keep():
    base = ep_chain()
    with pytest.raises(ConfigError, match="arriving at h2"):  # 0 arrives at h1, not h2
        Recording((*base, Transfer(6, "ep", 0, "h2", "h0", 1, after=(0,))))
    with pytest.raises(ConfigError, match="ids of transfers"):
        Recording((Transfer(0, "ep", 0, "h0", "h1", 1, after=(7,)),))
    with pytest.raises(ConfigError, match="unique"):
        Recording((base[0], base[0]))
    with pytest.raises(ConfigError, match="cycles"):
        Recording(
            (
                Transfer(0, "ep", 0, "h0", "h1", 1, after=(1,)),
                Transfer(1, "ep", 0, "h1", "h0", 1, after=(0,)),
            )
        )
    with pytest.raises(ConfigError, match="hosts of the fabric"):
        Recording((Transfer(0, "kv", 0, "h0", "h9", 1),), hosts=HOSTS)
    with pytest.raises(ConfigError, match="class"):
        Recording((Transfer(0, "rdma", 0, "h0", "h1", 1),))


def test_window_shifts_times_and_cuts_chains_at_its_edge():
    rec = Recording(
        (
            Transfer(0, "kv", 0.5, "h0", "h2", 100),
            Transfer(1, "kv", 1.2, "h1", "h2", 100),
            Transfer(2, "ep", 1.5, "h2", "h1", 100, after=(0,), gap_s=0.1),  # 0 lies outside
            Transfer(3, "ep", 1.6, "h1", "h2", 100, after=(2,), gap_s=0.2),
            Transfer(4, "kv", 3.0, "h0", "h3", 100),
        ),
        HOSTS,
    )
    w = rec.window(1.0, 2.0)
    assert [t.id for t in w.transfers] == [1, 2, 3]
    assert [round(t.start_s, 9) for t in w.transfers] == [0.2, 0.5, 0.6]
    assert w.transfers[1].after == () and w.transfers[1].gap_s == 0.0
    assert w.transfers[2].after == (2,) and w.transfers[2].gap_s == 0.2
    assert w.meta["window_s"] == [1.0, 2.0]
    with pytest.raises(ConfigError, match="within the run"):
        rec.window(5.0, 6.0)
    with pytest.raises(ConfigError, match="end after"):
        rec.window(2.0, 1.0)
    assert [t.id for t in rec.of_class(["ep"]).transfers] == [2, 3]


def test_a_recording_round_trips_through_its_file(tmp_path):
    rec = Recording(ep_chain(), HOSTS, {"bandwidth_scale": 4000.0, "fabric": "zcube"})
    rec.write(tmp_path / "transfers.jsonl")
    back = read(tmp_path / "transfers.jsonl")
    assert back == rec
    with pytest.raises(ConfigError, match=r"transfers\.jsonl"):
        read(tmp_path / "none" / "transfers.jsonl")


def test_busiest_window_is_the_one_with_the_most_kv_bytes_released():
    rec = Recording(
        (
            Transfer(0, "kv", 0.0, "h0", "h1", 10),
            Transfer(1, "kv", 2.0, "h0", "h1", 30),
            Transfer(2, "kv", 2.5, "h0", "h2", 30),
            Transfer(3, "kv", 3.2, "h0", "h2", 30),
            Transfer(4, "ep", 0.1, "h0", "h3", 1000),  # EP bytes do not count
        )
    )
    assert busiest_window(rec, 1.0) == (2.0, 3.0)  # 60 bytes; [2.5, 3.5) also 60, later
    assert busiest_window(rec, 2.0) == (2.0, 4.0)


def test_a_runs_logs_become_real_bytes_on_modelled_time_with_ep_chains():
    hosts = {"p0": "h1", "d0": "h2"}
    kv = [("d0", {"start": 100.0, "end": 100.5, "bytes": 1000, "engine_id": "p0", "ok": True})]
    ep = [
        ("d0", {"start": 101.0, "step": 0, "frames": 2, "bytes_sent": 400,
                "bytes_received": 800, "compute_s": 0.01}),
        ("d0", {"start": 103.0, "step": 1, "frames": 1, "bytes_sent": 200,
                "bytes_received": 200, "compute_s": 0.0}),
    ]  # fmt: skip
    rec = recording_from_logs(
        kv, ep, hosts, {"d0": ("h3", "h4")}, 4000.0, Clock(2.0), (*HOSTS, "h4")
    )
    pull = rec.transfers[0]
    assert (pull.cls, pull.src, pull.dst, pull.start_s, pull.bytes) == ("kv", "h1", "h2", 0, 4e6)
    assert pull.live_s == pytest.approx(0.25)  # 0.5 wall s at k = 2
    ep_ts = [t for t in rec.transfers if t.cls == "ep"]
    # step 0: 2 frames x 2 peers x (dispatch + combine) = 8; step 1: 4
    assert len(ep_ts) == 12
    d0, c0 = ep_ts[0], ep_ts[1]
    assert (d0.src, d0.dst, d0.start_s, d0.bytes) == ("h2", "h3", 0.5, 400 * 4000 / 4)
    assert (c0.src, c0.dst, c0.bytes, c0.after) == ("h3", "h2", 800 * 4000 / 4, (d0.id,))
    frame1 = ep_ts[4]
    assert frame1.after == (ep_ts[1].id, ep_ts[3].id) and frame1.gap_s == pytest.approx(0.005)
    step1 = ep_ts[8]
    assert step1.start_s == pytest.approx(1.5) and step1.after == (ep_ts[5].id, ep_ts[7].id)
    assert step1.gap_s == 0.0
    # split cuts every frame into equal exchanges, the compute gap shared alike
    split = recording_from_logs([], ep[:1], hosts, {"d0": ("h3", "h4")}, 4000.0, Clock(), split=3)
    assert len(split.transfers) == 2 * 3 * 4
    assert split.transfers[0].bytes == pytest.approx(400 * 4000 / 12)
    assert split.transfers[4].gap_s == pytest.approx(0.01 / 6)
