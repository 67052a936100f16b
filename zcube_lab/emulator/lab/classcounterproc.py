"""Per-class byte counters on a running lab's switch ports (adapter: `ip`, `tc`): the sink and
one counting filter per traffic class on every routed switch egress port, their counters read
back, the sink removed (the lines and their reading are `zcube_lab.core.fabric.classcounters`;
docs/LOSSLESS.md, "Victim accounting").

Installed under `--lossless` once the switch ports are shaped (Open vSwitch may reset a port's
qdisc while adding it, which drops its filters with it); a vswitchd restart reshapes the ports
and so removes them, and the counters then read 0 from there on (no fault run is lossless-only
today; say so if one is). Names: the batch file is `classcounters.tc` in the run folder.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from zcube_lab.core.fabric.classcounters import (
    SINK,
    counter_lines,
    parse_counters,
    root_handle,
    sink_lines,
)
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.lossless import feeders
from zcube_lab.emulator.lab.system import attempt, run
from zcube_lab.serving.trafficclass import DSCP

BATCH_FILE = "classcounters.tc"


def counted_ports(fabric: Fabric) -> list[str]:
    """The switch egress ports a route crosses (the ones the lossless agent watches)."""
    return sorted(feeders(fabric))


def install(fabric: Fabric, folder: Path) -> list[str]:
    """Add the sink (kept if there) and the filters on every counted port; the ports."""
    run(["ip", "-force", "-batch", "-"], input="\n".join(sink_lines()) + "\n", check=False)
    ports = counted_ports(fabric)
    batch = folder / BATCH_FILE
    batch.write_text("".join(line + "\n" for p in ports for line in counter_lines(p, DSCP)))
    run(["tc", "-batch", str(batch)], timeout=60)
    return ports


def read(ports: Iterable[str]) -> dict[str, dict[str, int]]:
    """Per port, per class, the bytes counted so far (a port that cannot be read is left out)."""
    out = {}
    for port in ports:
        code, text = attempt(["tc", "-s", "-j", "filter", "show", "dev", port,
                              "parent", root_handle()])  # fmt: skip
        if code == 0:
            out[port] = parse_counters(text, DSCP)
    return out


def remove_sink() -> None:
    """Delete the sink device (its filters went with the ports)."""
    attempt(["ip", "link", "del", SINK])
