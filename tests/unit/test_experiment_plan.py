"""The serving plan of a run without a lab: which role runs on which host with which argv, what
Prometheus scrapes, and Locust's command line (headless run and live web UI)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import configargparse
import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.hostplan import kv_source_map
from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.core.options import parse_with_file
from zcube_lab.core.policies import SPRAY_CHUNK_BYTES, SPRAY_STALL_S, SPRAY_STREAMS
from zcube_lab.emulator.experiment.plan import (
    DECODE_PORT,
    PREFILL_PORT,
    LocustWeb,
    Ports,
    RoleLaunch,
    RunConfig,
    RunPlan,
    peer_addresses,
    plan_run,
)
from zcube_lab.emulator.experiment.runconfig import layout_hint, profile_hint
from zcube_lab.emulator.prometheus.config import COMPONENTS
from zcube_lab.serving import decode, gateway, prefill
from zcube_lab.serving.config import Address, EpWorkerConfig
from zcube_lab.serving.launch import ep_worker_argv
from zcube_lab.workloads import LOCUSTFILE, locust_ext
from zcube_lab.workloads.shards import WORKERS_ENV, shard_files

ZCUBE = FabricSpec.of("zcube", n=4)
ROFT = FabricSpec.of("roft", servers=4, gpus_per_server=4)
LOGS = Path("/results/run-1/logs")
GATEWAY_PORT = 18000
PORTS = Ports(gateway=GATEWAY_PORT, controller=19101, loadgen=19200, emulator=19300)


def _plan(spec: FabricSpec = ZCUBE, **options: object) -> RunPlan:
    return plan_run(RunConfig(fabric=spec, **options))  # type: ignore[arg-type]


def _launches(plan: RunPlan) -> tuple[RoleLaunch, ...]:
    return plan.role_launches(GATEWAY_PORT, LOGS)


def _config(launch: RoleLaunch) -> object:
    """The role's config parsed back from its argv by the role's own flag parser."""
    module = launch.argv[2].split(".")[-1]
    mod = {"prefill": prefill, "decode": decode, "gateway": gateway}[module]
    parser = argparse.ArgumentParser()
    mod.add_arguments(parser)
    return mod.config_from_args(parse_with_file(parser, list(launch.argv[3:])))


def _by_name(plan: RunPlan) -> dict[str, RoleLaunch]:
    return {launch.name: launch for launch in _launches(plan)}


def _values(argv: list[str] | tuple[str, ...], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


# -- roles on hosts ------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [ZCUBE, ROFT], ids=["zcube", "roft"])
def test_every_gpu_host_runs_exactly_the_roles_its_placement_says(spec: FabricSpec) -> None:
    plan = _plan(spec)
    launches = _launches(plan)
    by_host: dict[str | None, list[str]] = {}
    for launch in launches:
        by_host.setdefault(launch.host, []).append(launch.argv[2])
    # Default layout: server 0 prefills, servers 1-3 decode, one engine per GPU host, no EP.
    assert by_host.pop(None) == ["zcube_lab.serving.gateway"]
    assert sorted(by_host, key=lambda h: int(h[1:])) == [f"h{i}" for i in range(16)]
    for host, modules in by_host.items():
        expected = "zcube_lab.serving.prefill" if int(host[1:]) < 4 else "zcube_lab.serving.decode"
        assert modules == [expected], host
    placed = {e.host: e.engine_id for e in plan.placement.engines}
    assert {la.host: la.name for la in launches if la.host} == placed
    assert launches[-1].name == "gateway"  # last: it needs every engine's URL


@pytest.mark.parametrize("spec", [ZCUBE, ROFT], ids=["zcube", "roft"])
def test_engines_listen_on_management_addresses_and_are_waited_for(spec: FabricSpec) -> None:
    plan = _plan(spec)
    launches = _by_name(plan)
    h5 = launches["decode-5"]
    assert _values(h5.argv, "--host") == ["198.19.0.6"]
    assert _values(h5.argv, "--port") == [str(DECODE_PORT)]
    assert h5.health_url == f"http://198.19.0.6:{DECODE_PORT}/health"
    assert launches["prefill-0"].health_url == f"http://198.19.0.1:{PREFILL_PORT}/health"
    assert launches["gateway"].health_url == f"http://127.0.0.1:{GATEWAY_PORT}/health"
    gw = _config(launches["gateway"])
    assert gw.port == GATEWAY_PORT and gw.host == "127.0.0.1"  # type: ignore[attr-defined]
    # every request's exact timings go to the run's logs
    assert gw.request_log == str(LOGS / "requests-gateway.jsonl")  # type: ignore[attr-defined]
    assert gw.prefill_urls == tuple(  # type: ignore[attr-defined]
        f"http://198.19.0.{i + 1}:{PREFILL_PORT}" for i in range(4)
    )
    assert gw.decode_urls == tuple(  # type: ignore[attr-defined]
        f"http://198.19.0.{i + 1}:{DECODE_PORT}" for i in range(4, 16)
    )


def test_rail_aligned_layout_tags_gateway_urls_with_the_rail() -> None:
    launches = _by_name(_plan(layout=LayoutSpec(layout="rail-aligned")))
    gw = _config(launches["gateway"])
    assert gw.prefill_urls[1] == f"http://198.19.0.2:{PREFILL_PORT}#group=rail1"  # type: ignore[attr-defined]
    assert gw.decode_urls[0] == f"http://198.19.0.5:{DECODE_PORT}#group=rail0"  # type: ignore[attr-defined]


# -- KV and all-to-all on the fabric addresses ------------------------------------------------


def test_prefill_serves_kv_on_every_fabric_address_of_its_host() -> None:
    plan = _plan(ZCUBE, prefix_cache_hit_rate=0.5)
    cfg = _config(_by_name(plan)["prefill-1"])
    assert cfg.kv_bind == (Address("198.18.0.2", 7100), Address("198.18.129.1", 7100))  # type: ignore[attr-defined]
    assert cfg.engine_id == "prefill-1"  # type: ignore[attr-defined]
    assert cfg.prefix_cache_hit_rate == 0.5  # type: ignore[attr-defined]
    assert cfg.bandwidth_scale == 4000.0  # type: ignore[attr-defined]  # 400 Gb/s over 100 Mb/s


def test_zcube_decode_binds_each_kv_lane_to_its_own_port() -> None:
    plan = _plan(ZCUBE)
    launches = _by_name(plan)
    for e in plan.placement.role("decode"):
        cfg = _config(launches[e.engine_id])
        host = plan.fabric.host(e.host)
        assert cfg.kv_source_map == kv_source_map(plan.fabric, host)  # type: ignore[attr-defined]
        assert cfg.kv_log == str(LOGS / f"kv-{e.engine_id}.jsonl")  # type: ignore[attr-defined]
    # h4: port-2 prefixes are pulled from its port-1 address and the other way round.
    assert _values(launches["decode-4"].argv, "--kv-source") == [
        "198.18.128.0/17=198.18.1.1",
        "198.18.0.0/17=198.18.128.2",
    ]


@pytest.mark.parametrize(
    ("spec", "kv_paths"), [(ROFT, "disjoint"), (ZCUBE, "shortest")], ids=["roft", "shortest"]
)
def test_no_kv_source_binding_without_disjoint_zcube_lanes(spec: FabricSpec, kv_paths: str) -> None:
    launches = _by_name(_plan(spec, kv_paths=kv_paths))
    assert "--kv-source" not in launches["decode-4"].argv
    assert "--kv-log" in launches["decode-4"].argv


def test_spray_changes_the_kv_transport_flags() -> None:
    plain = _config(_by_name(_plan(ZCUBE, kv_streams=3))["decode-7"])
    spray = _config(_by_name(_plan(ZCUBE, kv_streams=3, policy="spray"))["decode-7"])
    assert plain.kv_streams == 3  # type: ignore[attr-defined]
    assert plain.kv_stall_timeout_s is None  # type: ignore[attr-defined]
    assert plain.kv_chunk_bytes == 256 * 1024  # type: ignore[attr-defined]
    assert spray.kv_streams == SPRAY_STREAMS  # type: ignore[attr-defined]
    assert spray.kv_stall_timeout_s == SPRAY_STALL_S  # type: ignore[attr-defined]
    assert spray.kv_chunk_bytes == SPRAY_CHUNK_BYTES  # type: ignore[attr-defined]
    # Nothing else differs: spraying is a transport choice, not a different engine.
    assert (
        replace(
            spray,  # type: ignore[type-var]
            kv_streams=3,
            kv_stall_timeout_s=None,
            kv_chunk_bytes=256 * 1024,
        )
        == plain
    )


def test_the_mrc_transport_reaches_both_roles_and_paces_each_leg_under_its_nic_port() -> None:
    plan = _plan(ZCUBE, kv_transport="mrc", nic_mbps=100.0)
    launches = _by_name(plan)
    tcp = _by_name(_plan(ZCUBE, nic_mbps=100.0))
    prefills = [n for n in launches if n.startswith("prefill-")]
    decodes = [n for n in launches if n.startswith("decode-")]
    assert prefills and decodes
    for name in prefills:
        cfg = _config(launches[name])
        assert cfg.kv_transport == "mrc"  # type: ignore[attr-defined]
        assert cfg.kv_mrc_mtu == plan.config.link_mtu(plan.fabric, plan.scale)  # type: ignore[attr-defined]
        assert _config(tcp[name]).kv_transport == "tcp"  # type: ignore[attr-defined]
    for name in decodes:
        cfg = _config(launches[name])
        assert cfg.kv_transport == "mrc"  # type: ignore[attr-defined]
        # ZCube's NIC is 2 ports of 50 Mb/s here: each leg uses one, paced at 95% of it.
        assert cfg.kv_mrc_rate_mbps == pytest.approx(47.5)  # type: ignore[attr-defined]
        assert cfg.kv_mrc_delay_bound_ms == 0  # type: ignore[attr-defined]  # lossy: the RTO
        assert "--kv-transport" not in tcp[name].argv


def test_under_the_lossless_model_mrc_s_delay_bound_is_the_full_paused_queues() -> None:
    launches = _by_name(_plan(ZCUBE, kv_transport="mrc", nic_mbps=100.0, lossless=True))
    bounds = {_config(v).kv_mrc_delay_bound_ms for n, v in launches.items() if "decode-" in n}  # type: ignore[attr-defined]
    assert bounds and all(b > 100 for b in bounds)  # hundreds of modelled ms, not the 50 ms RTO


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"kv_transport": "udp"}, "kv_transport"),
        ({"kv_transport": "mrc", "machines": ("198.19.254.1", "198.19.254.2")}, "kv_transport"),
    ],
)
def test_the_mrc_transport_is_refused_where_it_is_not_faithful(options: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        RunConfig(fabric=ZCUBE, **options)
    assert err.value.field == field


def test_expert_parallel_peers_are_reached_on_their_fabric_addresses() -> None:
    layout = LayoutSpec(prefill_servers=2, ep_servers=2)
    plan = _plan(ZCUBE, layout=layout)
    launches = _launches(plan)
    # An EP worker on every host some engine exchanges with, started before the engines.
    assert [la.name for la in launches[:16]] == [f"ep-h{i}" for i in range(16)]
    ep = launches[0]
    assert ep.host == "h0" and ep.health_url == ""
    assert _values(ep.argv, "--bind") == ["198.18.0.1:7300", "198.18.128.1:7300"]
    assert list(ep.argv) == ep_worker_argv(
        EpWorkerConfig(bind=(Address("198.18.0.1", 7300), Address("198.18.128.1", 7300)))
    )
    # h0 and h4 share rank 0 on servers 0 and 1: h4's port-2 address is one switch away and
    # comes first (the one `--ep-ports one` keeps); its port-1 address is the second path.
    by_name = {la.name: la for la in launches}
    assert _values(by_name["prefill-0"].argv, "--ep-peers") == ["198.18.128.2:7300+198.18.1.1:7300"]
    assert _values(by_name["prefill-4"].argv, "--ep-peers") == ["198.18.128.1:7300+198.18.0.1:7300"]
    # each path leaves its own port: the KV pulls' source map
    assert _values(by_name["prefill-0"].argv, "--ep-source") == [
        "198.18.128.0/17=198.18.0.1",
        "198.18.0.0/17=198.18.128.1",
    ]
    for e in plan.placement.engines:
        peers = _values(by_name[e.engine_id].argv, "--ep-peers")
        assert peers == [
            "+".join(f"{ip}:7300" for ip in peer_addresses(plan.fabric, e.host, p))
            for p in e.ep_peers
        ]
    assert "--ep-subflows" not in by_name["decode-8"].argv
    # every engine of an EP instance logs its exchanges, one file per engine
    for e in plan.placement.engines:
        cfg = _config(by_name[e.engine_id])
        assert cfg.ep_log == str(LOGS / f"ep-{e.engine_id}.jsonl")  # type: ignore[attr-defined]
    sprayed = _by_name(_plan(ZCUBE, layout=layout, policy="spray"))["decode-8"]
    assert _values(sprayed.argv, "--ep-subflows") == [str(SPRAY_STREAMS)]


def test_all_to_all_alternates_between_the_two_zcube_ports_of_a_peer() -> None:
    layout = LayoutSpec(prefill_servers=2, ep_servers=2, alltoall="all")
    launches = _by_name(_plan(ZCUBE, layout=layout))
    # h4 shares h0's rank (one hop, port 2); h5-h7 are two hops away over either port, and the
    # first address (`--ep-ports one`'s) alternates with the pair; every peer has both.
    assert _values(launches["prefill-0"].argv, "--ep-peers") == [
        "198.18.128.2:7300+198.18.1.1:7300",
        "198.18.1.2:7300+198.18.129.2:7300",
        "198.18.130.2:7300+198.18.1.3:7300",
        "198.18.1.4:7300+198.18.131.2:7300",
    ]


def test_without_ep_peers_spray_leaves_all_to_all_alone() -> None:
    sprayed = _by_name(_plan(ROFT, policy="spray"))["decode-8"]
    assert "--ep-peers" not in sprayed.argv and "--ep-subflows" not in sprayed.argv
    assert "--ep-log" not in sprayed.argv  # no exchange, no exchange log


# -- Prometheus ----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [ZCUBE, ROFT], ids=["zcube", "roft"])
def test_scrape_jobs_cover_every_role_with_the_run_labels(spec: FabricSpec) -> None:
    plan = _plan(spec, scrape_interval_s=0.5)
    scrape = plan.scrape(PORTS, "20260101-000000-x-coding-agent")
    jobs = dict(scrape.jobs)
    assert tuple(jobs) == COMPONENTS
    assert jobs["gateway"] == (f"127.0.0.1:{GATEWAY_PORT}",)
    assert jobs["prefill"] == tuple(f"198.19.0.{i + 1}:{PREFILL_PORT}" for i in range(4))
    assert jobs["decode"] == tuple(f"198.19.0.{i + 1}:{DECODE_PORT}" for i in range(4, 16))
    assert jobs["controller"] == ("127.0.0.1:19101",)
    assert jobs["loadgen"] == ("127.0.0.1:19200",)
    assert jobs["emulator"] == ("127.0.0.1:19300",)
    assert scrape.interval_s == 0.5
    labels = {"run": "20260101-000000-x-coding-agent", "fabric": spec.kind}
    doc = json.loads(scrape.render())
    assert doc["global"]["external_labels"] == labels
    for job in doc["scrape_configs"]:
        assert job["static_configs"][0]["labels"] == labels, job["job_name"]


# -- Locust --------------------------------------------------------------------------------


def test_headless_locust_carries_the_workload_and_writes_into_the_run() -> None:
    plan = _plan(
        ROFT, workload="chat", seed=9, rate=2.5, duration_s=30, drain_s=20, arrival="gamma"
    )
    out = Path("/results/run-1")
    argv = plan.locust_argv(GATEWAY_PORT, 19200, out_dir=out, python="python3")
    assert argv[:5] == ["python3", "-m", "locust", "-f", str(LOCUSTFILE)]
    assert "--headless" in argv
    for flag, value in (
        ("--host", f"http://127.0.0.1:{GATEWAY_PORT}"),
        ("--workload", "chat"),
        ("--seed", "9"),
        ("--rate", "2.5"),
        ("--arrival", "gamma"),
        ("--duration", "30"),
        ("--run-time", "50s"),  # arrivals plus the drain
        ("--metrics-port", "19200"),
        ("--requests-out", str(out / "requests.jsonl")),
        ("--summary-out", str(out / "loadgen-summary.json")),
        ("--csv", str(out / "locust")),
    ):
        assert _values(argv, flag) == [value], flag
    assert "--burstiness" not in argv and "--length-scale" not in argv  # unset: the profile's
    assert "--web-port" not in argv and "--keep-running" not in argv


def test_live_locust_has_the_web_ui_and_no_headless_duration() -> None:
    plan = _plan(ZCUBE, workload="coding-agent", seed=3, rate=1.5, duration_s=3600)
    argv = plan.locust_argv(GATEWAY_PORT, 19200, web=LocustWeb("0.0.0.0", 8089))
    for flag, value in (
        ("--web-host", "0.0.0.0"),
        ("--web-port", "8089"),
        ("--workload", "coding-agent"),
        ("--seed", "3"),
        ("--rate", "1.5"),
        ("--duration", "3600"),
        ("--metrics-port", "19200"),
    ):
        assert _values(argv, flag) == [value], flag
    assert "--autostart" in argv and "--keep-running" in argv
    for headless in ("--headless", "--run-time", "--requests-out", "--csv", "--only-summary"):
        assert headless not in argv, headless


def test_headless_locust_needs_a_results_folder() -> None:
    with pytest.raises(ValueError, match="out_dir"):
        _plan().locust_argv(GATEWAY_PORT, 19200)


def _our_options(argv: list[str]) -> dict[str, object]:
    """The workload options of a Locust argv as `zcube_lab.workloads.locust_ext` parses them."""
    parser = configargparse.ArgumentParser()
    locust_ext.add_arguments(parser)
    return vars(parser.parse_known_args(argv, env_vars={})[0])


def test_the_default_comparisons_locust_draws_its_rate_times_the_window() -> None:
    # `compare --workload coding-agent --duration 45` (seed 1): Locust, started with the plan's
    # argv, draws the profile's 2 req/s for 45 s as round(2 x 45) = 90 arrivals inside the window
    # (arrivals.counted), the same 90 on every fabric; an open-ended Poisson draw sent 100.
    plan = _plan(workload="coding-agent", seed=1, duration_s=45)
    argv = plan.locust_argv(GATEWAY_PORT, 19200, out_dir=Path("/results/run-1"))
    options = argparse.Namespace(**_our_options(argv))
    run = locust_ext.build_run(argparse.Namespace(parsed_options=options, host="http://h:1"))
    times = [r.t for r in run.plan]
    assert (run.duration, run.arrival["process"], run.arrival["rate"]) == (45.0, "poisson", 2.0)
    assert len(times) == 90 and times[0] > 0 and times[-1] < 45
    roft = _plan(FabricSpec.of("roft", servers=4), workload="coding-agent", seed=1, duration_s=45)
    assert roft.locust_argv(GATEWAY_PORT, 19200, out_dir=Path("/results/run-1")) == argv


def test_distributed_locust_master_runs_no_plan_and_expects_every_worker() -> None:
    plan = _plan(ROFT, workload="chat", seed=9, rate=2.5, duration_s=30, drain_s=20)
    out = Path("/results/run-1")
    argv = plan.locust_master_argv(3, bind_host="10.0.0.1", bind_port=5600, out_dir=out)
    # One OpenLoopUser per worker: the locustfile reads the count from the environment.
    assert argv[:2] == ["env", f"{WORKERS_ENV}=3"]
    assert argv[3:7] == ["-m", "locust", "-f", str(LOCUSTFILE)]
    assert "--master" in argv and "--headless" in argv and "--worker" not in argv
    for flag, value in (
        ("--master-bind-host", "10.0.0.1"),
        ("--master-bind-port", "5600"),
        ("--expect-workers", "3"),
        ("-u", "3"),
        ("-r", "3"),
        ("--run-time", "50s"),
        ("--csv", str(out / "locust")),
        ("--json-file", str(out / "locust")),
    ):
        assert _values(argv, flag) == [value], flag
    for ours in ("--workload", "--seed", "--requests-out", "--summary-out", "--metrics-port"):
        assert ours not in argv, ours
    with pytest.raises(ConfigError):
        plan.locust_master_argv(0, bind_host="*", bind_port=5557, out_dir=out)


def test_distributed_locust_workers_each_carry_the_whole_workload_and_their_shard() -> None:
    plan = _plan(
        ROFT, workload="chat", seed=9, rate=2.5, duration_s=30, arrival="gamma", length_scale=0.1
    )
    out = Path("/results/run-1")
    one = _our_options(plan.locust_argv(GATEWAY_PORT, 19200, out_dir=out))
    plan_keys = ("workload", "seed", "model", "duration", "rate", "arrival", "length_scale")
    outputs = set()
    for k in range(3):
        argv = plan.locust_worker_argv(
            (k, 3),
            master_host="10.0.0.1",
            master_port=5600,
            gateway_url="http://10.0.0.2:8000",
            metrics_addr="10.0.0.2",
            metrics_port=19200 + k,
            out_dir=out,
            python="python3",
        )
        assert argv[:6] == ["python3", "-m", "locust", "-f", str(LOCUSTFILE), "--worker"]
        for flag, value in (
            ("--master-host", "10.0.0.1"),
            ("--master-port", "5600"),
            ("--host", "http://10.0.0.2:8000"),
        ):
            assert _values(argv, flag) == [value], flag
        ours = _our_options(argv)
        # The same plan as one process draws, on the worker's own command line.
        assert {key: ours[key] for key in plan_keys} == {key: one[key] for key in plan_keys}
        assert ours["plan_shard"] == f"{k}/3"
        assert (ours["metrics_addr"], ours["metrics_port"]) == ("10.0.0.2", 19200 + k)
        assert (ours["requests_out"], ours["summary_out"]) == tuple(
            str(p) for p in shard_files(out, k)
        )
        outputs |= {ours["requests_out"], ours["summary_out"]}
        for master_only in ("--headless", "--run-time", "--csv", "--json-file", "-u"):
            assert master_only not in argv, master_only
    assert len(outputs) == 6
    with pytest.raises(ConfigError) as e:
        plan.locust_worker_argv(
            (3, 3),
            master_host="10.0.0.1",
            master_port=5600,
            gateway_url="http://10.0.0.2:8000",
            metrics_addr="10.0.0.2",
            metrics_port=19200,
            out_dir=out,
        )
    assert e.value.field == "plan_shard"


# -- names and hints -----------------------------------------------------------------------


def test_label_and_run_name() -> None:
    assert _plan(ZCUBE).label == "zcube"
    assert _plan(ZCUBE, policy="ff").label == "zcube/ff"
    assert _plan(ROFT, faults=("link h0-leaf0 at 5s",)).label == "roft/ecmp"
    assert _plan(FabricSpec.of("roft", planes=2)).label == "roft-2planes"
    plan = _plan(ZCUBE, workload="zcube_lab/workloads/profiles/chat.json", tag="r1")
    assert plan.run_name("20260101-120000") == "20260101-120000-zcube-chat-r1"


def test_workload_hints_come_from_the_profile() -> None:
    assert layout_hint("rail-aligned") == "rail-aligned"
    assert layout_hint("chat") == "default"
    assert profile_hint("rail-aligned", "prefix_cache_hit_rate", 0.0) == 0.75
    assert profile_hint("chat", "no_such_option", "fallback") == "fallback"


@pytest.mark.parametrize("spec", [ZCUBE, ROFT], ids=["zcube", "roft"])
def test_kv_warm_gives_every_decode_every_prefill_kv_address(spec: FabricSpec) -> None:
    plan = _plan(spec, kv_warm=2)
    launches = _by_name(plan)
    binds = {
        e.engine_id: _config(launches[e.engine_id]).kv_bind  # type: ignore[attr-defined]
        for e in plan.placement.role("prefill")
    }
    assert binds
    for e in plan.placement.role("decode"):
        cfg = _config(launches[e.engine_id])
        assert cfg.kv_warm == 2  # type: ignore[attr-defined]
        assert dict(cfg.prefill_kv) == binds  # type: ignore[attr-defined]
    # off by default: no warm-up, and decode takes the addresses prefill advertises
    cold = _config(_by_name(_plan(spec))["decode-4"])
    assert cold.kv_warm == 0 and cold.prefill_kv == ()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "allowed"),
    [({"kv_warm": 17}, "between 0 and 16"), ({"kv_warm": 2, "kv_transport": "mrc"}, "mrc")],
)
def test_a_bad_kv_warm_is_named(options: dict[str, object], allowed: str) -> None:
    with pytest.raises(ConfigError, match=f"kv_warm.*{allowed}"):
        _plan(ZCUBE, **options)
