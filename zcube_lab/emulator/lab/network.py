"""The Mininet realization of a fabric description, with an explicit lifecycle.

`Lab(fabric, options).start()` removes stale state of an earlier crashed run, refuses a fabric
whose address ranges collide with this machine's routes, addresses or resolvers
(`zcube_lab.emulator.lab.hostnet`), starts our os-ken controller, builds the hosts and switches in
Mininet on Open vSwitch (userspace datapath when the kernel has no openvswitch module),
configures every link and host with one script per namespace (`zcube_lab.emulator.lab.links`: veth
pairs, addresses, routes, static ARP, shaping, offloads), starts every bridge in one `ovs-vsctl`
transaction, and waits until every switch holds the rules the controller computed. With
`lossless`, every shaped port's leaf is a pausable FIFO and the lossless agent
(`zcube_lab.emulator.lab.lossless`, its own process, tracked in the state file like the controller)
starts once the ports are shaped and stops first. `stop()` undoes it in reverse, and the state
file (`zcube_lab.emulator.lab.state`) lets the next run remove what a killed run left behind.
Besides Mininet's own bridge setup, Open vSwitch is reached only through
`zcube_lab.emulator.lab.ovs` (its daemons) and `zcube_lab.emulator.lab.ovsbridges`. Needs root.

Beside it, one concern each: `options` (`LabOptions`, validated up front), `machineprep` (the
machine-wide settings checked or made at the start), `nodes` (the Mininet bridge and controller
classes), `controlplane` (the controller's command line and the waits for it) and `losslessproc`
(the lossless agent as a process of the lab).

Names: bridges are the fabric's switch names; root-side interfaces `<switch>-eth<port>`; each
bridge carries `external_ids:zcube-lab=<pid>` (`state.OWNER_KEY`) so leftovers can be found.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from zcube_lab.adapters.procs import kill_group, signals_ignored
from zcube_lab.core.fabric.addressing import fabric_networks
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.hostplan import MGMT_BRIDGE, management_address, management_peer
from zcube_lab.core.fabric.linkplan import LinkSettings
from zcube_lab.emulator.lab import classcounterproc, links, losslessproc, ovs, ovsbridges
from zcube_lab.emulator.lab.controlplane import (
    controller_argv,
    wait_listening,
    wait_resynced,
    wait_routed,
)
from zcube_lab.emulator.lab.hostnet import check_host_network
from zcube_lab.emulator.lab.lossless import AgentReport, read_report
from zcube_lab.emulator.lab.machineprep import ensure_congestion_control, prepare_datapath
from zcube_lab.emulator.lab.nodes import controller_class, switch_class, topology, unreachable
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.state import (
    LabState,
    read_state,
    remove_stale_state,
    state_path,
    sweep,
    write_state,
)
from zcube_lab.emulator.lab.system import LabError

# A switch tries its controller again at most this often (Open vSwitch's own default backoff
# grows to 8 s; Mininet's OVSSwitch already asks for 1 s, said here so it does not depend on it).
RECONNECT_MS = 1000


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
        self.class_ports: list[str] = []  # switch ports counting EP and KV bytes apart
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
            # EP and KV bytes counted apart on every switch port (docs/LOSSLESS.md)
            self.class_ports = classcounterproc.install(self.fabric, self.run_dir)
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
        if self.class_ports:
            self.class_ports = []
            classcounterproc.remove_sink()
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
        """Open vSwitch answers, the datapath is chosen, its packet sockets are big enough
        (`machineprep.prepare_datapath`), private instances run, and TCP congestion control
        is allowed."""
        o = self.options
        self.datapath = prepare_datapath(o.datapath, o.ovs_instances, self.progress)
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
        groups = ovs.instance_groups(names, self.options.ovs_instances)
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
        from zcube_lab.emulator.lab import procfaults

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
        from zcube_lab.emulator.lab import procfaults

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
        return losslessproc.report_path(self.run_dir)

    def _start_lossless(self) -> None:
        """Start the agent on the shaped ports and wait until it watches them."""
        assert self.net is not None
        pids = {h.name: self.net.get(h.name).pid for h in self.fabric.hosts}
        self.lossless_agent, log = losslessproc.start_agent(
            self.fabric, self.options, pids, self.run_dir, self.progress
        )
        self.track_pid(self.lossless_agent.pid)
        losslessproc.wait_watching(self.lossless_agent, self.lossless_report_path, log)

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
            losslessproc.refresh_report(self.lossless_agent, path)
        return read_report(path)

    def lossless_force(self, pauses: list[tuple[str, float, float]]) -> bool:
        """Hold switch ports paused over windows on the monotonic clock (`[port, start, end]`;
        empty: none), whatever their queues (bmwg §8.4's stuck receiver); True once the agent
        holds them (`losslessproc.force_pauses`), False without an agent."""
        if not self.lossless_alive():
            return False
        assert self.lossless_agent is not None
        return losslessproc.force_pauses(self.lossless_agent, self.lossless_report_path, pauses)

    def class_counters(self) -> dict[str, dict[str, int]]:
        """Per switch port, per traffic class (`ep`, `kv`), the bytes into its queue so far
        (empty without `--lossless`)."""
        return classcounterproc.read(self.class_ports)

    def _stop_lossless(self) -> None:
        """SIGTERM the agent (it resumes every port and writes its report), then its group."""
        if self.lossless_agent is None:
            return
        agent, self.lossless_agent = self.lossless_agent, None
        losslessproc.stop_agent(agent)

    def stop_controller(self) -> None:
        """Kill the controller (a controller fault): installed rules stay in the switches
        (fail mode secure), nothing reacts until `restart_controller`."""
        if self.controller is not None:
            kill_group(self.controller.pid, grace=0.0)
            with contextlib.suppress(Exception):
                self.controller.wait(timeout=2)
            self.controller = None

    def restart_controller(self) -> int:
        """Start the controller again with the same options (its log appended to) and wait
        until every switch has reconnected (within `RECONNECT_MS`) and had its rules installed
        again. Returns its pid."""
        if self.controller is not None and self.controller.poll() is None:
            return self.controller.pid
        offset = self.controller_log.stat().st_size if self.controller_log.exists() else 0
        self._start_controller(append=True)
        assert self.controller is not None
        state = read_state(self.state_file)
        self._write_state([*(state.pids if state else []), self.controller.pid])
        names = [s.name for s in self.fabric.switches]
        missing = wait_resynced(self.controller, names, 15.0, self.controller_log, offset)
        if missing:
            self.progress(f"switches not back on the restarted controller: {', '.join(missing)}")
        return self.controller.pid

    def _start_controller(self, append: bool = False) -> None:
        o = self.options
        argv = controller_argv(self.fabric, o)
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
        wait_listening(self.controller, 30, self.controller_log, offset)

    def _link_settings(self) -> LinkSettings:
        o = self.options
        return LinkSettings(
            mtu=o.mtu,
            shapes=o.port_shapes(self.fabric),
            userspace=self.datapath == "user",
            management=o.management,
            congestion_control=o.congestion_control,
            clock=o.scale.clock,
        )

    def _build(self) -> None:
        from mininet.log import setLogLevel
        from mininet.node import OVSSwitch

        # Real failures surface in our scripts' exit codes and the route and reachability
        # checks; Mininet's own log would only add noise.
        setLogLevel("critical")
        o = self.options
        mtu = o.mtu
        owner = os.getpid()
        where = self.switch_instance

        LabSwitch = switch_class(self._switch_base(), mtu, owner, where)
        topo = topology(self.fabric, self._node_params)

        def switch(name: str, **params: object) -> OVSSwitch:
            # batch: every bridge in one ovs-vsctl transaction (OVSSwitch.batchStartup), as
            # Mininet does for a switch class; this factory hides the class from it.
            return LabSwitch(
                name,
                datapath=self.datapath,
                failMode="secure",
                protocols="OpenFlow13",
                reconnectms=RECONNECT_MS,
                batch=True,
                **params,
            )

        OurController = controller_class()

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

    # Hooks a cluster lab (zcube_lab.emulator.cluster.lab) overrides: one machine here.
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
        from zcube_lab.controller.rules import compute_rules

        rules = compute_rules(self.fabric, self.options.policy, self.options.ev_rules)
        return {s.name: len(rules[s.dpid].flows) for s in self.fabric.switches}

    def installed_rules(self) -> dict[str, int]:
        """Flow entries each bridge holds now (from ovs-ofctl)."""
        return {s.name: ovsbridges.flow_count(s.name) for s in self.fabric.switches}

    def wait_for_routes(self) -> None:
        """Block until every bridge holds exactly the rules the controller computed."""
        self.rules_installed = wait_routed(
            self.expected_rules(), self.installed_rules, self.options.route_timeout,
            self.controller_log,
        )  # fmt: skip

    # -- checks --------------------------------------------------------------------------
    def check_reachability(self, timeout_ms: int = 500, retries: int = 2) -> dict[str, list[str]]:
        """Ping every address of every other host from every host, in parallel across hosts.
        Returns host -> the addresses it could not reach (empty lists when all is well)."""
        t0 = time.monotonic()
        failures = unreachable(self.net, self.fabric, timeout_ms, retries)
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
            **self.options.summary(self.fabric),
            "phase_seconds": dict(self.times.phases),
            "controller_log": str(self.controller_log),
            "metrics": f"http://127.0.0.1:{self.options.metrics_port}/metrics",
        }
