"""The `fabric` dashboard: per-link load from the controller's OpenFlow port counters, drops,
ECMP select-group buckets, link and fault state, and whether the emulator kept up.

Links are shown in both directions: a switch port's transmit counter is the direction away from
the switch (`a0:3 -> h5`), and the receive counter of a port whose peer is a host is that host's
transmit direction (`h5 -> a0:3`), the NIC-to-switch half the transmit counters alone miss."""

from __future__ import annotations

from zcube_lab.controller.port_metrics import (
    GROUP_BUCKET_BYTES,
    GROUP_BUCKET_PACKETS,
    LINK_UP,
    PORT_RX_BYTES,
    PORT_RX_DROPPED,
    PORT_RX_ERRORS,
    PORT_TX_BYTES,
    PORT_TX_DROPPED,
    PORT_TX_ERRORS,
    SWITCH_RULES_EXPECTED,
    SWITCH_RULES_INSTALLED,
    SWITCH_UP,
)
from zcube_lab.core.fault_schedule import ACTIVE_METRIC
from zcube_lab.emulator.lab.health import CPU_METRIC, PROCESS_METRIC
from zcube_lab.serving.vllm_metrics import (
    ALLTOALL_BYTES,
    NIXL_BYTES_TRANSFERRED,
    NUM_REQUESTS_RUNNING,
)

from .panels import (
    RATE,
    RUN,
    SRV,
    Dashboard,
    Panel,
    Query,
    Variable,
    hist_sum,
    run_variables,
    total,
)

FROM_HOSTS = f'{RUN}, peer=~"h[0-9]+"'  # switch ports whose peer is a host
# Transmit bytes per second of every switch port (the controller's counters carry `_total`),
# and what every host sent into its switch port.
TX = f"sum by (switch, port, peer) (rate({PORT_TX_BYTES}{{{RUN}}}{RATE}))"
HOST_TX = f"sum by (switch, port, peer) (rate({PORT_RX_BYTES}{{{FROM_HOSTS}}}{RATE}))"
UTILIZATION = f"{TX} * 8 / ($link_mbps * 1000000)"
HOST_UTILIZATION = f"{HOST_TX} * 8 / ($link_mbps * 1000000)"
LINK_LEGEND = "{{switch}}:{{port}} -> {{peer}}"
HOST_LEGEND = "{{peer}} -> {{switch}}:{{port}}"


def _rate(metric: str, matchers: str = RUN) -> str:
    return f"rate({metric}{{{matchers}}}{RATE})"


LINK_PANELS = (
    Panel(
        "Per-link utilization, sorted",
        "Every link in both directions over the emulated link rate ($link_mbps "
        "Mb/s: 50 on ZCube, 100 on ROFT/Clos at --nic-mbps 100), hottest first. "
        "Label: switch:port -> peer (the switch sends), host -> switch:port (the host sends).",
        (
            Query(f"sort_desc({UTILIZATION})", LINK_LEGEND, instant=True),
            Query(f"sort_desc({HOST_UTILIZATION})", HOST_LEGEND, instant=True),
        ),
        kind="bargauge",
        unit="percentunit",
        height=12,
    ),
    Panel(
        "Per-link utilization over time",
        "One row per link direction, coloured by its utilization (a heatmap of links).",
        (Query(UTILIZATION, LINK_LEGEND), Query(HOST_UTILIZATION, HOST_LEGEND)),
        kind="status-history",
        unit="percentunit",
        height=12,
    ),
    Panel(
        "Hottest links",
        "The five switch ports and the five hosts sending the most, in bit/s.",
        (Query(f"topk(5, {TX} * 8)", LINK_LEGEND), Query(f"topk(5, {HOST_TX} * 8)", HOST_LEGEND)),
        unit="bps",
    ),
    Panel(
        "Drops and errors",
        "Packets dropped (rx + tx) and port errors, per switch port.",
        (
            Query(
                f"sum by (switch, port) ({_rate(PORT_RX_DROPPED)} + {_rate(PORT_TX_DROPPED)})",
                "dropped {{switch}}:{{port}}",
            ),
            Query(
                f"sum({_rate(PORT_RX_ERRORS)} + {_rate(PORT_TX_ERRORS)})",
                "errors (all ports)",
            ),
        ),
        unit="pps",
    ),
    Panel(
        "Select-group buckets (ECMP spread)",
        "Bytes per OpenFlow select-group bucket: how evenly each switch spreads flows "
        "over its equal-cost ports. Label: switch group/bucket -> peer.",
        (
            Query(
                f"sum by (switch, group, bucket, peer) ({_rate(GROUP_BUCKET_BYTES)}) * 8",
                "{{switch}} g{{group}}/b{{bucket}} -> {{peer}}",
            ),
        ),
        unit="bps",
    ),
    Panel(
        "Select-group bucket packets",
        "Packets per select-group bucket, summed over groups.",
        (
            Query(
                f"sum by (switch, bucket, peer) ({_rate(GROUP_BUCKET_PACKETS)})",
                "{{switch}} b{{bucket}} -> {{peer}}",
            ),
        ),
        unit="pps",
    ),
)

HEALTH_PANELS = (
    Panel(
        "Fabric load vs. what the servers sent",
        "Bytes entering the fabric at host ports (switch rx from peers h*) against the KV "
        "and all-to-all bytes the engines report; the gap is headers and framing.",
        (
            Query(
                f"sum({_rate(PORT_RX_BYTES, FROM_HOSTS)}) * 8",
                "fabric ingress from hosts",
            ),
            Query(
                f"(sum({_rate(hist_sum(NIXL_BYTES_TRANSFERRED), SRV)})"
                f" + sum({_rate(total(ALLTOALL_BYTES), SRV)})) * 8",
                "KV + all-to-all reported by engines",
            ),
        ),
        unit="bps",
    ),
    Panel(
        "Emulator health",
        "Machine CPU (busy share) and the busiest processes in cores. Near 1 core for "
        "ovs-vswitchd or any engine, the emulator, not the fabric, sets the numbers.",
        (
            Query(f"{CPU_METRIC}{{{RUN}}}", "machine CPU (0-1)"),
            Query(f"topk(5, {PROCESS_METRIC}{{{RUN}}})", "{{process}} (cores)"),
        ),
    ),
    Panel(
        "Failures: links down and injected faults",
        f"Switch port ends whose link is down (from OpenFlow port-status, {LINK_UP}) "
        f"and the faults `--fail` holds at the moment ({ACTIVE_METRIC}). The same "
        "windows are annotations on every dashboard.",
        (
            Query(f"count({LINK_UP}{{{RUN}}} == 0) or vector(0)", "link ends down"),
            Query(f"sum({ACTIVE_METRIC}{{{RUN}}}) or vector(0)", "faults active"),
        ),
        width=24,
        height=6,
    ),
    Panel(
        "Switches and rules",
        "Switches connected and the share of expected flow rules installed.",
        (
            Query(f"sum({SWITCH_UP}{{{RUN}}})", "switches up"),
            Query(
                f"sum({SWITCH_RULES_INSTALLED}{{{RUN}}}) / sum({SWITCH_RULES_EXPECTED}{{{RUN}}})",
                "rules installed / expected",
            ),
        ),
        width=24,
        height=6,
    ),
)


def dashboard() -> Dashboard:
    """The fabric dashboard."""
    return Dashboard(
        uid="zcube-fabric",
        title="zcube-lab / Fabric",
        description="The emulated fabric: per-link load from the controller's OpenFlow port "
        "counters, drops, ECMP select-group buckets, and whether the emulator kept up.",
        variables=(
            *run_variables(PORT_TX_BYTES),
            Variable("model_name", "Model", NUM_REQUESTS_RUNNING, RUN),
        ),
        link_mbps=True,
        panels=(*LINK_PANELS, *HEALTH_PANELS),
    )
