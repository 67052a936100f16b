"""zcube-lab: a live emulator of LLM inference clusters on ZCube, ROFT and Clos fabrics.

This package is the pure core that every other package may import, and that imports nothing of
ours outside itself: the fabric description and builders, host plan, scale, cost model and
placement (`zcube_lab.fabric`), run policies, the fault grammar and schedule, one quantile
function (`stats`), small process and port helpers, and the error type. The command line
(`cli`, `commands`, `fabric_options`) lives here too and is imported by nothing. See
docs/DESIGN.md for the package picture.
"""

__version__ = "0.1.0"
