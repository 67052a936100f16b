"""Naming the lab's machines: `--machines` as wire addresses, this machine's first. Every test
passes this machine's addresses itself, so nothing is run."""

from __future__ import annotations

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.cluster.remote import Machine, argv_on, parse_machines

HERE = {"127.0.0.1", "10.254.0.1"}


def test_a_good_list_numbers_the_machines_in_order_this_one_first() -> None:
    machines = parse_machines(" 10.254.0.1, 10.254.0.2,10.254.0.3 ,", local=HERE)
    assert machines == [
        Machine(0, "10.254.0.1"),
        Machine(1, "10.254.0.2"),
        Machine(2, "10.254.0.3"),
    ]
    assert [m.local for m in machines] == [True, False, False]
    assert machines[1].label == "machine 1 (10.254.0.2)"


def test_the_first_address_must_be_this_machines() -> None:
    with pytest.raises(ConfigError) as err:
        parse_machines("10.254.0.2,10.254.0.1", local=HERE)
    assert err.value.field == "machines"
    assert err.value.value == "10.254.0.2"
    assert "10.254.0.1" in err.value.allowed  # it says which addresses would do


@pytest.mark.parametrize(
    "text",
    [
        "10.254.0.1,10.254.0.1",  # the same machine twice
        "10.254.0.1, 10.254.0.2, 10.254.0.1",
        "10.254.0.1",  # one machine is no cluster
        "10.254.0.1,,",
        "",
        "10.254.0.1,10.254.0.256",  # not IPv4
        "10.254.0.1,fd00::2",
        "10.254.0.1,peer.example",
        "10.254.0.1 10.254.0.2",  # not comma-separated
    ],
)
def test_a_bad_list_is_refused_by_name(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_machines(text, local=HERE)
    assert err.value.field == "machines"


def test_only_other_machines_go_over_ssh() -> None:
    here, there = parse_machines("10.254.0.1,10.254.0.2", local=HERE)
    assert argv_on(here, ["ip", "link", "show"]) == ["ip", "link", "show"]
    remote = argv_on(there, ["sh", "/run/lab/a b.sh"])
    assert remote[0] == "ssh"
    assert remote[-2:] == ["root@10.254.0.2", "sh '/run/lab/a b.sh'"]


def test_loopback_is_refused_even_when_local() -> None:
    with pytest.raises(ConfigError, match="machines"):
        parse_machines("127.0.0.1,10.254.0.2", local={"127.0.0.1", "10.254.0.1"})
