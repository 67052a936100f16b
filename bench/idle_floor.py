"""Benchmark: the CPU floor of an idle lab, per process (issue 34 item 3).

    flock /tmp/zcube-heavy.lock .venv/bin/python -m bench.idle_floor --fabric zcube \\
        [--lossless] [--dilation 16] [--window 30] [--repeat 3] [--ovs KEY=VALUE ...]
    flock /tmp/zcube-heavy.lock .venv/bin/python -m bench.idle_floor --live --dilation 1 \\
        --workload coding-agent --windows 3      # `zcube-lab up --fabric zcube --gpus 64 --serve`

Brings a lab up and serving as a run starts it (`zcube_lab.emulator.experiment.launcher.Launcher`:
the fabric, the controller, the lossless agent under `--lossless`, the serving roles, the health
sampler and Prometheus), starts no load, lets it settle, then reads every lab process's CPU
from /proc (`bench/procwatch.py`) at the start and the end of a window and prints each one's
cores, their total, and the machine's busy cores over the same window (other work on the shared
machine included: compare the two, and the load average printed beside them). 64 GPU hosts by
default: ZCube n=8, ROFT 8 servers x 8 GPUs (8 rail leaves, 2 spines).

`--ovs KEY=VALUE` sets `Open_vSwitch . other_config:KEY` of the system Open vSwitch for the
whole measurement (e.g. `max-idle=10000`) and removes it afterwards. `--lever K=V[,K=V]`
(repeatable) measures a lever *in the same lab*: after the window with the defaults, one window
with the lever set (other_config keys, or `probe=MS`, every controller connection's inactivity
probe), reverted after, and a last window with the defaults again, so a lever is compared
against the lab on either side of it. Each window also gives ovs-vswitchd's threads and its
event counters per second (`ovs-appctl coverage/show`). One JSON line per window goes to `--out`
(appended). Needs root; run it under the heavy lock.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.procwatch import CLK_TCK, ProcSample, scan
from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.options import add_flags, from_args
from zcube_lab.emulator.experiment.launcher import Launcher
from zcube_lab.emulator.experiment.live import LiveLab
from zcube_lab.emulator.experiment.plan import plan_run
from zcube_lab.emulator.experiment.runconfig import RunConfig, profile_fallback
from zcube_lab.emulator.lab.lossless import AgentPlan
from zcube_lab.emulator.lab.losslessproc import stop_agent, wait_watching
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.verdict.cpustats import (
    cpu_share,
    parse_proc_stat,
    parse_task_stat,
)
from zcube_lab.emulator.verdict.judge import DATAPATH

FABRICS = {
    "zcube": FabricSpec.of("zcube", n=8),
    "roft": FabricSpec.of("roft", servers=8, gpus_per_server=8),
}


def cores_by_process(
    before: Sequence[ProcSample], after: Sequence[ProcSample], seconds: float
) -> dict[str, float]:
    """Each process's cores over the window (processes present at both ends only; ticks of
    children it reaped counted with it)."""
    start = {s.key: s for s in before}
    out = {}
    for s in after:
        b = start.get(s.key)
        if b is not None:
            ticks = s.ticks + s.child_ticks - b.ticks - b.child_ticks
            out[s.name] = ticks / CLK_TCK / seconds
    return out


def by_role(cores: dict[str, float]) -> dict[str, float]:
    """Cores summed per role (`decode/h12` counts under `decode`)."""
    out: dict[str, float] = {}
    for name, c in cores.items():
        role = name.split("/", 1)[0].split("#", 1)[0]
        out[role] = out.get(role, 0.0) + c
    return out


def median_roles(windows: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each role's median cores over windows (a role missing from a window counts 0), the
    largest first."""
    names = {role for w in windows for role in w}
    medians = {r: statistics.median(w.get(r, 0.0) for w in windows) for r in names}
    return dict(sorted(medians.items(), key=lambda item: -item[1]))


OVS_PIDFILE = Path("/var/run/openvswitch/ovs-vswitchd.pid")


def _lab_processes() -> list[ProcSample]:
    """This lab's processes and the system's ovs-vswitchd (not another one on the machine,
    such as a peer machine's in its own root: `scripts/peer.sh`)."""
    system = int(OVS_PIDFILE.read_text().strip())
    samples = scan(os.getpid(), resources=False)
    return [s for s in samples if s.role != DATAPATH or s.pid == system]


def _threads(samples: Sequence[ProcSample]) -> dict[str, int]:
    """ovs-vswitchd's threads' ticks by thread name (a kind of thread summed: `handler`,
    `revalidator`, ...), read now."""
    out: dict[str, int] = {}
    for s in samples:
        if s.role != DATAPATH:
            continue
        for task in Path(f"/proc/{s.pid}/task").iterdir():
            try:
                name, times = parse_task_stat((task / "stat").read_text())
            except (OSError, ValueError):
                continue
            kind = name.rstrip("0123456789")
            out[kind] = out.get(kind, 0) + times.ticks
    return out


def _coverage() -> dict[str, float]:
    """ovs-vswitchd's event counters per second over its last 5 s (`coverage/show`)."""
    text = subprocess.run(
        ["ovs-appctl", "coverage/show"], capture_output=True, text=True, check=False
    ).stdout
    out = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 1 and parts[1].endswith("/sec"):
            out[parts[0]] = float(parts[1].removesuffix("/sec"))
    return out


def _busy_cores(before: str, after: str) -> float:
    a, b = parse_proc_stat(before)["cpu"], parse_proc_stat(after)["cpu"]
    return cpu_share(a, b).busy * (os.cpu_count() or 1)


def _ovs_set(settings: dict[str, str]) -> None:
    for key, value in settings.items():
        subprocess.run(
            ["ovs-vsctl", "set", "Open_vSwitch", ".", f"other_config:{key}={value}"], check=True
        )


def _ovs_clear(settings: dict[str, str]) -> None:
    for key in settings:
        subprocess.run(
            ["ovs-vsctl", "remove", "Open_vSwitch", ".", "other_config", key], check=False
        )


def _controllers() -> list[str]:
    text = subprocess.run(
        ["ovs-vsctl", "--bare", "--columns=_uuid", "find", "Controller"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return text.split()


def apply_lever(lever: dict[str, str]) -> None:
    """Set a lever: `other_config` keys of Open vSwitch, or `probe` (every controller
    connection's inactivity probe, ms; 0 turns it off)."""
    for key, value in lever.items():
        if key == "probe":
            for uuid in _controllers():
                subprocess.run(
                    ["ovs-vsctl", "set", "Controller", uuid, f"inactivity_probe={value}"],
                    check=True,
                )
        else:
            _ovs_set({key: value})


def revert_lever(lever: dict[str, str]) -> None:
    """Undo `apply_lever`: the defaults back."""
    for key in lever:
        if key == "probe":
            for uuid in _controllers():
                subprocess.run(["ovs-vsctl", "clear", "Controller", uuid, "inactivity_probe"])
        else:
            _ovs_clear({key: ""})


def window(window_s: float) -> dict[str, Any]:
    """Every lab process's cores over `window_s` from now."""
    load = os.getloadavg()
    stat0, t0 = Path("/proc/stat").read_text(), time.monotonic()
    before = _lab_processes()
    threads0 = _threads(before)
    time.sleep(window_s)
    after = _lab_processes()
    threads1 = _threads(after)
    stat1, t1 = Path("/proc/stat").read_text(), time.monotonic()
    cores = cores_by_process(before, after, t1 - t0)
    ovs_threads = {
        k: round((threads1[k] - threads0.get(k, 0)) / CLK_TCK / (t1 - t0), 4)
        for k in sorted(threads1)
    }
    coverage = _coverage()
    return {
        "cores": {k: round(v, 4) for k, v in sorted(cores.items())},
        "roles": {k: round(v, 4) for k, v in sorted(by_role(cores).items())},
        "lab_cores": round(sum(cores.values()), 4),
        "ovs_threads": ovs_threads,
        "ovs_events_per_s": {k: v for k, v in coverage.items() if v >= 1},
        "machine_busy_cores": round(_busy_cores(stat0, stat1), 4),
        "loadavg_before": load,
        "loadavg_after": os.getloadavg(),
        "window_s": round(t1 - t0, 2),
    }


def restart_agent(lab: Lab, tap: bool) -> None:
    """Replace the lab's lossless agent by one with the same plan, its tap on or off (off: it
    polls at idle as every agent did before issue 34)."""
    assert lab.lossless_agent is not None
    stop_agent(lab.lossless_agent)
    plan = replace(AgentPlan.from_json((lab.run_dir / "lossless-plan.json").read_text()), tap=tap)
    plan_file = lab.run_dir / f"lossless-plan-{'tap' if tap else 'poll'}.json"
    plan_file.write_text(plan.to_json())
    report = lab.lossless_report_path
    report.unlink(missing_ok=True)
    log = lab.run_dir / f"lossless-{'tap' if tap else 'poll'}.log"
    with log.open("wb") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "zcube_lab.emulator.lab.lossless", str(plan_file), str(report)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    lab.lossless_agent = agent
    lab.track_pid(agent.pid)
    wait_watching(agent, report, log)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def stop_locust_load(port: int) -> None:
    """Stop the load of Locust's web UI on `port` (its Stop button)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    stop = urllib.request.Request(f"http://127.0.0.1:{port}/stop", data=b"", method="POST")
    with opener.open(stop, timeout=10) as answer:
        answer.read()


# `zcube-lab up --gpus 64`'s fabrics: the scale-down that keeps the full size's structure.
LIVE_FABRICS = {
    "zcube": FabricSpec.of("zcube", n=8, gpus_per_server=2),
    "roft": FabricSpec.of("roft", servers=32, gpus_per_server=2),
}


def live_config(args: argparse.Namespace) -> RunConfig:
    """The config `zcube-lab up --fabric F --gpus 64 --serve` builds for these options (the
    workload profile's fallbacks for what is left out, e.g. its lossless setting), as `up`
    builds it (`run.config_from_args`: `from_args` over `RunConfig`'s flags)."""
    parser = argparse.ArgumentParser()
    add_flags(parser, RunConfig)
    argv = ["--dilation", str(args.dilation), "--workload", args.workload, "--duration", "3600"]
    argv += ["--results", str(args.results)] + (["--lossless"] if args.lossless else [])
    spec = LIVE_FABRICS[args.fabric]
    fallback = profile_fallback(args.workload, spec)
    return from_args(RunConfig, parser.parse_args(argv), fallback, fabric=spec, tag="live")


def send_requests(url: str, model: str, seconds: float, every_s: float = 0.5) -> None:
    """A client of the gateway's OpenAI API (as a user's script would be): a short completion
    every `every_s` for `seconds` (Locust's UI cannot start a second load after its Stop: one
    OpenLoopUser per process)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    body = json.dumps({"model": model, "prompt": "hello " * 64, "max_tokens": 16}).encode()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        post = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with contextlib.suppress(OSError), opener.open(post, timeout=30) as answer:
            answer.read()
        time.sleep(every_s)


def wake(live: LiveLab, seen_s: float = 12.0) -> dict[str, Any]:
    """After the idle windows, requests sent again (`send_requests`): how long until Prometheus
    scrapes at the run's interval, and over the first `seen_s` seconds how often the gateway's
    requests and the fabric's port counters moved in Prometheus (one change per sample at the
    run's pace)."""
    assert live.watch is not None and live.launcher.prometheus is not None
    active = live.watch.pace.active_s
    url = f"http://127.0.0.1:{live.launcher.gateway_port}/v1/completions"
    client = threading.Thread(
        target=send_requests, args=(url, live.config.model, seen_s), daemon=True
    )
    started = time.monotonic()
    client.start()
    while live.watch.interval_s != active and time.monotonic() - started < 30:
        time.sleep(0.05)
    tightened = time.monotonic() - started
    client.join()
    window = f"[{seen_s:.0f}s]"
    prom = live.launcher.prometheus
    return {
        "wake": {
            "tightened_after_s": round(tightened, 2),
            "window_s": seen_s,
            "gateway_request_changes": prom.query_value(
                f"sum(changes(zcube:gateway_requests_total{window}))"
            ),
            # the fabric's packets summed, one step a second: how many seconds showed them move
            # (one port alone carries a request's KV only now and then)
            "fabric_packet_changes": prom.query_value(
                f"changes(sum(zcube_port_tx_packets_total){window[:-1]}:1s])"
            ),
            "scrapes_of_the_gateway": prom.query_value(
                f'count_over_time(up{{job="gateway"}}{window})'
            ),
        }
    }


def measure_live(
    config: RunConfig, settle_s: float, window_s: float, windows: int, check_wake: bool = False
) -> list:
    """`up --serve`'s processes (`LiveLab`) with Locust's load stopped: per-process cores over
    `windows` windows of `window_s`, after `settle_s`; with `check_wake`, then the load started
    again (`wake`)."""
    live = LiveLab(config, prometheus_port=free_port(), locust_port=free_port(), progress=_progress)
    done = threading.Event()

    def serving() -> None:  # what `up --serve`'s own loop does each second
        while not done.wait(1.0):
            live.tick()

    ticker = threading.Thread(target=serving, daemon=True)
    try:
        live.start()
        stop_locust_load(live.locust_port)
        ticker.start()
        time.sleep(settle_s)
        results = [{"lever": {}, "live": True, **window(window_s)} for _ in range(windows)]
        if check_wake:
            results[-1].update(wake(live))
        return results
    finally:
        done.set()
        if ticker.is_alive():
            ticker.join()
        live.stop()


def measure(
    config: RunConfig,
    settle_s: float,
    window_s: float,
    levers: Sequence[dict[str, str]] = (),
    agents: Sequence[str] = (),
    windows: int = 1,
) -> list[dict[str, Any]]:
    """One lab up and serving, idle: per-process cores over `window_s` (`windows` windows);
    then, in the same lab, over a window with each lever set (after `settle_s` / 3), and the
    defaults once more; or, with `agents` (`poll`, `tap`), one window per lossless agent mode,
    the agent restarted."""
    launcher = Launcher(plan_run(config), _progress)
    launcher.prepare()
    try:
        launcher.start()
        time.sleep(settle_s)
        if agents:
            assert isinstance(launcher.lab, Lab)
            results = []
            for mode in agents:
                restart_agent(launcher.lab, tap=mode == "tap")
                time.sleep(settle_s / 3)
                results.append({"lever": {}, "agent": mode, **window(window_s)})
            return results
        results = [{"lever": {}, **window(window_s)} for _ in range(windows)]
        for lever in levers:
            apply_lever(lever)
            try:
                time.sleep(settle_s / 3)
                results.append({"lever": lever, **window(window_s)})
            finally:
                revert_lever(lever)
        if levers:
            time.sleep(settle_s / 3)
            results.append({"lever": {}, **window(window_s)})
        return results
    finally:
        launcher.stop()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fabric", choices=sorted(FABRICS), default="zcube")
    p.add_argument("--lossless", action="store_true")
    p.add_argument("--dilation", type=float, default=16.0)
    p.add_argument("--workload", default="kv-heavy")
    p.add_argument("--settle", type=float, default=15.0, help="seconds after start")
    p.add_argument("--window", type=float, default=30.0, help="seconds measured")
    p.add_argument("--repeat", type=int, default=1, help="labs brought up in turn")
    p.add_argument("--windows", type=int, default=1, help="windows measured in each lab")
    p.add_argument(
        "--wake",
        action="store_true",
        help="with --live: after the windows, send requests again and report how soon the "
        "scrapes and the controller's polls are back at the run's pace",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="`up --serve`'s processes (with Locust's web UI, its load stopped)",
    )
    p.add_argument("--ovs", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--lever",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="measured in the same lab after the defaults: other_config keys, or probe=MS",
    )
    p.add_argument(
        "--agents",
        default="",
        help="comma-separated lossless agent modes measured in turn in one lab (poll, tap)",
    )
    p.add_argument("--tag", default="", help="a label written with each result")
    p.add_argument("--out", type=Path, default=None, help="append one JSON line per repeat")
    p.add_argument("--results", type=Path, default=Path("/tmp/zcube-idle-floor"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ovs = dict(kv.split("=", 1) for kv in args.ovs)
    levers = [dict(kv.split("=", 1) for kv in spec.split(",")) for spec in args.lever]
    config = (
        live_config(args)
        if args.live
        else RunConfig(
            fabric=FABRICS[args.fabric],
            workload=args.workload,
            lossless=args.lossless,
            dilation=args.dilation,
            results_root=args.results,
            tag="live" if args.live else "idle",
        )
    )
    totals: list[float] = []
    roles: list[dict[str, float]] = []
    _ovs_set(ovs)
    try:
        for i in range(args.repeat):
            agents = [m for m in args.agents.split(",") if m]
            if args.live:
                results = measure_live(
                    config, args.settle, args.window, args.windows, check_wake=args.wake
                )
            else:
                results = measure(config, args.settle, args.window, levers, agents, args.windows)
            for result in results:
                result.update(
                    fabric=args.fabric, lossless=args.lossless, dilation=args.dilation,
                    ovs=ovs, tag=args.tag, repeat=i,
                    at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                )  # fmt: skip
                if not result["lever"] and not agents:
                    totals.append(result["lab_cores"])
                    roles.append(result["roles"])
                print(json.dumps(result), flush=True)
                if args.out is not None:
                    with args.out.open("a") as f:
                        f.write(json.dumps(result) + "\n")
    finally:
        _ovs_clear(ovs)
    if totals:
        print(f"lab cores: median {statistics.median(totals):.3f} of {totals}", file=sys.stderr)
        for role, cores in median_roles(roles).items():
            print(f"  {role:<12} {cores:.3f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
