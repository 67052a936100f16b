"""Load generation: open-loop Locust load, arrival processes and workload profiles.

Modules, one concern each: `arrivals` (seeded arrival schedules), `profiles` (validated profile
data from `profiles/*.json`), `mooncake` (the trace format and its synthetic generator),
`requests` (the pure, seeded request plan), `client` (streaming measurement), `client_metrics`
(`zcube_client_*` Prometheus metrics), `openloop` (the driver), `locust_ext` (Locust options and
reporting), `loadsummary` (planned against achieved), `locustfile` (the user Locust runs),
`shards` (the plan sharded over Locust workers, and merged back), `stubserver` (a fast stub
endpoint for tests and benchmarks).
See docs/WORKLOADS.md.
"""

from pathlib import Path

# The file Locust runs (`locust -f LOCUSTFILE`), wherever the package is installed.
LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
