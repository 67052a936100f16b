"""Traffic classes: EP and KV connections carry their DSCP from the sending socket, both ends."""

from __future__ import annotations

import asyncio
import socket

import pytest

from zcube_lab.serving.addresses import Address
from zcube_lab.serving.alltoall import AllToAll, start_ep_server
from zcube_lab.serving.kvwire.conns import KVConnections
from zcube_lab.serving.trafficclass import (
    DSCP,
    EP,
    KV,
    class_of_tos,
    mark_socket,
    mark_stream,
    tos_byte,
)


def test_marks_are_distinct_and_read_back() -> None:
    assert DSCP[EP] != DSCP[KV]
    assert tos_byte(EP) == 34 << 2 and tos_byte(KV) == 18 << 2
    assert class_of_tos(tos_byte(EP) | 0x3) == EP  # ECN bits ignored
    assert class_of_tos(0) is None
    with pytest.raises(ValueError):
        tos_byte("bulk")


def test_a_unix_socket_is_left_alone() -> None:
    a, b = socket.socketpair()
    with a, b:
        assert mark_socket(a, EP) is False


def _tos(sock: object) -> int:
    return sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS)  # type: ignore[attr-defined]


def test_kv_connection_is_marked() -> None:
    async def main() -> tuple[int, int]:
        accepted: list[int] = []

        async def handle(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            accepted.append(_tos(w.get_extra_info("socket")))
            w.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = await KVConnections().open(Address("127.0.0.1", port), None)
        mine = _tos(conn.writer.get_extra_info("socket"))
        conn.abort()
        await asyncio.sleep(0.05)
        server.close()
        return mine, accepted[0]

    mine, theirs = asyncio.run(main())
    assert class_of_tos(mine) == KV
    assert theirs == 0  # a plain server's end is not marked: only ours are


def test_ep_exchange_marks_both_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    import zcube_lab.serving.alltoall as alltoall

    marked: list[tuple[int, str]] = []

    def spy(writer: asyncio.StreamWriter, traffic_class: str) -> bool:
        ok = mark_stream(writer, traffic_class)
        marked.append((_tos(writer.get_extra_info("socket")), traffic_class))
        return ok

    monkeypatch.setattr(alltoall, "mark_stream", spy)

    async def main() -> None:
        server = await start_ep_server(Address("127.0.0.1", 0))
        port = server.sockets[0].getsockname()[1]
        a2a = AllToAll([Address("127.0.0.1", port)])
        assert await a2a.exchange(1000, 500) == 1500
        await a2a.close()
        server.close()

    asyncio.run(main())
    # the leader's lane and the worker's accepted end, each with EP's mark set
    assert len(marked) == 2
    assert all(cls == EP and class_of_tos(tos) == EP for tos, cls in marked)
