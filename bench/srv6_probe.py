"""Can this machine carry MRC's SRv6 EVs? A small measured probe (issue 36, item 6).

`python -m bench.srv6_probe counts` (no root): the rules each EV format needs on the default
fabrics (`zcube_lab.controller.evformats`). `python -m bench.srv6_probe probe` (root, Open vSwitch
running; take `/tmp/zcube-heavy.lock` first): two namespaces, `zsr6a` and `zsr6b`, joined
through one userspace-datapath bridge `zsr6test`, removed afterwards even on failure. It
measures:
- `kernel_encap`, `kernel_seg6local`: whether the hosts' kernel takes a seg6 encapsulation
  route and a seg6local End route (the error text if not);
- `usid`: UDP datagrams from `zsr6a` to a uSID EV `BLOCK:0201:0102:e001::` (two switch SIDs
  and `zsr6b`'s host SID); the bridge holds one rule per SID, each matching the destination
  prefix `BLOCK:sid::/48`, shifting the uSIDs left 16 bits with a `move` action and either
  resubmitting (SID 0x0201: a second switch stood in by the same bridge) or sending out of
  port 2 (SID 0x0102, rewriting the Ethernet destination to the host's); how many arrive,
  with which destination address, and each rule's packet count;
- `unknown_sid`: the same to a SID no rule holds (table miss: nothing arrives);
- `srh`, `srh_seg6_enabled`: datagrams carrying an SRH written by the sending socket
  (`IPV6_RTHDR`, routing type 4: the segment list without the kernel's seg6 route), once with
  `seg6_enabled` 0 on the receiver and once with 1, and the packet count of a rule matching
  `nw_proto=43` (the routing header) beside that of one matching UDP;
- `ovs`: the Open vSwitch version, whether its interface types include `srv6`, and whether
  `ovs-ofctl` knows any routing-header match field.
Prints one JSON object. The sender and receiver are this module run inside a namespace
(`send`, `receive`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from ipaddress import IPv6Address
from pathlib import Path

from zcube_lab.controller.evformats import ev_rule_counts
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.srv6 import BLOCK_BITS, USID_BITS, container

BRIDGE = "zsr6test"
NAMESPACES = ("zsr6a", "zsr6b")
VETHS = ("zsr6a0", "zsr6b0")  # the bridge's ends; the namespace end is `eth0`
GATEWAY_MAC = "02:00:5e:c0:be:01"  # what zsr6a sends the block to; the last SID rule rewrites it
HOST_SID = {"zsr6a": 0xE000, "zsr6b": 0xE001}
TRANSIT_SID, OUT_SID, UNKNOWN_SID = 0x0201, 0x0102, 0x0301
UDP_PORT = 47000
COUNT = 20
DEFAULT_FABRICS = (
    FabricSpec.of("zcube"),
    FabricSpec.of("roft", planes=2),
    FabricSpec.of("roft"),
    FabricSpec.of("clos"),
)
REPO = Path(__file__).resolve().parents[1]
IPV6_RTHDR = 57  # linux/in6.h (the socket module lacks it)
ROUTING_TYPE_SRH = 4


def srh_option(segments: Sequence[IPv6Address]) -> bytes:
    """An IPV6_RTHDR value: an SRH whose active segment is `segments[0]`, then the rest, the
    final one the address the socket sends to (the kernel writes it into slot 0)."""
    order = [IPv6Address(0), *reversed(segments)]  # slot 0 is the final destination
    n = len(order)
    head = struct.pack("!BBBBBBH", 0, 2 * n, ROUTING_TYPE_SRH, n - 1, n - 1, 0, 0)
    return head + b"".join(a.packed for a in order)


def prefix(sid: int) -> str:
    return f"{container([sid])}/{BLOCK_BITS + USID_BITS}"


def shift_action() -> str:
    """Drop the active uSID: the 80 bits after it move up 16, zeros in (OVS's bit 0 is the
    address's last)."""
    tail = 128 - BLOCK_BITS - USID_BITS
    return f"move:NXM_NX_IPV6_DST[0..{tail - 1}]->NXM_NX_IPV6_DST[{USID_BITS}..{tail + 15}]," + (
        f"load:0->NXM_NX_IPV6_DST[0..{USID_BITS - 1}]"
    )


# -- running things ----------------------------------------------------------------------------
def run(
    argv: Sequence[str], check: bool = True, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, check=check, timeout=timeout, cwd=REPO
    )


def netns(ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["ip", "netns", "exec", ns, *argv], check=check)


def ofctl(*argv: str) -> str:
    return run(["ovs-ofctl", "-O", "OpenFlow13", *argv]).stdout


def teardown() -> None:
    """Remove the bridge, the namespaces and the veths, whatever exists of them."""
    run(["ovs-vsctl", "--if-exists", "del-br", BRIDGE], check=False)
    for ns in NAMESPACES:
        run(["ip", "netns", "del", ns], check=False)
    for veth in VETHS:
        run(["ip", "link", "del", veth], check=False)


@contextlib.contextmanager
def testbed() -> Iterator[dict[str, str]]:
    """The two namespaces and the bridge; yields each namespace's MAC. Torn down on exit."""
    teardown()
    try:
        macs = {}
        run(["ovs-vsctl", "add-br", BRIDGE, "--", "set", "bridge", BRIDGE,
             "datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13"])  # fmt: skip
        for port, (ns, veth) in enumerate(zip(NAMESPACES, VETHS, strict=True), start=1):
            run(["ip", "netns", "add", ns])
            run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            run(["ip", "link", "set", veth, "up"])
            run(["ethtool", "-K", veth, "tx", "off"], check=False)
            run(["ovs-vsctl", "add-port", BRIDGE, veth, "--", "set", "interface", veth,
                 f"ofport_request={port}"])  # fmt: skip
            netns(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0")
            netns(ns, "sysctl", "-qw", "net.ipv6.conf.eth0.accept_dad=0")
            netns(ns, "ethtool", "-K", "eth0", "tx", "off", check=False)
            netns(ns, "ip", "link", "set", "lo", "up")
            netns(ns, "ip", "link", "set", "eth0", "up")
            address = container([HOST_SID[ns]])
            netns(ns, "ip", "-6", "addr", "add", f"{address}/128", "dev", "eth0", "nodad")
            macs[ns] = json.loads(netns(ns, "ip", "-j", "link", "show", "eth0").stdout)[0][
                "address"
            ]
        block = f"{container([TRANSIT_SID]).exploded[:9]}:0:0:0:0:0:0/{BLOCK_BITS}"
        netns("zsr6a", "ip", "-6", "neigh", "add", "fe80::1", "lladdr", GATEWAY_MAC, "dev", "eth0",
              "nud", "permanent")  # fmt: skip
        netns("zsr6a", "ip", "-6", "route", "add", block, "via", "fe80::1", "dev", "eth0")
        yield macs
    finally:
        teardown()


def install_flows(macs: dict[str, str]) -> None:
    """One rule per SID, plus two counters for what Open vSwitch takes the SRH packets for."""
    flows = [
        f"priority=100,ipv6,ipv6_dst={prefix(TRANSIT_SID)},actions={shift_action()},resubmit(,0)",
        f"priority=100,ipv6,ipv6_dst={prefix(OUT_SID)},"
        f"actions={shift_action()},set_field:{macs['zsr6b']}->eth_dst,output:2",
        "priority=300,ipv6,nw_proto=43,actions=drop",
        f"priority=200,udp6,udp_dst={UDP_PORT + 1},ipv6_dst={prefix(TRANSIT_SID)},"
        f"actions={shift_action()},resubmit(,0)",
    ]
    ofctl("del-flows", BRIDGE)
    for flow in flows:
        ofctl("add-flow", BRIDGE, flow)


def flow_counts() -> dict[str, int]:
    """Each flow's match -> packets it took."""
    out = {}
    for line in ofctl("--no-names", "dump-flows", BRIDGE).splitlines():
        if "n_packets=" not in line:
            continue
        fields = dict(f.split("=", 1) for f in line.split(", ") if "=" in f and " " not in f)
        match = line.split(", ")[-1].split(" actions=")[0]
        out[match] = int(fields.get("n_packets", "0"))
    return out


def exchange(
    dst: IPv6Address, port: int, segments: Sequence[IPv6Address] = ()
) -> dict[str, object]:
    """Send COUNT datagrams from zsr6a to `dst` (with an SRH of `segments`, if any); what
    zsr6b's socket on `port` got."""
    me = [sys.executable, "-m", "bench.srv6_probe"]
    receiver = subprocess.Popen(
        ["ip", "netns", "exec", "zsr6b", *me, "receive", "--port", str(port), "--seconds", "4"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    time.sleep(1.0)
    send = ["send", "--dst", str(dst), "--port", str(port), "--count", str(COUNT)]
    send += [f"--segment={s}" for s in segments]
    sent = netns("zsr6a", *me, *send, check=False)
    out, _ = receiver.communicate(timeout=15)
    result: dict[str, object] = {"sent": COUNT, "send_error": sent.stderr.strip()[-200:] or None}
    result |= json.loads(out or "{}")
    return result


def kernel_routes() -> dict[str, str]:
    """Whether zsr6a's kernel takes a seg6 encapsulation route and a seg6local route."""
    tries = {
        "kernel_encap": ["ip", "-6", "route", "add", "fd00:1::/64", "encap", "seg6", "mode",
                         "encap", "segs", str(container([TRANSIT_SID, OUT_SID])), "dev", "eth0"],
        "kernel_seg6local": ["ip", "-6", "route", "add", str(container([0x0F01])), "encap",
                             "seg6local", "action", "End", "dev", "eth0"],
    }  # fmt: skip
    out = {}
    for name, argv in tries.items():
        done = netns("zsr6a", *argv, check=False)
        out[name] = "accepted" if done.returncode == 0 else done.stderr.strip()
    return out


def ovs_facts() -> dict[str, object]:
    """The Open vSwitch version, its interface types, and whether it parses SRH match fields."""
    version = run(["ovs-vswitchd", "--version"]).stdout.splitlines()[0]
    types = run(["ovs-vsctl", "get", "Open_vSwitch", ".", "iface_types"]).stdout.strip()
    fields = {}
    for field in ("ipv6_exthdr=0x100", "srh_segments_left=1", "ipv6_rthdr_type=4"):
        done = run(
            ["ovs-ofctl", "-O", "OpenFlow13", "parse-flow", f"ipv6,{field},actions=drop"],
            check=False,
        )
        fields[field.split("=")[0]] = "parsed" if done.returncode == 0 else done.stderr.strip()
    added = run(["ovs-vsctl", "add-port", BRIDGE, "zsr6tnl", "--", "set", "interface", "zsr6tnl",
                 "type=srv6"], check=False)  # fmt: skip
    error = run(["ovs-vsctl", "--if-exists", "get", "interface", "zsr6tnl", "error"], check=False)
    run(["ovs-vsctl", "--if-exists", "del-port", BRIDGE, "zsr6tnl"], check=False)
    return {
        "version": version,
        "srv6_in_iface_types": "srv6" in types,
        "match_fields": fields,
        "srv6_port": added.stderr.strip() or error.stdout.strip() or "added",
    }


def probe() -> dict[str, object]:
    """Every measurement of the module docstring, on a fresh test bed."""
    report: dict[str, object] = {}
    with testbed() as macs:
        install_flows(macs)
        report |= kernel_routes()
        ev = container([TRANSIT_SID, OUT_SID, HOST_SID["zsr6b"]])
        report["usid_ev"] = str(ev)
        report["usid"] = exchange(ev, UDP_PORT)
        report["unknown_sid"] = exchange(container([UNKNOWN_SID, HOST_SID["zsr6b"]]), UDP_PORT)
        final = container([HOST_SID["zsr6b"]])
        netns("zsr6b", "sysctl", "-qw", "net.ipv6.conf.all.seg6_enabled=0")
        report["srh"] = exchange(final, UDP_PORT + 1, [ev])
        for key in ("all", "eth0"):
            netns("zsr6b", "sysctl", "-qw", f"net.ipv6.conf.{key}.seg6_enabled=1")
        report["srh_seg6_enabled"] = exchange(final, UDP_PORT + 1, [ev])
        report["flows"] = flow_counts()
        report["ovs"] = ovs_facts()
    report["left_behind"] = leftovers()
    return report


def leftovers() -> list[str]:
    """Anything of the test bed still present (should be none)."""
    names = run(["ip", "-o", "link", "show"]).stdout
    spaces = run(["ip", "netns", "list"]).stdout
    gone = [n for n in (*VETHS, BRIDGE) if f" {n}:" in names or f" {n}@" in names]
    return gone + [ns for ns in NAMESPACES if ns in spaces]


# -- inside a namespace ------------------------------------------------------------------------
def send(dst: str, port: int, count: int, segments: Sequence[str]) -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
        if segments:
            sock.setsockopt(
                socket.IPPROTO_IPV6, IPV6_RTHDR, srh_option([IPv6Address(s) for s in segments])
            )
        for n in range(count):
            sock.sendto(f"srv6 probe {n}".encode(), (dst, port))
            time.sleep(0.005)


def receive(port: int, seconds: float) -> None:
    got = 0
    destinations: set[str] = set()
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
        sock.bind(("::", port))
        sock.settimeout(0.2)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                _data, ancillary, _flags, _addr = sock.recvmsg(2048, 64)
            except TimeoutError:
                continue
            got += 1
            for level, kind, value in ancillary:
                if level == socket.IPPROTO_IPV6 and kind == socket.IPV6_PKTINFO:
                    destinations.add(str(IPv6Address(value[:16])))
    print(json.dumps({"received": got, "arrived_to": sorted(destinations)}))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="srv6_probe", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("counts", help="rules per EV format on the default fabrics (no root)")
    sub.add_parser("probe", help="the namespace probe (root; take /tmp/zcube-heavy.lock)")
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--count", type=int, default=COUNT)
    s.add_argument("--segment", action="append", default=[])
    r = sub.add_parser("receive")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    if args.command == "counts":
        for spec in DEFAULT_FABRICS:
            counts = ev_rule_counts(build_fabric(spec))
            print(json.dumps({"fabric": spec.to_json(), **counts.__dict__}))
    elif args.command == "probe":
        print(json.dumps(probe(), indent=1))
    elif args.command == "send":
        send(args.dst, args.port, args.count, args.segment)
    else:
        receive(args.port, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
