"""The benchmarks: scripts run from the repository's root as modules (`python -m bench.soak`),
so one may import another (`bench.labrun`, `bench.procwatch`) and the shared test fixtures
(`tests.fuzz_requests`) with no change to `sys.path`; the project's own packages come from its
(editable) install. Not part of the installed package."""
