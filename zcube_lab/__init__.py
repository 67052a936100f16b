"""zcube-lab: a live emulator of LLM inference clusters on ZCube, ROFT and Clos fabrics.

Two packages, one rule each: `zcube_lab.core` is the pure core that every other package may
import and that imports nothing of ours outside itself; `zcube_lab.cli` is the command line,
which imports the other packages and is imported by nothing. See docs/DESIGN.md for the package
picture.
"""

__version__ = "0.1.0"
