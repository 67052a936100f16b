"""The pure core that every other package may import, and that imports nothing of ours outside
itself: the fabric description and builders, host plan, scale, cost model and placement
(`fabric`), run policies (`policies`), the fault grammar and schedule (`fault_schedule`), one
quantile function (`stats`), small process and port helpers (`procs`, `ports`) and the error
type (`errors`). No root, no clock; see docs/DESIGN.md for the package picture."""
