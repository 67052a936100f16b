"""The os-ken app: installs `compute_rules` on every switch of the fabric and exports counters.

Configuration is passed in, not read from globals: the app expects the keyword argument
`zcube_config` (a `ControllerConfig`), which `python -m zcube_lab.controller` hands to
`AppManager.instantiate_apps` (os-ken forwards instantiate keywords to every app). Starting the
module with a plain `AppManager.run_apps` therefore fails at once with a message saying so.

Handlers stay thin: they look up the switch by dpid, call pure code (`zcube_lab.controller.ofmsg`
for messages, `zcube_lab.controller.rules` for routes and diffs, `FabricStats` for counters) and
send what it returns.
- switch features (a switch connected): known dpid -> add or replace the groups, then add
  the flows of the CURRENT rules (after any recompute), then a barrier, without clearing the
  switch first: a switch reconnecting to a restarted controller keeps forwarding throughout
  (`ofmsg.install_messages`), then reads the switch's flows back (flow statistics) and
  deletes those of ours the rules do not hold (left by an earlier controller that had routed
  around a failure); unknown dpid -> log and ignore.
- barrier reply: the switch applied everything; record the installed counts.
- port status (and the port descriptions os-ken asks for at connect): a port is down when its
  state says link down, its config says port down, or it was deleted. The app keeps the set of
  down (switch, port); a fabric link is down as soon as either end is. `zcube_link_up` and
  `zcube_port_status_events_total` follow.
- with `recompute` set, a change of link state starts a short debounce (both ends of a link
  report within it), then the app computes `compute_rules` on the fabric without the down links,
  and sends every connected switch only the difference (`rules.diff_rules` after
  `rules.align_groups`, as messages from `ofmsg.diff_messages`) and a barrier. Without it the
  app only records: `static` then does not react at all, `ecmp` and `ff` react in the switch
  (a select group hashes over the buckets whose watch_port is up; a fast-failover group takes
  the first such bucket).
- a poller thread sends port, aggregate-flow and group statistics requests every
  `poll_interval` seconds; the replies update `FabricStats`, which `FabricCollector` exports.
  With `idle_poll_interval` above it, the poll slows to that while no port counter moves and
  comes back at the first reply that shows one moved (`zcube_lab.controller.pace`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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

from zcube_lab.controller.ofmsg import (
    diff_messages,
    flow_delete_strict,
    flow_stats_request,
    install_messages,
    stale_flows,
    stats_requests,
)
from zcube_lab.controller.pace import PollPace
from zcube_lab.controller.port_metrics import FabricCollector, FabricStats, OpenFlowPortStats
from zcube_lab.controller.rules import (
    RuleDiff,
    SwitchRules,
    align_groups,
    check_policy,
    compute_rules,
    diff_rules,
    failed_links,
    link_states,
    port_peers,
)
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric, Link

# Both ends of a failed link report within a few milliseconds; wait this long after the first
# change so one recompute covers them.
RECOMPUTE_DEBOUNCE_S = 0.03


def port_is_down(ofp: Any, reason: int, desc: Any) -> bool:
    """Whether a port-status (or port description) says the port carries no traffic."""
    return bool(
        reason == ofp.OFPPR_DELETE
        or desc.state & ofp.OFPPS_LINK_DOWN
        or desc.config & ofp.OFPPC_PORT_DOWN
    )


def link_text(link: Link) -> str:
    """A link as `node1:port1-node2:port2` for logs."""
    return f"{link.node1}:{link.port1}-{link.node2}:{link.port2}"


@dataclass(frozen=True)
class ControllerConfig:
    """What the app routes and how: the fabric, the policy, the polling period, the registry
    its metrics go to, and whether it recomputes routes when links go down or up."""

    fabric: Fabric
    policy: str
    poll_interval: float
    registry: CollectorRegistry
    recompute: bool = False
    ev_rules: bool = False  # also the static EV rules (UDP source port -> path; MRC)
    # > poll_interval: poll this slowly while no port counter moves (`pace.PollPace`); 0: off
    idle_poll_interval: float = 0.0

    def __post_init__(self) -> None:
        # Stored by its name, not an alias, so the logs and the rules agree on what it is.
        object.__setattr__(self, "policy", check_policy(self.policy))
        if not self.poll_interval > 0:
            raise ConfigError("poll_interval", self.poll_interval, "a number of seconds > 0")
        PollPace(self.poll_interval, self.idle_poll_interval)  # ConfigError names a bad one
        if not isinstance(self.recompute, bool):
            raise ConfigError("recompute", self.recompute, "True or False")
        if not isinstance(self.ev_rules, bool):
            raise ConfigError("ev_rules", self.ev_rules, "True or False")


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
                "a ControllerConfig passed to instantiate_apps; "
                "start with python -m zcube_lab.controller",
            )
        self.config = config
        fabric = config.fabric
        self.rules: dict[int, SwitchRules] = compute_rules(fabric, config.policy, config.ev_rules)
        by_name = {r.name: r for r in self.rules.values()}
        peers = {
            (node, port): far
            for (node, port), (far, _far_port) in port_peers(fabric).items()
            if fabric.is_switch(node)
        }
        self.stats = FabricStats(by_name, link_states(fabric, ()))
        config.registry.register(FabricCollector(self.stats, peers))
        self._datapaths: dict[int, Any] = {}
        self._barriers: dict[int, int] = {}  # dpid -> xid of the barrier ending the install
        self._stale_reads: dict[int, list[Any]] = {}  # dpid -> flow stats gathered after install
        self._lock = threading.Lock()
        # Serialises installing a connecting switch with a recompute, so a switch gets either
        # the old rules and then the diff, or the new rules and no diff.
        self._route_lock = threading.Lock()
        self._stop = threading.Event()
        # The statistics poll's pace; `_wake` cuts an idle wait short, `_moved` says whether a
        # reply since the last poll moved a port counter (both under `_lock`).
        self.pace = PollPace(config.poll_interval, config.idle_poll_interval)
        self._wake = threading.Event()
        self._moved = False
        self._down_ports: set[tuple[str, int]] = set()
        self._routed_down: tuple[Link, ...] = ()  # the failed links self.rules avoid
        self._pending_since: float | None = None  # monotonic time of the first unrouted change
        self._timer: Any = None
        # Runs a function after a delay on another thread (tests replace it).
        self.defer: Callable[[float, Callable[[], None]], Any] = hub.spawn_after

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Any:
        thread = super().start()
        self.threads.append(hub.spawn(self._poll_loop))
        self.logger.info(
            "routing %s (%d switches) with policy %s%s",
            self.config.fabric.kind,
            len(self.rules),
            self.config.policy,
            ", recomputing on link changes" if self.config.recompute else "",
        )
        return thread

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        super().stop()

    # -- installing rules -------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _on_features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        with self._route_lock:
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
                self._stale_reads[dp.id] = []
            dp.send_msg(barrier)
            dp.send_msg(flow_stats_request(dp))  # answered after the install (in order)
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

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_flow_stats(self, ev: Any) -> None:
        """The flows a connected switch holds after our install: delete ours the current rules
        do not (a multipart reply is gathered until its last part)."""
        dp = ev.msg.datapath
        with self._route_lock:
            with self._lock:
                entries = self._stale_reads.get(dp.id)
                if entries is None:
                    return
                entries.extend(ev.msg.body)
                if ev.msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
                    return
                del self._stale_reads[dp.id]
            rules = self.rules[dp.id]
            stale = stale_flows(entries, rules)
            for flow in stale:
                dp.send_msg(flow_delete_strict(dp, flow))
        if stale:
            self.logger.warning("%s: deleted %d stale flows", rules.name, len(stale))

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def _on_dead(self, ev: Any) -> None:
        dp = ev.datapath
        with self._lock:
            known = self._datapaths.pop(dp.id, None) is not None
            self._barriers.pop(dp.id, None)
            self._stale_reads.pop(dp.id, None)
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

    # -- link state and recomputing ----------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_port_status(self, ev: Any) -> None:
        msg = ev.msg
        rules = self.rules.get(msg.datapath.id)
        if rules is None:
            return
        ofp = msg.datapath.ofproto
        self.stats.port_status(rules.name)
        if msg.desc.port_no <= ofp.OFPP_MAX:
            down = port_is_down(ofp, msg.reason, msg.desc)
            self._observe(rules.name, {msg.desc.port_no: down})

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_port_desc(self, ev: Any) -> None:
        # os-ken asks every connecting switch for its ports: this catches links that changed
        # while the switch was away.
        msg = ev.msg
        rules = self.rules.get(msg.datapath.id)
        if rules is None:
            return
        ofp = msg.datapath.ofproto
        self._observe(
            rules.name,
            {
                p.port_no: port_is_down(ofp, ofp.OFPPR_MODIFY, p)
                for p in msg.body
                if p.port_no <= ofp.OFPP_MAX
            },
        )

    def _observe(self, switch: str, ports: dict[int, bool]) -> None:
        """Record port states (True = down); on a change, update link metrics and, when
        recomputing, schedule a recompute."""
        fabric = self.config.fabric
        with self._lock:
            before = set(self._down_ports)
            for port, down in ports.items():
                if down:
                    self._down_ports.add((switch, port))
                else:
                    self._down_ports.discard((switch, port))
            if self._down_ports == before:
                return
            down_now = frozenset(self._down_ports)
            schedule = self.config.recompute and self._pending_since is None
            if schedule:
                self._pending_since = time.monotonic()
        for port, down in sorted(ports.items()):
            if ((switch, port) in before) != down:
                self.logger.info("%s port %d %s", switch, port, "down" if down else "up")
        self.stats.set_links(link_states(fabric, down_now))
        if schedule:
            timer = self.defer(RECOMPUTE_DEBOUNCE_S, self._recompute_safely)
            with self._lock:
                self._timer = timer

    def _recompute_safely(self) -> None:
        try:
            self.recompute()
        except Exception:
            # On a timer thread nobody else would see it.
            self.logger.exception("route recompute failed")

    def recompute(self) -> dict[str, RuleDiff]:
        """Route around the links down now: compute the rules without them and send every
        connected switch what changed. Returns the non-empty diffs by switch name."""
        fabric, policy = self.config.fabric, self.config.policy
        started = time.monotonic()
        with self._route_lock:
            with self._lock:
                since, self._pending_since = self._pending_since, None
                self._timer = None
                down = failed_links(fabric, self._down_ports)
                datapaths = dict(self._datapaths)
            if down == self._routed_down:
                return {}  # a flap within the debounce: nothing to change
            went_down = [lk for lk in down if lk not in self._routed_down]
            came_up = [lk for lk in self._routed_down if lk not in down]
            fresh = compute_rules(fabric.without_links(down), policy, self.config.ev_rules)
            rules: dict[int, SwitchRules] = {}
            diffs: dict[int, RuleDiff] = {}
            for dpid, old in self.rules.items():
                rules[dpid] = align_groups(old, fresh[dpid])
                diff = diff_rules(old, rules[dpid])
                if not diff.empty:
                    diffs[dpid] = diff
            self.rules, self._routed_down = rules, down
            for dpid in diffs:
                self.stats.set_rules(rules[dpid].name, rules[dpid])
            for dpid, diff in diffs.items():
                dp = datapaths.get(dpid)
                if dp is None:
                    continue  # it gets the current rules when it connects
                for msg in diff_messages(dp, diff):
                    dp.send_msg(msg)
                barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
                dp.set_xid(barrier)
                with self._lock:
                    self._barriers[dpid] = barrier.xid
                dp.send_msg(barrier)
            # From the first port status it answers (or from now, when called directly).
            elapsed = time.monotonic() - (started if since is None else since)
        self.stats.recomputed(elapsed)
        changes = [
            *(f"link {link_text(lk)} down" for lk in went_down),
            *(f"link {link_text(lk)} up" for lk in came_up),
        ]
        self.logger.warning(
            "%s; recomputed, %d flows/%d groups changed on %d switches in %.1f ms",
            ", ".join(changes),
            sum(d.flows_changed for d in diffs.values()),
            sum(d.groups_changed for d in diffs.values()),
            len(diffs),
            elapsed * 1000,
        )
        return {rules[dpid].name: diff for dpid, diff in diffs.items()}

    # -- statistics -------------------------------------------------------------------------
    def _poll_loop(self) -> None:
        interval = self.pace.active_s
        while True:
            # Event.wait doubles as the sleep, so stop() (or a reply that ends an idle pace)
            # ends it at once.
            self._wake.wait(interval)
            if self._stop.is_set():
                return
            self._wake.clear()
            with self._lock:
                datapaths = list(self._datapaths.values())
                moved, self._moved = self._moved, False
                interval = self.pace.polled(moved)
            for dp in datapaths:
                for request in stats_requests(dp, bool(self.rules[dp.id].groups)):
                    dp.send_msg(request)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _on_port_stats(self, ev: Any) -> None:
        rules = self.rules.get(ev.msg.datapath.id)
        if rules is None:
            return
        ofp = ev.msg.datapath.ofproto
        moved = self.stats.ports(
            rules.name,
            {
                s.port_no: OpenFlowPortStats(
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
        if moved:
            with self._lock:
                self._moved = True
                wake = self.pace.replied(True)
            if wake:
                self._wake.set()

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
