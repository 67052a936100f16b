"""What the benchmarks (`bench/`) and the fidelity and failure tests drive inside a lab: each
module is a library and also the program run in the lab's hosts (`python -m
zcube_lab.emulator.probes.X`).

`kvprobe`: uncontended KV pulls timed against bytes / path rate; `epprobe`: all-to-all
exchanges timed the same way; `cutprobe`: a fabric link cut under one live KV transfer. Beside
them, shared by them: `fidelity` (ideal times and verdict rows, pure) and `hostprobe` (a probe
program started in a lab's host and its lines read)."""
