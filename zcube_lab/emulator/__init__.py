"""The emulated cluster, realized and measured (needs root where it touches the machine).

Sub-packages, one concern each: `lab` (the Mininet lab on Open vSwitch, its state file, every
`ovs-*` call, measurements, the health sampler, doctor, the fault injector), `experiment` (the
pure serving plan, the runner, the live lab, comparisons of variants, the sweep's ramp),
`probes` (what the benchmarks and fidelity tests drive inside a lab: the KV, all-to-all and
link-cut probes), `prometheus` (scrape config, the server process, PromQL collection) and
`results` (typed run summaries, figures, the fault report, report.html). Imports the core
(`zcube_lab.core`), `controller`, `serving` and `workloads`; never the CLI.
"""
