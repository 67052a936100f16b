"""A closed-loop locustfile, for comparison with the lab's open-loop one.

    locust -f zcube_lab/workloads/locustfile_closed.py --headless --host http://127.0.0.1:8000 \
        -u 16 -r 16 --run-time 60s --workload chat --seed 1 --requests-out requests.jsonl

Each of the `-u` users sends the plan's next request, waits for the whole answer and sends the
next: concurrency is fixed and the request rate is whatever the server allows (planned times
are ignored, the request shapes and their order are the plan's). Useful to find a cluster's
saturation throughput; it hides queueing, which is why the lab's runs are open-loop.
"""

from __future__ import annotations

from typing import Any

import gevent
import locust.stats
from locust import User, constant, events, task
from locust.exception import StopUser

from zcube_lab.workloads import locust_ext


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any, **_: Any) -> None:
    locust_ext.add_arguments(parser)


@events.init.add_listener
def _register(environment: Any, **_: Any) -> None:
    locust_ext.register(environment)


class ClosedLoopUser(User):
    """Sends the plan's requests back to back; the run ends when the plan is used up."""

    wait_time = constant(0)

    @task
    def next_request(self) -> None:
        """Send one planned request and wait for its answer."""
        run = locust_ext.get_run(self.environment)
        if run.finished and run.options.keep_running:
            run.again()  # Stop, then Start in the web UI: the plan from its start again
        if run.send_next():
            return
        if not run.quitting and not run.options.keep_running:
            run.quitting = True
            # As in the open-loop file: let Locust's CSV writer catch up, then quit.
            gevent.sleep(locust.stats.CSV_STATS_INTERVAL_SEC + 0.5)
            gevent.spawn(self.environment.runner.quit)
        raise StopUser()
