#!/usr/bin/env bash
# Benchmark: what Open vSwitch's userspace datapath does during one hotspot run's load
# (issue 34: which events the datapath's CPU per request follows). Clears
# `dpif-netdev/pmd-stats` when the run's load starts and reads it, with `coverage/show`
# before and after, when the run starts collecting. Needs root; run it under the heavy lock.
#
#   sudo bench/ovs_events.sh 100 out/     # NIC rate in Mb/s (the run's --nic-mbps), output folder
#
# Writes OUT/ovs-events-nicNIC.txt (the two readings and the window) and OUT/run-nicNIC.log.
set -euo pipefail
nic=${1:?NIC rate in Mb/s}
out=${2:?output folder}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p "$out"
log="$out/run-nic$nic.log"
.venv/bin/zcube-lab run --fabric zcube --workload hotspot --rate 12 --duration 45 \
    --nic-mbps "$nic" >"$log" 2>&1 &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null || true' INT TERM
wait_for() { until grep -q "$1" "$log"; do kill -0 "$pid" 2>/dev/null || return 1; sleep 0.5; done; }
wait_for "load: hotspot"
ovs-appctl dpif-netdev/pmd-stats-clear >/dev/null
t0=$(date +%s.%N)
cov0=$(ovs-appctl coverage/show)
wait_for "collecting"
t1=$(date +%s.%N)
{
    echo "# zcube-lab run --fabric zcube --workload hotspot --rate 12 --duration 45 --nic-mbps $nic"
    echo "# window (load start to collecting), s: $(python3 -c "print(round($t1 - $t0, 1))")"
    echo "## ovs-appctl dpif-netdev/pmd-stats-show (cleared at load start)"
    ovs-appctl dpif-netdev/pmd-stats-show
    echo "## ovs-appctl coverage/show at load start"
    echo "$cov0"
    echo "## ovs-appctl coverage/show at collecting"
    ovs-appctl coverage/show
} >"$out/ovs-events-nic$nic.txt"
wait "$pid"
echo "wrote $out/ovs-events-nic$nic.txt"
