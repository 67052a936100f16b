"""Importers: SimAI / HPCC ns-3 topology text, GraphML and GML through NetworkX, containerlab.

Each turns its file into a zcube-fabric/1 document (carrying the source's line numbers where it
has them) and loads that with the same schema and rules as a native file, so every error is the
same one line. Each returns the assumptions it made in `LoadedFabric.assumptions`; the CLI
prints them. What each format leaves out and what is assumed is in docs/FABRIC_FILES.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from zcube_lab.core.fabric.files.errors import FabricFileError, LineList, at_line, read_text
from zcube_lab.core.fabric.files.native import (
    DEFAULT_NIC_GBPS,
    FORMAT,
    IFNAME_MAX,
    LoadedFabric,
    load_document,
)

_RATE = re.compile(
    r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtT]?)(?:bps|b/s|bit/s)?\s*$"
)
_SCALE = {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0, "t": 1e3}
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|ms|s)?\s*$")
_TIME_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6, None: 1e3}
_NAME_OK = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
TIER_NAMES = ("tor", "agg", "core")


def parse_gbps(text: str) -> float | None:
    """`200Gbps` -> 200.0, `100M` -> 0.1, `1e11` (bit/s) -> 100.0; None when unreadable."""
    match = _RATE.match(str(text))
    if not match:
        return None
    return float(match.group(1)) * _SCALE[match.group(2).lower()]


def parse_latency_us(text: str) -> float | None:
    """`0.001ms` -> 1.0 µs (a bare number is ms, as SimAI writes it); None when unreadable."""
    match = _TIME.match(str(text))
    if not match:
        return None
    return float(match.group(1)) * _TIME_US[match.group(2)]


def _tier_of(switches: Iterable[str], gpu_switches: set[str], adj: Mapping[str, set[str]]) -> dict:
    """Each switch's tier name by its distance from the switches with GPUs."""
    dist = {s: 0 for s in gpu_switches}
    frontier = list(gpu_switches)
    while frontier:
        nxt = []
        for s in frontier:
            for n in adj.get(s, ()):
                if n not in dist:
                    dist[n] = dist[s] + 1
                    nxt.append(n)
        frontier = nxt
    out = {}
    for s in switches:
        d = dist.get(s)
        out[s] = "switch" if d is None else TIER_NAMES[d] if d < len(TIER_NAMES) else f"tier{d}"
    return out


def _build(
    path: str | Path,
    header_line: int,
    nic_gbps: float,
    switches: list[tuple[str, int]],
    gpus: list[tuple[str, int, int, int]],
    edges: list[tuple[str, str, float, float | None, int]],
    assumptions: list[str],
) -> LoadedFabric:
    """A document from plain lists, loaded. `switches`: (name, line); `gpus`: (name, server,
    rank, line); `edges`: (a, b, gbps, latency µs or None, line)."""
    sw_names = {s for s, _ in switches}
    gpu_names = {g for g, *_ in gpus}
    ports: dict[str, list[dict]] = {g: [] for g in gpu_names}
    links: dict[frozenset[str], dict] = {}
    adj: dict[str, set[str]] = {}
    merged = 0
    for a, b, gbps, lat, line in edges:
        for end in (a, b):
            if end not in sw_names and end not in gpu_names:
                raise FabricFileError(
                    path, line, f"link {a}-{b}", "unknown-node", f"{end} is not a declared node"
                )
        if a in gpu_names and b in gpu_names:
            raise FabricFileError(
                path,
                line,
                f"link {a}-{b}",
                "unknown-node",
                "joins two GPUs: GPUs link only to switches",
            )
        if a in gpu_names or b in gpu_names:
            gpu, sw = (a, b) if a in gpu_names else (b, a)
            port = {"switch": sw, "gbps": gbps}
            if lat is not None:
                port["latency_us"] = lat
            ports[gpu].append(at_line(port, line))
            continue
        if a == b:
            raise FabricFileError(path, line, f"link {a}-{b}", "self-link", f"joins {a} to itself")
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
        key = frozenset((a, b))
        if key in links and links[key]["gbps"] == gbps:
            links[key]["count"] += 1
            merged += 1
            continue
        if key in links:
            raise FabricFileError(
                path,
                line,
                f"link {a}-{b}",
                "duplicate-link",
                f"listed again at {gbps:g} Gb/s (first at {links[key]['gbps']:g} on line "
                f"{links[key].line}): parallel links of one pair run at one rate",
            )
        entry: dict[str, Any] = {"a": a, "b": b, "gbps": gbps, "count": 1}
        if lat is not None:
            entry["latency_us"] = lat
        links[key] = at_line(entry, line)
    if merged:
        assumptions.append(f"{merged} switch pair(s) listed again read as parallel links")
    gpu_switches = {p["switch"] for plist in ports.values() for p in plist}
    tiers = _tier_of([s for s, _ in switches], gpu_switches, adj)
    assumptions.append(
        "switch tiers by distance from the GPUs (" + ", ".join(TIER_NAMES) + "); radix = ports used"
    )
    hosts = []
    for name, server, rank, line in gpus:
        hosts.append(
            at_line(
                {"label": name, "server": server, "rank": rank, "ports": LineList(ports[name])},
                line,
            )
        )
    doc = at_line(
        {
            "format": FORMAT,
            "name": Path(path).stem,
            "nic_gbps": nic_gbps,
            "switches": [at_line({"name": s, "tier": tiers[s]}, line) for s, line in switches],
            "hosts": hosts,
            "links": list(links.values()),
        },
        header_line,
    )
    return load_document(doc, path, assumptions)


def _short_names(names: list[str], prefix: str) -> tuple[dict[str, str], bool]:
    """Source names -> switch names that are valid and leave room for `-eth<port>`."""
    fits = all(_NAME_OK.match(n) and len(n) + 7 <= IFNAME_MAX for n in names)
    if fits:
        return {n: n for n in names}, False
    return {n: f"{prefix}{i}" for i, n in enumerate(names)}, True


# -- SimAI / HPCC ns-3 text ----------------------------------------------------------------
def load_simai(path: str | Path) -> LoadedFabric:
    """SimAI / HPCC topology text: header, switch ids, one link a line (docs/FABRIC_FILES.md)."""
    lines = [
        (i + 1, line.split())
        for i, line in enumerate(read_text(path).splitlines())
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if len(lines) < 2:
        raise FabricFileError(path, None, "file", "syntax", "needs a header line and a switch line")
    hline, head = lines[0]
    assumptions: list[str] = []
    try:
        numbers = [int(x) for x in head[:5]]
    except ValueError:
        raise FabricFileError(
            path,
            hline,
            "header",
            "syntax",
            "not a SimAI/HPCC header: `nodes switches links` or `nodes gpus_per_server "
            "nvswitches switches links gpu_type`",
        ) from None
    if len(head) >= 5:
        # SimAI: the 4th field counts the network switches; line 2 lists NVSwitches first
        nodes, gps, nvswitches, nswitches, nlinks = numbers[:5]
        nswitches += nvswitches
    elif len(head) == 3:
        nodes, nswitches, nlinks = numbers[:3]
        gps, nvswitches = None, 0
    else:
        raise FabricFileError(
            path,
            hline,
            "header",
            "syntax",
            f"{len(head)} fields: a SimAI/HPCC header has 3 (`nodes switches links`) or 6",
        )
    sline, sw_ids = lines[1]
    if len(sw_ids) != nswitches:
        raise FabricFileError(
            path,
            sline,
            "switch ids",
            "syntax",
            f"{len(sw_ids)} switch ids, the header says {nswitches}",
        )
    body = lines[2:]
    if len(body) != nlinks:
        raise FabricFileError(
            path, hline, "header", "syntax", f"says {nlinks} links, the file has {len(body)}"
        )
    nv = set(sw_ids[:nvswitches])
    fabric_sw = [s for s in sw_ids if s not in nv]
    gpu_ids = [str(i) for i in range(nodes) if str(i) not in set(sw_ids)]
    edges: list[tuple[str, str, float, float | None, int]] = []
    nv_members: dict[str, list[str]] = {}
    errors_nonzero = 0
    for line, fields in body:
        if len(fields) < 3:
            raise FabricFileError(
                path, line, "link", "syntax", "a link line is `a b rate [latency [error rate]]`"
            )
        a, b = fields[0], fields[1]
        gbps = parse_gbps(fields[2])
        if gbps is None or gbps <= 0:
            raise FabricFileError(path, line, f"link {a}-{b}", "syntax", f"rate {fields[2]!r}")
        lat = parse_latency_us(fields[3]) if len(fields) > 3 else None
        if len(fields) > 4 and float(fields[4] or 0) != 0:
            errors_nonzero += 1
        for end in (a, b):
            if not end.isdigit() or int(end) >= nodes:
                raise FabricFileError(
                    path,
                    line,
                    f"link {a}-{b}",
                    "unknown-node",
                    f"{end} is not a node id 0..{nodes - 1}",
                )
        if a in nv or b in nv:
            nvs, gpu = (a, b) if a in nv else (b, a)
            nv_members.setdefault(nvs, []).append(gpu)
            continue
        edges.append((_sw(a, sw_ids), _sw(b, sw_ids), gbps, lat, line))
    # servers: the GPUs of one NVSwitch, else gpus_per_server consecutive ids, else one each
    server_of: dict[str, int] = {}
    for k, nvs in enumerate(sw_ids[:nvswitches]):
        for gpu in nv_members.get(nvs, []):
            server_of.setdefault(gpu, k)
    if nvswitches:
        assumptions.append(
            f"{nvswitches} NVSwitches and their links left out (the lab has no scale-up "
            "domain); a server is the GPUs of one NVSwitch"
        )
    if gps:
        base = len(set(server_of.values()))
        for i, gpu in enumerate(g for g in gpu_ids if g not in server_of):
            server_of[gpu] = base + i // gps
        if not nvswitches:
            assumptions.append(f"servers of {gps} consecutive GPU ids (the header's count)")
    else:
        for i, gpu in enumerate(gpu_ids):
            server_of.setdefault(gpu, i)
        assumptions.append("old 3-field header: every GPU is its own server")
    if errors_nonzero:
        assumptions.append(f"{errors_nonzero} link(s) with a non-zero error rate: ignored")
    gpus = []
    rank_of: dict[int, int] = {}
    # servers renumbered 0.. in order of their first GPU
    order: dict[int, int] = {}
    for gpu in gpu_ids:
        server = order.setdefault(server_of[gpu], len(order))
        rank = rank_of.get(server, 0)
        rank_of[server] = rank + 1
        gpus.append((f"h{gpu}", server, rank, hline))
    edges = [
        (a if a.startswith("s") else f"h{a}", b if b.startswith("s") else f"h{b}", g, lt, ln)
        for a, b, g, lt, ln in edges
    ]
    nic = _nic_rate(gpus, edges)
    assumptions.append(
        f"GPU ids sorted become h0..; switch id N is sN; NIC rate {nic:g} Gb/s (a GPU's links)"
    )
    gid = {name: f"h{i}" for i, (name, *_rest) in enumerate(gpus)}
    gpus = [(gid[n], s, r, ln) for n, s, r, ln in gpus]
    edges = [(gid.get(a, a), gid.get(b, b), g, lt, ln) for a, b, g, lt, ln in edges]
    return _build(path, hline, nic, [(f"s{s}", sline) for s in fabric_sw], gpus, edges, assumptions)


def _sw(node: str, sw_ids: list[str]) -> str:
    return f"s{node}" if node in sw_ids else node


def _nic_rate(gpus: list[tuple[str, int, int, int]], edges: list[tuple]) -> float:
    if not gpus:
        return DEFAULT_NIC_GBPS
    first = gpus[0][0]
    total = sum(g for a, b, g, *_ in edges if first in (a, b))
    return total or DEFAULT_NIC_GBPS


# -- GraphML / GML through NetworkX --------------------------------------------------------
_GPU_KINDS = {"gpu", "host", "server", "nic"}


def _edge_gbps(data: Mapping[str, Any]) -> float | None:
    for key in ("gbps", "Gbps"):
        if key in data:
            return float(data[key])
    for key in ("bandwidth", "LinkSpeed", "rate", "speed"):
        if key in data:
            value = str(data[key])
            if key == "LinkSpeed" and "LinkSpeedUnits" in data:
                value += str(data["LinkSpeedUnits"])
            elif key == "LinkSpeed" or value.replace(".", "").isdigit():
                value += "G" if key != "bandwidth" else ""
            rate = parse_gbps(value)
            if rate:
                return rate
    if "LinkSpeedRaw" in data:
        return float(data["LinkSpeedRaw"]) / 1e9
    return None


def load_graph(path: str | Path, fmt: str) -> LoadedFabric:
    """GraphML or GML: nodes with `type`/`kind`/`role` gpu|host are GPUs, the rest switches."""
    import networkx as nx

    read_text(path)  # a missing file is one `format` line
    try:
        if fmt == "graphml":
            graph = nx.read_graphml(path, force_multigraph=True)
        else:
            graph = nx.read_gml(path, label="id")
            graph = nx.MultiGraph(graph)
    except Exception as exc:  # NetworkX raises many kinds for a bad file
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FabricFileError(path, None, "file", "syntax", f"not valid {fmt}: {first}") from None
    assumptions: list[str] = []
    if graph.is_directed():
        assumptions.append("directed edges read as links (a link carries both ways)")
    nodes = list(graph.nodes)

    def kind(n: Any) -> str:
        data = graph.nodes[n]
        for key in ("type", "kind", "role"):
            if key in data:
                return str(data[key]).lower()
        return ""

    marked = [n for n in nodes if kind(n) in _GPU_KINDS]
    attach: list[Any] = []
    if marked:
        gpu_nodes = marked
        switch_nodes = [n for n in nodes if n not in set(marked)]
    else:
        gpu_nodes = [n for n in nodes if graph.degree(n) == 1]
        switch_nodes = [n for n in nodes if graph.degree(n) != 1]
        if gpu_nodes:
            assumptions.append(
                f"no node says type: gpu; the {len(gpu_nodes)} nodes of degree 1 are GPUs"
            )
        else:
            attach = switch_nodes
            assumptions.append(
                f"no node says type: gpu and none has degree 1: one GPU attached to each of "
                f"the {len(switch_nodes)} nodes (a WAN graph such as Topology Zoo's)"
            )
    rename, renamed = _short_names([str(n) for n in switch_nodes], "s")
    if renamed:
        assumptions.append("switch names too long or not plain: renamed s0.. in file order")
    sw = {n: rename[str(n)] for n in switch_nodes}
    default_rates = 0
    edges = []
    gpu_name = {n: f"h{i}" for i, n in enumerate(gpu_nodes)}
    for u, v, data in graph.edges(data=True):
        gbps = _edge_gbps(data)
        if gbps is None:
            gbps = DEFAULT_NIC_GBPS
            default_rates += 1
        lat = None
        for key in ("latency_us", "delay_us"):
            if key in data:
                lat = float(data[key])
        ends = [gpu_name.get(u, sw.get(u)), gpu_name.get(v, sw.get(v))]
        edges.append((ends[0], ends[1], gbps, lat, 0))
    if default_rates:
        assumptions.append(
            f"{default_rates} link(s) without a rate (gbps, bandwidth, LinkSpeed*): "
            f"{DEFAULT_NIC_GBPS:g} Gb/s"
        )
    gpus = []
    next_rank: dict[int, int] = {}
    for n in gpu_nodes:
        data = graph.nodes[n]
        server = int(data.get("server", len(gpus)))
        rank = int(data.get("rank", next_rank.get(server, 0)))
        next_rank[server] = max(next_rank.get(server, 0), rank + 1)
        gpus.append((gpu_name[n], server, rank, 0))
    if gpu_nodes and not any("server" in graph.nodes[n] for n in gpu_nodes):
        assumptions.append("no node says server: every GPU is its own server")
    for i, n in enumerate(attach):
        name = f"h{i}"
        gpus.append((name, i, 0, 0))
        edges.append((name, sw[n], DEFAULT_NIC_GBPS, None, 0))
    nic = _nic_rate(gpus, edges)
    return _build(path, 0, nic, [(sw[n], 0) for n in switch_nodes], gpus, edges, assumptions)


# -- containerlab ------------------------------------------------------------------------
def load_clab(path: str | Path, doc: Any) -> LoadedFabric:
    """containerlab topology: `linux` nodes are GPUs, other kinds switches; no rates."""
    topo = doc.get("topology") if isinstance(doc, Mapping) else None
    if not isinstance(topo, Mapping) or not isinstance(topo.get("nodes"), Mapping):
        raise FabricFileError(
            path,
            getattr(doc, "line", None),
            "topology",
            "format",
            "not a containerlab file: it needs topology.nodes and topology.links",
        )
    nodes = topo["nodes"]
    default_kind = str((topo.get("defaults") or {}).get("kind", ""))
    kinds = topo.get("kinds") or {}
    del kinds

    def kind(name: str) -> str:
        spec = nodes[name] or {}
        return str(spec.get("kind", default_kind)).lower()

    gpu_nodes = [n for n in nodes if kind(n) == "linux"]
    switch_nodes = [n for n in nodes if kind(n) != "linux"]
    rename, renamed = _short_names([str(n) for n in switch_nodes], "s")
    assumptions = [
        "containerlab carries no rates: every link at "
        f"{DEFAULT_NIC_GBPS:g} Gb/s; nodes of kind linux are GPUs, every other kind a switch",
        "a switch port is its interface's trailing number (eth3 -> port 3)",
    ]
    if renamed:
        assumptions.append("switch names too long or not plain: renamed s0.. in file order")
    gpu_name = {n: f"h{i}" for i, n in enumerate(gpu_nodes)}
    edges = []
    for link in topo.get("links") or []:
        line = getattr(link, "line", 0)
        ends = link.get("endpoints") if isinstance(link, Mapping) else None
        if not isinstance(ends, list) or len(ends) != 2:
            raise FabricFileError(
                path, line, "link", "syntax", 'a link needs endpoints: ["a:eth1", "b:eth1"]'
            )
        parsed = []
        for end in ends:
            node, _, intf = str(end).partition(":")
            if node not in nodes:
                raise FabricFileError(
                    path,
                    line,
                    f"link {ends[0]}-{ends[1]}",
                    "unknown-node",
                    f"{node} is not a node of topology.nodes",
                )
            parsed.append((node, intf))
        edges.append((parsed, line))
    ports: dict[str, list[tuple[str, str, int]]] = {g: [] for g in gpu_nodes}
    sw_edges = []
    for ((a, ia), (b, ib)), line in edges:
        if a in gpu_name and b in gpu_name:
            raise FabricFileError(
                path,
                line,
                f"link {a}-{b}",
                "unknown-node",
                "joins two GPUs: GPUs link only to switches",
            )
        if a in gpu_name or b in gpu_name:
            (g, gi), (s, si) = ((a, ia), (b, ib)) if a in gpu_name else ((b, ib), (a, ia))
            ports[g].append((gi, rename[s], _port_number(si), line))
            continue
        sw_edges.append((rename[a], rename[b], _port_number(ia), _port_number(ib), line))
    hosts = []
    next_rank: dict[int, int] = {}
    for i, g in enumerate(gpu_nodes):
        plist = sorted(ports[g], key=lambda p: (_port_number(p[0]) or 0, p[0]))
        entries = LineList()
        for _, s, sp, line in plist:
            entry: dict[str, Any] = {"switch": s, "gbps": DEFAULT_NIC_GBPS / max(len(plist), 1)}
            if sp is not None:
                entry["port"] = sp
            entries.append(at_line(entry, line))
        spec = nodes[g] or {}
        server = int((spec.get("labels") or {}).get("server", i))
        rank = int((spec.get("labels") or {}).get("rank", next_rank.get(server, 0)))
        next_rank[server] = max(next_rank.get(server, 0), rank + 1)
        hosts.append(
            at_line(
                {"label": g, "server": server, "rank": rank, "ports": entries},
                getattr(nodes, "line", 0),
            )
        )
    adj: dict[str, set[str]] = {}
    for a, b, *_ in sw_edges:
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    gpu_switches = {rename[s] for plist in ports.values() for _, s, _, _ in plist}
    tiers = _tier_of([rename[s] for s in switch_nodes], gpu_switches, adj)
    links: dict[frozenset[str], Any] = {}
    for a, b, pa, pb, line in sw_edges:
        key = frozenset((a, b))
        if key in links and pa is not None and pb is not None and "ports" in links[key]:
            links[key]["count"] += 1
            links[key]["ports"].append([pa, pb] if links[key]["a"] == a else [pb, pa])
            continue
        if key in links:
            raise FabricFileError(
                path,
                line,
                f"link {a}-{b}",
                "duplicate-link",
                f"listed again (first on line {links[key].line})",
            )
        entry = {"a": a, "b": b, "gbps": DEFAULT_NIC_GBPS, "count": 1}
        if pa is not None and pb is not None:
            entry["ports"] = [[pa, pb]]
        links[key] = at_line(entry, line)
    doc_out = at_line(
        {
            "format": FORMAT,
            "name": str(doc.get("name", Path(path).stem)),
            "nic_gbps": DEFAULT_NIC_GBPS,
            "switches": [
                at_line({"name": rename[s], "tier": tiers[rename[s]]}, 0) for s in switch_nodes
            ],
            "hosts": hosts,
            "links": list(links.values()),
        },
        getattr(doc, "line", 0),
    )
    if "labels" not in str(nodes):
        assumptions.append("no server/rank labels: every GPU is its own server")
    return load_document(doc_out, path, assumptions)


def _port_number(intf: str) -> int | None:
    match = re.search(r"(\d+)$", intf)
    if not match or int(match.group(1)) < 1:
        return None
    return int(match.group(1))
