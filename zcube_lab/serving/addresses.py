"""Fabric endpoints as the roles' flags name them, and the parsers of those flags (pure).

An `Address` is `host:port`. Flags that take several are repeatable and comma-separated
(`--ep-peers a:1,b:1`); an EP peer reached at several addresses (one per NIC port, so one per
path) joins them with `+` (`--ep-peers 198.18.0.2:7300+198.18.130.1:7300`). Source maps
(`CIDR=LOCAL`) name the local address a connection to an address in CIDR binds, which on a
multi-port host picks the port and so the path (`zcube_lab.core.fabric.hostplan.kv_source_map`).
Every parser raises `ConfigError` naming the field.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError

SOURCE_MAP_FORM = "CIDR=LOCAL_IP, e.g. 10.2.0.0/16=10.1.0.1"


@dataclass(frozen=True, order=True)
class Address:
    """A TCP endpoint, `host:port`."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_address(text: str, field_name: str) -> Address:
    """`host:port` to an Address, or a ConfigError."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(field_name, text, "host:port with a port in 0..65535")
    return Address(host, int(port))


def addresses(values: Sequence[str] | str | None, field_name: str) -> tuple[Address, ...]:
    """Repeatable / comma-separated `host:port` flags to Addresses."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    out: list[Address] = []
    for v in values:
        out.extend(parse_address(p, field_name) for p in str(v).split(",") if p)
    return tuple(out)


EpPeer = tuple[Address, ...]  # one EP peer: its addresses, one per path


def parse_ep_peers(values: Sequence[str] | str | None, field_name: str) -> tuple[EpPeer, ...]:
    """Repeatable / comma-separated EP peers, each `host:port[+host:port...]`."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    return tuple(
        tuple(parse_address(a, field_name) for a in peer.split("+") if a)
        for v in values
        for peer in str(v).split(",")
        if peer
    )


def ep_peer_item(peer: EpPeer) -> str:
    """One EP peer as its flag writes it: its addresses joined by `+`."""
    return "+".join(str(a) for a in peer)


def as_ep_peers(values: Sequence[EpPeer | Address]) -> tuple[EpPeer, ...]:
    """EP peers from peers or bare addresses (a peer reached at one address)."""
    return tuple((v,) if isinstance(v, Address) else tuple(v) for v in values)


def parse_urls(values: Sequence[str] | str | None, field_name: str = "") -> tuple[str, ...]:
    """Repeatable / comma-separated URL flags to a tuple (checked by the config)."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    return tuple(u for v in values for u in str(v).split(",") if u)


def parse_source_map(values: Sequence[str] | None, field_name: str) -> tuple[tuple[str, str], ...]:
    """`CIDR=LOCAL` flags to a source map."""
    out = []
    for v in values or ():
        cidr, sep, local = str(v).partition("=")
        if not sep or not cidr or not local:
            raise ConfigError(field_name, v, SOURCE_MAP_FORM)
        out.append((cidr, local))
    return tuple(out)


def parse_kv_sources(values: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    """`CIDR=LOCAL` flags to the decode's KV source map."""
    return parse_source_map(values, "kv_source")


def check_source_map(entries: Sequence[tuple[str, str]], field_name: str) -> None:
    """A ConfigError naming the first entry that is not a network and a local address."""
    for cidr, local in entries:
        try:
            ipaddress.ip_network(cidr, strict=False)
            ipaddress.ip_address(local)
        except ValueError:
            raise ConfigError(field_name, f"{cidr}={local}", SOURCE_MAP_FORM) from None


def parse_prefill_kv(
    values: Sequence[str] | None,
) -> tuple[tuple[str, tuple[Address, ...]], ...]:
    """`ENGINE_ID=host:port[,host:port]` entries to the decode's override table."""
    out = []
    for v in values or ():
        engine_id, sep, addrs = str(v).partition("=")
        if not sep or not engine_id:
            raise ConfigError("prefill_kv", v, "ENGINE_ID=host:port[,host:port...]")
        out.append((engine_id, addresses(addrs, "prefill_kv")))
    return tuple(out)


def prefill_kv_item(entry: tuple[str, tuple[Address, ...]]) -> str:
    """One `prefill_kv` entry as its flag writes it."""
    engine_id, addrs = entry
    return engine_id + "=" + ",".join(str(a) for a in addrs)
