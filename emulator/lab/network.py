"""The Mininet realization of a fabric description, with an explicit lifecycle.

`Lab(fabric, options).start()` removes stale state of an earlier crashed run, refuses a fabric
whose address ranges collide with this machine's routes, addresses or resolvers
(`emulator.lab.hostnet`), starts our os-ken controller, builds the hosts and switches in
Mininet on Open vSwitch (userspace datapath when the kernel has no openvswitch module),
configures every link and host with one script per namespace (`emulator.lab.links`: veth pairs,
addresses, routes, static ARP, shaping, offloads), starts every bridge in one `ovs-vsctl`
transaction, and waits until every switch holds the rules the controller computed. With
`lossless`, every shaped port's leaf is a pausable FIFO and the lossless agent
(`emulator.lab.lossless`, its own process, tracked in the state file like the controller)
starts once the ports are shaped and stops first. `stop()` undoes it in reverse, and the state
file (`emulator.lab.state`) lets the next run remove what a killed run left behind. Besides
Mininet's own bridge setup, Open vSwitch is reached only through `emulator.lab.ovs`. Needs
root.

Names: bridges are the fabric's switch names; root-side interfaces `<switch>-eth<port>`; each
bridge carries `external_ids:zcube-lab=<pid>` (`state.OWNER_KEY`) so leftovers can be found.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from emulator.lab import links, ovs
from emulator.lab.datapath_ceiling import check_nic_rate, datapath_ceiling
from emulator.lab.hostnet import check_host_network
from emulator.lab.lossless import POLL_S as LOSSLESS_POLL_S
from emulator.lab.lossless import REPORT_FILE as LOSSLESS_REPORT
from emulator.lab.lossless import AgentReport, agent_plan, read_report
from emulator.lab.state import (
    OWNER_KEY,
    STATE_DIR,
    LabState,
    read_state,
    remove_stale_state,
    state_path,
    sweep,
    write_state,
)
from emulator.lab.system import LabError, attempt
from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.addressing import fabric_networks
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.hostplan import (
    CONGESTION_CONTROLS,
    DEFAULT_CONGESTION_CONTROL,
    MGMT_BRIDGE,
    check_congestion_control,
    management_address,
    management_peer,
)
from zcube_lab.core.fabric.linkplan import LinkSettings, PortShape, port_shapes
from zcube_lab.core.fabric.queues import QueueModel, queue_summary
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.procs import kill_group, signals_ignored

# The userspace datapath's shared send socket must hold every packet queued in every shaped
# switch port at once (see emulator.lab.ovs); 64 MiB is about 3,800 jumbo frames at their kernel
# size (~17 KiB each). Each port's receive socket gets 8 MiB, ~480 frames of slack while
# ovs-vswitchd is descheduled on a busy 2-core machine.
DATAPATH_SEND_BUFFER = 64 * 2**20
DATAPATH_RECV_BUFFER = 8 * 2**20
DATAPATHS = ("auto", "user", "kernel")
MAX_OVS_INSTANCES = 64


def instance_groups(switches: list[str], instances: int) -> list[list[str]]:
    """`switches` dealt to `instances` daemons in contiguous runs of their order, as even as
    can be (ZCube n=4 and 2 instances: the A group and the B group); never an empty run.
    Pure."""
    n = max(1, min(instances, len(switches)))
    base, extra = divmod(len(switches), n)
    groups, at = [], 0
    for k in range(n):
        size = base + (1 if k < extra else 0)
        groups.append(switches[at : at + size])
        at += size
    return groups


@dataclass(frozen=True)
class LabOptions:
    """How to realize a fabric."""

    scale: Scale = field(default_factory=Scale)
    mtu: int = 9000
    datapath: str = "auto"
    policy: str = "ecmp"  # routing policy (controller.rules.ROUTING_POLICIES)
    recompute: bool = False  # the controller reroutes when a port goes down or comes back
    ev_rules: bool = False  # the controller also installs the EV rules (the mrc KV transport)
    of_port: int = 6653
    of_host: str = "127.0.0.1"  # where the controller listens (a cluster: machine 0's wire address)
    metrics_port: int = 9101
    poll_interval: float = 1.0
    route_timeout: float = 60.0
    management: bool = False  # a front-end network (198.19.0.0/17) from the root namespace
    state_dir: Path = STATE_DIR
    log_dir: Path | None = None  # where controller.log goes (default: a fresh temporary folder)
    queue: QueueModel = field(default_factory=QueueModel)  # leaf queue of every shaped port
    shaped: bool = True  # False: no rate limit and no queue limit (bench/datapath.py)
    congestion_control: str = DEFAULT_CONGESTION_CONTROL  # every host namespace's TCP
    # 0: every bridge in the system Open vSwitch (one ovs-vswitchd main thread serves every
    # port); N: N private ovs-vswitchd instances of the lab's own, the switches dealt among them
    # in contiguous runs of the fabric's order (`instance_groups`; userspace datapath only).
    ovs_instances: int = 0
    lossless: bool = False  # PFC-like pauses instead of drops (emulator.lab.lossless)
    lossless_poll_s: float = LOSSLESS_POLL_S  # the agent's poll interval

    def __post_init__(self) -> None:
        check_congestion_control(self.congestion_control)
        if self.lossless and not self.shaped:
            raise ConfigError("lossless", self.lossless, "off on an unshaped lab")
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
        return port_shapes(fabric, self.scale, self.mtu, self.queue, lossless=self.lossless)


def _by_instance(switches: object) -> list[tuple[ovs.Instance | None, list[object]]]:
    """Mininet switches grouped by the Open vSwitch instance holding them, in first-seen order."""
    groups: dict[ovs.Instance | None, list[object]] = {}
    for sw in switches:  # type: ignore[attr-defined]
        groups.setdefault(getattr(sw, "instance", None), []).append(sw)
    return list(groups.items())


def _per_instance(
    base: Callable[..., object], switches: list[object], kwargs: dict[str, object]
) -> list[object]:
    """Mininet's batch start-up or shutdown (`base`, the class method of OVSSwitch) once per
    Open vSwitch instance, its `ovs-vsctl` addressed to that instance; the system instance's
    switches go exactly as before (the base class's runner)."""
    for inst, group in _by_instance(switches):
        extra = dict(kwargs)
        if inst is not None:
            extra["run"] = _vsctl_run(inst, kwargs.get("run"))  # type: ignore[arg-type]
        base(group, **extra)
    return switches


def _vsctl_run(
    inst: ovs.Instance | None, run: Callable[..., object] | None
) -> Callable[..., object]:
    """Mininet's command runner (`errRun` by default) with `ovs-vsctl` commands addressed to
    `inst`'s database (None: unchanged, the system instance)."""
    from mininet.util import errRun

    base = run or errRun
    if inst is None:
        return base
    prefix = " ".join(ovs.vsctl_argv(inst))

    def wrapped(cmd: str, *args: object, **kwargs: object) -> object:
        if isinstance(cmd, str) and (cmd == ovs.VSCTL or cmd.startswith(f"{ovs.VSCTL} ")):
            cmd = prefix + cmd[len(ovs.VSCTL) :]
        return base(cmd, *args, **kwargs)

    return wrapped


CC_SYSCTL = Path("/proc/sys/net/ipv4")


def ensure_congestion_control(name: str, sysctl_dir: Path = CC_SYSCTL) -> list[str]:
    """Make TCP congestion control `name` settable as a host namespace's default, or raise a
    LabError naming what this kernel has. Loads `tcp_<name>` when the kernel lacks it, and adds
    it to `tcp_allowed_congestion_control` (a machine-wide list; the kernel lets a namespace
    other than the first default only to an algorithm on it: EPERM otherwise). Returns what
    it changed."""
    changed: list[str] = []
    available_file = sysctl_dir / "tcp_available_congestion_control"
    available = available_file.read_text().split()
    if name not in available:
        code, output = attempt(["modprobe", "-q", f"tcp_{name}"], timeout=20)
        available = available_file.read_text().split()
        if name not in available:
            raise LabError(
                f"TCP congestion control {name!r} is not in this kernel (available: "
                f"{', '.join(available)}; modprobe tcp_{name}: {output or code}); choose one of "
                f"{', '.join(c for c in CONGESTION_CONTROLS if c in available)}"
            )
        changed.append(f"loaded tcp_{name}")
    allowed_file = sysctl_dir / "tcp_allowed_congestion_control"
    allowed = allowed_file.read_text().split()
    if name not in allowed:
        allowed_file.write_text(" ".join([*allowed, name]) + "\n")
        changed.append(f"added {name} to net.ipv4.tcp_allowed_congestion_control")
    return changed


def pick_datapath(requested: str, ovs_instances: int, kernel_available: Callable[[], bool]) -> str:
    """The datapath a lab uses: `user` or `kernel` as asked; `auto` takes the kernel's when its
    module loads, except with private ovs-vswitchd instances, which are userspace only."""
    if requested != "auto":
        return requested
    if ovs_instances:
        return "user"
    return "kernel" if kernel_available() else "user"


def kernel_datapath_available() -> bool:
    """True when the openvswitch kernel module is loaded or loadable."""
    if Path("/sys/module/openvswitch").exists():
        return True
    code, _output = attempt(["modprobe", "-q", "openvswitch"], timeout=20)
    return code == 0 and Path("/sys/module/openvswitch").exists()


def _wait_listening(
    proc: subprocess.Popen[bytes], timeout: float, log: Path, offset: int = 0
) -> None:
    """Wait for the controller's "listening" line (connecting to probe would look like a
    switch to it), after byte `offset` of its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_bytes()[offset:].decode(errors="replace") if log.exists() else ""
        if "controller listening" in text:
            return
        if proc.poll() is not None:
            raise LabError(f"controller exited with {proc.returncode}:\n{text[-2000:]}")
        time.sleep(0.05)
    raise LabError(f"controller did not start listening within {timeout:.0f}s; see {log}")


@dataclass
class PhaseTimes:
    """Seconds spent in each bring-up phase, in order."""

    phases: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = round(seconds, 2)


class Lab:
    """A fabric realized in Mininet and routed by our controller. Use as a context manager or
    call `start()` and `stop()` (always, in `finally`)."""

    def __init__(
        self,
        fabric: Fabric,
        options: LabOptions | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.fabric = fabric
        self.options = options or LabOptions()
        self.progress = progress or (lambda _msg: None)
        self.net = None  # mininet.net.Mininet once built
        self.controller: subprocess.Popen[bytes] | None = None
        self.lossless_agent: subprocess.Popen[bytes] | None = None
        self.times = PhaseTimes()
        self.datapath = ""
        self.send_error_offset = 0  # ovs-vswitchd's log size at start (ovs.send_errors_since)
        self.rules_installed: dict[str, int] = {}
        self.ovs_instances: list[ovs.Instance] = []  # private Open vSwitch daemons (if any)
        self.switch_instance: dict[str, ovs.Instance] = {}
        self.state_file = state_path(self.options.state_dir, os.getpid())
        if self.options.log_dir is not None:
            self.options.log_dir.mkdir(parents=True, exist_ok=True)
            self.run_dir = self.options.log_dir
        else:
            self.run_dir = Path(tempfile.mkdtemp(prefix="zcube-lab-"))
        self.controller_log = self.run_dir / "controller.log"

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> Lab:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Lab:
        """Bring the lab up; on any failure everything started so far is torn down."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        if os.geteuid() != 0:
            raise LabError("the lab needs root (Mininet creates namespaces and links)")
        t0 = time.monotonic()
        removed = remove_stale_state(self.options.state_dir)
        if removed:
            self.progress(f"removed stale state: {', '.join(removed)}")
        # After the sweep, so a killed run's management bridge is gone, not taken for the host's.
        check_host_network(fabric_networks(self.fabric, self.options.management))
        self._write_state()
        self._prepare_datapath()
        self.times.add("cleanup", time.monotonic() - t0)

        t0 = time.monotonic()
        self._start_controller()
        self.times.add("controller", time.monotonic() - t0)

        t0 = time.monotonic()
        self.progress(
            f"building {len(self.fabric.hosts)} hosts, {len(self.fabric.switches)} switches, "
            f"{len(self.fabric.links)} links"
        )
        self._build()
        self.times.add("build", time.monotonic() - t0)

        t0 = time.monotonic()
        self.progress("configuring hosts and starting switches")
        # Hosts first: both ends of every link are up when a switch first reports its ports.
        self._configure_hosts()
        self.net.start()
        # After the switches, where Mininet reapplied its: Open vSwitch may reset the qdisc of a
        # port it adds (its QoS code deletes a qdisc it takes for its own).
        self._configure_switch_ports()
        self.times.add("start", time.monotonic() - t0)

        if self.options.lossless:
            t0 = time.monotonic()
            self._start_lossless()
            self.times.add("lossless", time.monotonic() - t0)

        t0 = time.monotonic()
        self.progress("waiting for the controller's rules")
        self.wait_for_routes()
        self.times.add("routed", time.monotonic() - t0)

    def stop(self) -> None:
        """Tear everything down, in reverse order; safe to call twice. A second Ctrl-C while
        tearing down is ignored: an interrupted teardown is what leaves namespaces behind."""
        with signals_ignored():
            self._stop()

    def _stop(self) -> None:
        self._stop_lossless()
        if self.net is not None:
            net, self.net = self.net, None
            try:
                net.stop()
            except Exception as exc:  # keep tearing down: leftovers are swept below
                print(f"warning: mininet stop: {exc}", file=sys.stderr)
            # Mininet's RemoteController.stop() does nothing, so the controller node's shell
            # would live until this process exits (one more per lab in a long process).
            for c in net.controllers:
                with contextlib.suppress(Exception):
                    c.terminate()
        if self.controller is not None:
            kill_group(self.controller.pid)
            with contextlib.suppress(Exception):
                self.controller.wait(timeout=1)
            self.controller = None
        # Whatever Mininet did not remove (e.g. after a failed build) goes too; what still
        # runs is killed at once (grace 0): a clean teardown has stopped it already.
        state = read_state(self.state_file)
        if state is not None:
            sweep(state, grace=0.0)
        self._stop_ovs_instances()
        self.state_file.unlink(missing_ok=True)

    # -- phases ------------------------------------------------------------------------
    def _write_state(self, pids: list[int] | None = None) -> None:
        root_intfs = list(self.fabric.switch_interfaces())
        if self.options.management:
            root_intfs += [MGMT_BRIDGE] + [management_peer(h) for h in self.fabric.hosts]
        state = LabState(
            owner=os.getpid(),
            fabric=self.fabric.spec.to_json(),
            bridges=tuple(s.name for s in self.fabric.switches),
            interfaces=tuple(root_intfs),
            pids=tuple(pids or ()),
            run_dir=str(self.run_dir),
        )
        write_state(self.state_file, state)

    def _prepare_datapath(self) -> None:
        """Open vSwitch answers, the datapath is chosen, and the userspace datapath's packet
        sockets are big enough that no packet is lost between a switch and its ports
        (`ovs.ensure_socket_buffers` says why)."""
        for name, (code, output) in (
            ("ovsdb-server", ovs.db_status()),
            ("ovs-vswitchd", ovs.vswitchd_status()),
        ):
            if code != 0:
                raise LabError(
                    f"Open vSwitch is not running ({name}: {output.strip() or 'no answer'}); "
                    "start it with scripts/setup.sh or /usr/share/openvswitch/scripts/ovs-ctl start"
                )
        o = self.options
        self.datapath = pick_datapath(o.datapath, o.ovs_instances, kernel_datapath_available)
        if self.datapath == "user":
            changed = ovs.ensure_socket_buffers(DATAPATH_SEND_BUFFER, DATAPATH_RECV_BUFFER)
            if changed:
                self.progress(f"datapath socket buffers: {'; '.join(changed)}")
        self.send_error_offset = ovs.log_size()
        if o.ovs_instances:
            self._start_ovs_instances()
        changed = ensure_congestion_control(self.options.congestion_control)
        if changed:
            self.progress(f"congestion control: {'; '.join(changed)}")

    def _start_ovs_instances(self) -> None:
        """Start the private ovs-vswitchd instances and deal the switches among them."""
        if self.datapath != "user":
            raise LabError(
                f"ovs_instances={self.options.ovs_instances} needs the userspace datapath "
                f"(this lab uses {self.datapath!r})"
            )
        names = [s.name for s in self.fabric.switches]
        groups = instance_groups(names, self.options.ovs_instances)
        self.progress(f"starting {len(groups)} ovs-vswitchd instances of the lab's own")
        for k, group in enumerate(groups):
            inst = ovs.start_instance(ovs.INSTANCE_ROOT / f"{os.getpid()}-{k}")
            self.ovs_instances.append(inst)
            self.switch_instance.update(dict.fromkeys(group, inst))

    def _stop_ovs_instances(self) -> None:
        for inst in self.ovs_instances:
            ovs.stop_instance(inst)
        self.ovs_instances = []
        self.switch_instance = {}

    def kill_vswitchd(self) -> int:
        """SIGKILL the ovs-vswitchd daemon(s) holding this lab's bridges (a vswitchd fault):
        the system one, or every private instance; returns the first pid."""
        from emulator.lab import procfaults

        if not self.ovs_instances:
            return procfaults.kill_vswitchd()
        pids = [ovs.kill_vswitchd(inst) for inst in self.ovs_instances]
        return pids[0]

    def start_vswitchd(self) -> int:
        """Start again what `kill_vswitchd` killed; returns the first new pid. The bridges come
        back from their ovsdb without flows (the controller reinstalls them when the switches
        reconnect) and without their ports' shaping: a fresh ovs-vswitchd deletes the root
        qdisc it finds on every port it adds (Open vSwitch's QoS code, for a port with no QoS
        record), which left the restarted fabric unshaped. So once each daemon has applied its
        database (every port added), the switch ports are shaped again, as at bring-up."""
        from emulator.lab import procfaults

        if not self.ovs_instances:
            pid = procfaults.start_vswitchd()
            ovs.wait_reconfigured(self.fabric.switches[0].name)
        else:
            for inst in self.ovs_instances:
                ovs.start_vswitchd(inst)
            for inst in self.ovs_instances:
                bridge = next(s for s, i in self.switch_instance.items() if i == inst)
                ovs.wait_reconfigured(bridge, inst)
            pid = self.ovs_instances[0].pids()[ovs.VSWITCHD]
        self._configure_switch_ports()
        return pid

    # -- the lossless agent ----------------------------------------------------------------
    @property
    def lossless_report_path(self) -> Path:
        return self.run_dir / LOSSLESS_REPORT

    def _start_lossless(self) -> None:
        """Start the agent on the shaped ports and wait until it watches them."""
        assert self.net is not None
        o = self.options
        pids = {h.name: self.net.get(h.name).pid for h in self.fabric.hosts}
        plan = agent_plan(self.fabric, o.port_shapes(self.fabric), pids, o.mtu, o.lossless_poll_s)
        plan_file = self.run_dir / "lossless-plan.json"
        plan_file.write_text(plan.to_json())
        self.lossless_report_path.unlink(missing_ok=True)
        log = self.run_dir / "lossless.log"
        self.progress(f"starting the lossless agent ({len(plan.thresholds)} ports, log {log})")
        with log.open("wb") as out:
            self.lossless_agent = subprocess.Popen(
                [sys.executable, "-m", "emulator.lab.lossless", str(plan_file),
                 str(self.lossless_report_path)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.track_pid(self.lossless_agent.pid)
        deadline = time.monotonic() + 20
        while not self.lossless_report_path.exists():
            if self.lossless_agent.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace")[-2000:]
                raise LabError(f"the lossless agent did not start (see {log}):\n{text}")
            time.sleep(0.05)

    def lossless_alive(self) -> bool:
        """True while the lossless agent runs (False without one)."""
        return self.lossless_agent is not None and self.lossless_agent.poll() is None

    def lossless_report(self, fresh: bool = False) -> AgentReport | None:
        """What the lossless agent last wrote (None without one); `fresh`: ask a running agent
        to write it now (SIGUSR1) and wait up to a second for it."""
        if not self.options.lossless:
            return None
        path = self.lossless_report_path
        if fresh and self.lossless_alive():
            assert self.lossless_agent is not None
            before = path.stat().st_mtime_ns if path.exists() else 0
            self.lossless_agent.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                if path.exists() and path.stat().st_mtime_ns != before:
                    break
                time.sleep(0.01)
        return read_report(path)

    def _stop_lossless(self) -> None:
        """SIGTERM the agent (it resumes every port and writes its report), then its group."""
        if self.lossless_agent is None:
            return
        agent, self.lossless_agent = self.lossless_agent, None
        with contextlib.suppress(ProcessLookupError):
            agent.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            agent.wait(timeout=3)
        kill_group(agent.pid, grace=1.0)
        with contextlib.suppress(Exception):
            agent.wait(timeout=1)

    def stop_controller(self) -> None:
        """Kill the controller (a controller fault): installed rules stay in the switches
        (fail mode secure), nothing reacts until `restart_controller`."""
        if self.controller is not None:
            kill_group(self.controller.pid, grace=0.0)
            with contextlib.suppress(Exception):
                self.controller.wait(timeout=2)
            self.controller = None

    def restart_controller(self) -> int:
        """Start the controller again with the same options (its log appended to); the
        switches reconnect by themselves. Returns its pid."""
        if self.controller is not None and self.controller.poll() is None:
            return self.controller.pid
        self._start_controller(append=True)
        assert self.controller is not None
        state = read_state(self.state_file)
        self._write_state([*(state.pids if state else []), self.controller.pid])
        return self.controller.pid

    def _start_controller(self, append: bool = False) -> None:
        o = self.options
        argv = [
            sys.executable,
            "-m",
            "controller",
            "--fabric-spec",
            self.fabric.spec.to_json(),
            "--policy",
            o.policy,
            "--listen-host",
            o.of_host,
            "--of-port",
            str(o.of_port),
            "--metrics-port",
            str(o.metrics_port),
            "--poll-interval",
            str(o.poll_interval),
        ]
        if o.recompute:
            argv.append("--recompute")
        if o.ev_rules:
            argv.append("--ev-rules")
        self.progress(
            f"starting controller (policy {o.policy}{', recompute' if o.recompute else ''}, "
            f"log {self.controller_log})"
        )
        offset = self.controller_log.stat().st_size if append else 0
        with self.controller_log.open("ab" if append else "wb") as log:
            self.controller = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        if not append:
            self._write_state([self.controller.pid])
        _wait_listening(self.controller, 30, self.controller_log, offset)

    def _link_settings(self) -> LinkSettings:
        o = self.options
        return LinkSettings(
            mtu=o.mtu,
            shapes=o.port_shapes(self.fabric),
            userspace=self.datapath == "user",
            management=o.management,
            congestion_control=o.congestion_control,
            clock=Clock(o.scale.dilation),
        )

    def _build(self) -> None:
        from mininet.log import setLogLevel
        from mininet.node import OVSSwitch, RemoteController
        from mininet.topo import Topo

        # Real failures surface in our scripts' exit codes and the route and reachability
        # checks; Mininet's own log would only add noise.
        setLogLevel("critical")
        o = self.options
        mtu = o.mtu
        owner = os.getpid()
        where = self.switch_instance

        class LabSwitch(self._switch_base()):  # type: ignore[misc]
            """OVS bridge with the lab's MTU on every port and our owner mark; in a private
            Open vSwitch instance when the lab runs some (its shell's ovs-* tools and the
            batched ovs-vsctl transactions address that instance)."""

            def __init__(self, name, **params):
                super().__init__(name, **params)
                self.instance = where.get(name)
                if self.instance is not None:
                    self.cmd(f"export OVS_RUNDIR={self.instance.rundir}")

            def intfOpts(self, intf):
                return super().intfOpts(intf) + f" mtu_request={mtu}"

            def bridgeOpts(self):
                opts = super().bridgeOpts() + f" external_ids:{OWNER_KEY}={owner}"
                if self.instance is not None:
                    opts = opts.replace(
                        " datapath_type=netdev", f" datapath_type={ovs.PRIVATE_DATAPATH_TYPE}"
                    )
                return opts

            @classmethod
            def batchStartup(cls, switches, **kwargs):
                return _per_instance(super().batchStartup, switches, kwargs)

            @classmethod
            def batchShutdown(cls, switches, **kwargs):
                return _per_instance(super().batchShutdown, switches, kwargs)

        topo = Topo()
        for h in self.fabric.hosts:
            topo.addHost(h.name, ip=None, **self._node_params(h.name))
        for s in self.fabric.switches:
            topo.addSwitch(s.name, dpid=f"{s.dpid:016x}", **self._node_params(s.name))
        for lk in self.fabric.links:
            # Rates, queues, MTU and offloads come from linkplan, not Mininet (emulator.lab.links).
            topo.addLink(lk.node1, lk.node2, port1=lk.port1, port2=lk.port2)

        def switch(name: str, **params: object) -> OVSSwitch:
            # batch: every bridge in one ovs-vsctl transaction (OVSSwitch.batchStartup), as
            # Mininet does for a switch class; this factory hides the class from it.
            return LabSwitch(
                name,
                datapath=self.datapath,
                failMode="secure",
                protocols="OpenFlow13",
                batch=True,
                **params,
            )

        class OurController(RemoteController):
            def checkListening(self) -> None:
                # Mininet's probe pipes `telnet` to our port and decodes what it reads as UTF-8:
                # our controller answers with a binary OpenFlow HELLO whose random xid can be
                # invalid UTF-8, failing bring-up at random. We already waited for the
                # controller's listening line, so there is nothing to check.
                return None

        self.net = self._mininet_class()(
            topo=topo,
            switch=switch,
            link=links.link_class(),
            controller=OurController("c0", ip=o.of_host, port=o.of_port),
            build=False,
            autoSetMacs=False,
            autoStaticArp=False,
            **self._mininet_params(),
        )
        self.net.build()
        pids = [self.controller.pid] if self.controller else []
        pids += [h.pid for h in self.net.hosts]
        self._write_state(pids)
        self._create_links()

    # Hooks a cluster lab (emulator.cluster.lab) overrides: one machine here.
    def _switch_base(self) -> type:
        from mininet.node import OVSSwitch

        return OVSSwitch

    def _node_params(self, _node: str) -> dict[str, object]:
        return {}

    def _mininet_class(self) -> type:
        from mininet.net import Mininet

        return Mininet

    def _mininet_params(self) -> dict[str, object]:
        return {}

    def _create_links(self) -> None:
        links.create_links(self.net, self.fabric, self._link_settings(), self.run_dir)

    def _configure_hosts(self) -> None:
        links.configure_hosts(self.net, self.fabric, self._link_settings(), self.run_dir)

    def _configure_switch_ports(self) -> None:
        links.configure_switch_ports(self.fabric, self._link_settings(), self.run_dir)

    def track_pid(self, pid: int) -> None:
        """Record a process started in the lab (e.g. a server in a host) so a later run can
        remove it if this one dies without tearing down."""
        state = read_state(self.state_file)
        if state is not None:
            self._write_state([*state.pids, pid])

    def expected_rules(self) -> dict[str, int]:
        """Flow entries each switch must hold once routed, from the controller's pure rules."""
        from controller.rules import compute_rules

        rules = compute_rules(self.fabric, self.options.policy, self.options.ev_rules)
        return {s.name: len(rules[s.dpid].flows) for s in self.fabric.switches}

    def installed_rules(self) -> dict[str, int]:
        """Flow entries each bridge holds now (from ovs-ofctl)."""
        return {s.name: ovs.flow_count(s.name) for s in self.fabric.switches}

    def wait_for_routes(self) -> None:
        """Block until every bridge holds exactly the rules the controller computed."""
        expected = self.expected_rules()
        deadline = time.monotonic() + self.options.route_timeout
        while True:
            installed = self.installed_rules()
            if installed == expected:
                self.rules_installed = installed
                return
            if time.monotonic() > deadline:
                missing = {
                    k: (installed.get(k), v) for k, v in expected.items() if installed.get(k) != v
                }
                raise LabError(
                    f"routes not installed within {self.options.route_timeout:.0f}s "
                    f"(switch: (installed, expected)) {missing}; see {self.controller_log}"
                )
            time.sleep(0.25)

    # -- checks --------------------------------------------------------------------------
    def check_reachability(self, timeout_ms: int = 500, retries: int = 2) -> dict[str, list[str]]:
        """Ping every address of every other host from every host, in parallel across hosts.
        Returns host -> the addresses it could not reach (empty lists when all is well)."""
        t0 = time.monotonic()
        pending = []
        for h in self.fabric.hosts:
            targets = [i.ip for o in self.fabric.hosts if o.name != h.name for i in o.interfaces]
            node = self.net.get(h.name)
            # -a prints the addresses that answered; the rest are unreachable.
            node.sendCmd("fping", "-a", "-t", str(timeout_ms), "-r", str(retries), *targets)
            pending.append((h.name, node, targets))
        failures: dict[str, list[str]] = {}
        for name, node, targets in pending:
            alive = {line.strip() for line in node.waitOutput().splitlines()}
            failures[name] = [t for t in targets if t not in alive]
        self.times.add("reachable", time.monotonic() - t0)
        return failures

    def management_ip(self, host: str) -> str:
        """A host's management address (API and metrics; needs `management=True`)."""
        if not self.options.management:
            raise LabError("this lab has no management network (LabOptions.management)")
        return management_address(self.fabric.host(host).gid)

    def summary(self) -> dict[str, object]:
        """What a user wants to see after bring-up."""
        return {
            "fabric": self.fabric.kind,
            "datapath": self.datapath,
            "hosts": len(self.fabric.hosts),
            "switches": len(self.fabric.switches),
            "links": len(self.fabric.links),
            "rules_installed": sum(self.rules_installed.values()),
            "bandwidth_scale": self.options.scale.bandwidth_scale(self.fabric),
            "nic_mbps": self.options.scale.nic_mbps,
            "mtu": self.options.mtu,
            "congestion_control": self.options.congestion_control,
            "lossless": self.options.lossless,
            "queue_model": self.options.queue.describe() if self.options.shaped else "unshaped",
            "queues": queue_summary(
                self.fabric, self.options.scale, self.options.mtu, self.options.queue
            )
            if self.options.shaped
            else [],
            "phase_seconds": dict(self.times.phases),
            "controller_log": str(self.controller_log),
            "metrics": f"http://127.0.0.1:{self.options.metrics_port}/metrics",
        }
