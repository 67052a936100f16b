"""The health verdict's eyes on another lab machine: that machine's CPU, its Open vSwitch and its
hosts' and switch ports' network counters, judged there by the same rules as on machine 0.

Machine 0 starts it over ssh for the load window and reads one verdict back:

    python -m zcube_lab.emulator.cluster.agent --hosts h8=1234,h9=1240 --rates '{"a2-eth1": 50,
    ...}'

It prints "ready" once both samplers have taken their first reading, samples until its stdin
closes (machine 0 closes it when the load is over; ssh passes that on, where it would not pass a
signal), then prints the `HealthVerdict` as one JSON line and exits. `--hosts` maps the GPU hosts
this machine emulates to the pids of their shells (in this machine's PID namespace: their
network namespaces are read through /proc/<pid>), `--rates` the shaped interfaces here
(`netstats.shaped_rates`, only this machine's). `--switch-ports` names the interfaces whose
queue drops are the modelled switch's own (reported, not judged), as on machine 0.
"""

from __future__ import annotations

import argparse
import json
import sys

from zcube_lab.emulator.lab.health import HealthSampler
from zcube_lab.emulator.lab.netsampler import NetSampler
from zcube_lab.emulator.verdict.limits import Limits


def parse_hosts(text: str) -> dict[str, int]:
    """`h8=1234,h9=1240` -> {"h8": 1234, "h9": 1240}."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, pid = part.partition("=")
        out[name] = int(pid)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m zcube_lab.emulator.cluster.agent", description=__doc__
    )
    p.add_argument("--hosts", default="", help="host=pid,... of the GPU hosts on this machine")
    p.add_argument("--rates", default="{}", help="JSON: shaped interface -> Mb/s, this machine")
    p.add_argument("--switch-ports", default="", help="comma-separated switch-side interfaces")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument(
        "--no-judge-qdisc-drops",
        action="store_true",
        help="report queue drops without judging them (as machine 0 was told)",
    )
    args = p.parse_args(argv)
    limits = Limits(judge_qdisc_drops=not args.no_judge_qdisc_drops)
    health = HealthSampler(interval_s=args.interval)
    net = NetSampler(
        parse_hosts(args.hosts),
        json.loads(args.rates),
        interval_s=args.interval,
        limits=limits.rates,
    )
    health.start()
    net.start()
    print("ready", flush=True)
    sys.stdin.read()  # until machine 0 closes it
    net.stop()
    samples = health.stop()  # how many were taken
    evidence = net.evidence(limits=limits.rates)
    from dataclasses import replace

    evidence = replace(
        evidence,
        switch_ports=frozenset(filter(None, args.switch_ports.split(","))),
    )
    verdict = health.verdict(limits, evidence)
    print(json.dumps({"samples": samples, "verdict": verdict.to_dict()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
