"""What a run does differently on several machines (`RunConfig.machines`): the health agents on
the other machines, the files that come back from them, and the verdict over all of them.

- **Agents** (`zcube_lab.emulator.cluster.agent`): one per other machine, started over ssh just
  before the load, sampling that machine's CPU, its Open vSwitch, its hosts' TCP counters and its
  shaped queues; each judges its machine by the run's thresholds when the load ends.
- **Files**: what processes on other machines wrote into the run folder's path there (their KV
  and request logs, the Locust workers' records) is copied back (`fetch_missing`); a file
  machine 0 already holds (a log its ssh pipe wrote, or everything when the folder is shared)
  is left alone.
- **Verdict**: the run is trustworthy only when machine 0's verdict and every agent's are;
  each agent's reasons join machine 0's, prefixed with the machine (the rule is
  `zcube_lab.emulator.verdict.combine.over_machines`).
"""

from __future__ import annotations

import json
import select
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from zcube_lab.core.fabric.clusterplan import switch_ends
from zcube_lab.emulator.cluster.lab import ClusterLab
from zcube_lab.emulator.cluster.remote import SSH_OPTIONS, Machine, argv_on, run_on
from zcube_lab.emulator.lab.system import LabError
from zcube_lab.emulator.verdict.combine import over_machines
from zcube_lab.emulator.verdict.judge import HealthVerdict
from zcube_lab.emulator.verdict.netstats import shaped_rates

AGENT_READY_S = 30.0
AGENT_VERDICT_S = 60.0


@dataclass
class Agent:
    """A running health agent on `machine`."""

    machine: Machine
    proc: subprocess.Popen[str]
    log: IO[bytes]


def machine_rates(lab: ClusterLab, machine: int) -> dict[str, float]:
    """The shaped interfaces on `machine` and their rates (Mb/s)."""
    rates = shaped_rates(lab.fabric, lab.options.scale)
    return {
        name: mbps
        for name, mbps in rates.items()
        if lab.split.machine_of(name.rsplit("-eth", 1)[0]) == machine
    }


def machine_hosts(lab: ClusterLab, machine: int) -> dict[str, int]:
    """The GPU hosts on `machine` and their shells' pids (in that machine's PID namespace)."""
    assert lab.net is not None
    return {h: lab.net.get(h).pid for h in lab.split.per_machine[machine].hosts}


def start_agents(lab: ClusterLab, log_dir: Path, judge_qdisc_drops: bool = True) -> list[Agent]:
    """A health agent on every other machine, each ready (first readings taken)."""
    agents = []
    for m in lab.machines[1:]:
        hosts = machine_hosts(lab, m.index)
        argv = [sys.executable, "-m", "zcube_lab.emulator.cluster.agent"]
        argv += ["--hosts", ",".join(f"{h}={pid}" for h, pid in hosts.items())]
        argv += ["--rates", json.dumps(machine_rates(lab, m.index), separators=(",", ":"))]
        argv += ["--switch-ports", ",".join(switch_ends(lab.split, m.index))]
        if not judge_qdisc_drops:
            argv.append("--no-judge-qdisc-drops")
        log = (log_dir / f"agent-{m.index}.log").open("wb")
        proc = subprocess.Popen(
            argv_on(m, argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        agents.append(Agent(m, proc, log))
    for agent in agents:
        _wait_line(agent, "ready", AGENT_READY_S)
    return agents


def _wait_line(agent: Agent, expect: str, timeout_s: float) -> str:
    assert agent.proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([agent.proc.stdout], [], [], 0.2)
        if ready:
            line = agent.proc.stdout.readline()
            if not line:
                break
            if line.strip() == expect or (expect == "{" and line.startswith("{")):
                return line
    raise LabError(
        f"the health agent on {agent.machine.label} did not answer {expect!r} within "
        f"{timeout_s:g}s (its log: {agent.log.name})"
    )


def finish_agents(agents: list[Agent]) -> list[tuple[Machine, HealthVerdict]]:
    """End every agent's sampling and read its verdict."""
    for agent in agents:
        assert agent.proc.stdin is not None
        agent.proc.stdin.close()
    out = []
    for agent in agents:
        line = _wait_line(agent, "{", AGENT_VERDICT_S)
        agent.proc.wait(timeout=10)
        agent.log.close()
        out.append((agent.machine, HealthVerdict.from_dict(json.loads(line)["verdict"])))
    return out


def stop_agents(agents: list[Agent]) -> None:
    """Kill agents that are still running (a failed run)."""
    for agent in agents:
        if agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait()
        if not agent.log.closed:
            agent.log.close()


def merge_verdicts(
    local: HealthVerdict, remote: list[tuple[Machine, HealthVerdict]]
) -> HealthVerdict:
    """Machine 0's verdict, untrustworthy when any machine's is, with every machine's reasons
    (`zcube_lab.emulator.verdict.combine.over_machines`, under each machine's label)."""
    return over_machines(local, [(machine.label, verdict) for machine, verdict in remote])


def verdicts_json(remote: list[tuple[Machine, HealthVerdict]]) -> list[dict[str, Any]]:
    """Each other machine's own verdict, for health.json."""
    return [{"machine": m.index, "address": m.address, "verdict": v.to_dict()} for m, v in remote]


def fetch_missing(machine: Machine, folder: Path) -> list[str]:
    """Copy the files of `folder` on `machine` that machine 0 lacks into `folder` (recursively);
    returns their relative paths."""
    if machine.local:
        return []
    code, listing = run_on(
        machine, ["sh", "-c", f"cd {shlex.quote(str(folder))} 2>/dev/null && find . -type f"]
    )
    if code != 0:
        return []
    missing = [p for p in listing.splitlines() if p.strip() and not (folder / p).exists()]
    if not missing:
        return []
    remote = f"tar -C {shlex.quote(str(folder))} -cf - " + " ".join(shlex.quote(p) for p in missing)
    done = subprocess.run(
        ["ssh", *SSH_OPTIONS, f"root@{machine.address}", remote],
        capture_output=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise LabError(f"fetching {len(missing)} files from {machine.label}: {done.stderr!r}")
    subprocess.run(["tar", "-C", str(folder), "-xf", "-"], input=done.stdout, check=True)
    return [p.removeprefix("./") for p in missing]


def start_distributed_load(launcher: Any, run_dir: Path) -> subprocess.Popen[bytes]:
    """Locust's master here and one worker per machine, worker K sending shard K of the plan
    (`zcube_lab.workloads.shards`) to the gateway at machine 0's management address; the master's
    process (it exits when the run time is over, and the workers with it)."""
    from zcube_lab.adapters.ports import free_port
    from zcube_lab.core.fabric.clusterplan import mgmt_root_address

    lab: ClusterLab = launcher.lab
    plan = launcher.plan
    workers = len(lab.machines)
    here = lab.machines[0].address
    master_port = free_port()
    argv = plan.locust_master_argv(workers, bind_host=here, bind_port=master_port, out_dir=run_dir)
    master = launcher.popen_root("locust", argv)
    gateway = f"http://{plan.gateway_host}:{launcher.gateway_port}"
    for m in lab.machines:
        argv = plan.locust_worker_argv(
            (m.index, workers),
            master_host=here,
            master_port=master_port,
            gateway_url=gateway,
            metrics_addr=mgmt_root_address(m.index),
            metrics_port=launcher.loadgen_port,
            out_dir=run_dir,
        )
        name = f"locust-worker-{m.index}"
        if m.local:
            launcher.popen_root(name, argv)
        else:
            launcher.popen_remote(m, name, argv)
    return master


def gather_load(launcher: Any, run_dir: Path, timeout_s: float = 30.0) -> dict[str, Any]:
    """Once the master is done: wait for the workers, bring back what the other machines wrote
    into the run folder (records, summaries, engine logs) and merge the workers' records and
    summaries into the run's `requests.jsonl` and `loadgen-summary.json`."""
    from zcube_lab.workloads.shards import merge_shard_files

    deadline = time.monotonic() + timeout_s
    for name, proc in launcher.procs:
        if name.startswith("locust-worker-"):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise LabError(f"{name} still running {timeout_s:g}s after the master") from None
    lab: ClusterLab = launcher.lab
    for m in lab.machines[1:]:
        fetch_missing(m, run_dir)
    return merge_shard_files(run_dir, len(lab.machines))
