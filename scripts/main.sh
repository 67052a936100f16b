#!/usr/bin/env bash
# The README's main command: set up (idempotent), check the machine, then the default
# comparison: ZCube vs ROFT (16 emulated GPUs each, 8 servers of 2 GPUs: the scale-down that
# keeps each fabric's structure, zcube_lab/core/fabric/scaledown.py; `--gpus-per-server 4
# --servers-per-leaf 4` gives the old sizes), the coding-agent workload, 3 interleaved
# repeats of 45 s. Prints the table and writes results/compare-<time>/report.html.
# About 8-10 minutes on a 2-core machine. Extra arguments go to `zcube-lab compare`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
LAB="${ZCUBE_VENV:-$ROOT/.venv}/bin/zcube-lab"
cd "$ROOT"
"$LAB" doctor
"$LAB" cost --gpus 1024 --nic-gbps 400 --switch-ports 64 --port-gbps 400
"$LAB" compare --fabrics zcube,roft --workload coding-agent --repeat 3 --duration 45 "$@"
