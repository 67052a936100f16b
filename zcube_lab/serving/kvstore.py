"""Prefill's held KV caches: one real byte buffer per request, kept until pulled or expired.

Pure bookkeeping: the caller passes `now` (seconds on any monotonic clock). The buffer's content
is seeded from the request id, so a test can regenerate it; its CRC-32 travels to decode in
`kv_transfer_params` and decode checks the bytes it reassembles against it.
"""

from __future__ import annotations

import functools
import random
import zlib
from dataclasses import dataclass


@dataclass
class HeldKV:
    """One request's KV cache held for decode to pull."""

    request_id: str
    data: bytes
    tokens: int
    checksum: int
    expires_at: float


# A prime: chunk and lane boundaries (powers of two) never fall at the same place in the block,
# so no two chunks of a buffer below 2**20 x 1 MiB are alike and a misplaced one fails the CRC.
_BLOCK_BYTES = 1_048_573


@functools.lru_cache(maxsize=4)
def _kv_block(seed: int) -> bytes:
    return random.Random(f"kv:{seed}").randbytes(_BLOCK_BYTES)


def kv_buffer_and_checksum(request_id: str, seed: int, num_bytes: int) -> tuple[bytes, int]:
    """`make_kv_buffer` and its CRC-32 (computed once: it travels to decode)."""
    data = make_kv_buffer(request_id, seed, num_bytes)
    return data, zlib.crc32(data)


def make_kv_buffer(request_id: str, seed: int, num_bytes: int) -> bytes:
    """Deterministic pseudo-random bytes standing in for a request's KV cache: the seed's random
    block (about 1 MiB, drawn once) repeated from an offset taken from the request id. Copying
    costs a few percent of drawing every byte, which was a third of prefill's CPU."""
    block = _kv_block(seed)
    start = zlib.crc32(f"kv:{seed}:{request_id}".encode()) % _BLOCK_BYTES
    head = block[start : start + num_bytes]
    if len(head) == num_bytes:
        return head
    full, rest = divmod(num_bytes - len(head), _BLOCK_BYTES)
    return b"".join([head, *[block] * full, block[:rest]])  # one copy of the whole


class KVStore:
    """Held KV buffers by request id, with a token capacity and lease expiry."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self._held: dict[str, HeldKV] = {}
        self.used_tokens = 0

    def __len__(self) -> int:
        return len(self._held)

    def fits(self, tokens: int) -> bool:
        """Whether `tokens` more tokens fit next to what is held."""
        return self.used_tokens + tokens <= self.capacity_tokens

    def put(
        self,
        request_id: str,
        data: bytes,
        tokens: int,
        now: float,
        lease_s: float,
        checksum: int | None = None,
    ) -> HeldKV:
        """Hold `data` for `request_id` until `now + lease_s`; `checksum` is its CRC-32 if the
        caller computed it already (prefill does, while its modelled compute runs)."""
        self.release(request_id)
        crc = zlib.crc32(data) if checksum is None else checksum
        held = HeldKV(request_id, data, tokens, crc, now + lease_s)
        self._held[request_id] = held
        self.used_tokens += tokens
        return held

    def get(self, request_id: str) -> HeldKV | None:
        """The held buffer, or None if unknown, released or expired."""
        return self._held.get(request_id)

    def release(self, request_id: str) -> bool:
        """Free a buffer (decode pulled it); False if it was not held."""
        held = self._held.pop(request_id, None)
        if held is None:
            return False
        self.used_tokens -= held.tokens
        return True

    def expire(self, now: float) -> list[str]:
        """Free every buffer whose lease ended at or before `now`; return their ids."""
        gone = [rid for rid, h in self._held.items() if h.expires_at <= now]
        for rid in gone:
            self.release(rid)
        return gone

    @property
    def usage(self) -> float:
        """Fraction of capacity held (vllm:kv_cache_usage_perc)."""
        return self.used_tokens / self.capacity_tokens if self.capacity_tokens else 0.0

    def get_bytes(self, request_id: str) -> bytes | None:
        """The held bytes (what the KV server serves), or None."""
        held = self._held.get(request_id)
        return held.data if held is not None else None
