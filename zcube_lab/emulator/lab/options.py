"""How to realize a fabric: `LabOptions`, every choice a lab takes, validated up front.

Frozen and checked when made (`ConfigError` names the field, the value and what is allowed):
the datapath, the MTU, private Open vSwitch instances, lossless pauses, TCP congestion control,
and the NIC rate against what this machine's datapath can carry
(`zcube_lab.emulator.lab.datapath_ceiling`). `LabOptions.port_shapes` gives the rate and queue limit
of every shaped interface, and `LabOptions.summary` what a user reads of them after bring-up. Names:
the allowed values of a field are a tuple in capitals (`DATAPATHS`), its bound `MAX_<FIELD>`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.hostplan import DEFAULT_CONGESTION_CONTROL, check_congestion_control
from zcube_lab.core.fabric.linkplan import PortShape, port_shapes
from zcube_lab.core.fabric.queues import QueueModel, queue_summary
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.lab.datapath_ceiling import check_nic_rate, datapath_ceiling
from zcube_lab.emulator.lab.lossless import POLL_S as LOSSLESS_POLL_S
from zcube_lab.emulator.lab.state import STATE_DIR

DATAPATHS = ("auto", "user", "kernel")
MAX_OVS_INSTANCES = 64
# The lossless agent's real-time priority (SCHED_FIFO) in every lab, live runs and replays: it
# stands for a switch's PFC logic, which no CPU load delays. At normal priority a live incast's
# reaction p99 was 6.0-9.0 wall ms, at this one 1.8-2.2 (docs/LOSSLESS.md, issue 48). It sleeps
# between readings (at least as long as each took: `lossless.rest_s`), so it cannot hold a core.
LOSSLESS_PRIORITY = 10


@dataclass(frozen=True)
class LabOptions:
    """How to realize a fabric."""

    scale: Scale = field(default_factory=Scale)
    mtu: int = 9000
    datapath: str = "auto"
    policy: str = "ecmp"  # routing policy (zcube_lab.controller.rules.ROUTING_POLICIES)
    recompute: bool = False  # the controller reroutes when a port goes down or comes back
    ev_rules: bool = False  # the controller also installs the EV rules (the mrc KV transport)
    of_port: int = 6653
    of_host: str = "127.0.0.1"  # where the controller listens (a cluster: machine 0's wire address)
    metrics_port: int = 9101
    poll_interval: float = 1.0
    idle_poll_interval: float = 0.0  # > poll_interval: the controller's poll while idle (0: off)
    route_timeout: float = 60.0
    management: bool = False  # a front-end network (198.19.0.0/17) from the root namespace
    state_dir: Path = STATE_DIR
    log_dir: Path | None = None  # where controller.log goes (default: a fresh temporary folder)
    queue: QueueModel = field(default_factory=QueueModel)  # leaf queue of every shaped port
    shaped: bool = True  # False: no rate limit and no queue limit (bench/datapath.py)
    congestion_control: str = DEFAULT_CONGESTION_CONTROL  # every host namespace's TCP
    # 0: every bridge in the system Open vSwitch (one ovs-vswitchd main thread serves every
    # port); N: N private ovs-vswitchd instances of the lab's own, the switches dealt among them
    # in contiguous runs of the fabric's order (`ovs.instance_groups`; userspace datapath only).
    ovs_instances: int = 0
    lossless: bool = False  # PFC-like pauses instead of drops (zcube_lab.emulator.lab.lossless)
    lossless_poll_s: float = LOSSLESS_POLL_S  # the agent's poll interval
    # 0: the agent runs as any process; N: at real-time priority N (SCHED_FIFO), as a switch's
    # PFC logic is hardware that no CPU load delays; where the kernel refuses, it runs as any
    # process and its log says so (losslessproc.realtime)
    lossless_priority: int = LOSSLESS_PRIORITY
    # the agent also counts each switch port's ingress backlog (ovs-vswitchd's receive socket)
    # and pauses the link's far end past XOFF, as PFC's ingress accounting; off in live runs,
    # on in replays (replay.driver.LOSSLESS_INGRESS), measured both ways: docs/LOSSLESS.md
    lossless_ingress: bool = False
    # every shaped port's HTB burst in bytes; None: Mininet's 15k. At a fine time scale 15 KB is
    # a real half megabyte arriving faster than line rate: a replay keeps it to two frames.
    htb_burst_bytes: int | None = None

    def __post_init__(self) -> None:
        check_congestion_control(self.congestion_control)
        if self.lossless and not self.shaped:
            raise ConfigError("lossless", self.lossless, "off on an unshaped lab")
        if self.htb_burst_bytes is not None and not self.mtu <= self.htb_burst_bytes <= 1 << 20:
            raise ConfigError("htb burst", self.htb_burst_bytes, f"{self.mtu} (the MTU) to 1 MiB")
        if not 0 <= self.lossless_priority <= 99:
            raise ConfigError("lossless priority", self.lossless_priority, "0 (off) to 99")
        if not 0.0002 <= self.lossless_poll_s <= 0.1:
            raise ConfigError("lossless poll", self.lossless_poll_s, "0.2 ms to 100 ms")
        if self.datapath not in DATAPATHS:
            raise ConfigError("datapath", self.datapath, f"one of {list(DATAPATHS)}")
        if not 1280 <= self.mtu <= 9000:
            raise ConfigError("mtu", self.mtu, "between 1280 and 9000")
        if not 0 <= self.ovs_instances <= MAX_OVS_INSTANCES:
            raise ConfigError(
                "ovs_instances", self.ovs_instances, f"between 0 and {MAX_OVS_INSTANCES}"
            )
        if self.ovs_instances and self.datapath == "kernel":
            raise ConfigError(
                "ovs_instances", self.ovs_instances, "0 with the kernel datapath (userspace only)"
            )
        check_nic_rate(self.scale.shaped_nic_mbps, datapath_ceiling(self.mtu))

    def port_shapes(self, fabric: Fabric) -> dict[str, PortShape]:
        """Rate and queue limit of every shaped interface (none when unshaped)."""
        if not self.shaped:
            return {}
        return port_shapes(
            fabric,
            self.scale,
            self.mtu,
            self.queue,
            lossless=self.lossless,
            burst_bytes=self.htb_burst_bytes,
        )

    def summary(self, fabric: Fabric) -> dict[str, object]:
        """The options a user wants to see after bring-up, with `fabric`'s scale and queues."""
        return {
            "bandwidth_scale": self.scale.bandwidth_scale(fabric),
            "nic_mbps": self.scale.nic_mbps,
            "mtu": self.mtu,
            "congestion_control": self.congestion_control,
            "lossless": self.lossless,
            **(self.lossless_agent() if self.lossless else {}),
            "queue_model": self.queue.describe() if self.shaped else "unshaped",
            "queues": queue_summary(fabric, self.scale, self.mtu, self.queue)
            if self.shaped
            else [],
        }

    def lossless_agent(self) -> dict[str, object]:
        """How the lossless agent runs (a run's config records it, as a replay's result does):
        its real-time priority (0: none), poll interval and whether it counts ingress backlogs."""
        return {
            "lossless_priority": self.lossless_priority,
            "lossless_poll_s": self.lossless_poll_s,
            "lossless_ingress": self.lossless_ingress,
        }
