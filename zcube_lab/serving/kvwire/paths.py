"""Choosing a pull's paths: lanes planned over the KV addresses, the source address for each,
the address of a replacement lane, and what a decode engine's pulls learnt about each address.

Path health across pulls (optional, `PathHealth`): like MRC, which keeps an entropy value's
state for the connection's lifetime, a decode engine remembers which addresses had a lane
retired and moved nothing since. A later pull plans its lanes on the other addresses and sends
each suspect address only a probe (a zero-length GET on its own connection, not waited for by
the pull): an answer clears the suspicion, silence for the stall timeout renews it.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from zcube_lab.serving.config import Address
from zcube_lab.serving.kvwire.protocol import OP_GET, RESPONSE, encode_request


def pick_source(remote: str, source_map: Sequence[tuple[str, str]]) -> str | None:
    """The local address to bind when connecting to `remote`: the first `(cidr, local)` entry
    whose network holds it (on ZCube, pulling a port-2 address from local port 1 and a port-1
    address from local port 2 puts each lane on its own disjoint path), or None."""
    if not source_map:
        return None
    addr = ipaddress.ip_address(remote)
    for cidr, local in source_map:
        if addr in _network(cidr):
            return local
    return None


@functools.lru_cache(maxsize=256)
def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    # Parsed once: every lane of every pull looks its source up in the same few networks.
    return ipaddress.ip_network(cidr, strict=False)


# Chunks each lane gets of a transfer (when the maximum chunk size allows it), and the smallest
# chunk worth a request of its own.
CHUNKS_PER_LANE = 4
MIN_CHUNK_BYTES = 4096


def chunk_size(
    num_bytes: int,
    lanes: int,
    max_chunk: int,
    per_lane: int = CHUNKS_PER_LANE,
    min_chunk: int = MIN_CHUNK_BYTES,
) -> int:
    """The chunk size that splits `num_bytes` evenly over `lanes`: `ceil(num_bytes / (lanes *
    m))` with `m` chunks per lane, `per_lane` unless chunks would exceed `max_chunk` (then
    more) or fall below `min_chunk` (then fewer, at least one).

    There are at most `lanes * m` chunks, so lanes of equal speed dealt them round-robin carry
    at most `m` chunks each: within `m` bytes of `num_bytes / lanes` (when num_bytes is at least
    `lanes * min_chunk`; a smaller transfer gets chunks of `ceil(num_bytes / lanes)`). A fixed
    chunk size would leave one lane a whole chunk behind: 640 KB as three 256 KiB chunks over
    four lanes ends when one lane has moved 262 KB, not 160 KB."""
    if num_bytes <= 0:
        return max(1, min(max_chunk, min_chunk))
    lanes = max(1, lanes)
    most = -(-num_bytes // (lanes * max_chunk))  # fewest chunks per lane that fit max_chunk
    fewest = num_bytes // (lanes * min_chunk)  # most chunks per lane that stay >= min_chunk
    per = max(most, min(per_lane, fewest), 1)
    return -(-num_bytes // (lanes * per))


def plan_lanes(
    num_bytes: int,
    chunk_bytes: int,
    addrs: Sequence[Address],
    streams: int,
    avoid: Collection[Address] = (),
) -> list[tuple[Address, list[tuple[int, int]]]]:
    """Deal chunks (offset, length) round-robin over `streams` lanes per address. The lanes
    that would go to an address in `avoid` go to the other addresses instead (as many lanes in
    all), unless every address is to be avoided."""
    chunks = [(off, min(chunk_bytes, num_bytes - off)) for off in range(0, num_bytes, chunk_bytes)]
    use = [a for a in addrs if a not in avoid] or list(addrs)
    # Interleave addresses so that fewer chunks than lanes still use every address.
    count = min(streams * len(addrs), max(1, len(chunks)))
    lanes_addrs = [use[i % len(use)] for i in range(count)]
    lanes: list[tuple[Address, list[tuple[int, int]]]] = [(a, []) for a in lanes_addrs]
    for i, c in enumerate(chunks):
        lanes[i % len(lanes)][1].append(c)
    return lanes


def pick_replacement(
    addrs: Sequence[Address],
    last_progress: Mapping[Address, float],
    last_retired: Mapping[Address, float],
    turn: int,
) -> Address:
    """The address for a replacement lane: rotate (by `turn`) over the addresses whose latest
    news is a lane receiving bytes, or no news; if every address has had a lane retired since
    its last progress, the one whose last retirement is oldest.

    On ZCube one address pair can be the dead path, so reopening there would only stall again;
    on a fat tree a new source port re-hashes to another spine, so the same address is fine."""
    never = -math.inf
    healthy = [a for a in addrs if last_retired.get(a, never) <= last_progress.get(a, never)]
    if healthy:
        return healthy[turn % len(healthy)]
    return min(addrs, key=lambda a: last_retired.get(a, never))


class PathHealth:
    """What the pulls of one decode engine learnt about each KV address, kept across pulls.

    Keyed by `str(Address)`; on ZCube an address (with its mapped source port) is one 2-hop
    path. Pulls report every retired lane (`retired`) and every byte received (`progress`). An
    address is *suspect* while its latest retirement is less than `hold_s` old and nothing has
    arrived from it since. `probe` checks a suspect address in the background: one zero-length
    GET on a new connection, at most one in flight per address; an answer counts as progress
    (the suspicion is cleared), silence or a refused connection for `timeout_s` as a
    retirement (the suspicion is renewed). `clock` must be monotonic seconds."""

    def __init__(self, hold_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not hold_s > 0:
            raise ValueError(f"hold_s must be > 0, not {hold_s!r}")
        self.hold_s = hold_s
        self.clock = clock
        self._retired: dict[str, float] = {}
        self._progress: dict[str, float] = {}
        self._probes: dict[str, asyncio.Task[None]] = {}

    def retired(self, addr: Address | str, now: float | None = None) -> None:
        """A lane (or probe) on `addr` was retired: stalled, refused or reset."""
        self._retired[str(addr)] = self.clock() if now is None else now

    def progress(self, addr: Address | str, now: float | None = None) -> None:
        """Bytes arrived from `addr`."""
        self._progress[str(addr)] = self.clock() if now is None else now

    def last_retired(self, addr: Address | str) -> float:
        """When a lane on `addr` was last retired (-inf: never)."""
        return self._retired.get(str(addr), -math.inf)

    def last_progress(self, addr: Address | str) -> float:
        """When bytes last arrived from `addr` (-inf: never)."""
        return self._progress.get(str(addr), -math.inf)

    def is_suspect(self, addr: Address | str, now: float | None = None) -> bool:
        """Retired less than `hold_s` ago, and nothing received since."""
        key = str(addr)
        at = self._retired.get(key)
        if at is None:
            return False
        now = self.clock() if now is None else now
        return now - at < self.hold_s and self._progress.get(key, -math.inf) < at

    def suspects(self, now: float | None = None) -> set[str]:
        """Every suspect address."""
        now = self.clock() if now is None else now
        return {a for a in self._retired if self.is_suspect(a, now)}

    @property
    def probing(self) -> set[str]:
        """Addresses with a probe in flight."""
        return set(self._probes)

    def probe(
        self, addr: Address, request_id: str, *, timeout_s: float, local: str | None = None
    ) -> bool:
        """Start a background probe of `addr` (unless one is in flight); True if started."""
        key = str(addr)
        if key in self._probes:
            return False
        task = asyncio.create_task(self._probe(addr, request_id, timeout_s, local))
        self._probes[key] = task
        task.add_done_callback(lambda _: self._probes.pop(key, None))
        return True

    async def _probe(
        self, addr: Address, request_id: str, timeout_s: float, local: str | None
    ) -> None:
        if await probe_path(addr, request_id, timeout_s=timeout_s, local=local):
            self.progress(addr)
        else:
            self.retired(addr)

    async def wait_probes(self) -> None:
        """Wait until the probes in flight have their answer."""
        while self._probes:
            await asyncio.gather(*self._probes.values(), return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel the probes in flight."""
        tasks = list(self._probes.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def probe_path(
    addr: Address, request_id: str, *, timeout_s: float, local: str | None = None
) -> bool:
    """One round trip on a new connection (a new path id): a GET of zero bytes of
    `request_id`. True when any answer (OK or NOT FOUND) arrives within `timeout_s`."""
    writer: asyncio.StreamWriter | None = None
    ok = False
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(
                addr.host, addr.port, local_addr=(local, 0) if local else None
            )
            writer.write(encode_request(OP_GET, request_id, 0, 0))
            await writer.drain()
            await reader.readexactly(RESPONSE.size)
        ok = True
    except (TimeoutError, OSError, asyncio.IncompleteReadError):
        pass
    finally:
        if writer is not None:
            # A dead path would hold a graceful close; a live one has nothing left to say.
            writer.transport.abort()
    return ok
