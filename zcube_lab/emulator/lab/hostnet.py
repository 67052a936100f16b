"""Does the lab's address plan collide with this machine's own network?

A lab range that overlaps a route, an address or a resolver of the root namespace takes that
traffic over while the lab is up (the management bridge's route wins by longest prefix) and,
left behind by a killed run, keeps it taken: a resolver inside the range stops answering, and
with it every name lookup. So `Lab.start()` (every command that builds a lab) and `doctor` refuse
such a plan, naming both sides.

Two layers: the pure part (`parse_routes`, `parse_addresses`, `parse_resolvers`, `conflicts`,
`leftovers`) takes `ip -j route`, `ip -j addr` and resolv.conf text as data; `read_host_network`
is the thin adapter that reads them. The lab's own devices (the management bridge, its veths and
tunnels), which a killed run may have left, are not the host's: they are set aside as leftovers,
which the next start (`state.remove_stale_state`) removes.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path

from zcube_lab.core.fabric.hostplan import MGMT_BRIDGE
from zcube_lab.emulator.lab.system import LabError, run

# The resolver a program asks, and the upstream ones behind systemd-resolved's stub (127.0.0.53).
RESOLV_CONFS = (Path("/etc/resolv.conf"), Path("/run/systemd/resolve/resolv.conf"))
# Root-namespace devices the lab makes: the management bridge, a veth per host (`zm-<host>`,
# hostplan.management_peer) and a tunnel per other machine (`zmv-<m>-<k>`, clusterplan).
LAB_DEVICE_PREFIXES = ("zm-", "zmv-")
# Routes this short are catch-alls (a default route, or the two /1 halves a VPN installs as
# one): the lab's more specific routes are meant to win over them, so they are no conflict.
CATCH_ALL_PREFIX = 1


def is_lab_device(name: str) -> bool:
    """A root-namespace device the lab creates (left over if a run was killed)."""
    return name == MGMT_BRIDGE or name.startswith(LAB_DEVICE_PREFIXES)


@dataclass(frozen=True)
class HostEntry:
    """One route, address or resolver of the root namespace, as a message shows it."""

    kind: str  # "route", "address" or "resolver"
    network: IPv4Network  # a route's destination, an address's own /32 or a resolver's /32
    text: str  # e.g. "route 10.255.0.0/16 dev zcl-mgmt", "resolver 10.255.255.53"
    device: str = ""


@dataclass(frozen=True)
class Conflict:
    """A lab range and the host's entry inside or around it."""

    lab: str  # the range's label, e.g. "management network"
    network: IPv4Network
    host: HostEntry

    def __str__(self) -> str:
        return f"the lab's {self.lab} {self.network} overlaps this machine's {self.host.text}"


def _ipv4_network(text: str) -> IPv4Network | None:
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
    return net if isinstance(net, IPv4Network) else None


def parse_routes(text: str) -> list[HostEntry]:
    """IPv4 routes from `ip -j route` (destination "default" is 0.0.0.0/0)."""
    entries = []
    for r in json.loads(text or "[]"):
        dst = r.get("dst", "")
        net = _ipv4_network("0.0.0.0/0" if dst == "default" else dst)
        if net is None:
            continue
        dev = r.get("dev", "")
        via = f" via {r['gateway']}" if r.get("gateway") else ""
        entries.append(HostEntry("route", net, f"route {net}{via} dev {dev}".strip(), dev))
    return entries


def parse_addresses(text: str) -> list[HostEntry]:
    """IPv4 addresses from `ip -j addr`, one entry per address (its own /32)."""
    entries = []
    for link in json.loads(text or "[]"):
        dev = link.get("ifname", "")
        for a in link.get("addr_info", []):
            if a.get("family") != "inet":
                continue
            net = _ipv4_network(a.get("local", ""))
            if net is not None:
                shown = f"address {a['local']}/{a.get('prefixlen', 32)} on {dev}"
                entries.append(HostEntry("address", net, shown, dev))
    return entries


def parse_resolvers(text: str, source: str = "resolv.conf") -> list[HostEntry]:
    """IPv4 `nameserver` lines of a resolv.conf."""
    entries = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            net = _ipv4_network(fields[1])
            if net is not None:
                entries.append(HostEntry("resolver", net, f"resolver {fields[1]} ({source})"))
    return entries


def conflicts(lab: Sequence[tuple[str, IPv4Network]], host: Sequence[HostEntry]) -> list[Conflict]:
    """Every (lab range, host entry) pair that overlaps, leaving out the lab's own devices and
    catch-all routes."""
    found = []
    for label, net in lab:
        for entry in host:
            if is_lab_device(entry.device):
                continue
            if entry.kind == "route" and entry.network.prefixlen <= CATCH_ALL_PREFIX:
                continue
            if net.overlaps(entry.network):
                found.append(Conflict(label, net, entry))
    return found


def leftovers(host: Sequence[HostEntry]) -> list[HostEntry]:
    """Entries on the lab's own devices: what a killed run left in the root namespace."""
    return [e for e in host if is_lab_device(e.device)]


def refusal(found: Sequence[Conflict]) -> str:
    """The message that refuses a plan, every conflict named."""
    lines = "\n".join(f"  - {c}" for c in found)
    return (
        f"the lab's addresses collide with this machine's network:\n{lines}\n"
        "the lab's ranges are fixed (zcube_lab.core.fabric.addressing, RFC 2544's 198.18.0.0/15): "
        "move the host's route, address or resolver out of them, or run the lab in a VM"
    )


# ---- the adapter: the only code here that touches the machine ------------------------------


def read_host_network(resolv_confs: Sequence[Path] = RESOLV_CONFS) -> list[HostEntry]:
    """The root namespace's IPv4 routes (main table), addresses and resolvers."""
    entries: list[HostEntry] = []
    entries += parse_routes(run(["ip", "-j", "-4", "route", "show"], timeout=10))
    entries += parse_addresses(run(["ip", "-j", "-4", "addr", "show"], timeout=10))
    for path in resolv_confs:
        with contextlib.suppress(OSError):  # no such file: no resolver to collide with
            entries += parse_resolvers(path.read_text(), path.name)
    return entries


def check_host_network(lab: Sequence[tuple[str, IPv4Network]]) -> None:
    """Refuse (LabError) a plan whose ranges collide with this machine's network."""
    found = conflicts(lab, read_host_network())
    if found:
        raise LabError(refusal(found))
