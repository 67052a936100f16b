"""A small PD cluster as local processes on loopback, for development, tests and benches.

`ClusterSpec` says how many prefill and decode instances, which model, and how many KV
addresses each prefill serves (127.0.0.1, 127.0.0.2, ... stand in for a ZCube host's two fabric
interfaces). `LocalCluster` starts every role with `python -m zcube_lab.serving.<role>` in its own
process group, waits for `/health`, and `stop()` kills the groups (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from zcube_lab.adapters.ports import free_port
from zcube_lab.adapters.procs import stop_groups, wait_http
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.options import option
from zcube_lab.serving.config import (
    Address,
    DecodeConfig,
    EpWorkerConfig,
    GatewayConfig,
    PrefillConfig,
)
from zcube_lab.serving.launch import decode_argv, ep_worker_argv, gateway_argv, prefill_argv


@dataclass(frozen=True)
class ClusterSpec:
    """What to start."""

    model: str = option("tiny", help="model profile")
    prefills: int = option(1, help="prefill instances")
    decodes: int = option(1, help="decode instances")
    kv_addresses: int = option(2, help="KV addresses per prefill")
    kv_streams: int = option(2, help="TCP streams per KV address")
    bandwidth_scale: float = option(1.0, help="real NIC rate over emulated (payloads / this)")
    gateway_port: int = option(
        0, flag="--port", help="gateway port (0: a free one; the `gateway` line says which)"
    )
    ep_size: int = option(1, help="GPU hosts per instance")
    extra_prefill_args: tuple[str, ...] = ()
    extra_decode_args: tuple[str, ...] = ()
    extra_gateway_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("prefills", "decodes", "kv_addresses", "kv_streams", "ep_size"):
            v = getattr(self, name)
            if not 1 <= v <= 16:
                raise ConfigError(name, v, "1..16")


@dataclass
class RoleProcess:
    """One started role."""

    role: str
    argv: list[str]
    url: str | None
    proc: subprocess.Popen[bytes]


@dataclass
class LocalCluster:
    """Processes of one local cluster; use as a context manager or call start()/stop()."""

    spec: ClusterSpec
    log_dir: Path | None = None
    processes: list[RoleProcess] = field(default_factory=list)
    gateway_url: str = ""
    prefill_urls: list[str] = field(default_factory=list)
    decode_urls: list[str] = field(default_factory=list)
    ep_workers: list[Address] = field(default_factory=list)  # no /health: waited for by TCP

    def _spawn(self, role: str, argv: list[str], url: str | None) -> None:
        out = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{role}-{len(self.processes)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(RoleProcess(role, argv, url, proc))

    def _ep_peers(self, n: int) -> tuple[Address, ...]:
        """Start n-1 EP workers; return their addresses."""
        peers = tuple(Address("127.0.0.1", free_port()) for _ in range(n - 1))
        for a in peers:
            self._spawn("ep_worker", ep_worker_argv(EpWorkerConfig(bind=(a,))), None)
        self.ep_workers.extend(peers)
        return peers

    def start(self, timeout_s: float = 20.0) -> LocalCluster:
        """Start prefills, decodes, then the gateway; wait until all answer /health."""
        s = self.spec
        try:
            for i in range(s.prefills):
                kv = tuple(
                    Address(f"127.0.0.{k + 1}", free_port(f"127.0.0.{k + 1}"))
                    for k in range(s.kv_addresses)
                )
                pcfg = PrefillConfig(
                    model=s.model, port=free_port(), engine_index=str(i), engine_id=f"prefill-{i}",
                    bandwidth_scale=s.bandwidth_scale, kv_bind=kv,
                    ep_peers=self._ep_peers(s.ep_size),
                )  # fmt: skip
                url = f"http://{pcfg.host}:{pcfg.port}"
                self._spawn("prefill", [*prefill_argv(pcfg), *s.extra_prefill_args], url)
                self.prefill_urls.append(url)
            for i in range(s.decodes):
                dcfg = DecodeConfig(
                    model=s.model, port=free_port(), engine_index=str(i), kv_streams=s.kv_streams,
                    bandwidth_scale=s.bandwidth_scale, ep_peers=self._ep_peers(s.ep_size),
                )  # fmt: skip
                url = f"http://{dcfg.host}:{dcfg.port}"
                self._spawn("decode", [*decode_argv(dcfg), *s.extra_decode_args], url)
                self.decode_urls.append(url)
            gcfg = GatewayConfig(
                model=s.model, port=s.gateway_port or free_port(),
                prefill_urls=tuple(self.prefill_urls), decode_urls=tuple(self.decode_urls),
            )  # fmt: skip
            self.gateway_url = f"http://{gcfg.host}:{gcfg.port}"
            self._spawn("gateway", [*gateway_argv(gcfg), *s.extra_gateway_args], self.gateway_url)
            self._wait_healthy(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, timeout_s: float) -> None:
        urls = [rp.url + "/health" for rp in self.processes if rp.url is not None]
        deadline = time.monotonic() + timeout_s
        failing = wait_http(urls, timeout_s, alive=self._check_alive, poll_s=0.05)
        # An engine's first step must find its EP peers listening (on a busy machine a worker
        # can start after the engines answer /health, and that step's exchange then fails).
        for a in self.ep_workers:
            while not _accepts(a):
                if time.monotonic() > deadline:
                    failing.append(f"EP worker {a.host}:{a.port}")
                    break
                self._check_alive()
                time.sleep(0.05)
        if failing:
            raise TimeoutError(f"not healthy after {timeout_s}s: {failing}")

    def _check_alive(self) -> None:
        for rp in self.processes:
            if rp.proc.poll() is not None:
                raise RuntimeError(f"{rp.role} exited with {rp.proc.returncode}: {rp.argv}")

    def kill(self, role: str, index: int = 0) -> None:
        """Kill one role's process (fault injection)."""
        procs = [rp for rp in self.processes if rp.role == role]
        stop_groups([procs[index].proc], grace=3.0)

    def stop(self) -> None:
        """Kill every process group, gently then firmly."""
        stop_groups([rp.proc for rp in self.processes], grace=3.0)
        self.processes.clear()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _accepts(a: Address) -> bool:
    """True when something accepts TCP connections on `a`."""
    try:
        with socket.create_connection((a.host, a.port), timeout=0.5):
            return True
    except OSError:
        return False
