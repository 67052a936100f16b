"""free_port: never a port this process handed out lately, never 9090, nothing listening."""

from __future__ import annotations

import socket

from zcube_lab.adapters import ports
from zcube_lab.adapters.ports import free_port, port_free


def test_no_port_is_handed_out_twice_in_a_row_of_calls() -> None:
    # Without the memory the kernel repeats itself: 11 of 20,000 bare bind(0) calls here gave
    # one of the 6 ports before, and over 3,000 calls a repeat is near certain.
    got = [free_port() for _ in range(3000)]
    assert len(set(got)) == len(got)
    assert 9090 not in got


def test_a_port_the_kernel_repeats_is_skipped(monkeypatch) -> None:
    answers = iter([40001, 40001, 9090, 40002])

    class FakeSocket:
        def __init__(self, *_: object) -> None:
            self.port = next(answers)

        def __enter__(self) -> FakeSocket:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def bind(self, _addr: object) -> None:
            return None

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(ports, "_RECENT", type(ports._RECENT)(maxlen=8))
    monkeypatch.setattr(ports.socket, "socket", FakeSocket)
    assert free_port() == 40001
    assert free_port() == 40002  # 40001 again and 9090 skipped


def test_the_memory_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(ports, "_RECENT", type(ports._RECENT)(maxlen=4))
    for _ in range(10):
        free_port()
    assert len(ports._RECENT) == 4


def test_the_port_is_free_until_someone_listens() -> None:
    p = free_port()
    assert port_free(p)
    with socket.socket() as s:
        s.bind(("127.0.0.1", p))
        s.listen()
        assert not port_free(p)
