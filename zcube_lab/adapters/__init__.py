"""Thin helpers over the machine that the packages above the core share: process groups, HTTP
waits and signals (`procs`), free TCP ports (`ports`). They do I/O, so they stand one floor above
the pure `zcube_lab.core`, import only it, and hold no state. See docs/DESIGN.md."""
