"""zcube-fabric/1 -> `Fabric`: schema check, template expansion, defaults, then the rules.

Steps (docs/FABRIC_FILES.md): the document is checked against `schema.json`; switch names with
ranges (`leaf{0..3}`) and server groups with port templates (`"leaf{rank}"`,
`"tor{server // 4}"`) are expanded; what the file leaves out is assigned (switch ports in
order: every explicit port first, then host ports in GPU order, then links in file order;
addresses from the lab's plan, NIC port k in address plane k at row = server, column = rank;
MACs as the builders make them; dpids counted from 1); then the rules of
`errors.RULES` that a schema cannot state are checked. Pure: no root, nothing started.
"""

from __future__ import annotations

import ast
import ipaddress
import json
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from itertools import product
from pathlib import Path
from typing import Any

from zcube_lab.core.fabric.addressing import (
    FABRIC_RANGE,
    MAX_COLUMNS,
    fabric_address,
    host_mac,
    plane_network,
    plane_rows,
)
from zcube_lab.core.fabric.description import (
    Fabric,
    FabricSpec,
    Host,
    Interface,
    Link,
    Route,
    Switch,
)
from zcube_lab.core.fabric.files.errors import FabricFileError, line_of

FORMAT = "zcube-fabric/1"
KIND = "file"
DEFAULT_NIC_GBPS = 400.0
IFNAME_MAX = 15
_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")


@dataclass(frozen=True)
class Roles:
    """Role placement a file asks for: host lists and/or server counts (a rule)."""

    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    ep_groups: tuple[tuple[str, ...], ...] = ()
    prefill_servers: int | None = None
    decode_servers: int | None = None
    ep_servers: int | None = None


@dataclass(frozen=True)
class LoadedFabric:
    """A fabric read from a file, and what the `Fabric` has no field for."""

    fabric: Fabric
    source: str
    name: str
    format: str = FORMAT
    switch_planes: Mapping[str, int] = field(default_factory=dict)
    switch_groups: Mapping[str, str] = field(default_factory=dict)
    latency_us: Mapping[Link, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    roles: Roles | None = None
    prices: Mapping[str, float] = field(default_factory=dict)
    nvlink_forwarding: bool = False
    assumptions: tuple[str, ...] = ()


def schema() -> dict[str, Any]:
    """The JSON Schema of zcube-fabric/1 shipped with the package."""
    text = resources.files(__package__).joinpath("schema.json").read_text(encoding="utf-8")
    return json.loads(text)


# -- small helpers -----------------------------------------------------------------------
def expand_names(text: str) -> list[str]:
    """`leaf{0..3}` -> leaf0..leaf3; several ranges give every combination, in order."""
    parts = _RANGE.split(text)
    fixed, ranges = parts[0::3], list(zip(parts[1::3], parts[2::3], strict=True))
    out = []
    for values in product(*(range(int(lo), int(hi) + 1) for lo, hi in ranges)):
        name = fixed[0]
        for value, rest in zip(values, fixed[1:], strict=True):
            name += f"{value}{rest}"
        out.append(name)
    return out


_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def _eval(node: ast.AST, env: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    raise ValueError("only whole numbers, server, rank, gid, local and + - * // % are allowed")


def fill_template(template: str, env: Mapping[str, int]) -> str:
    """`"tor{server // 4}"` with server=9 -> `tor2`: each {...} an integer expression of the
    names in `env`, nothing else."""

    def one(match: re.Match[str]) -> str:
        return str(_eval(ast.parse(match.group(1).strip(), mode="eval").body, env))

    return re.sub(r"\{([^{}]*)\}", one, template)


class _Ctx:
    """The file being read, for error lines."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: Any, element: str, rule: str, detail: str) -> FabricFileError:
        line = where if isinstance(where, int) else line_of(where)
        return FabricFileError(self.source, line, element, rule, detail)


# -- the schema ----------------------------------------------------------------------------
def _locate(doc: Any, path: Iterable[Any]) -> tuple[int | None, str]:
    """The deepest line known along `path` in `doc`, and a readable element name."""
    line = line_of(doc)
    node, label = doc, "file"
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            break
        label = (
            f"{label}[{key}]"
            if isinstance(key, int)
            else key
            if label == "file"
            else (f"{label}.{key}")
        )
        line = line_of(node, line)
        if isinstance(node, Mapping) and isinstance(node.get("name"), str):
            label = f"{label} ({node['name']})"
    return line, label


def check_schema(doc: Any, source: str) -> None:
    """Validate `doc` against the shipped schema; the most relevant error is one line."""
    if not isinstance(doc, Mapping):
        raise FabricFileError(source, line_of(doc), "file", "format", "not a mapping of sections")
    if doc.get("format") != FORMAT:
        raise FabricFileError(
            source,
            line_of(doc),
            "format",
            "format",
            f"format {doc.get('format')!r} is not supported: a native file says "
            f"'format: {FORMAT}' (other formats: docs/FABRIC_FILES.md)",
        )
    import jsonschema

    validator = jsonschema.Draft202012Validator(
        schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is None:
        return
    line, label = _locate(doc, error.absolute_path)
    message = error.message
    if len(message) > 160:
        message = message[:157] + "..."
    raise FabricFileError(source, line, label, "schema", message)


# -- building ------------------------------------------------------------------------------
@dataclass
class _Port:
    host: int
    index: int
    switch: str
    port: int | None
    gbps: float
    ip: str | None
    latency_us: float | None
    where: Any


@dataclass
class _HostDraft:
    server: int
    rank: int | None
    rail: int | None
    label: str | None
    ports: list[_Port]
    routes: list[tuple[str, int]] | None
    where: Any


def load_document(doc: Any, source: str | Path, assumptions: Iterable[str] = ()) -> LoadedFabric:
    """A parsed zcube-fabric/1 document -> a validated `LoadedFabric`, or FabricFileError."""
    source = str(source)
    check_schema(doc, source)
    return _Builder(doc, _Ctx(source)).build(tuple(assumptions))


class _Builder:
    def __init__(self, doc: Mapping[str, Any], ctx: _Ctx) -> None:
        self.doc = doc
        self.ctx = ctx
        self.nic_gbps = float(doc.get("nic_gbps", DEFAULT_NIC_GBPS))

    # switches ---------------------------------------------------------------------------
    def switches(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        out: list[dict[str, Any]] = []
        where: dict[str, Any] = {}
        for entry in self.doc["switches"]:
            for name in expand_names(entry["name"]):
                if name in where:
                    raise self.ctx.fail(
                        entry,
                        f"switch {name}",
                        "duplicate-node",
                        f"declared again (first on line {line_of(where[name])})",
                    )
                where[name] = entry
                out.append({"name": name, **{k: v for k, v in entry.items() if k != "name"}})
        return out, where

    # hosts ------------------------------------------------------------------------------
    def _port(
        self, host: int, index: int, spec: Any, env: Mapping[str, int], count: int, where: Any
    ) -> _Port:
        if isinstance(spec, str):
            spec = {"switch": spec}
        try:
            switch = fill_template(spec["switch"], env)
        except (ValueError, SyntaxError, ZeroDivisionError) as exc:
            raise self.ctx.fail(
                spec if line_of(spec) else where,
                f"port template {spec['switch']!r}",
                "schema",
                f"cannot fill it: {exc}",
            ) from None
        return _Port(
            host,
            index,
            switch,
            spec.get("port"),
            float(spec.get("gbps", self.nic_gbps / max(count, 1))),
            spec.get("ip"),
            spec.get("latency_us"),
            spec if line_of(spec) else where,
        )

    def hosts(self) -> list[_HostDraft]:
        drafts: list[_HostDraft] = []
        if "hosts" in self.doc:
            for entry in self.doc["hosts"]:
                gid = len(drafts)
                ports = entry["ports"]
                env = {"gid": gid, "server": entry["server"], "rank": entry.get("rank", 0)}
                drafts.append(
                    _HostDraft(
                        entry["server"],
                        entry.get("rank"),
                        entry.get("rail"),
                        entry.get("label") or entry.get("name"),
                        [
                            self._port(gid, k, p, env, len(ports), entry)
                            for k, p in enumerate(ports)
                        ],
                        None
                        if "routes" not in entry
                        else [(r["prefix"], r["port"]) for r in entry["routes"]],
                        entry,
                    )
                )
            return drafts
        server = 0
        for group in self.doc["servers"]:
            for local in range(group.get("count", 1)):
                for rank in range(group["gpus"]):
                    gid = len(drafts)
                    env = {"gid": gid, "server": server, "rank": rank, "local": local}
                    ports = group["ports"]
                    drafts.append(
                        _HostDraft(
                            server,
                            rank,
                            None,
                            None,
                            [
                                self._port(gid, k, p, env, len(ports), group)
                                for k, p in enumerate(ports)
                            ],
                            None,
                            group,
                        )
                    )
                server += 1
        return drafts

    # the whole -------------------------------------------------------------------------
    def build(self, assumptions: tuple[str, ...]) -> LoadedFabric:
        ctx = self.ctx
        sw_list, sw_where = self.switches()
        drafts = self.hosts()
        host_names = {f"h{gid}" for gid in range(len(drafts))}

        # ranks default to order within the server
        seen_ranks: dict[int, int] = {}
        for d in drafts:
            if d.rank is None:
                d.rank = seen_ranks.get(d.server, 0)
            seen_ranks[d.server] = max(seen_ranks.get(d.server, 0), d.rank + 1)

        # every GPU linked, the same number of ports each, to declared switches
        nports = None
        for gid, d in enumerate(drafts):
            if not d.ports:
                raise ctx.fail(
                    d.where, f"host h{gid}", "host-without-link", "has no NIC port linked"
                )
            if nports is None:
                nports = len(d.ports)
            elif len(d.ports) != nports:
                raise ctx.fail(
                    d.where,
                    f"host h{gid}",
                    "uneven-ports",
                    f"has {len(d.ports)} NIC ports, h0 has {nports}: each port index is one "
                    "address plane, so every GPU needs the same count",
                )
            for p in d.ports:
                if p.switch not in sw_where:
                    what = (
                        "a GPU host, and GPUs link only to switches"
                        if (p.switch in host_names)
                        else "not a declared switch"
                    )
                    raise ctx.fail(
                        p.where,
                        f"host h{gid} port {p.index}",
                        "unknown-node",
                        f"{p.switch} is {what}",
                    )
        assert nports is not None
        planes_given = self.doc.get("planes")
        if nports > 8:
            raise ctx.fail(
                drafts[0].where,
                "host h0",
                "uneven-ports",
                f"{nports} NIC ports: the address plan holds at most 8 planes",
            )

        # switch links, expanded
        link_drafts: list[
            tuple[str, str, float, list[tuple[int, int]] | None, float | None, Any]
        ] = []
        pair_where: dict[frozenset[str], Any] = {}
        for entry in self.doc.get("links", []):
            ends_a = self._names(entry["a"])
            ends_b = self._names(entry["b"])
            pairs = list(product(ends_a, ends_b))
            count = entry.get("count", 1)
            ports = entry.get("ports")
            label = f"link {entry['a']}-{entry['b']}"
            if ports is not None and (len(pairs) != 1 or len(ports) != count):
                raise ctx.fail(
                    entry,
                    label,
                    "schema",
                    f"ports lists {len(ports)} port pairs for {len(pairs)} switch pair(s) of "
                    f"{count} link(s): give one pair per link of a single switch pair",
                )
            for a, b in pairs:
                for end in (a, b):
                    if end not in sw_where:
                        what = (
                            "a GPU host: a GPU's links are its ports"
                            if end in host_names
                            else "not a declared switch"
                        )
                        raise ctx.fail(entry, f"link {a}-{b}", "unknown-node", f"{end} is {what}")
                if a == b:
                    raise ctx.fail(entry, f"link {a}-{b}", "self-link", f"joins {a} to itself")
                key = frozenset((a, b))
                if key in pair_where:
                    raise ctx.fail(
                        entry,
                        f"link {a}-{b}",
                        "duplicate-link",
                        f"listed again (first on line {line_of(pair_where[key])}); parallel "
                        "links are one entry with count",
                    )
                pair_where[key] = entry
                link_drafts.append(
                    (
                        a,
                        b,
                        float(entry.get("gbps", self.nic_gbps)),
                        ports,
                        entry.get("latency_us"),
                        entry,
                    )
                )

        # switch ports: explicit ones first, then host ports, then links, lowest free
        taken: dict[str, dict[int, str]] = {s["name"]: {} for s in sw_list}

        def claim(switch: str, port: int, what: str, where: Any) -> None:
            if port in taken[switch]:
                raise ctx.fail(
                    where,
                    what,
                    "port-taken",
                    f"{switch} port {port} already carries {taken[switch][port]}",
                )
            taken[switch][port] = what

        for gid, d in enumerate(drafts):
            for p in d.ports:
                if p.port is not None:
                    claim(p.switch, p.port, f"host h{gid} port {p.index}", p.where)
        for a, b, _, ports, _, entry in link_drafts:
            for pa, pb in ports or ():
                claim(a, pa, f"a link to {b}", entry)
                claim(b, pb, f"a link to {a}", entry)
        cursor: dict[str, int] = dict.fromkeys(taken, 1)

        def next_free(switch: str, what: str) -> int:
            port = cursor[switch]
            while port in taken[switch]:
                port += 1
            cursor[switch] = port + 1
            taken[switch][port] = what
            return port

        hosts: list[Host] = []
        links: list[Link] = []
        latency: dict[Link, float] = {}
        planes = nports
        addresses: dict[str, str] = {}
        for gid, d in enumerate(drafts):
            name = f"h{gid}"
            ifaces = []
            for p in d.ports:
                port = (
                    p.port
                    if p.port is not None
                    else next_free(p.switch, f"host {name} port {p.index}")
                )
                link = Link(name, p.index, p.switch, port, p.gbps)
                links.append(link)
                if p.latency_us is not None:
                    latency[link] = float(p.latency_us)
                ip = p.ip if p.ip is not None else self._address(p, d, planes, name)
                if ip in addresses:
                    raise ctx.fail(
                        p.where,
                        f"host {name} port {p.index}",
                        "address",
                        f"{ip} is already {addresses[ip]}'s",
                    )
                if ipaddress.IPv4Address(ip) not in FABRIC_RANGE:
                    raise ctx.fail(
                        p.where,
                        f"host {name} port {p.index}",
                        "address",
                        f"{ip} is outside the lab's fabric range {FABRIC_RANGE}",
                    )
                addresses[ip] = f"{name}-eth{p.index}"
                ifaces.append(Interface(name, p.index, ip, host_mac(gid, p.index)))
            routes = self._routes(d, name, planes)
            hosts.append(
                Host(
                    name,
                    gid,
                    d.server,
                    d.rank or 0,
                    d.rail if d.rail is not None else (d.rank or 0),
                    tuple(ifaces),
                    routes,
                )
            )
        for a, b, gbps, ports, lat, entry in link_drafts:
            count = entry.get("count", 1)
            for k in range(count):
                if ports is not None:
                    pa, pb = ports[k]
                else:
                    pa = next_free(a, f"a link to {b}")
                    pb = next_free(b, f"a link to {a}")
                link = Link(a, pa, b, pb, gbps)
                links.append(link)
                if lat is not None:
                    latency[link] = float(lat)

        # switches: radix, names, planes, dpids
        used = {s: len(ports) for s, ports in taken.items()}
        explicit_dpids: dict[int, str] = {}
        for s in sw_list:
            if "dpid" in s:
                if s["dpid"] in explicit_dpids:
                    raise ctx.fail(
                        sw_where[s["name"]],
                        f"switch {s['name']}",
                        "duplicate-node",
                        f"dpid {s['dpid']} is already {explicit_dpids[s['dpid']]}'s",
                    )
                explicit_dpids[s["dpid"]] = s["name"]
        next_dpid = 1
        role_count: dict[str, int] = {}
        switches: list[Switch] = []
        for s in sw_list:
            name = s["name"]
            top = max(taken[name], default=0)
            radix = s.get("radix")
            if radix is not None and (used[name] > radix or top > radix):
                raise ctx.fail(
                    sw_where[name],
                    f"switch {name}",
                    "radix",
                    f"has {used[name]} links (highest port {top}) but radix {radix}",
                )
            longest = f"{name}-eth{top}"
            if len(longest) > IFNAME_MAX:
                raise ctx.fail(
                    sw_where[name],
                    f"switch {name}",
                    "name-length",
                    f"interface {longest} is longer than Linux's {IFNAME_MAX} characters; "
                    "use a shorter switch name",
                )
            if "dpid" in s:
                dpid = s["dpid"]
            else:
                while next_dpid in explicit_dpids:
                    next_dpid += 1
                dpid = next_dpid
                next_dpid += 1
            role = s.get("tier", "switch")
            index = s.get("index", role_count.get(role, 0))
            role_count[role] = max(role_count.get(role, 0), index + 1)
            switches.append(Switch(name, dpid, role, index, radix if radix else max(top, 1)))
        switch_planes = {s["name"]: s["plane"] for s in sw_list if "plane" in s}
        if planes_given is not None or switch_planes:
            self._check_planes(drafts, switch_planes, sw_where, planes_given, nports)

        roles = self._roles(hosts)
        notes = tuple(self.doc.get("notes", ()))
        fabric = Fabric(
            FabricSpec.of(KIND, path=ctx.source),
            self.nic_gbps,
            tuple(hosts),
            tuple(switches),
            tuple(links),
            notes,
        )
        nvlink = bool(self.doc.get("nvlink_forwarding", False))
        _check_connected(fabric, nvlink, ctx, drafts, sw_where)
        labels = {f"h{gid}": d.label for gid, d in enumerate(drafts) if d.label}
        return LoadedFabric(
            fabric=fabric,
            source=ctx.source,
            name=str(self.doc.get("name", Path(ctx.source).stem)),
            switch_planes=switch_planes,
            switch_groups={s["name"]: s["group"] for s in sw_list if "group" in s},
            latency_us=latency,
            labels=labels,
            roles=roles,
            prices=dict(self.doc.get("prices", {})),
            nvlink_forwarding=nvlink,
            assumptions=assumptions,
        )

    def _names(self, value: str | list[str]) -> list[str]:
        items = [value] if isinstance(value, str) else list(value)
        return [n for item in items for n in expand_names(item)]

    def _address(self, p: _Port, d: _HostDraft, planes: int, name: str) -> str:
        rows = plane_rows(planes)
        if not 0 <= d.server < rows or not 0 <= (d.rank or 0) < MAX_COLUMNS:
            raise self.ctx.fail(
                p.where,
                f"host {name} port {p.index}",
                "address",
                f"server {d.server}, rank {d.rank} do not fit the address plan: at most {rows} "
                f"servers and {MAX_COLUMNS} GPUs a server with {planes} NIC port(s); give ip",
            )
        return fabric_address(p.index, planes, d.server, d.rank or 0)

    def _routes(self, d: _HostDraft, name: str, planes: int) -> tuple[Route, ...]:
        if d.routes is None:
            return tuple(Route(str(plane_network(k, planes)), k) for k in range(planes))
        out = []
        for prefix, port in d.routes:
            try:
                net = ipaddress.IPv4Network(prefix)
            except ValueError as exc:
                raise self.ctx.fail(
                    d.where, f"host {name} route {prefix}", "address", str(exc)
                ) from None
            if port >= planes:
                raise self.ctx.fail(
                    d.where,
                    f"host {name} route {prefix}",
                    "address",
                    f"leaves through port {port}, but the host has {planes}",
                )
            out.append(Route(str(net), port))
        return tuple(out)

    def _check_planes(
        self,
        drafts: list[_HostDraft],
        switch_planes: Mapping[str, int],
        sw_where: Mapping[str, Any],
        planes_given: int | None,
        nports: int,
    ) -> None:
        if planes_given is not None and planes_given != nports:
            raise self.ctx.fail(
                self.doc,
                "planes",
                "plane",
                f"planes: {planes_given}, but every GPU has {nports} NIC port(s), one a plane",
            )
        for name, plane in switch_planes.items():
            if plane >= nports:
                raise self.ctx.fail(
                    sw_where[name],
                    f"switch {name}",
                    "plane",
                    f"in plane {plane}, but GPUs have {nports} NIC port(s): planes 0..{nports - 1}",
                )
        for gid, d in enumerate(drafts):
            for p in d.ports:
                plane = switch_planes.get(p.switch)
                if plane is not None and plane != p.index:
                    raise self.ctx.fail(
                        p.where,
                        f"host h{gid} port {p.index}",
                        "plane",
                        f"plugs into {p.switch} of plane {plane}; port k belongs to plane k",
                    )

    def _roles(self, hosts: list[Host]) -> Roles | None:
        spec = self.doc.get("roles")
        if spec is None:
            return None
        names = {h.name for h in hosts}
        servers = sorted({h.server for h in hosts})
        fail = self.ctx.fail
        for key in ("prefill", "decode"):
            for h in spec.get(key, ()):
                if h not in names:
                    raise fail(
                        spec,
                        f"roles.{key}",
                        "roles",
                        f"{h} is not a GPU of this fabric (h0..h{len(hosts) - 1})",
                    )
        both = set(spec.get("prefill", ())) & set(spec.get("decode", ()))
        if both:
            raise fail(spec, "roles", "roles", f"{sorted(both)[0]} is asked to prefill and decode")
        seen: set[str] = set()
        sizes = set()
        for i, group in enumerate(spec.get("ep_groups", ())):
            sizes.add(len(group))
            for h in group:
                if h not in names:
                    raise fail(
                        spec, f"roles.ep_groups[{i}]", "roles", f"{h} is not a GPU of this fabric"
                    )
                if h in seen:
                    raise fail(spec, f"roles.ep_groups[{i}]", "roles", f"{h} is in two EP groups")
                seen.add(h)
        if len(sizes) > 1:
            raise fail(
                spec, "roles.ep_groups", "roles", f"EP groups of unequal sizes {sorted(sizes)}"
            )
        pre, dec = spec.get("prefill_servers"), spec.get("decode_servers")
        if (pre or 0) + (dec or 0) > len(servers):
            raise fail(
                spec,
                "roles",
                "roles",
                f"asks for {pre or 0} prefill + {dec or 0} decode servers; the fabric has "
                f"{len(servers)}",
            )
        ep = spec.get("ep_servers")
        if ep is not None:
            pool = dec if dec is not None else len(servers) - (pre or 0)
            if pool <= 0 or pool % ep:
                raise fail(
                    spec,
                    "roles.ep_servers",
                    "roles",
                    f"EP instances of {ep} servers do not divide the {pool} decode servers",
                )
        gpus_per_server = {sum(1 for h in hosts if h.server == s) for s in servers}
        if (pre or dec or ep) and len(gpus_per_server) > 1:
            raise fail(
                spec,
                "roles",
                "roles",
                f"server counts need servers of equal GPU counts; these have "
                f"{sorted(gpus_per_server)}",
            )
        return Roles(
            tuple(spec.get("prefill", ())),
            tuple(spec.get("decode", ())),
            tuple(tuple(g) for g in spec.get("ep_groups", ())),
            pre,
            dec,
            ep,
        )


def _check_connected(
    fabric: Fabric,
    nvlink: bool,
    ctx: _Ctx,
    drafts: list[_HostDraft],
    sw_where: Mapping[str, Any],
) -> None:
    """Every two GPUs share a connected part of the switch graph (hosts do not forward); with
    `nvlink`, through any GPU of their servers (rail-only fabrics). Every switch reaches a GPU."""
    parent = {s.name: s.name for s in fabric.switches}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for lk in fabric.links:
        if lk.node1 in parent and lk.node2 in parent:
            parent[find(lk.node1)] = find(lk.node2)
    sig: dict[Any, frozenset[str]] = {}
    first: dict[Any, int] = {}
    for h in fabric.hosts:
        unit = h.server if nvlink else h.gid
        comps = frozenset(find(fabric.attachments[(h.name, i.index)].switch) for i in h.interfaces)
        sig[unit] = sig.get(unit, frozenset()) | comps
        first.setdefault(unit, h.gid)
    reached = set().union(*sig.values())
    for s in fabric.switches:
        if find(s.name) not in reached:
            raise ctx.fail(
                sw_where[s.name],
                f"switch {s.name}",
                "disconnected",
                "reaches no GPU: it is cut off from every host",
            )
    groups: dict[frozenset[str], Any] = {}
    for unit, comps in sig.items():
        groups.setdefault(comps, unit)
    items = list(groups.items())
    for i, (ca, ua) in enumerate(items):
        for cb, ub in items[i + 1 :]:
            if not ca & cb:
                a, b = first[ua], first[ub]
                hint = (
                    ""
                    if nvlink
                    else (
                        " (a rail-only fabric reached through NVLink says nvlink_forwarding: true)"
                    )
                )
                raise ctx.fail(
                    drafts[b].where,
                    f"hosts h{a} and h{b}",
                    "disconnected",
                    f"no path joins them{hint}",
                )
