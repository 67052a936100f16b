"""Issue 6 acceptance: cut a fabric link that carries an active KV transfer, under each policy.

A real ZCube (n=4) in Mininet on Open vSwitch, routed by our os-ken controller; a real KV server
(serving.kvwire) on the prefill host h0 and a real pull from the decode host h5, over both NIC
ports as decode does. h5 pulls h0's port-1 address from its port 2, across B1 > A0; once bytes
are flowing on that path, the real `FaultInjector` cuts link a0-b1 for the rest of the test.

- ff (fast-failover detours), recompute (controller reroutes) and spray (retire the stalled
  subflows, move their bytes) must complete the pull with every byte and the checksum verified;
- static (one path, nothing reacts) must fail with a clear timeout error, in bounded time;
- afterwards nothing of the lab remains.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from emulator.builders import build_fabric
from emulator.fabric import FabricSpec
from emulator.faults import FaultInjector, parse_faults
from emulator.hostconfig import Scale, kv_source_map
from emulator.network import Lab, LabOptions
from emulator.policies import SPRAY_STALL_S, SPRAY_STREAMS, get_policy
from zcube_lab.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

PROBE = str(Path(__file__).with_name("kv_probe.py"))
FABRIC = build_fabric(FabricSpec.of("zcube", n=4))
KV_BYTES = 24 * 1024 * 1024  # about 2 s over both 50 Mb/s ports
PULL_TIMEOUT_S = 6.0
CUT = "link a0-b1 at 0s"  # prefill h0's port 1 hangs off a0; decode h5's port 2 off b1


def _tx_bytes(switch: str, port: int) -> int:
    out = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", switch, str(port)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    tx = out.split("tx pkts=", 1)[1]
    return int(tx.split("bytes=", 1)[1].split(",", 1)[0])


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    import select

    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if line:
                return line.strip()
        if proc.poll() is not None:
            break
    raise AssertionError(f"no output within {timeout}s (exit {proc.poll()})")


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


def _cut_during_pull(policy_name: str, logs: Path, state_dir: Path) -> tuple[dict, Lab, int]:
    policy = get_policy(policy_name)
    lab = Lab(
        FABRIC,
        LabOptions(
            scale=Scale(nic_mbps=100.0),
            policy=policy.routing,
            recompute=policy.recompute,
            of_port=free_port(),
            metrics_port=free_port(),
            state_dir=state_dir,
            log_dir=logs,
        ),
    )
    procs: list[subprocess.Popen[str]] = []
    injector = None
    try:
        lab.start()
        assert lab.net is not None
        h0, h5 = FABRIC.host("h0"), FABRIC.host("h5")
        addrs = [f"{i.ip}:7100" for i in h0.interfaces]
        server = lab.net.get("h0").popen(
            [sys.executable, PROBE, "serve", "--bytes", str(KV_BYTES), *addrs],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(server)
        assert _readline(server, 20) == "ready"
        argv = [sys.executable, PROBE, "pull", "--bytes", str(KV_BYTES)]
        argv += ["--timeout-s", str(PULL_TIMEOUT_S)]
        argv += [f"--source={cidr}={local}" for cidr, local in kv_source_map(FABRIC, h5)]
        if policy.spray:
            argv += ["--streams", str(SPRAY_STREAMS), "--stall-s", str(SPRAY_STALL_S)]
        client = lab.net.get("h5").popen(
            [*argv, *addrs], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        procs.append(client)
        assert _readline(client, 20) == "started"
        (link,) = [lk for lk in FABRIC.links if {lk.node1, lk.node2} == {"a0", "b1"}]
        a0_port = link.port1 if link.node1 == "a0" else link.port2
        before = _tx_bytes("a0", a0_port)
        time.sleep(0.4)
        carried = _tx_bytes("a0", a0_port) - before
        injector = FaultInjector(FABRIC, parse_faults([CUT], FABRIC, 60), logs / "faults.jsonl")
        injector.start(time.time())
        line = _readline(client, PULL_TIMEOUT_S + 10)
        result = json.loads(line)
        recomputes = 0
        if policy.recompute:
            url = f"http://127.0.0.1:{lab.options.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as resp:
                for row in resp.read().decode().splitlines():
                    if row.startswith("zcube_route_recomputes_total"):
                        recomputes = int(float(row.split()[-1]))
        result["recomputes"] = recomputes
        return result, lab, carried
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=5)
        if injector is not None:
            injector.stop()
        lab.stop()


@pytest.mark.parametrize("policy", ["ff", "recompute", "spray"])
def test_a_reacting_policy_completes_the_cut_transfer_intact(
    policy: str, tmp_path: Path, state_dir: Path
) -> None:
    result, _lab, carried = _cut_during_pull(policy, tmp_path, state_dir)
    assert carried > 100_000, f"the cut link carried only {carried} bytes of the transfer"
    assert result["ok"], result["error"]
    assert result["bytes"] == KV_BYTES and result["checksum_ok"]
    events = [json.loads(x) for x in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [e["action"] for e in events] == ["down"]
    assert len(events[0]["interfaces"]) == 2
    if policy == "spray":
        assert result["retired"] >= 1  # the stalled subflows were retired, not waited for
    if policy == "recompute":
        assert result["recomputes"] >= 1
        log = (tmp_path / "controller.log").read_text()
        assert "recomputed" in log


def test_static_routing_reports_the_failure_clearly_without_hanging(
    tmp_path: Path, state_dir: Path
) -> None:
    t0 = time.monotonic()
    result, _lab, carried = _cut_during_pull("static", tmp_path, state_dir)
    assert carried > 100_000
    assert not result["ok"]
    assert "timed out" in result["error"] and str(KV_BYTES) in result["error"]
    assert result["seconds"] < PULL_TIMEOUT_S + 2
    assert time.monotonic() - t0 < 90


def test_nothing_of_the_failure_labs_remains(state_dir: Path) -> None:
    # Runs after the tests above (file order): every lab was stopped, links and all.
    bridges = subprocess.run(
        ["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not {s.name for s in FABRIC.switches} & set(bridges)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "a0-eth" not in links and "zcl-mgmt" not in links
    assert not list(state_dir.glob("lab-*.json"))
