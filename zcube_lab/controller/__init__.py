"""The fabric's OpenFlow controller: pure rule computation (`rules`), an in-memory flow table
(`flowtable`), the os-ken app (`app`) and its port metrics (`port_metrics`).

Run it with `python -m zcube_lab.controller`.
"""
