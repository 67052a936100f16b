"""The lab's locustfile: one open-loop user that replays the seeded request plan.

    locust -f zcube_lab/workloads/locustfile.py --headless --host http://127.0.0.1:8000 -u 1 -r 1 \
        --run-time 70s --workload coding-agent --seed 1 --arrival poisson --rate 2 \
        --duration 60 --metrics-port 9400 --requests-out results/requests.jsonl \
        --csv results/locust --json-file results/locust --only-summary

Open loop: `OpenLoopUser` (exactly one per process, whatever `-u` says) runs the plan's
dispatcher, which sends every request at its planned time from its own greenlet; completions
never gate arrivals. Options and reporting live in `zcube_lab.workloads.locust_ext`; this file only
declares the user and hooks the extension into Locust's events.

Distributed (docs/WORKLOADS.md): W workers started with `--worker --plan-shard K/W` (K = 0..W-1)
and a master started with `ZCUBE_LOCUST_WORKERS=W` and `--master --expect-workers W -u W -r W`;
`fixed_count` is Locust's total over the workers, so each worker gets one user and its shard.
"""

from __future__ import annotations

import logging
from typing import Any

import gevent
import locust.runners
import locust.stats
from locust import User, events, task
from locust.exception import StopUser

from zcube_lab.core.errors import ConfigError
from zcube_lab.workloads import locust_ext, shards

log = logging.getLogger("zcube.workloads")

try:
    # Read when Locust loads this file: the master's dispatcher reads `fixed_count` from here.
    WORKERS = shards.locust_workers()
except ConfigError as exc:
    log.error("zcube workload: %s", exc)
    raise SystemExit(2) from None


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any, **_: Any) -> None:
    locust_ext.add_arguments(parser)


@events.init.add_listener
def _register(environment: Any, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, locust.runners.MasterRunner):
        expected = environment.parsed_options.expect_workers
        if expected != WORKERS:
            # One user per worker: with fewer, a worker's shard would never be sent.
            log.error(
                "zcube workload: --expect-workers %d but %s=%d (one OpenLoopUser per worker)",
                expected,
                shards.WORKERS_ENV,
                WORKERS,
            )
            raise SystemExit(2)
    locust_ext.register(environment)


class OpenLoopUser(User):
    """Replays the whole plan open-loop, then ends the run (unless `--keep-running`)."""

    # One dispatcher per process: the plan already holds the concurrency; more users would
    # only replay it twice. Locust counts `fixed_count` over all workers (one when local).
    fixed_count = WORKERS
    driving = False  # this user runs the plan (a second one in the process does not)

    @task
    def replay(self) -> None:
        """Drive the plan to its end; stop the runner when it is done."""
        run = locust_ext.get_run(self.environment)
        if not run.claim():
            # A second user in this process: more users than workers, or the master handing a
            # worker that quit (its shard done) to a running one. The plan is already running.
            # (After a stop under --keep-running, a new user starts a new round instead.)
            log.warning(
                "a second OpenLoopUser in one process does nothing; see %s", shards.WORKERS_ENV
            )
            raise StopUser()
        self.driving = True
        run.drive()
        # Locust rewrites its CSV every CSV_STATS_INTERVAL_SEC and not again at shutdown: wait
        # for one more write so the CSV counts the last requests too. A worker's stats reach
        # the master (which writes the CSV) every WORKER_REPORT_INTERVAL: wait for one report.
        wait = locust.stats.CSV_STATS_INTERVAL_SEC + 0.5
        if isinstance(self.environment.runner, locust.runners.WorkerRunner):
            wait += locust.runners.WORKER_REPORT_INTERVAL
        gevent.sleep(wait)
        if not run.options.keep_running and self.environment.runner is not None:
            # Quit from a fresh greenlet: quitting kills the users, this one included.
            gevent.spawn(self.environment.runner.quit)
        raise StopUser()

    def on_stop(self) -> None:
        """Abandon in-flight requests when Locust stops this user (run time over, Ctrl-C)."""
        run = getattr(self.environment, locust_ext.ENV_ATTR, None)
        if run is not None and run.started and self.driving:
            run.stop()
