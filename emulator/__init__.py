"""The emulated cluster: fabric description, builders, cost model, Mininet realization."""
