"""The lab's address plan: every address it gives out, derived from names, in one place.

Everything lies in 198.18.0.0/15, the range RFC 2544 reserves for benchmarking networks, so no
lab address is one that a real network of the machine's (an office's 10/8, a cloud's VPC, a
resolver such as 10.255.255.53) uses; `zcube_lab.emulator.lab.hostnet` still checks, at every start
and in `doctor`, that the machine has no route, address or resolver inside the lab's ranges.

    198.18.0.0/15  the lab
      198.18.0.0/16    fabric: the NIC ports, a /32 each, only inside the hosts' namespaces
      198.19.0.0/17    management network: the bridge `zcl-mgmt` in the root namespace and one
                       veth per GPU host
      198.19.254.0/24  the cluster wire `scripts/peer.sh` makes (198.19.254.1 here, .2 the
                       peer): machines' own addresses, so not a lab range the check refuses

Fabric. A fabric has P address planes (ROFT and Clos: P = 1, or `--planes`; ZCube: 2, port 1
on group A and port 2 on group B), and plane k is the k-th of the 2^b equal parts of
198.18.0.0/16 (b = bits to number P planes: one plane is the whole /16, two are /17s, three or
four /18s, up to eight /19s). Within a plane an address is `row` (third octet, counted from the
plane's first) and `column + 1` (fourth octet):
- ROFT and Clos: row = server, column = rank: plane 0 is `198.18.<server>.<rank+1>`;
- multi-plane ROFT: port k in plane k, same row and column (2 planes: port 1 is
  `198.18.<128+server>.<rank+1>`);
- ZCube: port 1 (on `A[s]`) `198.18.<s>.<r+1>` in 198.18.0.0/17, port 2 (on `B[r]`)
  `198.18.<128+r>.<s+1>` in 198.18.128.0/17: a segment's port-1 addresses and a rail's port-2
  addresses are each one /24, and each group's addresses one /17 (the routes of
  `builders.build_zcube`).
So a plane holds at most `plane_rows(P)` rows (servers, or ZCube's n) of 254 columns.

Management. GPU host `gid` is `198.19.<gid // 250>.<gid % 250 + 1>`/17, machine k's root
namespace (the bridge) `198.19.127.<254 - k>`: machine 0, the one-machine lab, is
198.19.127.254. Pure: no root needed.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Network
from typing import TYPE_CHECKING

from zcube_lab.core.errors import ConfigError

if TYPE_CHECKING:
    from zcube_lab.core.fabric.description import Fabric

LAB_RANGE = IPv4Network("198.18.0.0/15")  # RFC 2544
FABRIC_RANGE = IPv4Network("198.18.0.0/16")
MANAGEMENT_RANGE = IPv4Network("198.19.0.0/17")
WIRE_RANGE = IPv4Network("198.19.254.0/24")
WIRE_HERE = "198.19.254.1"  # scripts/peer.sh: this machine's end of the wire
WIRE_PEER = "198.19.254.2"  # and the peer's
MGMT_PREFIX_LEN = MANAGEMENT_RANGE.prefixlen
MGMT_ROOT_IP = "198.19.127.254"
MGMT_HOSTS_PER_ROW = 250
MGMT_HOST_ROWS = 127  # rows 0..126 hold GPU hosts; row 127 the machines' root namespaces
MAX_COLUMNS = 254  # a fourth octet of 1..254


def plane_bits(planes: int) -> int:
    """How many address bits number `planes` planes (1 plane: 0 bits, 2: 1, 3-4: 2, 5-8: 3)."""
    if not 1 <= planes <= 8:
        raise ConfigError("planes", planes, "between 1 and 8")
    return (planes - 1).bit_length()


def plane_network(plane: int, planes: int) -> IPv4Network:
    """Address plane `plane` of a fabric with `planes` of them (a part of `FABRIC_RANGE`)."""
    bits = plane_bits(planes)
    if not 0 <= plane < planes:
        raise ValueError(f"plane {plane} of {planes}")
    size = FABRIC_RANGE.num_addresses >> bits
    base = int(FABRIC_RANGE.network_address) + plane * size
    return IPv4Network((base, FABRIC_RANGE.prefixlen + bits))


def plane_rows(planes: int) -> int:
    """Rows (/24s: servers, or ZCube's segments and rails) one plane holds."""
    return plane_network(0, planes).num_addresses // 256


def fabric_address(plane: int, planes: int, row: int, column: int) -> str:
    """The address of row `row`, column `column` in plane `plane` (fourth octet column + 1)."""
    if not 0 <= row < plane_rows(planes) or not 0 <= column < MAX_COLUMNS:
        raise ValueError(f"row {row}, column {column} outside plane {plane} of {planes}")
    net = plane_network(plane, planes)
    return str(net.network_address + row * 256 + column + 1)


def host_mac(gid: int, iface: int) -> str:
    """The MAC of GPU host `gid`'s interface `iface`: locally administered, 02:<iface>:<gid>."""
    octets = (0x02, iface & 0xFF, (gid >> 24) & 0xFF, (gid >> 16) & 0xFF, (gid >> 8) & 0xFF, gid)
    return ":".join(f"{o & 0xFF:02x}" for o in octets)


def row_network(plane: int, planes: int, row: int) -> str:
    """The /24 of row `row` in plane `plane` (a ZCube segment's or rail's 1-hop route)."""
    return f"{ipaddress.IPv4Address(fabric_address(plane, planes, row, 0)) - 1}/24"


def check_rows(field: str, value: int, planes: int) -> None:
    """Refuse a size whose rows do not fit one address plane (ConfigError naming `field`)."""
    rows = plane_rows(planes)
    if value > rows:
        what = "one plane" if planes == 1 else f"each of {planes} planes"
        raise ConfigError(
            field,
            value,
            f"at most {rows}: the lab's address plan gives {what} {plane_network(0, planes)} "
            f"({rows} /24s; zcube_lab.core.fabric.addressing)",
        )


def management_address(gid: int) -> str:
    """Management (front-end network) address of GPU host `gid`: API and metrics live here, so
    they never cross the fabric under test."""
    row, column = divmod(gid, MGMT_HOSTS_PER_ROW)
    if not 0 <= row < MGMT_HOST_ROWS:
        raise ConfigError(
            "gpus",
            gid + 1,
            f"at most {MGMT_HOST_ROWS * MGMT_HOSTS_PER_ROW} GPU hosts on the management "
            f"network {MANAGEMENT_RANGE}",
        )
    return str(MANAGEMENT_RANGE.network_address + row * 256 + column + 1)


def mgmt_root_address(machine: int) -> str:
    """The management address of machine `machine`'s root namespace (machine 0: the one-machine
    lab's `MGMT_ROOT_IP`)."""
    if not 0 <= machine < MAX_COLUMNS:
        raise ConfigError("machines", machine + 1, f"at most {MAX_COLUMNS} machines")
    return str(ipaddress.IPv4Address(MGMT_ROOT_IP) - machine)


def lab_networks(planes: int, management: bool) -> list[tuple[str, IPv4Network]]:
    """The ranges a lab of `planes` fabric planes uses, labelled for messages: each plane, and
    the management network when there is one."""
    nets = [
        (f"fabric plane {k}" if planes > 1 else "fabric", plane_network(k, planes))
        for k in range(planes)
    ]
    if management:
        nets.append(("management network", MANAGEMENT_RANGE))
    return nets


def fabric_networks(fabric: Fabric, management: bool) -> list[tuple[str, IPv4Network]]:
    """`lab_networks` of a built fabric: one address plane per NIC port of its hosts."""
    return lab_networks(len(fabric.hosts[0].interfaces), management)


def plan_networks() -> list[tuple[str, IPv4Network]]:
    """Every range any lab may use (what `doctor` checks): the fabric and the management
    network. The cluster wire is left out: it is the machines' own network."""
    return [("fabric", FABRIC_RANGE), ("management network", MANAGEMENT_RANGE)]
