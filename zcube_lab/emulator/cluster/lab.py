"""A lab spread over several machines on Mininet's cluster edition.

`ClusterLab(fabric, machines, options)` is a `Lab` whose nodes Mininet's `MininetCluster` starts
on the machine `zcube_lab.core.fabric.split` chose for them (`RemoteHost` and `RemoteOVSSwitch`
shells over ssh), whose links each machine creates with one root script (`clusterplan`: veth pairs
inside a machine, VXLAN tunnels between machines, shaped like any other link), and whose
switches on every machine connect to the one controller on machine 0's wire address. Everything
the lab checks (Open vSwitch answering, rules installed, leftovers of crashed runs) is checked on
every machine, and each machine keeps a state file of what the run made there, so a teardown, or
the next run after a crash, removes it there too.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from zcube_lab.core.fabric.clusterplan import (
    machine_link_setup,
    machine_port_setup,
    root_interfaces,
    tunnel_mtu,
)
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.split import Split, split_fabric
from zcube_lab.emulator.cluster.remote import Machine, argv_on, check_on, python_on, run_on, ship
from zcube_lab.emulator.cluster.tunnel import TunnelMeasure, check_plan, measure_tunnel, plan_demand
from zcube_lab.emulator.lab import links, ovsbridges
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.state import LabState, write_state
from zcube_lab.emulator.lab.system import LabError

# The wire between machines must carry the lab's frames plus the VXLAN header.
DEFAULT_WIRE_MTU = 9100


def _remote_state_code(state_dir: str, action: str, state: LabState | None = None) -> str:
    """Python run on a remote machine: write, sweep, or sweep stale state files there."""
    payload = state.to_json() if state is not None else ""
    return (
        "import json, os\n"
        "from pathlib import Path\n"
        "from zcube_lab.emulator.lab import state as s\n"
        f"d = Path({state_dir!r})\n"
        f"action = {action!r}\n"
        f"payload = {payload!r}\n"
        "out = []\n"
        "if action == 'write':\n"
        "    st = s.LabState.from_json(payload)\n"
        "    s.write_state(s.state_path(d, st.owner), st)\n"
        "elif action == 'sweep':\n"
        "    st = s.LabState.from_json(payload)\n"
        "    p = s.state_path(d, st.owner)\n"
        "    old = s.read_state(p)\n"
        "    out = s.sweep(old or st, grace=0.0)\n"
        "    p.unlink(missing_ok=True)\n"
        "    import shutil\n"
        "    shutil.rmtree(st.run_dir, ignore_errors=True)  # the copy of the run's scripts\n"
        "elif action == 'kill':\n"
        "    # every process in the network namespace of a recorded host shell: what the lab\n"
        "    # started in the hosts there (ssh gives them no hangup)\n"
        "    st = s.LabState.from_json(payload)\n"
        "    nets = set()\n"
        "    for pid in st.pids:\n"
        "        try:\n"
        "            nets.add(os.readlink(f'/proc/{pid}/ns/net'))\n"
        "        except OSError:\n"
        "            pass\n"
        "    for d in os.listdir('/proc'):\n"
        "        try:\n"
        "            if d.isdigit() and int(d) not in st.pids and "
        "os.readlink(f'/proc/{d}/ns/net') in nets:\n"
        "                os.kill(int(d), 9)\n"
        "                out.append(d)\n"
        "        except OSError:\n"
        "            pass\n"
        "elif action == 'stale':\n"
        "    out = s.remove_stale_state(d)\n"
        "print(json.dumps(out))\n"
    )


class ClusterLab(Lab):
    """A fabric realized on several machines (machine 0 is this one)."""

    def __init__(
        self,
        fabric: Fabric,
        machines: Sequence[Machine],
        options: LabOptions | None = None,
        progress: Callable[[str], None] | None = None,
        wire_mtu: int = DEFAULT_WIRE_MTU,
        measure_tunnels: bool = True,
    ) -> None:
        options = options or LabOptions()
        tunnel_mtu(options.mtu, wire_mtu)
        if options.lossless:  # its agent watches and pauses this machine's ports only
            raise LabError("the lossless mode runs on one machine, not a cluster lab")
        if len(machines) < 2 or not machines[0].local:
            raise LabError("a cluster lab needs this machine first and at least one other")
        if options.ovs_instances:
            # Its switches are Mininet's remote switches, set up over ssh on each machine's
            # system Open vSwitch; private instances are a single-machine lever for now.
            raise LabError(
                "a cluster lab runs on each machine's system Open vSwitch (ovs_instances must be 0)"
            )
        options = replace(options, of_host=machines[0].address)
        super().__init__(fabric, options, progress)
        self.machines = list(machines)
        self.split: Split = split_fabric(fabric, len(machines), options.scale)
        self.measure_tunnels = measure_tunnels
        self.tunnels: dict[tuple[int, int], TunnelMeasure] = {}

    # -- where things are --------------------------------------------------------------
    def machine_of(self, node: str) -> Machine:
        """The machine that emulates a host or switch."""
        return self.machines[self.split.machine_of(node)]

    def _remotes(self) -> list[Machine]:
        return self.machines[1:]

    def _server(self, machine: Machine) -> str:
        # The cluster edition calls this machine 'localhost' (no ssh for its nodes).
        return "localhost" if machine.local else machine.address

    # -- hooks of Lab --------------------------------------------------------------------
    def _start(self) -> None:
        for m in self._remotes():
            removed = python_on(m, _remote_state_code(str(self.options.state_dir), "stale"))
            if removed:
                self.progress(f"removed stale state on {m.label}: {', '.join(removed)}")
        if self.measure_tunnels:
            t0 = time.monotonic()
            for a, b in self.split.pairs():
                self.progress(f"measuring the tunnel between machines {a} and {b}")
                found = measure_tunnel(self.machines[a], self.machines[b], self.options.mtu)
                self.tunnels[(a, b)] = found
                need = plan_demand(self.split)[(a, b)]
                self.progress(
                    f"tunnel {a}-{b}: {found.mbps_ab:.0f} / {found.mbps_ba:.0f} Mb/s, "
                    f"rtt {found.rtt_ms:.3f} ms; the plan needs {need:.0f} Mb/s each way"
                )
            check_plan(self.split, self.tunnels)
            self.times.add("tunnels", time.monotonic() - t0)
        super()._start()

    def _prepare_datapath(self) -> None:
        super()._prepare_datapath()
        from zcube_lab.emulator.lab.machineprep import DATAPATH_RECV_BUFFER, DATAPATH_SEND_BUFFER

        code = (
            "import json\n"
            "from zcube_lab.emulator.lab import ovs\n"
            "from zcube_lab.emulator.lab.machineprep import kernel_datapath_available\n"
            "db, vs = ovs.db_status(), ovs.vswitchd_status()\n"
            "ok = db[0] == 0 and vs[0] == 0\n"
            f"send, recv = {DATAPATH_SEND_BUFFER}, {DATAPATH_RECV_BUFFER}\n"
            "changed = ovs.ensure_socket_buffers(send, recv) if ok else []\n"
            "print(json.dumps({'db': db, 'vswitchd': vs, 'kernel': kernel_datapath_available(),"
            " 'changed': changed}))\n"
        )
        for m in self._remotes():
            answer: Any = python_on(m, code)
            for name in ("db", "vswitchd"):
                if answer[name][0] != 0:
                    raise LabError(
                        f"Open vSwitch is not running on {m.label} ({name}: {answer[name][1]}); "
                        "run scripts/setup.sh there"
                    )
            if self.datapath == "kernel" and not answer["kernel"]:
                raise LabError(
                    f"{m.label} has no openvswitch kernel module; use --datapath user everywhere"
                )
            if answer["changed"]:
                self.progress(f"{m.label}: {'; '.join(answer['changed'])}")

    def _switch_base(self) -> type:
        from mininet.examples.cluster import RemoteOVSSwitch
        from mininet.node import OVSSwitch

        machines = {self._server(m): m for m in self.machines}

        class ClusterSwitch(RemoteOVSSwitch):
            @classmethod
            def batchStartup(cls, switches: list, **_kwargs: Any) -> list:
                # One ovs-vsctl transaction per machine, run over a plain ssh command (not the
                # switch's terminal, whose line limit a long transaction exceeds).
                for server in sorted({s.server for s in switches}):
                    group = [s for s in switches if s.server == server]
                    machine = machines[server]

                    def run(cmd: str, shell: bool = True, machine: Machine = machine) -> str:
                        return check_on(machine, ["sh", "-c", cmd], "starting the switches")

                    OVSSwitch.batchStartup(group, run=run)
                return switches

        return ClusterSwitch

    def _node_params(self, node: str) -> dict[str, object]:
        m = self.machine_of(node)
        # One ssh connection per machine, every node's session multiplexed on it (the
        # cluster edition's shared control path): no key exchange per node.
        return {
            "server": self._server(m),
            "serverIP": m.address,
            "user": "root",
            "controlPath": True,
        }

    def _mininet_class(self) -> type:
        from mininet.examples.cluster import MininetCluster

        return MininetCluster

    def _mininet_params(self) -> dict[str, object]:
        from mininet.examples.cluster import RemoteHost
        from mininet.node import Node

        class ClusterHost(RemoteHost):
            def popen(self, *args: Any, **kwargs: Any) -> Any:
                if self.isRemote:
                    # ssh hands the remote shell one string: quote each argument, or a '#', a
                    # space or JSON in an argument is the shell's, not the program's.
                    if len(args) == 1 and isinstance(args[0], list):
                        args = ([shlex.quote(str(a)) for a in args[0]],)
                    # Without -d: mnexec forks and its parent exits when it already leads a
                    # process group (sudo's), and ssh would end with it at once.
                    kwargs.setdefault("mncmd", ["mnexec", "-a", str(self.pid)])
                return super().popen(*args, **kwargs)

            def _popen(self, cmd: Any, sudo: bool = True, tt: bool = True, **params: Any) -> Any:
                if not self.isRemote:
                    # As a one-machine lab's host: the cluster edition's own would make the
                    # process a group leader first, so `mnexec -d` would fork and the process
                    # started would exit at once, leaving its child untracked.
                    return Node._popen(self, cmd, **params)
                return super()._popen(cmd, sudo=sudo, tt=tt, **params)

        return {
            "host": ClusterHost,
            "servers": [self._server(m) for m in self.machines],
            "serverIP": {self._server(m): m.address for m in self.machines},
            "user": "root",
        }

    def _write_state(self, pids: list[int] | None = None) -> None:
        local = self.machines[0]
        here = [p for p in (pids or ()) if not self._remote_pid(p)]
        state = LabState(
            owner=os.getpid(),
            fabric=self.fabric.spec.to_json(),
            bridges=self._bridges(local),
            interfaces=root_interfaces(self.split, 0, self.options.management),
            pids=tuple(here),
            run_dir=str(self.run_dir),
        )
        write_state(self.state_file, state)

    def _remote_pid(self, pid: int) -> bool:
        if self.net is None:
            return False
        return any(
            getattr(n, "isRemote", False) and n.pid == pid
            for n in (*self.net.hosts, *self.net.switches)
        )

    def _bridges(self, machine: Machine) -> tuple[str, ...]:
        return tuple(
            s.name for s in self.fabric.switches if self.split.machine_of(s.name) == machine.index
        )

    def _state(self, machine: Machine) -> LabState:
        pids = []
        if self.net is not None:
            pids = [
                h.pid
                for h in self.net.hosts
                if self.split.machine_of(h.name) == machine.index and h.pid
            ]
        return LabState(
            owner=os.getpid(),
            fabric=self.fabric.spec.to_json(),
            bridges=self._bridges(machine),
            interfaces=root_interfaces(self.split, machine.index, self.options.management),
            pids=tuple(pids),
            run_dir=str(self.run_dir),
        )

    def _pids_and_macs(self) -> tuple[dict[str, int], dict[str, str]]:
        pids = {node.name: node.pid for node in (*self.net.hosts, *self.net.switches)}
        macs = {i.name: i.mac for link in self.net.links for i in (link.intf1, link.intf2)}
        return pids, macs

    def _create_links(self) -> None:
        # Each other machine's state once, as its nodes exist and before its links do (what
        # the run later tracks is on this machine: `track_pid` rewrites only the local file).
        for m in self._remotes():
            python_on(m, _remote_state_code(str(self.options.state_dir), "write", self._state(m)))
        pids, macs = self._pids_and_macs()
        settings = self._link_settings()
        addresses = [m.address for m in self.machines]
        for m in self.machines:
            setup = machine_link_setup(
                self.split, m.index, addresses, pids, macs, settings, str(self.run_dir)
            )
            links.write_setup(setup)
        self._run_everywhere("links", "creating the links")

    def _configure_hosts(self) -> None:
        setups = links.write_host_setups(self.fabric, self._link_settings(), self.run_dir)
        for m in self._remotes():
            ship(m, self.run_dir)
        links.run_host_setups(self.net, setups, self.run_dir)

    def _configure_switch_ports(self) -> None:
        settings = self._link_settings()
        for m in self.machines:
            links.write_setup(machine_port_setup(self.split, m.index, settings, str(self.run_dir)))
        self._run_everywhere("ports", "configuring the switch ports")

    def _run_everywhere(self, name: str, what: str) -> None:
        """Run `<run dir>/<name>-<k>.sh` on every machine k, all at once."""
        for m in self._remotes():
            ship(m, self.run_dir)
        running = {
            m: subprocess.Popen(
                argv_on(m, ["sh", str(self.run_dir / f"{name}-{m.index}.sh")]),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for m in self.machines
        }
        failures = []
        for m, proc in running.items():
            out, _ = proc.communicate(timeout=links.SCRIPT_TIMEOUT_S)
            if proc.returncode != 0:
                failures.append(f"{m.label}: {links.failure_text(out)}")
        if failures:
            raise LabError(f"{what} failed: " + "; ".join(failures))

    def installed_rules(self) -> dict[str, int]:
        """Flow entries each bridge holds now: `Lab`'s count here, the same asked elsewhere."""
        counts = {b: ovsbridges.flow_count(b) for b in self._bridges(self.machines[0])}
        for m in self._remotes():
            code = (
                "import json\n"
                "from zcube_lab.emulator.lab.ovsbridges import flow_count\n"
                f"print(json.dumps({{b: flow_count(b) for b in {list(self._bridges(m))!r}}}))\n"
            )
            counts.update(python_on(m, code))  # type: ignore[arg-type]
        return counts

    def _stop(self) -> None:
        if self.net is not None:  # before the host shells go, while their namespaces are known
            for m in self._remotes():
                try:
                    python_on(
                        m, _remote_state_code(str(self.options.state_dir), "kill", self._state(m))
                    )
                except LabError as exc:
                    self.progress(f"warning: stopping processes on {m.label}: {exc}")
            self._end_remote_shells()
        super()._stop()
        for m in self._remotes():
            try:
                python_on(
                    m, _remote_state_code(str(self.options.state_dir), "sweep", self._state(m))
                )
            except LabError as exc:
                self.progress(f"warning: teardown on {m.label}: {exc}")

    def _end_remote_shells(self) -> None:
        """Kill the local ssh chain (sudo, ssh) of every remote node's shell. Mininet ends a
        shell with SIGHUP, which a process started under nohup ignores and passes on ignored;
        the remote shell then ends when its ssh session closes."""
        assert self.net is not None

        def remote(node: Any) -> bool:
            return bool(getattr(node, "isRemote", False))

        # Mininet would delete these links' interfaces through the shells killed below: the
        # remote state's sweep deletes their root-side ends, and host ends go with the hosts.
        self.net.links = [
            lk for lk in self.net.links if not (remote(lk.intf1.node) or remote(lk.intf2.node))
        ]
        for node in (*self.net.hosts, *self.net.switches):
            shell = getattr(node, "shell", None)
            if getattr(node, "isRemote", False) and shell is not None and shell.poll() is None:
                for pid in process_tree(shell.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    shell.wait(timeout=5)

    def leftovers(self) -> dict[str, dict[str, list[str]]]:
        """What of this fabric still exists on each machine: bridges and root interfaces."""
        out = {}
        for m in self.machines:
            names = set(root_interfaces(self.split, m.index, True))
            _c, links_out = run_on(m, ["ip", "-o", "link", "show"])
            present = {ln.split(":")[1].strip().split("@")[0] for ln in links_out.splitlines()}
            _c, br = run_on(m, ["ovs-vsctl", "list-br"])
            out[m.label] = {
                "bridges": sorted(set(br.split()) & set(self._bridges(m))),
                "interfaces": sorted(present & names),
            }
        return out

    def summary(self) -> dict[str, object]:
        data = super().summary()
        data["machines"] = [
            {
                "machine": m.index,
                "address": m.address,
                "hosts": len(self.split.per_machine[m.index].hosts),
                "switches": len(self.split.per_machine[m.index].switches),
            }
            for m in self.machines
        ]
        data["cut_links"] = len(self.split.cut)
        data["cut_mbps"] = round(self.split.cut_mbps, 1)
        data["tunnels"] = [t.to_dict() for t in self.tunnels.values()]
        return data


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc), parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in task.read_text().split()]
    return out
