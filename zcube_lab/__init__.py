"""zcube-lab: a live emulator of LLM inference clusters on ZCube, ROFT and Clos fabrics.

One import name, floors that import one way (tests/unit/test_imports.py checks them):
`zcube_lab.core` is the pure core that every package may import and that imports nothing of
ours outside itself (no root, no processes, no clock); `zcube_lab.adapters` holds the small
helpers over the machine (process groups, HTTP waits, signals, free ports) and imports only the
core; `zcube_lab.controller` (the os-ken app), `zcube_lab.serving` (the inference roles),
`zcube_lab.workloads` (load) and `zcube_lab.emulator` (the lab, runs and results) sit above them;
`zcube_lab.cli` (the `zcube-lab` command, also `python -m zcube_lab`) is the top floor, which
nothing imports. See docs/DESIGN.md for the package picture.
"""

__version__ = "0.1.0"
