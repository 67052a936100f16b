"""The expert-parallel options every engine takes, declared once (a base of
`zcube_lab.serving.config.EngineCommon`): its peers and the paths to them, the all-to-all's subflows
and timeouts, and how the exchange is sent (the model profile's `ExpertWire`, which these can
change for a sensitivity run).

`--ep-ports all` (the default) sends to every address of each peer, one connection per NIC port
and path (`--ep-source` binds each to the local port of its path, the KV pulls' source map),
and splits each peer's bytes evenly over them: every lab fabric's NIC ports have equal rates
(ZCube's two ports NIC/2 each, ROFT's planes NIC/P each), so an even split is the split by
port rate. `--ep-ports one` keeps the first address only, on the host's shortest routes, which
is how the lab sent all-to-all before. A peer with one address (a one-port NIC) has one path
either way; the exchange log's `lanes` says how many connections an exchange used.
"""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.options import option
from zcube_lab.serving.addresses import (
    EpPeer,
    as_ep_peers,
    check_source_map,
    ep_peer_item,
    parse_ep_peers,
    parse_source_map,
)
from zcube_lab.serving.eptraffic import FRAME_PACKETS, EpTraffic, with_wire
from zcube_lab.serving.models import ModelProfile

# Which addresses of an EP peer an exchange uses (`--ep-ports`).
EP_PORTS = ("all", "one")


def _check(cond: bool, field_name: str, value: object, allowed: str) -> None:
    if not cond:
        raise ConfigError(field_name, value, allowed)


def on_off(raw: object, field_name: str) -> bool | None:
    """An on/off option's value: True, False, or None (unset); anything else names the field."""
    if raw is None or isinstance(raw, bool):
        return raw
    text = str(raw).lower()
    if text not in ("on", "off"):
        raise ConfigError(field_name, raw, "on or off")
    return text == "on"


def on_off_text(value: bool) -> str:
    """An on/off option's flag text."""
    return "on" if value else "off"


@dataclass(frozen=True)
class EpOptions:
    """An engine's expert-parallel options; `check_ep` validates them against its profile."""

    # EP peers: each a host reached at one address per path (`host:port+host:port`).
    ep_peers: tuple[EpPeer, ...] = option(
        (),
        help="an EP peer: host:port, or its addresses joined by + (one per NIC port and path); "
        "repeat or comma-separate; none: EP size 1",
        repeat=True,
        parse=parse_ep_peers,
        item=ep_peer_item,
    )
    # Which of a peer's addresses an exchange uses: every one (a connection per port and
    # path, bytes split over them) or the first only, on the host's shortest routes.
    ep_ports: str = option(
        "all",
        help="all: every address of each EP peer, one connection per NIC port and path, the "
        "bytes split evenly (the ports' rates are equal); one: its first address only",
        omit_default=True,
    )
    # (cidr, local address): the source address of all-to-all connections to addresses in cidr
    # (the KV source map: on ZCube, each path leaves its own port).
    ep_source_map: tuple[tuple[str, str], ...] = option(
        (),
        flag="--ep-source",
        help="CIDR=LOCAL: all-to-all connections to addresses in CIDR bind local address LOCAL "
        "(repeatable; with --ep-ports all)",
        repeat=True,
        parse=parse_source_map,
        item=lambda entry: "=".join(entry),
    )
    # All-to-all: TCP subflows (source ports, hence ECMP hashes) per EP peer path; retire a
    # subflow that receives nothing for ep_stall_timeout_s (None: never); a peer not answered
    # within ep_timeout_s fails for that step.
    ep_subflows: int = option(
        1, help="all-to-all TCP subflows per EP peer address", omit_default=True
    )
    ep_stall_timeout_s: float | None = option(
        None,
        help="retire an all-to-all subflow that receives nothing for this long (default: never)",
        type=float,
        omit_default=True,
    )
    ep_timeout_s: float = option(
        5.0, help="an EP peer not answered within this fails for that step", omit_default=True
    )
    # How the exchange is sent (zcube_lab.serving.models.ExpertWire); None: the profile's.
    ep_per_node: bool | None = option(
        None,
        help="on: each token sent once per destination node (DeepEP's normal kernels); off: once "
        "per routed expert (default: the profile's)",
        parse=on_off,
        item=on_off_text,
        omit_default=True,
    )
    ep_node_limit: int | None = option(
        None,
        help="route each token to at most this many nodes (0: no limit; default: the profile's)",
        type=int,
        omit_default=True,
    )
    ep_dbo: bool | None = option(
        None,
        help="on: dual-batch overlap, two micro-batches hide each other's exchange behind "
        "compute; off: each frame's exchange follows its compute (default: the profile's)",
        parse=on_off,
        item=on_off_text,
        omit_default=True,
    )
    ep_frame_packets: int = option(
        FRAME_PACKETS,
        help="group MoE layers into frames of at least this many 9,000-byte packets per "
        "connection (zcube_lab.serving.eptraffic)",
        omit_default=True,
    )
    # Append one JSON line per all-to-all exchange to this file ("": no log).
    ep_log: str = option(
        "", help="append one JSON line per all-to-all exchange to this file", omit_default=True
    )

    def _check_ep(self, profile: ModelProfile) -> None:
        """Normalize bare addresses to one-address peers; a ConfigError names a bad option."""
        object.__setattr__(self, "ep_peers", as_ep_peers(self.ep_peers))
        if self.ep_peers and not profile.is_moe:
            peers = [ep_peer_item(p) for p in self.ep_peers]
            raise ConfigError("ep_peers", peers, "empty: model is dense")
        _check(all(self.ep_peers), "ep_peers", self.ep_peers, "at least one address per peer")
        _check(self.ep_ports in EP_PORTS, "ep_ports", self.ep_ports, " or ".join(EP_PORTS))
        check_source_map(self.ep_source_map, "ep_source")
        _check(1 <= self.ep_subflows <= 64, "ep_subflows", self.ep_subflows, "1..64")
        _check(0 < self.ep_timeout_s <= 3600, "ep_timeout_s", self.ep_timeout_s, "0 < s <= 3600")
        if self.ep_node_limit is not None:
            _check(self.ep_node_limit >= 0, "ep_node_limit", self.ep_node_limit, ">= 0 (0: none)")
        _check(
            1 <= self.ep_frame_packets <= 4096, "ep_frame_packets", self.ep_frame_packets, "1..4096"
        )
        _check("\n" not in self.ep_log, "ep_log", self.ep_log, "a file path")
        if self.ep_stall_timeout_s is not None:
            _check(
                0 < self.ep_stall_timeout_s < self.ep_timeout_s,
                "ep_stall_timeout_s",
                self.ep_stall_timeout_s,
                f"> 0 and < ep_timeout_s ({self.ep_timeout_s}), or unset (off)",
            )

    @property
    def ep_size(self) -> int:
        """GPU hosts this instance spans: itself plus its EP peers."""
        return 1 + len(self.ep_peers)

    @property
    def ep_paths(self) -> tuple[EpPeer, ...]:
        """Each EP peer's addresses an exchange uses (`ep_ports`)."""
        if self.ep_ports == "one":
            return tuple(p[:1] for p in self.ep_peers)
        return self.ep_peers

    def ep_traffic_of(self, profile: ModelProfile, bandwidth_scale: float) -> EpTraffic:
        """The all-to-all arithmetic of `profile` as these options change it."""
        profile = with_wire(
            profile,
            per_node=self.ep_per_node,
            node_limit=self.ep_node_limit,
            dual_batch_overlap=self.ep_dbo,
        )
        lanes = min((len(p) for p in self.ep_paths), default=1) * self.ep_subflows
        return EpTraffic(profile, self.ep_size, bandwidth_scale, lanes, self.ep_frame_packets)
