#!/usr/bin/env bash
# The README's main command. At this stage of the lab: set up (idempotent), check the machine,
# bring up each fabric at its default size through our controller and check all-pairs
# reachability, then price the full-size fabrics side by side.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
LAB="${ZCUBE_VENV:-$ROOT/.venv}/bin/zcube-lab"
"$LAB" doctor
for fabric in zcube roft clos; do
    echo
    echo "=== zcube-lab up --fabric $fabric"
    "$LAB" up --fabric "$fabric"
done
echo
echo "=== zcube-lab cost (1024 GPUs, 400G NICs, 64x400G and 128x400G switches)"
"$LAB" cost --gpus 1024 --nic-gbps 400 --switch-ports 64 --port-gbps 400
"$LAB" cost --gpus 1024 --nic-gbps 400 --switch-ports 128 --port-gbps 400
