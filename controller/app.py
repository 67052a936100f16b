"""The os-ken app: installs `compute_rules` on every switch of the fabric and exports counters.

Configuration is passed in, not read from globals: the app expects the keyword argument
`zcube_config` (a `ControllerConfig`), which `python -m controller` hands to
`AppManager.instantiate_apps` (os-ken forwards instantiate keywords to every app). Starting the
module with a plain `AppManager.run_apps` therefore fails at once with a message saying so.

Handlers stay thin: they look up the switch by dpid, call pure code (`controller.ofmsg` for
messages, `FabricStats` for counters) and send what it returns.
- switch features (a switch connected): known dpid -> clear its flows and groups, add the
  groups, then the flows, then a barrier; unknown dpid -> log and ignore.
- barrier reply: the switch applied everything; record the installed counts.
- a poller thread sends port, aggregate-flow and group statistics requests every
  `poll_interval` seconds; the replies update `FabricStats`, which `FabricCollector` exports.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3
from prometheus_client import CollectorRegistry

from controller.metrics import FabricCollector, FabricStats, PortCounters
from controller.ofmsg import install_messages, stats_requests
from controller.rules import SwitchRules, check_policy, compute_rules, port_peers
from emulator.fabric import Fabric
from zcube_lab.errors import ConfigError


@dataclass(frozen=True)
class ControllerConfig:
    """What the app routes and how: the fabric, the policy, the polling period, the registry
    its metrics go to."""

    fabric: Fabric
    policy: str
    poll_interval: float
    registry: CollectorRegistry

    def __post_init__(self) -> None:
        check_policy(self.policy)
        if not self.poll_interval > 0:
            raise ConfigError("poll_interval", self.poll_interval, "a number of seconds > 0")


class ZCubeController(app_manager.OSKenApp):
    """Proactive routing for one fabric over OpenFlow 1.3."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.pop("zcube_config", None)
        super().__init__(*args, **kwargs)
        if not isinstance(config, ControllerConfig):
            raise ConfigError(
                "zcube_config",
                config,
                "a ControllerConfig passed to instantiate_apps; start with python -m controller",
            )
        self.config = config
        fabric = config.fabric
        self.rules: dict[int, SwitchRules] = compute_rules(fabric, config.policy)
        by_name = {r.name: r for r in self.rules.values()}
        peers = {
            (node, port): far
            for (node, port), (far, _far_port) in port_peers(fabric).items()
            if fabric.is_switch(node)
        }
        self.stats = FabricStats(by_name)
        config.registry.register(FabricCollector(self.stats, by_name, peers))
        self._datapaths: dict[int, Any] = {}
        self._barriers: dict[int, int] = {}  # dpid -> xid of the barrier ending the install
        self._lock = threading.Lock()
        self._stop = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Any:
        thread = super().start()
        self.threads.append(hub.spawn(self._poll_loop))
        self.logger.info(
            "routing %s (%d switches) with policy %s",
            self.config.fabric.kind,
            len(self.rules),
            self.config.policy,
        )
        return thread

    def stop(self) -> None:
        self._stop.set()
        super().stop()

    # -- installing rules -------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _on_features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        rules = self.rules.get(dp.id)
        if rules is None:
            self.logger.warning("ignoring switch with unknown dpid %016x", dp.id)
            return
        for msg in install_messages(dp, rules):
            dp.send_msg(msg)
        barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
        dp.set_xid(barrier)
        with self._lock:
            self._datapaths[dp.id] = dp
            self._barriers[dp.id] = barrier.xid
        dp.send_msg(barrier)
        self.stats.connected(rules.name)
        self.logger.info(
            "%s (%016x): sent %d flows, %d groups",
            rules.name,
            dp.id,
            len(rules.flows),
            len(rules.groups),
        )

    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_barrier(self, ev: Any) -> None:
        dp = ev.msg.datapath
        with self._lock:
            done = self._barriers.get(dp.id) == ev.msg.xid
            if done:
                del self._barriers[dp.id]
        if done:
            rules = self.rules[dp.id]
            self.stats.installed(rules.name, len(rules.flows), len(rules.groups))
            self.logger.info("%s: rules installed", rules.name)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def _on_dead(self, ev: Any) -> None:
        dp = ev.datapath
        with self._lock:
            known = self._datapaths.pop(dp.id, None) is not None
            self._barriers.pop(dp.id, None)
        if known:
            self.stats.disconnected(self.rules[dp.id].name)
            self.logger.warning("%s disconnected", self.rules[dp.id].name)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_error(self, ev: Any) -> None:
        msg = ev.msg
        rules = self.rules.get(msg.datapath.id)
        if rules is not None:
            self.stats.error(rules.name)
        self.logger.error(
            "OpenFlow error from %016x: type=%d code=%d", msg.datapath.id, msg.type, msg.code
        )

    # -- statistics -------------------------------------------------------------------------
    def _poll_loop(self) -> None:
        # Event.wait doubles as the sleep, so stop() ends the loop at once.
        while not self._stop.wait(self.config.poll_interval):
            with self._lock:
                datapaths = list(self._datapaths.values())
            for dp in datapaths:
                for request in stats_requests(dp, bool(self.rules[dp.id].groups)):
                    dp.send_msg(request)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _on_port_stats(self, ev: Any) -> None:
        rules = self.rules.get(ev.msg.datapath.id)
        if rules is None:
            return
        ofp = ev.msg.datapath.ofproto
        self.stats.ports(
            rules.name,
            {
                s.port_no: PortCounters(
                    s.rx_bytes,
                    s.tx_bytes,
                    s.rx_packets,
                    s.tx_packets,
                    s.rx_dropped,
                    s.tx_dropped,
                    s.rx_errors,
                    s.tx_errors,
                )
                for s in ev.msg.body
                if s.port_no <= ofp.OFPP_MAX  # skip LOCAL: the bridge's own port is no link
            },
        )

    @set_ev_cls(ofp_event.EventOFPGroupStatsReply, MAIN_DISPATCHER)
    def _on_group_stats(self, ev: Any) -> None:
        rules = self.rules.get(ev.msg.datapath.id)
        if rules is None:
            return
        self.stats.buckets(
            rules.name,
            {
                g.group_id: tuple((b.packet_count, b.byte_count) for b in g.bucket_stats)
                for g in ev.msg.body
            },
        )

    @set_ev_cls(ofp_event.EventOFPAggregateStatsReply, MAIN_DISPATCHER)
    def _on_aggregate(self, ev: Any) -> None:
        rules = self.rules.get(ev.msg.datapath.id)
        if rules is not None:
            self.stats.flows_reported(rules.name, ev.msg.body.flow_count)
