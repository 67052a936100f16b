"""The controller's Prometheus metrics: names, the latest counters, and a collector.

The app's handlers write switch counters into a `FabricStats` (thread-safe: the OpenFlow threads
write, the HTTP exporter's thread reads); `FabricCollector` turns a snapshot of it into metric
families on whatever `CollectorRegistry` it is registered with. Counters are the switch's own
(rates come from PromQL `rate()`), so nothing here reads the clock.

Labels: `switch` is the fabric switch name (`a0`, `leaf1`), `port` the OpenFlow port number,
`peer` the node at the other end of that port in the fabric description (`b0`, `spine1`, `h3`;
empty for a port the fabric does not know); group buckets add `group` and `bucket` (index).

Failures: `zcube_link_up` is 0 for both switch ends of a link once either end reported down
(port status), `zcube_port_status_events_total` counts those reports per switch, and a
recomputing controller counts its recomputes and how long the last one took from the port
status to the last barrier sent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from zcube_lab.controller.rules import SwitchRules

# Per switch port, from OpenFlow port statistics. (Exposed names; counters end in _total.)
PORT_RX_BYTES = "zcube_port_rx_bytes_total"
PORT_TX_BYTES = "zcube_port_tx_bytes_total"
PORT_RX_PACKETS = "zcube_port_rx_packets_total"
PORT_TX_PACKETS = "zcube_port_tx_packets_total"
PORT_RX_DROPPED = "zcube_port_rx_dropped_total"
PORT_TX_DROPPED = "zcube_port_tx_dropped_total"
PORT_RX_ERRORS = "zcube_port_rx_errors_total"
PORT_TX_ERRORS = "zcube_port_tx_errors_total"
# Per select-group bucket, from OpenFlow group statistics.
GROUP_BUCKET_PACKETS = "zcube_group_bucket_packets_total"
GROUP_BUCKET_BYTES = "zcube_group_bucket_bytes_total"
# Per switch.
SWITCH_RULES_EXPECTED = "zcube_switch_rules_expected"
SWITCH_RULES_INSTALLED = "zcube_switch_rules_installed"
SWITCH_GROUPS_INSTALLED = "zcube_switch_groups_installed"
SWITCH_FLOWS = "zcube_switch_flows"
SWITCH_UP = "zcube_switch_up"
OPENFLOW_ERRORS = "zcube_openflow_errors_total"
# Per switch port that is a link end, and per switch: link state from port-status messages.
LINK_UP = "zcube_link_up"
PORT_STATUS_EVENTS = "zcube_port_status_events_total"
# Fabric-wide.
SWITCHES_CONNECTED = "zcube_switches_connected"
ROUTE_RECOMPUTES = "zcube_route_recomputes_total"
ROUTE_RECOMPUTE_SECONDS = "zcube_route_recompute_seconds"

PORT_COUNTERS: tuple[tuple[str, str, str], ...] = (
    # (OpenFlowPortStats field, metric name, help)
    ("rx_bytes", PORT_RX_BYTES, "Bytes received on a switch port."),
    ("tx_bytes", PORT_TX_BYTES, "Bytes sent from a switch port."),
    ("rx_packets", PORT_RX_PACKETS, "Packets received on a switch port."),
    ("tx_packets", PORT_TX_PACKETS, "Packets sent from a switch port."),
    ("rx_dropped", PORT_RX_DROPPED, "Received packets the switch port dropped."),
    ("tx_dropped", PORT_TX_DROPPED, "Packets to send the switch port dropped."),
    ("rx_errors", PORT_RX_ERRORS, "Receive errors on a switch port."),
    ("tx_errors", PORT_TX_ERRORS, "Transmit errors on a switch port."),
)


@dataclass(frozen=True)
class OpenFlowPortStats:
    """One switch port's OpenFlow statistics as the switch last reported them (cumulative
    counters of an OFPPortStats reply)."""

    rx_bytes: int = 0
    tx_bytes: int = 0
    rx_packets: int = 0
    tx_packets: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0
    rx_errors: int = 0
    tx_errors: int = 0


@dataclass
class _SwitchState:
    up: bool = False
    rules_installed: int = 0
    groups_installed: int = 0
    flows_reported: int | None = None
    errors: int = 0
    port_status_events: int = 0
    ports: dict[int, OpenFlowPortStats] = field(default_factory=dict)
    # group id -> (packets, bytes) per bucket, in bucket order
    buckets: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class RouteStats:
    """Fabric-wide link and recompute figures."""

    links: dict[tuple[str, int], bool]
    recomputes: int
    last_recompute_s: float | None


class FabricStats:
    """The latest counters of every switch, keyed by switch name, the rules each should hold,
    and the state of every link end (switch, port)."""

    def __init__(
        self,
        switches: Mapping[str, SwitchRules],
        links: Mapping[tuple[str, int], bool] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._rules = dict(switches)
        self._state = {name: _SwitchState() for name in switches}
        self._links = dict(links or {})
        self._recomputes = 0
        self._last_recompute_s: float | None = None

    def _kept(self, switch: str, up: bool) -> _SwitchState:
        # Event counters survive a reconnect; the switch's own counters do not.
        old = self._state[switch]
        return _SwitchState(up=up, errors=old.errors, port_status_events=old.port_status_events)

    def connected(self, switch: str) -> None:
        with self._lock:
            self._state[switch] = self._kept(switch, up=True)

    def disconnected(self, switch: str) -> None:
        # Counters of a gone switch are stale: drop them rather than export old values.
        with self._lock:
            self._state[switch] = self._kept(switch, up=False)

    def set_rules(self, switch: str, rules: SwitchRules) -> None:
        """The rules the switch should now hold (after a recompute)."""
        with self._lock:
            self._rules[switch] = rules

    def rules(self, switch: str) -> SwitchRules:
        with self._lock:
            return self._rules[switch]

    def port_status(self, switch: str) -> None:
        with self._lock:
            self._state[switch].port_status_events += 1

    def set_links(self, links: Mapping[tuple[str, int], bool]) -> None:
        """Whether each link end's link is up (ends not given keep their state)."""
        with self._lock:
            self._links.update(links)

    def recomputed(self, seconds: float) -> None:
        with self._lock:
            self._recomputes += 1
            self._last_recompute_s = seconds

    def routes(self) -> RouteStats:
        """A copy of the link states and recompute figures."""
        with self._lock:
            return RouteStats(dict(self._links), self._recomputes, self._last_recompute_s)

    def installed(self, switch: str, flows: int, groups: int) -> None:
        with self._lock:
            state = self._state[switch]
            state.rules_installed, state.groups_installed = flows, groups

    def flows_reported(self, switch: str, flows: int) -> None:
        with self._lock:
            self._state[switch].flows_reported = flows

    def error(self, switch: str) -> None:
        with self._lock:
            self._state[switch].errors += 1

    def ports(self, switch: str, counters: Mapping[int, OpenFlowPortStats]) -> bool:
        """Keep a switch's port counters; whether any port's packet counts moved (or a port
        is new) since the last reply."""
        with self._lock:
            kept = self._state[switch].ports
            moved = any(
                (old := kept.get(port)) is None
                or (old.rx_packets, old.tx_packets) != (new.rx_packets, new.tx_packets)
                for port, new in counters.items()
            )
            kept.update(counters)
            return moved

    def buckets(self, switch: str, counters: Mapping[int, tuple[tuple[int, int], ...]]) -> None:
        with self._lock:
            self._state[switch].buckets.update(counters)

    def snapshot(self) -> dict[str, _SwitchState]:
        """A copy that later updates do not change."""
        with self._lock:
            return {
                name: _SwitchState(
                    s.up,
                    s.rules_installed,
                    s.groups_installed,
                    s.flows_reported,
                    s.errors,
                    s.port_status_events,
                    dict(s.ports),
                    dict(s.buckets),
                )
                for name, s in self._state.items()
            }

    def expected(self, switch: str) -> int:
        with self._lock:
            return len(self._rules[switch].flows)


class FabricCollector(Collector):
    """Exports a `FabricStats` as `zcube_*` metric families at every scrape."""

    def __init__(self, stats: FabricStats, peers: Mapping[tuple[str, int], str]) -> None:
        self._stats = stats
        self._peers = peers

    def collect(self) -> Iterator[Metric]:
        snap = self._stats.snapshot()
        port_labels = ["switch", "port", "peer"]
        families = {
            attr: CounterMetricFamily(name, text, labels=port_labels)
            for attr, name, text in PORT_COUNTERS
        }
        bucket_labels = ["switch", "group", "bucket", "port", "peer"]
        b_packets = CounterMetricFamily(
            GROUP_BUCKET_PACKETS, "Packets a select-group bucket sent.", labels=bucket_labels
        )
        b_bytes = CounterMetricFamily(
            GROUP_BUCKET_BYTES, "Bytes a select-group bucket sent.", labels=bucket_labels
        )
        expected = GaugeMetricFamily(
            SWITCH_RULES_EXPECTED, "Flows compute_rules gives the switch.", labels=["switch"]
        )
        installed = GaugeMetricFamily(
            SWITCH_RULES_INSTALLED,
            "Flows the controller installed on the switch (confirmed by a barrier).",
            labels=["switch"],
        )
        groups = GaugeMetricFamily(
            SWITCH_GROUPS_INSTALLED,
            "Groups the controller installed on the switch (confirmed by a barrier).",
            labels=["switch"],
        )
        reported = GaugeMetricFamily(
            SWITCH_FLOWS,
            "Flows with the controller's cookie the switch reports.",
            labels=["switch"],
        )
        up = GaugeMetricFamily(SWITCH_UP, "1 if the switch is connected.", labels=["switch"])
        errors = CounterMetricFamily(
            OPENFLOW_ERRORS, "OpenFlow error messages received from the switch.", labels=["switch"]
        )
        for name, state in sorted(snap.items()):
            expected.add_metric([name], self._stats.expected(name))
            installed.add_metric([name], state.rules_installed)
            groups.add_metric([name], state.groups_installed)
            up.add_metric([name], 1 if state.up else 0)
            errors.add_metric([name], state.errors)
            if state.flows_reported is not None:
                reported.add_metric([name], state.flows_reported)
            for port, counters in sorted(state.ports.items()):
                labels = [name, str(port), self._peers.get((name, port), "")]
                for attr, family in families.items():
                    family.add_metric(labels, getattr(counters, attr))
            group_specs = {g.group_id: g for g in self._stats.rules(name).groups}
            for group_id, counts in sorted(state.buckets.items()):
                spec = group_specs.get(group_id)
                for index, (packets, nbytes) in enumerate(counts):
                    port = spec.buckets[index].port if spec and index < len(spec.buckets) else 0
                    labels = [
                        name,
                        str(group_id),
                        str(index),
                        str(port),
                        self._peers.get((name, port), ""),
                    ]
                    b_packets.add_metric(labels, packets)
                    b_bytes.add_metric(labels, nbytes)
        connected = GaugeMetricFamily(SWITCHES_CONNECTED, "Switches connected to the controller.")
        connected.add_metric([], sum(1 for s in snap.values() if s.up))
        yield from families.values()
        yield from (b_packets, b_bytes, expected, installed, groups, reported, up, errors)
        yield connected
        yield from self._route_families(snap)

    def _route_families(self, snap: Mapping[str, _SwitchState]) -> Iterator[Metric]:
        routes = self._stats.routes()
        link_up = GaugeMetricFamily(
            LINK_UP,
            "1 while the link at this switch port is up (neither end reported down).",
            labels=["switch", "port", "peer"],
        )
        for (name, port), is_up in sorted(routes.links.items()):
            link_up.add_metric([name, str(port), self._peers.get((name, port), "")], int(is_up))
        events = CounterMetricFamily(
            PORT_STATUS_EVENTS, "Port-status messages received from the switch.", labels=["switch"]
        )
        for name, state in sorted(snap.items()):
            events.add_metric([name], state.port_status_events)
        recomputes = CounterMetricFamily(
            ROUTE_RECOMPUTES, "Route recomputes after link-state changes."
        )
        recomputes.add_metric([], routes.recomputes)
        yield from (link_up, events, recomputes)
        if routes.last_recompute_s is not None:
            seconds = GaugeMetricFamily(
                ROUTE_RECOMPUTE_SECONDS,
                "Seconds from the port status to the last barrier sent, last recompute.",
            )
            seconds.add_metric([], routes.last_recompute_s)
            yield seconds
