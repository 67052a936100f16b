"""The lab's locustfile: one open-loop user that replays the seeded request plan.

    locust -f workloads/locustfile.py --headless --host http://127.0.0.1:8000 -u 1 -r 1 \
        --run-time 70s --workload coding-agent --seed 1 --arrival poisson --rate 2 \
        --duration 60 --metrics-port 9400 --requests-out results/requests.jsonl \
        --csv results/locust --json-file results/locust --only-summary

Open loop: `OpenLoopUser` (exactly one, whatever `-u` says) runs the plan's dispatcher, which
sends every request at its planned time from its own greenlet; completions never gate arrivals.
Options and reporting live in `workloads.locust_ext`; this file only declares the user and
hooks the extension into Locust's events.
"""

from __future__ import annotations

from typing import Any

import gevent
import locust.stats
from locust import User, events, task
from locust.exception import StopUser

from workloads import locust_ext


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any, **_: Any) -> None:
    locust_ext.add_arguments(parser)


@events.init.add_listener
def _register(environment: Any, **_: Any) -> None:
    locust_ext.register(environment)


class OpenLoopUser(User):
    """Replays the whole plan open-loop, then ends the run (unless `--keep-running`)."""

    # One dispatcher per process: the plan already holds the concurrency; more users would
    # only replay it twice.
    fixed_count = 1

    @task
    def replay(self) -> None:
        """Drive the plan to its end; stop the runner when it is done."""
        run = locust_ext.get_run(self.environment)
        run.drive()
        # Locust rewrites its CSV every CSV_STATS_INTERVAL_SEC and not again at shutdown: wait
        # for one more write so the CSV counts the last requests too.
        gevent.sleep(locust.stats.CSV_STATS_INTERVAL_SEC + 0.5)
        if not run.options.keep_running and self.environment.runner is not None:
            # Quit from a fresh greenlet: quitting kills the users, this one included.
            gevent.spawn(self.environment.runner.quit)
        raise StopUser()

    def on_stop(self) -> None:
        """Abandon in-flight requests when Locust stops this user (run time over, Ctrl-C)."""
        run = getattr(self.environment, locust_ext.ENV_ATTR, None)
        if run is not None and run.started:
            run.stop()
