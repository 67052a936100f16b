"""Time dilation k (docs/DOMAIN.md §4) in the pure parts: the run option, the link rates (bytes,
queues and MTU unchanged), the plan's command lines, and the summary in modelled seconds."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.linkplan import port_rates
from zcube_lab.core.fabric.queues import QueueModel, fabric_mtu, port_queue_limits
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.options import parse_with_file
from zcube_lab.emulator.experiment.plan import RunConfig, RunPlan, plan_run
from zcube_lab.emulator.results.run.dilation import SERVER_WALL_TIMES, TRANSFER_TIMES, undilate
from zcube_lab.emulator.results.run.summary import DirectedUtilization, RunSummary, TransferFigures
from zcube_lab.serving import decode, gateway, prefill

ZCUBE = FabricSpec.of("zcube", n=4)
ROFT = FabricSpec.of("roft", servers=4, gpus_per_server=4, planes=2)
DATA = Path(__file__).parent / "data"


def _plan(**options: object) -> RunPlan:
    return plan_run(RunConfig(fabric=ZCUBE, **options))  # type: ignore[arg-type]


# --- the option ----------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0.0, 0.5, 16.5, math.inf])
def test_a_dilation_outside_1_to_16_is_refused_by_name(k: float) -> None:
    with pytest.raises(ConfigError) as exc:
        RunConfig(fabric=ZCUBE, dilation=k)
    assert exc.value.field == "dilation"


@pytest.mark.parametrize("k", [0.0, 0.5, 1000.5, math.inf])
def test_a_scale_takes_the_fine_time_scales_k_and_no_more(k: float) -> None:
    # A replay's scale stretches time up to 1,000x (paced datagrams on the lab's clock); a
    # run's config keeps kernel TCP's bound of 16 (above).
    assert Scale(dilation=120.0).clock.wall(1.0) == 120.0
    with pytest.raises(ConfigError) as exc:
        Scale(dilation=k)
    assert exc.value.field == "dilation"


def test_faults_are_not_dilated_so_the_two_are_refused_together() -> None:
    with pytest.raises(ConfigError) as exc:
        RunConfig(fabric=ZCUBE, dilation=2.0, faults=("link a0-b1 at 10s for 5s",))
    assert exc.value.field == "dilation"
    RunConfig(fabric=ZCUBE, dilation=1.0, faults=("link a0-b1 at 10s for 5s",))


def test_config_json_records_the_dilation() -> None:
    assert RunConfig(fabric=ZCUBE).to_dict()["dilation"] == 1.0
    assert RunConfig(fabric=ZCUBE, dilation=2.0).to_dict()["dilation"] == 2.0


# --- the links -----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [ZCUBE, ROFT], ids=["zcube", "roft-2planes"])
def test_rates_are_divided_and_bytes_queues_and_mtu_are_not(spec: FabricSpec) -> None:
    fabric = build_fabric(spec)
    one, two = Scale(nic_mbps=100.0), Scale(nic_mbps=100.0, dilation=2.0)
    assert two.bandwidth_scale(fabric) == one.bandwidth_scale(fabric)  # payloads keep their size
    r1, r2 = port_rates(fabric, one), port_rates(fabric, two)
    assert r1.keys() == r2.keys()
    assert all(r2[name] == pytest.approx(r1[name] / 2) for name in r1)
    assert two.shaped_nic_mbps == 50.0
    # Counted in packets and bytes: the same at every k.
    model = QueueModel()
    assert port_queue_limits(fabric, two, 9000, model) == port_queue_limits(
        fabric, one, 9000, model
    )
    assert fabric_mtu(fabric, two) == fabric_mtu(fabric, one)


def test_the_plan_shapes_at_rate_over_k() -> None:
    one, two = _plan(), _plan(dilation=2.0)
    assert two.scale == Scale(nic_mbps=100.0, dilation=2.0)
    assert two.scale.bandwidth_scale(two.fabric) == one.scale.bandwidth_scale(one.fabric)


# --- the command lines ---------------------------------------------------------------------


def _parsed(argv: tuple[str, ...]) -> object:
    mod = {"prefill": prefill, "decode": decode, "gateway": gateway}[argv[2].split(".")[-1]]
    parser = argparse.ArgumentParser()
    mod.add_arguments(parser)
    return mod.config_from_args(parse_with_file(parser, list(argv[3:])))


def test_every_engine_and_the_gateway_run_dilated_with_the_same_payloads() -> None:
    logs = Path("/r/logs")
    one = _plan(decode_hotspot=2, policy="spray").role_launches(1, logs)
    two = _plan(decode_hotspot=2, policy="spray", dilation=2.0).role_launches(1, logs)
    assert [r.name for r in one] == [r.name for r in two]
    for a, b in zip(one, two, strict=True):
        ca, cb = _parsed(a.argv), _parsed(b.argv)
        assert ca.dilation == 1.0 and cb.dilation == 2.0  # type: ignore[attr-defined]
        # Everything else, the modelled timeouts and the bandwidth scale included, is the same.
        assert replace(cb, dilation=1.0) == ca  # type: ignore[type-var]
        assert "--dilation" not in a.argv


def test_locust_sends_the_same_plan_over_k_times_the_wall_time() -> None:
    def argv(plan: RunPlan) -> list[str]:
        return plan.locust_argv(1, 2, out_dir=Path("/r"), python="py")

    one, two = (
        argv(_plan(duration_s=60, drain_s=30)),
        argv(_plan(duration_s=60, drain_s=30, dilation=2.0)),
    )
    assert one[one.index("--run-time") + 1] == "90s"
    assert two[two.index("--run-time") + 1] == "180s"
    # The plan's length stays in modelled seconds: the same requests at the same planned times.
    assert one[one.index("--duration") + 1] == two[two.index("--duration") + 1] == "60"
    assert two[two.index("--dilation") + 1] == "2.0" and "--dilation" not in one


# --- the summary ---------------------------------------------------------------------------


def _transfers() -> TransferFigures:
    return TransferFigures(
        kv_pulls=100, kv_attempts_failed=1, kv_xfer_p50_s=0.1, kv_xfer_p90_s=0.16,
        kv_xfer_p99_s=2.1, kv_xfer_max_s=2.2, kv_xfer_bytes_p50=480e3, kv_xfer_bytes_p90=9e5,
        kv_xfer_bytes_p99=2e6, kv_xfer_bytes_max=2.1e6, kv_xfer_ratio_p50=1.1,
        kv_xfer_ratio_p90=1.3, kv_xfer_ratio_p99=20.0, kv_xfer_ratio_max=22.0, kv_pulls_rated=100,
        kv_pulls_stalled=2, kv_stalled_max_s=2.2, alltoall_exchanges=10, alltoall_p50_s=0.004,
        alltoall_p90_s=0.006, alltoall_p99_s=0.01, alltoall_max_s=None,
        alltoall_bytes_sent_p50=1e4, alltoall_bytes_received_p50=1e4,
        alltoall_exchange_failures=0,
    )  # fmt: skip


def _dilated_run() -> RunSummary:
    """A real run's summary with the newer sections, as a k = 2 run writes it before undilation."""
    base = RunSummary.from_dict(json.loads((DATA / "summary-zcube.json").read_text()))
    directed = DirectedUtilization(
        busiest_link="h5->a1:2", busiest_link_util_mean=0.4, busiest_link_util_peak=0.9,
        peak_link="a0:5->b0:5", peak_link_util=1.0, host_uplink_util_max=0.4,
        host_downlink_util_max=0.1, directed_links=64, util_peak_window_s=1.0,
    )  # fmt: skip
    return replace(
        base,
        fabric_stats=replace(base.fabric_stats, directed=directed),
        transfers=_transfers(),
    )


def test_what_the_engines_logged_is_divided_by_k() -> None:
    wall = _dilated_run()
    s = undilate(wall, Clock(2.0))
    assert s.dilation == 2.0
    for name in SERVER_WALL_TIMES:
        before, after = getattr(wall.server, name), getattr(s.server, name)
        if before is None or math.isnan(before):  # a histogram that saw nothing
            assert after is None or math.isnan(after), name
        else:
            assert after == before / 2, name
    assert set(SERVER_WALL_TIMES) == {
        f"{t}_p{q}_s" for t in ("kv_xfer", "alltoall") for q in (50, 90, 99)
    }
    for name in TRANSFER_TIMES:
        before = getattr(wall.transfers, name)
        assert getattr(s.transfers, name) == (None if before is None else before / 2), name
    assert s.transfers is not None and s.transfers.kv_xfer_p99_s == 1.05
    assert s.fabric_stats.directed is not None
    assert s.fabric_stats.directed.util_peak_window_s == 0.5


def test_what_is_modelled_already_or_a_ratio_or_the_emulators_is_not() -> None:
    wall = _dilated_run()
    s = undilate(wall, Clock(2.0))
    # The load generator reports in modelled seconds itself (records, client figures, rates).
    assert s.client == wall.client and s.loadgen == wall.loadgen
    assert s.throughput_series == wall.throughput_series
    assert s.server.client_ttft_p99_s == wall.server.client_ttft_p99_s
    # The servers' histograms observe modelled seconds themselves (zcube_lab.serving.vllm_metrics).
    assert s.server.gateway_ttft_p99_s == wall.server.gateway_ttft_p99_s
    assert s.server.ttft_p50_s == wall.server.ttft_p50_s
    assert s.server.itl_p99_s == wall.server.itl_p99_s
    # Bytes, counts and ratios of bytes to capacity or of time to ideal time.
    assert s.server.kv_bytes == wall.server.kv_bytes
    assert s.transfers is not None and wall.transfers is not None
    assert s.transfers.kv_xfer_ratio_p99 == wall.transfers.kv_xfer_ratio_p99
    assert s.transfers.kv_xfer_bytes_p99 == wall.transfers.kv_xfer_bytes_p99
    assert s.fabric_stats.utilization == wall.fabric_stats.utilization
    assert s.port_util == wall.port_util and s.link_util == wall.link_util
    # The emulator judged in its own time.
    assert (s.window_s, s.health, s.trustworthy) == (wall.window_s, wall.health, wall.trustworthy)
    assert undilate(wall, Clock()) is wall


def test_summary_json_records_the_dilation_only_when_on(tmp_path: Path) -> None:
    wall = _dilated_run()
    assert "dilation" not in wall.to_dict()
    s = undilate(wall, Clock(2.0))
    s.write(tmp_path)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["dilation"] == 2.0
    assert RunSummary.read(tmp_path).to_json() == s.to_json()  # NaN != NaN: compare the text
