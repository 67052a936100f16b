"""The pure core that every other package may import, and that imports nothing of ours outside
itself: the fabric description and builders, host plan, scale, cost model and placement
(`fabric`), run policies (`policies`), the fault grammar and schedule (`fault_schedule`), one
quantile function (`stats`), the clock crossing (`clock`), options declared once (`options`) and
the error type (`errors`). No root, no processes, no clock; the helpers that touch the machine
live one floor up, in `zcube_lab.adapters`. See docs/DESIGN.md for the package picture."""
