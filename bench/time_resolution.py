"""Benchmark report: the lab's time resolution against a real chip's per-port buffer share
(issue 33 item 6).

    .venv/bin/python -m bench.time_resolution [--out docs/img/time-resolution.png]

Prints, per port rate (100 Mb/s NIC, 50 Mb/s ZCube half-rate port), MTU (1500, 9000) and time
dilation k, one frame's serialization and the default 64-frame switch queue in modelled ms
(the same at every k) and in wall ms, beside the Tomahawk-class chips' per-port share in µs;
draws the figure (log scale). The arithmetic is `zcube_lab.core.fabric.resolution`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from zcube_lab.core.fabric.queues import FLOOR_PACKETS
from zcube_lab.core.fabric.resolution import (
    MTUS,
    PORT_RATES_MBPS,
    real_shares_s,
    resolution,
    table,
)

ROOT = Path(__file__).resolve().parents[1]


def lines() -> list[str]:
    """The printed table."""
    out = [
        "| port | MTU B | k | one frame, modelled ms | 64-frame queue, modelled ms | "
        "one frame, wall ms | queue, wall ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table():
        out.append(
            f"| {r.mbps:g} Mb/s | {r.mtu} | {r.dilation:g} | {r.frame_s * 1e3:.2f} | "
            f"{r.queue_s * 1e3:.2f} | {r.frame_wall_s * 1e3:.2f} | {r.queue_wall_s * 1e3:.1f} |"
        )
    out.append("")
    for name, share in real_shares_s().items():
        out.append(f"real per-port share, {name}: {share * 1e6:.1f} µs")
    return out


def draw(path: Path) -> None:
    """Bars on a log axis: the lab's frame and queue per port and MTU, the chips' shares."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, frames, queues = [], [], []
    for mbps in PORT_RATES_MBPS:
        for mtu in MTUS:
            r = resolution(mbps, mtu)
            labels.append(f"{mbps:g} Mb/s\nMTU {mtu}")
            frames.append(r.frame_s * 1e6)
            queues.append(r.queue_s * 1e6)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], frames, width=0.4, label="one frame (the smallest queue)")
    ax.bar([x + 0.2 for x in xs], queues, width=0.4, label=f"default queue, {FLOOR_PACKETS} frames")
    for (name, share), style in zip(real_shares_s().items(), ("--", ":", "-."), strict=False):
        ax.axhline(share * 1e6, color="black", linestyle=style, label=f"real port share: {name}")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("modelled time, µs (log; the same at every dilation k)")
    ax.set_title("The lab's time resolution against a real chip's per-port buffer")
    ax.set_ylim(10, 1e6)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs/img/time-resolution.png")
    parser.add_argument("--no-figure", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    print("\n".join(lines()))
    if not args.no_figure:
        draw(args.out)
        print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
