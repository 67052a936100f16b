"""Read `bench/ovs_events.sh`'s files: what the userspace datapath did over a run's load, and per
packet it received. The figures docs/BENCHMARKS.md gives ("What the datapath's CPU follows")
come from here:

    .venv/bin/python -m bench.ovs_events_read \
        bench/results/cpu_per_request/ovs-events-nic{100,50}.txt

Counters are `coverage/show` totals at "collecting" minus at load start (`parse_coverage` of
`bench/datapath_levers.py`); packets are `dpif-netdev/pmd-stats-show`'s, cleared at load start.
No root, no lab."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.datapath_levers import parse_coverage

COUNTERS = ("poll_create_node", "util_xalloc", "netdev_received", "netdev_sent")
_WINDOW = re.compile(r"^# window .*s: ([\d.]+)$", re.MULTILINE)
_PACKETS = re.compile(r"packets received: (\d+)")
_AT = "## ovs-appctl coverage/show at "


@dataclass(frozen=True)
class Events:
    """One file's reading: the window, the packets the datapath received, counter deltas."""

    window_s: float
    packets: int
    deltas: dict[str, int]

    def per_packet(self, counter: str) -> float:
        return self.deltas.get(counter, 0) / self.packets if self.packets else 0.0


def read_events(text: str) -> Events:
    """An `ovs_events.sh` file -> its window, packets and counter deltas (pure)."""
    window, packets = _WINDOW.search(text), _PACKETS.search(text)
    parts = text.split(_AT)
    if window is None or packets is None or len(parts) != 3:
        raise ValueError(
            "not an ovs_events.sh file: window, packets or two coverage readings missing"
        )
    start, end = parse_coverage(parts[1]), parse_coverage(parts[2])
    deltas = {k: v - start.get(k, 0) for k, v in end.items()}
    return Events(float(window.group(1)), int(packets.group(1)), deltas)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("files", nargs="+", type=Path, help="ovs-events-nicN.txt files")
    args = p.parse_args(argv)
    first: Events | None = None
    for path in args.files:
        ev = read_events(path.read_text())
        line = f"{path.name}: {ev.window_s:g} s, {ev.packets:,} packets"
        for c in COUNTERS:
            line += f", {c} {ev.deltas.get(c, 0):,} ({ev.per_packet(c):.1f}/packet)"
        if first is not None:
            line += f"; against {args.files[0].name}: packets {ev.packets / first.packets - 1:+.0%}"
            line += "".join(
                f", {c} {ev.deltas.get(c, 0) / first.deltas[c] - 1:+.0%}"
                for c in COUNTERS[:2]
                if first.deltas.get(c)
            )
        first = first or ev
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
