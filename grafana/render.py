"""Renders the dashboard model (`panels`) as Grafana's dashboard JSON model (schemaVersion 39).

Conventions every dashboard follows (tests/unit/test_grafana_dashboards.py checks them): the
Prometheus datasource is the template variable `datasource`, and every panel, query and
annotation uses `${datasource}`; panels are laid out left to right on Grafana's 24-column grid;
failure windows (injected faults, links down) are annotations on every dashboard.
"""

from __future__ import annotations

from zcube_lab.controller.port_metrics import LINK_UP
from zcube_lab.core.fault_schedule import ACTIVE_METRIC

from .panels import RUN, Dashboard, Panel, Variable

SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24


def _variable(v: Variable) -> dict[str, object]:
    selector = f"{v.metric}{{{v.depends}}}" if v.depends else v.metric
    query = f"label_values({selector}, {v.name})"
    return {
        "name": v.name,
        "label": v.label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor"},
        "refresh": 2,  # on time-range change: a new run appears without reloading
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 2 if v.name == "run" else 1,  # newest run first (names start with the time)
        "regex": "",
        "hide": 0,
        "options": [],
        "skipUrlSync": False,
    }


def _datasource_variable() -> dict[str, object]:
    return {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def _link_mbps_variable() -> dict[str, object]:
    return {
        "name": "link_mbps",
        "label": "Link Mb/s",
        "description": "Emulated rate of one fabric link: ZCube ports 50, ROFT/Clos 100 "
        "(at --nic-mbps 100).",
        "type": "custom",
        "query": "50,100,200",
        "current": {"selected": True, "text": "100", "value": "100"},
        "options": [
            {"selected": value == "100", "text": value, "value": value}
            for value in ("50", "100", "200")
        ],
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "skipUrlSync": False,
    }


def _options(panel: Panel) -> tuple[dict[str, object], dict[str, object]]:
    """The panel's `options` and its field `defaults`, which depend on the visualization."""
    defaults: dict[str, object] = {"unit": panel.unit}
    if panel.kind == "bargauge":
        defaults.update({"min": 0, "max": 1})
        return {
            "displayMode": "gradient",
            "orientation": "horizontal",
            "showUnfilled": True,
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        }, defaults
    if panel.kind == "status-history":
        defaults.update({"min": 0, "max": 1, "color": {"mode": "continuous-GrYlRd"}})
        return {
            "showValue": "never",
            "rowHeight": 0.9,
            "legend": {"showLegend": False},
        }, defaults
    return {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }, defaults


def _panel(panel: Panel, pid: int, x: int, y: int) -> dict[str, object]:
    targets = [
        {
            "datasource": DS,
            "refId": chr(ord("A") + i),
            "expr": q.expr,
            "legendFormat": q.legend or "__auto",
            "range": not q.instant,
            "instant": q.instant,
            "editorMode": "code",
        }
        for i, q in enumerate(panel.queries)
    ]
    options, defaults = _options(panel)
    return {
        "id": pid,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DS,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": targets,
    }


# Failure windows on every dashboard: injected faults (the run's injector) and links the
# controller saw go down (OpenFlow port-status).
ANNOTATIONS: tuple[dict[str, object], ...] = (
    {
        "name": "Injected faults",
        "datasource": DS,
        "enable": True,
        "iconColor": "red",
        "expr": f"max by (fault) ({ACTIVE_METRIC}{{{RUN}}}) > 0",
        "step": "1s",
        "titleFormat": "fault: {{fault}}",
        "tagKeys": "fault",
    },
    {
        "name": "Links down",
        "datasource": DS,
        "enable": True,
        "iconColor": "orange",
        "expr": f"count by (switch, peer) ({LINK_UP}{{{RUN}}} == 0)",
        "step": "1s",
        "titleFormat": "link down: {{switch}} -> {{peer}}",
        "tagKeys": "switch,peer",
    },
)


def render(d: Dashboard) -> dict[str, object]:
    """The Grafana dashboard model (schemaVersion 39) of one dashboard."""
    panels = []
    x = y = row_height = 0
    for pid, panel in enumerate(d.panels, start=1):
        if x + panel.width > GRID_COLUMNS:
            x, y, row_height = 0, y + row_height, 0
        panels.append(_panel(panel, pid, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    variables = [_datasource_variable(), *(_variable(v) for v in d.variables)]
    if d.link_mbps:
        variables.append(_link_mbps_variable())
    return {
        "uid": d.uid,
        "title": d.title,
        "description": d.description,
        "tags": ["zcube-lab"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "5s",
        "time": {"from": "now-15m", "to": "now"},
        "timezone": "utc",
        "annotations": {"list": list(ANNOTATIONS)},
        "links": [],
        "templating": {"list": variables},
        "panels": panels,
    }
