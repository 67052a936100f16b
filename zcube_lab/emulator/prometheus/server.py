"""The run's Prometheus process (adapter): Debian's `/usr/bin/prometheus` as a subprocess.

`PrometheusServer` runs it on 127.0.0.1 at a free port (never 9090, where the Debian system
service may listen), waits for `/-/ready`, and speaks the HTTP API (queries, target health, TSDB
snapshots, series export) with urllib, so it needs no extra dependency. The configuration it
runs with is built by `zcube_lab.emulator.prometheus.config` (pure);
what a run asks it is in `zcube_lab.emulator.prometheus.queries`.

Layout under the caller's working directory: `prometheus.yml`, `prometheus.log`, `tsdb/` (with
`tsdb/snapshots/<name>` after `snapshot()`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from zcube_lab.adapters.ports import free_port

PROMETHEUS_BINARY = "/usr/bin/prometheus"


# --- adapter: the real server ---------------------------------------------------------------


class PrometheusError(RuntimeError):
    """Prometheus failed to start, or its API answered with an error (its message included)."""


@dataclass(frozen=True)
class TargetHealth:
    """Scrape health of one active target, as `/api/v1/targets` reports it."""

    job: str
    instance: str
    health: str  # "up", "down" or "unknown" (not scraped yet)
    last_error: str
    scrape_url: str


class PrometheusServer:
    """Debian's Prometheus on 127.0.0.1:<free port>, storing its TSDB under `workdir/tsdb`.

    `start()` writes the config, launches the binary and waits for `/-/ready`; `stop()` sends
    SIGTERM, then SIGKILL after `grace_s`, and always reaps the process. Use it as a context
    manager so a failing run still stops it.
    """

    def __init__(
        self,
        config_text: str,
        workdir: Path | str,
        *,
        binary: str = PROMETHEUS_BINARY,
        retention: str = "1d",
        ready_timeout_s: float = 30.0,
        grace_s: float = 10.0,
        http_timeout_s: float = 10.0,
        port: int | None = None,
        listen_host: str = "127.0.0.1",
    ) -> None:
        self.config_text = config_text
        # Absolute: Prometheus resolves relative paths against its own working directory.
        self.workdir = Path(workdir).resolve()
        self.binary = binary
        self.retention = retention
        self.ready_timeout_s = ready_timeout_s
        self.grace_s = grace_s
        self.http_timeout_s = http_timeout_s
        # None: a free port on each attempt; a number: that port, for Grafana and browsers.
        self.requested_port = port
        self.listen_host = listen_host
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        # urllib follows http_proxy from the environment; never send 127.0.0.1 through a proxy.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # paths and addresses

    @property
    def config_path(self) -> Path:
        return self.workdir / "prometheus.yml"

    @property
    def tsdb_path(self) -> Path:
        return self.workdir / "tsdb"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    @property
    def url(self) -> str:
        if self.port is None:
            raise PrometheusError("Prometheus is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        """Whether our Prometheus process is alive."""
        return self._proc is not None and self._proc.poll() is None

    # lifecycle

    def start(self) -> PrometheusServer:
        """Launch Prometheus and return once it answers `/-/ready`."""
        if self._proc is not None:
            raise PrometheusError("Prometheus is already started")
        if not os.access(self.binary, os.X_OK):
            raise PrometheusError(f"{self.binary} not found: run scripts/setup.sh")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tsdb_path.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text)
        # The free port can be taken between our probe and Prometheus' bind: retry a few times.
        attempts = 3 if self.requested_port is None else 1
        for attempt in range(1, attempts + 1):
            self.port = self.requested_port or free_port()
            self._launch()
            try:
                self._wait_ready()
                return self
            except PrometheusError as exc:
                log = self._log_tail()
                self.stop()
                if "address already in use" not in log or attempt == attempts:
                    raise PrometheusError(f"{exc}; {self.log_path} ends:\n{log}") from None
            except BaseException:
                self.stop()  # e.g. Ctrl-C while waiting: __exit__ will not run, so stop here
                raise
        raise AssertionError("unreachable")

    def reload(self, config_text: str) -> None:
        """Run with `config_text` from now: the file rewritten, then SIGHUP (Prometheus reloads
        it in place, the TSDB and the series untouched)."""
        if not self.running():
            raise PrometheusError("Prometheus is not running")
        assert self._proc is not None
        self.config_text = config_text
        self.config_path.write_text(config_text)
        self._proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        """Terminate Prometheus (SIGTERM, then SIGKILL after `grace_s`) and reap it; idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # lets it close the TSDB head cleanly
                proc.wait(timeout=self.grace_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            # Also reached on Ctrl-C during the grace period: never leave it running.
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _launch(self) -> None:
        args = [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.tsdb_path}",
            # Short: a run lasts minutes. Retention counts back from the newest sample, not the
            # wall clock, so reopening a finished run's TSDB later deletes nothing.
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address={self.listen_host}:{self.port}",
        ]
        if self.listen_host == "127.0.0.1":
            # For TSDB snapshots; safe only while it listens on loopback.
            args.append("--web.enable-admin-api")
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                # Its own session: a Ctrl-C meant for the run reaches Prometheus only via stop().
                start_new_session=True,
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            code = self._proc.poll()
            if code is not None:
                raise PrometheusError(f"Prometheus exited with code {code} before it was ready")
            try:
                with self._opener.open(f"{self.url}/-/ready", timeout=1.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass  # not listening yet, or still replaying its WAL (503)
            time.sleep(0.1)
        raise PrometheusError(f"Prometheus not ready after {self.ready_timeout_s} s")

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # HTTP API

    def _api(self, path: str, params: Mapping[str, str] | None = None, post: bool = False) -> Any:
        """`data` of a Prometheus API answer; PrometheusError with its message otherwise."""
        body = urllib.parse.urlencode(params or {}).encode()
        url = f"{self.url}{path}"
        if post:
            request = urllib.request.Request(url, data=body, method="POST")
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
        else:
            request = urllib.request.Request(f"{url}?{body.decode()}" if params else url)
        try:
            with self._opener.open(request, timeout=self.http_timeout_s) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            # Bad PromQL and the like: Prometheus answers 400/422 with {"error": ...}.
            raw = exc.read()
            try:
                message = json.loads(raw).get("error", raw.decode(errors="replace"))
            except ValueError:
                message = raw.decode(errors="replace")
            raise PrometheusError(
                f"{path} {dict(params or {})}: HTTP {exc.code}: {message}"
            ) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise PrometheusError(f"{path}: Prometheus unreachable at {self.url}: {exc}") from None
        if payload.get("status") != "success":
            raise PrometheusError(f"{path} {dict(params or {})}: {payload.get('error', payload)}")
        return payload.get("data")

    def query(self, promql: str, time: float | None = None) -> list[dict[str, Any]]:
        """Instant query: series as Prometheus returns them ({"metric": ..., "value": [t, v]}).

        A scalar or string result comes back as one series with empty labels.
        """
        params = {"query": promql}
        if time is not None:
            params["time"] = _timestamp(time)
        data = self._api("/api/v1/query", params, post=True)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def query_value(self, promql: str, time: float | None = None) -> float | None:
        """The single value of an instant query; None when it has no series (no data yet)."""
        series = self.query(promql, time)
        if not series:
            return None
        if len(series) > 1:
            labels = [s["metric"] for s in series]
            raise PrometheusError(f"{promql!r} returned {len(series)} series, wanted one: {labels}")
        return float(series[0]["value"][1])

    def query_range(
        self, promql: str, start: float, end: float, step: float
    ) -> list[dict[str, Any]]:
        """Range query between unix times: series as {"metric": ..., "values": [[t, v], ...]}."""
        if not step > 0:
            raise ValueError(f"step={step!r} must be positive")
        params = {
            "query": promql,
            "start": _timestamp(start),
            "end": _timestamp(end),
            "step": _timestamp(step),
        }
        return list(self._api("/api/v1/query_range", params, post=True)["result"])

    def targets(self) -> list[TargetHealth]:
        """Scrape health of every active target."""
        data = self._api("/api/v1/targets", {"state": "active"})
        return [
            TargetHealth(
                job=str(t["labels"].get("job", "")),
                instance=str(t["labels"].get("instance", "")),
                health=str(t.get("health", "unknown")),
                last_error=str(t.get("lastError", "")),
                scrape_url=str(t.get("scrapeUrl", "")),
            )
            for t in data["activeTargets"]
        ]

    def wait_for_targets_up(
        self, timeout: float = 30.0, ignore_jobs: Collection[str] = ()
    ) -> list[TargetHealth]:
        """Wait until every configured target (but those of `ignore_jobs`, not started yet) has
        been scraped successfully; their health."""
        deadline = time.monotonic() + timeout
        while True:
            targets = [t for t in self.targets() if t.job not in ignore_jobs]
            if targets and all(t.health == "up" for t in targets):
                return targets
            if time.monotonic() >= deadline:
                down = [f"{t.job}/{t.instance}: {t.health} {t.last_error}" for t in targets]
                raise PrometheusError(
                    f"targets not up after {timeout} s: "
                    f"{down or 'no active targets yet (Prometheus adds them within ~5 s)'}"
                )
            time.sleep(0.2)

    def snapshot(self) -> Path:
        """A TSDB snapshot (admin API, includes the head block); its directory on disk."""
        data = self._api("/api/v1/admin/tsdb/snapshot", post=True)
        path = self.tsdb_path / "snapshots" / str(data["name"])
        if not path.is_dir():
            raise PrometheusError(f"snapshot {data['name']} reported but {path} does not exist")
        return path

    def export_series(
        self,
        matchers: Sequence[str],
        start: float,
        end: float,
        step: float,
        path: Path | str,
    ) -> Path:
        """Write every series matching `matchers` between `start` and `end` as JSON; the path.

        Each matcher is a PromQL selector (e.g. `vllm:time_to_first_token_seconds_bucket`) or
        any expression; values are sampled every `step` seconds.
        """
        exported = {
            "start": start,
            "end": end,
            "step": step,
            "series": [
                {"matcher": matcher, "metric": s["metric"], "values": s["values"]}
                for matcher in matchers
                for s in self.query_range(matcher, start, end, step)
            ],
        }
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(exported))
        tmp.replace(out)  # a report never reads a half-written file
        return out


def _timestamp(value: float) -> str:
    return repr(float(value))
