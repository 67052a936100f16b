"""Helpers for the serving tests: an in-process PD cluster (one event loop, real loopback
sockets), a threaded app host for synchronous clients, and Prometheus scraping helpers.
Imported explicitly by the serving test modules (no conftest)."""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from zcube_lab.adapters.ports import free_port
from zcube_lab.serving.config import Address, DecodeConfig, GatewayConfig, PrefillConfig
from zcube_lab.serving.decode import make_decode_app
from zcube_lab.serving.gateway import make_gateway_app
from zcube_lab.serving.prefill import make_prefill_app


@dataclass
class InProcessCluster:
    """URLs and registries of a cluster whose apps run in the test's event loop."""

    gateway_url: str
    prefill_url: str
    decode_url: str
    prefill_cfg: PrefillConfig
    decode_cfg: DecodeConfig
    gateway_registry: CollectorRegistry
    prefill_registry: CollectorRegistry
    decode_registry: CollectorRegistry


async def start_inprocess_cluster(
    aiohttp_server: Callable[..., Any],
    prefill: dict[str, Any] | None = None,
    decode: dict[str, Any] | None = None,
    gateway: dict[str, Any] | None = None,
    kv_addresses: int = 2,
    registry: Callable[[], CollectorRegistry] = CollectorRegistry,
) -> InProcessCluster:
    """Start prefill, decode and gateway apps with pytest-aiohttp's `aiohttp_server`, each
    with a fresh `registry()`."""
    kv_bind = tuple(
        Address(f"127.0.0.{k + 1}", free_port(f"127.0.0.{k + 1}")) for k in range(kv_addresses)
    )
    pcfg = replace(PrefillConfig(kv_bind=kv_bind, engine_id="prefill-0"), **(prefill or {}))
    dcfg = replace(DecodeConfig(), **(decode or {}))
    preg, dreg, greg = registry(), registry(), registry()
    psrv = await aiohttp_server(make_prefill_app(pcfg, preg))
    dsrv = await aiohttp_server(make_decode_app(dcfg, dreg))
    purl, durl = str(psrv.make_url("")).rstrip("/"), str(dsrv.make_url("")).rstrip("/")
    gcfg = replace(GatewayConfig(prefill_urls=(purl,), decode_urls=(durl,)), **(gateway or {}))
    gsrv = await aiohttp_server(make_gateway_app(gcfg, greg))
    return InProcessCluster(
        str(gsrv.make_url("")).rstrip("/"), purl, durl, pcfg, dcfg, greg, preg, dreg
    )


@dataclass
class _Served:
    url: URL

    def make_url(self, path: str) -> URL:
        return self.url.join(URL(path))


@asynccontextmanager
async def run_app_servers() -> AsyncIterator[Callable[[web.Application], Any]]:
    """A stand-in for pytest-aiohttp's `aiohttp_server` that serves apps as `web.run_app` does
    in the role processes: a handler goes on when its client leaves (aiohttp's test server
    cancels it instead). Yields the starter; every app is cleaned up on exit."""
    runners: list[web.AppRunner] = []

    async def serve(app: web.Application) -> _Served:
        runner = web.AppRunner(app, access_log=None, handler_cancellation=False)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        return _Served(URL(f"http://{host}:{port}"))

    try:
        yield serve
    finally:
        for r in reversed(runners):
            await r.cleanup()


def sample_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample in an exposition, keyed by (name, sorted labels)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    total = 0.0
    for (n, lbls), v in sample_values(text).items():
        d = dict(lbls)
        if n == name and all(d.get(k) == val for k, val in labels.items()):
            total += v
    return total


def registry_text(registry: CollectorRegistry) -> str:
    """The exposition of a registry, as /metrics would serve it."""
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


@contextmanager
def threaded_apps(*factories: Callable[[list[str]], web.Application]) -> Iterator[list[str]]:
    """Run apps on loopback in a background event loop; yield their base URLs.

    Each factory gets the URLs of the apps started before it (so a gateway can point at stubs).
    """
    loop = asyncio.new_event_loop()
    urls: list[str] = []
    runners: list[web.AppRunner] = []
    ready = threading.Event()
    error: list[BaseException] = []

    async def start() -> None:
        for f in factories:
            runner = web.AppRunner(f(list(urls)), access_log=None)
            await runner.setup()
            port = free_port()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            runners.append(runner)
            urls.append(f"http://127.0.0.1:{port}")

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as exc:
            error.append(exc)
        ready.set()
        if not error:
            loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    if error:
        raise error[0]
    try:
        yield urls
    finally:

        async def stop() -> None:
            for r in reversed(runners):
                await r.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


_EP_FRAME = struct.Struct("!Q")  # zcube_lab.serving.alltoall's answer header: a u64 length
_EP_REQUEST = struct.Struct("!QQ")  # its request header: u64 length, u64 answer length


async def delayed_ep_peer(delay_s: float) -> tuple[Address, asyncio.Server]:
    """An EP peer on loopback that answers each dispatch with the bytes it asks for after
    `delay_s` (a slow or congested path). Close the server when done."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                n, back = _EP_REQUEST.unpack(await reader.readexactly(_EP_REQUEST.size))
                await reader.readexactly(n)
                await asyncio.sleep(delay_s)
                writer.write(_EP_FRAME.pack(back) + bytes(back))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    addr = Address("127.0.0.1", free_port())
    return addr, await asyncio.start_server(serve, addr.host, addr.port)
