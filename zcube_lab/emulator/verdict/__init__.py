"""The emulator health verdict, in one package (pure): was a run faithful enough to report?

- `limits`: every limit a run is judged by, in one frozen `Limits` object, written to
  `health.json` beside the verdict;
- `judge`: the CPU rules and the whole verdict (`judge` -> `HealthVerdict`), which adds
  `network`'s reasons;
- `network`: evidence beyond CPU (losses, retransmission timeouts, shaping, engine lateness, KV
  pulls against their ideal, event-loop lag, missing evidence) judged against the limits;
- `cpustats`: the CPU counters as /proc text, parsed and turned into `HealthSample`s;
- `netstats`: the network counters as text, parsed and turned into per-window events;
- `combine`: verdicts of parts into the verdict of a whole: the machines of a cluster run, the
  runs of a variant or a sweep point, a repeat's walk up a ladder of rates.

Nothing here reads /proc, runs a tool or reads the clock: the samplers that gather the evidence
live in `zcube_lab.emulator.lab` (`health`, `netsampler`) and hand it over as data.
"""
