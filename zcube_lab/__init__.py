"""zcube-lab: a live emulator of LLM inference clusters on ZCube, ROFT and Clos fabrics.

Two floors, one rule each: `zcube_lab.core` is the pure core that every package of ours may
import and that imports nothing of ours outside itself (no root, no processes, no clock);
`zcube_lab.adapters` holds the small helpers over the machine (process groups, HTTP waits,
signals, free ports) that the packages above the core share, and imports only the core. The
command line is its own top package, `zcube_cli`, which nothing imports. See docs/DESIGN.md for
the package picture.
"""

__version__ = "0.1.0"
