"""The port-type levers of `bench/datapath_levers.py` (issue 34, item 1): AF_XDP and DPDK.

A lever is named `<base>[+<extra>][@<mtu>]`:
- base `system` (every bridge in the system ovs-vswitchd) or `instN` (N private instances);
- extra `hash` (select groups hash fields), `afxdp` or `afxdp-nonpmd` (after bring-up every
  switch port becomes an AF_XDP port on its veth in generic XDP mode, polled by a PMD thread or
  by the main thread), or `dpdk` (`instN` only: each private daemon is replaced by Debian's DPDK
  build on the same database, every switch port a DPDK `net_af_packet` port on the veth, polled
  by one PMD thread);
- `@mtu` the lab's MTU (default 9000: the lab's). Open vSwitch's AF_XDP ports carry frames of
  one 4 KiB umem chunk, so `afxdp*` needs an MTU of at most `AFXDP_MAX_MTU`.

`qdisc_sent` reads how many packets each switch port's root qdisc sent, so the bench can say
whether a port type's transmit still passes through the veth's qdisc: the lab's HTB shaping,
its queue limits and the lossless agent's queue readings all live there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from zcube_lab.emulator.lab import ovs

if TYPE_CHECKING:
    from zcube_lab.emulator.lab.network import Lab

PORT_TYPES = ("system", "afxdp", "afxdp-nonpmd", "dpdk")
EXTRAS = ("hash", *PORT_TYPES[1:])
DEFAULT_MTU = 9000
# Any MTU attaches without an error, but a frame longer than one 4 KiB umem chunk less its
# headroom is lost without a count (measured: `ping -s 3500` passes an AF_XDP port, -s 4000 not)
AFXDP_MAX_MTU = 3498
PMD_CORE = 1  # the core the PMD thread is pinned to (pmd-cpu-mask), of this machine's 2
# not under /tmp: DPDK refuses to load drivers from a folder below a world-writable one
DPDK_ROOT = Path(os.environ.get("ZCUBE_DPDK_ROOT", "/opt/zcl-dpdk"))
DPDK_VSWITCHD = DPDK_ROOT / "usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk"
DPDK_LIBS = DPDK_ROOT / "usr/lib/x86_64-linux-gnu"
DPDK_PMDS = DPDK_LIBS / "dpdk/pmds-23.0"
HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
DPDK_HUGEPAGES = 600  # 1.2 GiB: the 1 GiB the DPDK build asks for, and slack
_QDISC = re.compile(r"^qdisc \S+ \S+ dev (\S+) root\b.*?\n\s*Sent (\d+) bytes (\d+) pkt", re.M)


@dataclass(frozen=True)
class Lever:
    """One lever: private instances, hashed select groups, the switch ports' type, the MTU."""

    name: str
    instances: int
    hash: bool
    port_type: str
    mtu: int

    @property
    def pmd(self) -> bool:
        """True when a PMD thread polls the ports (it spins one core whatever the load)."""
        return self.port_type in ("afxdp", "dpdk")


def parse_lever(name: str) -> Lever:
    """`system`, `inst8+hash`, `inst1+afxdp-nonpmd@3000`, ... -> a Lever (raises ValueError;
    pure)."""
    body, _, mtu_text = name.partition("@")
    base, _, extra = body.partition("+")
    usage = f"unknown lever {name!r}: system or instN, optionally +{'|+'.join(EXTRAS)}, @mtu"
    if extra and extra not in EXTRAS:
        raise ValueError(usage)
    if base == "system":
        instances = 0
    elif base.startswith("inst") and base[4:].isdigit() and int(base[4:]) > 0:
        instances = int(base[4:])
    else:
        raise ValueError(usage)
    if mtu_text and not (mtu_text.isdigit() and 1280 <= int(mtu_text) <= 9000):
        raise ValueError(f"{name!r}: the MTU after @ is 1280 to 9000")
    mtu = int(mtu_text) if mtu_text else DEFAULT_MTU
    port_type = extra if extra in PORT_TYPES else "system"
    if port_type.startswith("afxdp") and mtu > AFXDP_MAX_MTU:
        raise ValueError(f"{name!r}: AF_XDP ports take an MTU of at most {AFXDP_MAX_MTU}")
    if port_type != "system" and not instances:
        # a PMD's core mask and the DPDK build stay in private daemons, gone with the lab
        raise ValueError(f"{name!r}: port types are levers of private instances (instN+...)")
    return Lever(name, instances, extra == "hash", port_type, mtu)


def parse_qdisc_sent(text: str) -> dict[str, int]:
    """`tc -s qdisc show` -> packets each device's root qdisc sent (pure)."""
    return {m.group(1): int(m.group(3)) for m in _QDISC.finditer(text)}


def parse_ofports(text: str) -> dict[str, int]:
    """`ovs-vsctl --format=json --columns=name,ofport list Interface` -> {name: ofport}
    (pure; interfaces without an OpenFlow port are left out)."""
    data = json.loads(text)
    return {name: port for name, port in data["data"] if isinstance(port, int) and port > 0}


def retype_argv(ofports: Mapping[str, int], lever: Lever) -> list[str]:
    """The ovs-vsctl arguments (after `ovs-vsctl`) that turn `ofports`' interfaces into
    `lever`'s port type, each keeping its OpenFlow port number, which the controller's rules
    name (pure)."""
    argv: list[str] = []
    for k, (name, port) in enumerate(sorted(ofports.items())):
        cells = [f"ofport_request={port}"]
        if lever.port_type.startswith("afxdp"):
            cells += [f"type={lever.port_type}", "options:xdp-mode=generic"]
        elif lever.port_type == "dpdk":
            # a whole frame in one af_packet slot; qdisc_bypass=0 keeps the veth's qdisc
            devargs = f"net_af_packet{k},iface={name},framesz=16384,blocksz=16384,qdisc_bypass=0"
            cells += ["type=dpdk", f"options:dpdk-devargs={devargs}", f"mtu_request={lever.mtu}"]
        argv += ["--", "set", "Interface", name, *cells]
    return argv


def qdisc_share(sent_before: int, sent_after: int, tx_before: int, tx_after: int) -> float | None:
    """The share of the switch ports' transmitted packets that went through their root qdisc
    (pure; None when nothing was sent)."""
    tx = tx_after - tx_before
    return round((sent_after - sent_before) / tx, 3) if tx > 0 else None


# --- adapters: ovs-vsctl, tc, the DPDK daemon -------------------------------------------------


def _run(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 60) -> str:
    done = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}...: {done.stderr.strip()[:400]}")
    return done.stdout


def switch_qdisc_sent(interfaces: Sequence[str]) -> int:
    """Packets the root qdiscs of `interfaces` (root namespace) have sent, summed."""
    sent = parse_qdisc_sent(_run(["tc", "-s", "qdisc", "show"]))
    return sum(sent.get(name, 0) for name in interfaces)


def wait_ports(vsctl: Sequence[str], names: Collection[str], port_type: str) -> None:
    """Block until every interface of `names` has `port_type` and no error (30 s at most)."""
    deadline = time.monotonic() + 30
    while True:
        out = _run([*vsctl, "--format=json", "--columns=name,type,error", "list", "Interface"])
        rows = [r for r in json.loads(out)["data"] if r[0] in names]
        bad = [r for r in rows if r[1] != port_type or r[2] != ["set", []]]
        if not bad and len(rows) == len(names):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(bad)} ports not {port_type}: {bad[:2]}")
        time.sleep(0.5)


def retype_ports(vsctl: Sequence[str], interfaces: Collection[str], lever: Lever) -> None:
    """Turn `interfaces` (those of one running daemon, addressed by `vsctl`) into `lever`'s
    port type in one transaction, and wait until each is up without an error."""
    ofports = ofports_of(vsctl, interfaces)
    if lever.pmd:
        mask = f"other_config:pmd-cpu-mask={1 << PMD_CORE:#x}"
        _run([*vsctl, "set", "Open_vSwitch", ".", mask])
    _run([*vsctl, "--timeout=120", *retype_argv(ofports, lever)], timeout=150)
    wait_ports(vsctl, set(ofports), lever.port_type)


def ofports_of(vsctl: Sequence[str], interfaces: Collection[str]) -> dict[str, int]:
    """The OpenFlow port numbers of `interfaces` in one daemon's database."""
    text = _run([*vsctl, "--format=json", "--columns=name,ofport", "list", "Interface"])
    return {k: v for k, v in parse_ofports(text).items() if k in interfaces}


def dpdk_available() -> str | None:
    """None when the DPDK build is unpacked under DPDK_ROOT, else why not."""
    if not DPDK_VSWITCHD.exists():
        return (
            f"no DPDK build at {DPDK_VSWITCHD} (unpack Debian's openvswitch-switch-dpdk and its "
            "librte-* libraries there: apt-get download, dpkg-deb -x)"
        )
    return None


def dpdk_config(socket_mem_mb: int = 1024) -> dict[str, str]:
    """The other_config keys a private database needs before the DPDK build starts on it: DPDK
    on, its memory (hugepages: `--no-huge` implies `--legacy-mem`, which Open vSwitch's own
    `--in-memory` refuses), its drivers' folder, the PMD's core."""
    return {
        "dpdk-init": "true",
        "dpdk-socket-mem": str(socket_mem_mb),
        "dpdk-socket-limit": str(socket_mem_mb),
        "dpdk-extra": f"--no-pci -d {DPDK_PMDS}",
        "pmd-cpu-mask": f"{1 << PMD_CORE:#x}",
    }


@contextlib.contextmanager
def hugepages(pages: int) -> Iterator[None]:
    """At least `pages` 2 MiB hugepages reserved while the block runs (the DPDK build's
    memory); the machine's previous count is put back after."""
    before = int(HUGEPAGES.read_text())
    if before < pages:
        HUGEPAGES.write_text(f"{pages}\n")
    try:
        yield
    finally:
        if before < pages:
            HUGEPAGES.write_text(f"{before}\n")


def swap_to_dpdk(inst: ovs.Instance, interfaces: Collection[str], lever: Lever) -> None:
    """Replace a private instance's ovs-vswitchd by the DPDK build on the same database, with
    every one of `interfaces` a `net_af_packet` port on its veth (same OpenFlow port)."""
    reason = dpdk_available()
    if reason:
        raise RuntimeError(reason)
    vsctl = ovs.vsctl_argv(inst)
    ofports = ofports_of(vsctl, interfaces)
    ovs.kill_vswitchd(inst)
    for key, value in dpdk_config().items():
        _run([*vsctl, "--no-wait", "set", "Open_vSwitch", ".", f"other_config:{key}={value}"])
    _run([*vsctl, "--no-wait", *retype_argv(ofports, lever)])
    env = {"LD_LIBRARY_PATH": str(DPDK_LIBS)}
    try:
        ovs.start_vswitchd(inst, timeout_s=60, binary=str(DPDK_VSWITCHD), env=env)
    except Exception:
        # the lab's teardown deletes its bridges through a running daemon: give it one back
        ovs.start_vswitchd(inst)
        raise
    wait_ports(vsctl, set(ofports), "dpdk")


def apply_port_type(lab: Lab, lever: Lever) -> None:
    """Give an up lab's switch ports `lever`'s type (AF_XDP, or DPDK by swapping each private
    daemon for the DPDK build), then shape them again (a port re-added by Open vSwitch loses
    its root qdisc, see `Lab.start_vswitchd`) and wait for the controller's rules."""
    if lever.port_type == "system":
        return
    by_switch: dict[str, list[str]] = {}
    for intf in lab.fabric.switch_interfaces():
        by_switch.setdefault(intf.rsplit("-eth", 1)[0], []).append(intf)
    for inst in lab.ovs_instances:
        mine = {i for s, got in lab.switch_instance.items() if got == inst for i in by_switch[s]}
        if lever.port_type == "dpdk":
            swap_to_dpdk(inst, mine, lever)
        else:
            retype_ports(ovs.vsctl_argv(inst), mine, lever)
    lab._configure_switch_ports()  # the lab's own step: shaping and offloads of every port
    lab.wait_for_routes()
