"""The emulator health verdict, in one package (pure): was a run faithful enough to report?

- `limits`: every limit a run is judged by, in one frozen `Limits` object, written to
  `health.json` beside the verdict;
- `judge`: the CPU rules and the whole verdict (`judge` -> `HealthVerdict`), which adds
  `network`'s reasons;
- `network`: evidence beyond CPU (losses, retransmission timeouts, shaping, engine lateness, KV
  pulls against their ideal, event-loop lag, missing evidence) judged against the limits;
- `netstats`: the network counters as text, parsed and turned into per-window events.

Nothing here reads /proc, runs a tool or reads the clock: the samplers that gather the evidence
live in `emulator.lab` (`health`, `netsampler`) and hand it over as data.
"""
