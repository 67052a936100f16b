"""`Fabric` -> zcube-fabric/1: every built-in (ZCube, ROFT, Clos at any size) writes itself.

The document names every port, address and route that differs from what the loader would
assign, so loading it gives back the same hosts, switches and links (the round-trip test);
parallel links between two switches are one entry with `count` and their `ports`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from zcube_lab.core.fabric.addressing import fabric_address, plane_network
from zcube_lab.core.fabric.description import Fabric, Link
from zcube_lab.core.fabric.files.native import FORMAT, KIND


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def fabric_document(fabric: Fabric, name: str | None = None) -> dict[str, Any]:
    """The zcube-fabric/1 document of `fabric` (plain data: dump it as YAML or JSON)."""
    doc: dict[str, Any] = {"format": FORMAT}
    doc["name"] = name or _default_name(fabric)
    if fabric.kind != KIND:
        doc["origin"] = {"kind": fabric.kind, "params": dict(fabric.spec.params)}
    doc["nic_gbps"] = _number(fabric.nic_gbps)
    if fabric.notes:
        doc["notes"] = list(fabric.notes)
    doc["switches"] = [
        {"name": s.name, "tier": s.role, "index": s.index, "radix": s.radix, "dpid": s.dpid}
        for s in fabric.switches
    ]
    planes = len(fabric.hosts[0].interfaces) if fabric.hosts else 1
    hosts = []
    host_links: dict[tuple[str, int], Link] = {}
    switch_links: list[Link] = []
    for lk in fabric.links:
        if fabric.is_switch(lk.node1) and fabric.is_switch(lk.node2):
            switch_links.append(lk)
        elif fabric.is_switch(lk.node2):
            host_links[(lk.node1, lk.port1)] = lk
        else:
            host_links[(lk.node2, lk.port2)] = lk
    for h in fabric.hosts:
        ports = []
        for iface in h.interfaces:
            lk = host_links[(h.name, iface.index)]
            switch, port = lk.other(h.name)
            entry: dict[str, Any] = {"switch": switch, "port": port, "gbps": _number(lk.gbps)}
            if iface.ip != _default_ip(iface.index, planes, h.server, h.rank):
                entry["ip"] = iface.ip
            ports.append(entry)
        host: dict[str, Any] = {"server": h.server, "rank": h.rank}
        if h.rail != h.rank:
            host["rail"] = h.rail
        host["ports"] = ports
        default_routes = tuple((str(plane_network(k, planes)), k) for k in range(planes))
        if tuple((r.prefix, r.interface) for r in h.routes) != default_routes:
            host["routes"] = [{"prefix": r.prefix, "port": r.interface} for r in h.routes]
        hosts.append(host)
    doc["hosts"] = hosts
    grouped: dict[tuple[str, str, float], list[tuple[int, int]]] = {}
    for lk in switch_links:
        grouped.setdefault((lk.node1, lk.node2, lk.gbps), []).append((lk.port1, lk.port2))
    doc["links"] = [
        {
            "a": a,
            "b": b,
            "gbps": _number(gbps),
            "count": len(ports),
            "ports": [list(p) for p in ports],
        }
        for (a, b, gbps), ports in grouped.items()
    ]
    return doc


def _default_ip(index: int, planes: int, server: int, rank: int) -> str | None:
    try:
        return fabric_address(index, planes, server, rank)
    except ValueError:
        return None


def _default_name(fabric: Fabric) -> str:
    params = "-".join(
        f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}"
        for k, v in fabric.spec.params
        if k != "path"
    )
    return f"{fabric.kind}-{params}" if params else fabric.kind


class _Dumper(yaml.SafeDumper):
    pass


class _Flow(dict):
    """A mapping written on one line."""


_Dumper.add_representer(
    _Flow, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True)
)


def dump_yaml(doc: dict[str, Any]) -> str:
    """YAML text of a document: sections as blocks, each switch, host and link on one line."""
    doc = dict(doc)
    for section in ("switches", "hosts", "links"):
        if section in doc:
            doc[section] = [_Flow(item) for item in doc[section]]
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=10_000)


def write_fabric(fabric: Fabric, path: str | Path, name: str | None = None) -> Path:
    """Write `fabric` to `path` in zcube-fabric/1 (JSON when the name ends .json)."""
    import json

    path = Path(path)
    doc = fabric_document(fabric, name)
    text = json.dumps(doc, indent=1) + "\n" if path.suffix == ".json" else dump_yaml(doc)
    path.write_text(text, encoding="utf-8")
    return path
