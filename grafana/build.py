"""Generates the lab's Grafana dashboards (`grafana/dashboards/*.json`) from panel definitions
kept as plain data in this package. One dashboard per concern: `serving`, `fabric`,
`kv-alltoall`, and `kpis` (the IETF BMWG draft's KPI names over the same series).

    python grafana/build.py           # rewrite the JSON files
    python grafana/build.py --check   # exit 1 if a committed file differs from this output

Conventions every dashboard follows (tests/unit/test_grafana_dashboards.py checks them):
- the Prometheus datasource is the template variable `datasource`; every panel and query uses
  `${datasource}`, so the same JSON works against any Prometheus (the VM's, a run's TSDB);
- template variables `run`, `fabric` and `model_name` select series by the target labels every
  run's Prometheus attaches (`run`, `fabric`) and by vLLM's `model_name` label (the load
  generator's own metrics call it `model`); they are multi-value regex matchers (`=~`);
- every metric a query names is one our code exports (serving, controller, workloads, emulator),
  and its name comes from the constant that code registers it under.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
DASHBOARD_DIR = HERE / "dashboards"
ROOT = HERE.parent
# Run as a file, Python puts grafana/ on the path, not the checkout this script belongs to:
# the dashboards are built from that checkout's metric constants.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from grafana import (  # noqa: E402
    fabric_dashboard,
    kpi_dashboard,
    kv_alltoall_dashboard,
    serving_dashboard,
)
from grafana.panels import Dashboard  # noqa: E402
from grafana.render import render  # noqa: E402

DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "serving": serving_dashboard.dashboard,
    "fabric": fabric_dashboard.dashboard,
    "kv-alltoall": kv_alltoall_dashboard.dashboard,
    "kpis": kpi_dashboard.dashboard,
}


def dashboard_text(name: str) -> str:
    """The JSON text committed as `dashboards/<name>.json`."""
    return json.dumps(render(DASHBOARDS[name]()), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the dashboards, or with --check report the ones that differ."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    stale = []
    for name in DASHBOARDS:
        path = DASHBOARD_DIR / f"{name}.json"
        text = dashboard_text(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            DASHBOARD_DIR.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        print("out of date (run python grafana/build.py):", *stale, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
