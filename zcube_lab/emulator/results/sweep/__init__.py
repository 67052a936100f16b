"""The load sweep's results: each run's and each point's figures and `sweep.json`
(`sweeppoints`), each fabric's capacity (`capacity`), tokens per GPU-second at it
(`gputhroughput`), and the sweep's tables and plot (`sweepreport`). The SLO a run is judged
against is `zcube_lab.emulator.results.run.goodput`."""
