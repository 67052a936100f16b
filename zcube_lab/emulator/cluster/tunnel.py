"""What a tunnel between two lab machines carries by itself, and whether a plan fits in it.

`measure_tunnel(a, b)` builds one VXLAN device on each machine, between their wire addresses,
each in a throwaway network namespace (`zcl-tun-<pid>`: nothing of a running lab is touched),
with the lab's MTU and no shaping; then it pings across (round-trip time) and runs iperf3 for a
few seconds each way. That is the tunnel's own capacity: encapsulation, the wire and both
kernels, with no emulated rate in the way. A cluster lab refuses a plan whose cut links between
two machines add up to more than that capacity in either direction (`check_plan`): its emulated
links could not all reach their rates at once, so the lab would measure the tunnel, not the
fabric. Needs root on both machines.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.clusterplan import VXLAN_PORT
from zcube_lab.core.fabric.split import Split
from zcube_lab.emulator.cluster.remote import Machine, check_on, run_on
from zcube_lab.emulator.lab.system import LabError

PROBE_VNI = 990000  # far from the lab's link VNIs (clusterplan.VNI_BASE + link index)
PROBE_NET = "192.168.251"  # the probe's two addresses, .1 (first machine) and .2
IPERF_PORT = 5299
DEFAULT_HEADROOM = 1.0  # the plan may use the whole measured capacity, no more


@dataclass(frozen=True)
class TunnelMeasure:
    """A tunnel between machines `a` and `b` (indices): capacity each way, round-trip time."""

    a: int
    b: int
    mtu: int
    mbps_ab: float
    mbps_ba: float
    rtt_ms: float

    @property
    def capacity_mbps(self) -> float:
        """The smaller direction: what a plan may rely on both ways."""
        return min(self.mbps_ab, self.mbps_ba)

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "capacity_mbps": self.capacity_mbps}


def _namespace() -> str:
    return f"zcl-tun-{os.getpid()}"


def _setup_argv(me: Machine, peer: Machine, address: str, mtu: int, vni: int) -> list[str]:
    ns = _namespace()
    dev = f"ztun{vni % 10000}"
    script = "; ".join(
        [
            "set -e",
            f"ip netns add {ns}",
            f"ip link add {dev} type vxlan id {vni} local {me.address} remote {peer.address} "
            f"dstport {VXLAN_PORT} ttl 64",
            f"ip link set {dev} netns {ns}",
            f"ip -n {ns} link set lo up",
            f"ip -n {ns} link set {dev} mtu {mtu} up",
            f"ip -n {ns} addr add {address}/30 dev {dev}",
        ]
    )
    return ["sh", "-c", script]


def _teardown(machine: Machine) -> None:
    ns = _namespace()
    run_on(machine, ["sh", "-c", f"ip netns pids {ns} | xargs -r kill -9; ip netns del {ns}"])


def _iperf(client: Machine, server: Machine, server_ip: str, seconds: float) -> float:
    ns = _namespace()
    check_on(
        server,
        ["ip", "netns", "exec", ns, "iperf3", "-s", "-1", "-D", "-p", str(IPERF_PORT)],
        "starting iperf3",
    )
    out = ""
    for _ in range(30):
        argv = ["ip", "netns", "exec", ns, "iperf3", "-c", server_ip, "-p", str(IPERF_PORT)]
        code, out = run_on(client, [*argv, "-J", "-t", f"{seconds:g}"], timeout=seconds + 30)
        if code == 0:
            break
        time.sleep(0.2)
    start = out.find("{")
    if start < 0:
        raise LabError(f"iperf3 across the tunnel printed no JSON: {out[:300]}")
    result = json.loads(out[start:])
    if "error" in result:
        raise LabError(f"iperf3 across the tunnel: {result['error']}")
    return result["end"]["sum_received"]["bits_per_second"] / 1e6


def parse_rtt_ms(ping_output: str) -> float:
    """The average round-trip time from ping's summary line (`rtt min/avg/max/mdev = ...`)."""
    match = re.search(r"= [\d.]+/([\d.]+)/", ping_output)
    if not match:
        raise LabError(f"ping printed no round-trip summary: {ping_output[-300:]}")
    return float(match.group(1))


def measure_tunnel(a: Machine, b: Machine, mtu: int = 9000, seconds: float = 2.0) -> TunnelMeasure:
    """Build a throwaway unshaped tunnel between `a` and `b`, measure it, remove it."""
    vni = PROBE_VNI + a.index * 100 + b.index
    ip_a, ip_b = f"{PROBE_NET}.1", f"{PROBE_NET}.2"
    try:
        check_on(a, _setup_argv(a, b, ip_a, mtu, vni), "building the probe tunnel")
        check_on(b, _setup_argv(b, a, ip_b, mtu, vni), "building the probe tunnel")
        size = str(mtu - 28)  # a full-size frame, which must not be fragmented (-M do)
        ping = check_on(
            a,
            [
                "ip",
                "netns",
                "exec",
                _namespace(),
                "ping",
                "-c",
                "20",
                "-i",
                "0.05",
                "-W",
                "1",
                "-s",
                size,
                "-M",
                "do",
                ip_b,
            ],
            "pinging across the probe tunnel",
        )
        rtt = parse_rtt_ms(ping)
        ab = _iperf(a, b, ip_b, seconds)
        ba = _iperf(b, a, ip_a, seconds)
    finally:
        _teardown(a)
        _teardown(b)
    return TunnelMeasure(a.index, b.index, mtu, round(ab, 1), round(ba, 1), round(rtt, 3))


def plan_demand(split: Split) -> dict[tuple[int, int], float]:
    """Emulated Mb/s of the cut links between each machine pair: what the tunnel must carry
    in each direction when every cut link is full."""
    return {pair: sum(c.mbps for c in links) for pair, links in split.pairs().items()}


def check_plan(
    split: Split,
    measured: dict[tuple[int, int], TunnelMeasure],
    headroom: float = DEFAULT_HEADROOM,
) -> None:
    """Refuse (ConfigError) a split whose cut links between two machines need more than the
    tunnel between them carries."""
    for pair, need in plan_demand(split).items():
        m = measured.get(pair)
        if m is None:
            raise LabError(f"no tunnel measurement between machines {pair[0]} and {pair[1]}")
        if need > m.capacity_mbps * headroom:
            raise ConfigError(
                "machines",
                f"{split.machines} machines ({len(split.pairs()[pair])} links cut between "
                f"machines {pair[0]} and {pair[1]}, {need:.0f} Mb/s)",
                f"a plan within the measured tunnel capacity {m.capacity_mbps:.0f} Mb/s: "
                "fewer GPUs, a lower --nic-mbps, or fewer machines",
            )
