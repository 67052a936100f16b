#!/usr/bin/env bash
# The lab VM for real (opt-in; not part of CI: 14-22 min under TCG on the 2-core test host):
# builds or reuses the Debian 12 box (scripts/vm/build-box.sh), adds it to Vagrant, boots our
# Vagrantfile with `vagrant up --provider=libvirt` (provisioning included, Grafana left out),
# runs `zcube-lab up` inside, measures the kernel datapath against the userspace one at the same
# paced load (bench/datapath.py --rate), and destroys the VM, whatever happened.
#
#   sudo scripts/vm/test-vm.sh            # as root on a Debian 12 host; see docs/SCALE.md
#
# Environment (defaults for a host without usable KVM, like the 2-core test host):
#   ZCUBE_VM_DOMAIN_TYPE=qemu   libvirt domain type (qemu = TCG; kvm where KVM runs guests)
#   ZCUBE_VM_CPUS=2 ZCUBE_VM_MEMORY_MB=4096
#   ZCUBE_VM_REPEATS=3          datapath measurements per datapath (alternating)
#   ZCUBE_VM_RATE=auto          paced load in Mb/s; auto = half the smaller capacity probed
#   ZCUBE_VM_SECONDS=10         iperf3 seconds per point
#   ZCUBE_VM_MTUS=9000          MTUs of the datapath points (9000: the lab's)
#   ZCUBE_VM_SERVE=1            also `zcube-lab up --serve` for a while, its forwarded ports
#                               (Prometheus, Locust) checked from the host
# Everything it prints is also in $ZCUBE_VM_CACHE/runs/<UTC time>/ with the JSON results.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${ZCUBE_VM_CACHE:-/var/cache/zcube-lab-vm}"
BOX_NAME=zcube/bookworm-local
RUN="$CACHE/runs/$(date -u +%Y%m%dT%H%M%SZ)"
REPEATS="${ZCUBE_VM_REPEATS:-3}"
RATE="${ZCUBE_VM_RATE:-auto}"
SECONDS_PER_POINT="${ZCUBE_VM_SECONDS:-10}"
MTUS="${ZCUBE_VM_MTUS:-9000}"
SERVE="${ZCUBE_VM_SERVE:-1}"

export ZCUBE_VM_BOX="$BOX_NAME"
export ZCUBE_VM_DOMAIN_TYPE="${ZCUBE_VM_DOMAIN_TYPE:-qemu}"
export ZCUBE_VM_CPUS="${ZCUBE_VM_CPUS:-2}"
export ZCUBE_VM_MEMORY_MB="${ZCUBE_VM_MEMORY_MB:-4096}"
export ZCUBE_SKIP_GRAFANA="${ZCUBE_SKIP_GRAFANA:-1}"
# Forwarded ports away from a lab running on the host itself.
export ZCUBE_GRAFANA_PORT="${ZCUBE_GRAFANA_PORT:-13000}"
export ZCUBE_PROMETHEUS_PORT="${ZCUBE_PROMETHEUS_PORT:-19090}"
export ZCUBE_LOCUST_PORT="${ZCUBE_LOCUST_PORT:-18089}"
# Vagrant's state for this machine outside the repository.
export VAGRANT_DOTFILE_PATH="$CACHE/vagrant-dot"
export VAGRANT_CHECKPOINT_DISABLE=1
export VAGRANT_DEFAULT_PROVIDER=libvirt

mkdir -p "$RUN"
exec > >(tee -a "$RUN/log.txt") 2>&1
log() { printf '[test-vm %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}
# step NAME CMD...: runs CMD, logs its wall time, records it in timings.txt.
step() {
    local name="$1" t=$SECONDS rc=0
    shift
    log "» $name"
    "$@" || rc=$?
    log "  $name: $((SECONDS - t)) s wall, exit $rc"
    printf '%s\t%s\t%s\n' "$name" "$((SECONDS - t))" "$rc" >>"$RUN/timings.txt"
    return "$rc"
}
[[ "$(id -u)" -eq 0 ]] || die "must run as root: sudo $0"
for tool in vagrant virsh qemu-system-x86_64; do
    command -v "$tool" >/dev/null || die "$tool is missing: apt-get install vagrant vagrant-libvirt libvirt-daemon-system qemu-system-x86"
done
cd "$ROOT"

# A daemon outlives this script: start it with no descriptor but 0-2, or it keeps whatever the
# caller holds open (`flock LOCK scripts/vm/test-vm.sh`: the lock, for as long as it runs).
detached() {
    (
        for fd in /proc/self/fd/*; do
            n="${fd##*/}"
            if ((n > 2)); then eval "exec $n>&-" 2>/dev/null || true; fi
        done
        exec "$@"
    )
}

# libvirt's daemons; without systemd as init (a container) they are started by hand.
if ! virsh -c qemu:///system version >/dev/null 2>&1; then
    log "starting virtlogd and libvirtd"
    detached virtlogd -d
    detached libvirtd -d
    for _ in $(seq 30); do
        virsh -c qemu:///system version >/dev/null 2>&1 && break
        sleep 1
    done
fi

# The storage pool vagrant-libvirt puts the box's image and the VM's disk in.
if ! virsh -c qemu:///system pool-info default >/dev/null 2>&1; then
    log "defining libvirt's storage pool 'default' (/var/lib/libvirt/images)"
    virsh -c qemu:///system pool-define-as default dir --target /var/lib/libvirt/images >/dev/null
    virsh -c qemu:///system pool-build default >/dev/null
fi
virsh -c qemu:///system pool-start default >/dev/null 2>&1 || true

destroy() {
    log "» vagrant destroy -f"
    vagrant destroy -f || log "vagrant destroy failed: check 'virsh list --all'"
}
trap destroy EXIT
trap 'exit 143' TERM INT # so that the EXIT trap destroys the VM

guest() { vagrant ssh -c "$1" -- -o LogLevel=ERROR; }

box="$(step build-box "$ROOT/scripts/vm/build-box.sh" | tail -1)"
[[ -f "$box" ]] || die "no box built"
# The box is added again only when it was rebuilt; then libvirt's copy of the old one, in the
# pool, is deleted (vagrant-libvirt uploads the new one under a new name).
stamp="$CACHE/box-added.stamp"
if [[ -f "$stamp" && "$stamp" -nt "$box" ]] && vagrant box list | grep -q "^$BOX_NAME "; then
    log "box $BOX_NAME already added"
else
    virsh -c qemu:///system vol-list default 2>/dev/null |
        awk '/zcube-VAGRANTSLASH-bookworm-local/ {print $1}' |
        while read -r vol; do virsh -c qemu:///system vol-delete --pool default "$vol" >/dev/null; done
    step box-add vagrant box add --force --name "$BOX_NAME" "$box"
    touch "$stamp"
fi

vagrant_up() { vagrant up --provider=libvirt | "$ROOT/scripts/vm/stamp-lines.sh"; }
step vagrant-up vagrant_up
guest 'uname -a; nproc; free -m | head -2; lsmod | grep -w openvswitch || echo "no openvswitch module"' |
    tee "$RUN/guest.txt"

# zcube-lab up: the 16-GPU ZCube lab, its all-pairs check, the summary, torn down.
step zcube-lab-up guest "sudo /vagrant/.venv/bin/zcube-lab up --fabric zcube --json" |
    tee "$RUN/zcube-lab-up.json"

# up --serve as the Vagrantfile's header shows it, its ports checked through the forwarding.
serve_check() {
    local prom="http://127.0.0.1:$ZCUBE_PROMETHEUS_PORT" locust="http://127.0.0.1:$ZCUBE_LOCUST_PORT"
    guest "sudo setsid timeout -s INT 480 /vagrant/.venv/bin/zcube-lab up --fabric zcube --serve --bind 0.0.0.0 --rate 1 --duration 440 </dev/null >/tmp/serve.log 2>&1 &"
    local ok=0
    for _ in $(seq 80); do # under TCG the lab, Prometheus and Locust take minutes to answer
        sleep 5
        if curl -fsS --max-time 5 "$prom/-/ready" >/dev/null 2>&1 &&
            curl -fsS --max-time 5 "$locust/" >/dev/null 2>&1; then
            ok=1
            break
        fi
    done
    if ((ok)); then
        sleep 30 # some requests and scrapes
        log "Prometheus and Locust answer on the host's forwarded ports"
        curl -fsS --max-time 10 "$prom/api/v1/query?query=up" | tee "$RUN/serve-up-query.json"
        echo
        curl -fsS --max-time 10 "$prom/api/v1/query?query=sum(vllm:request_success_total)" |
            tee "$RUN/serve-requests-query.json"
        echo
    else
        log "Prometheus or Locust did not answer on $prom, $locust"
    fi
    # Ctrl-C to the lab's Python process only (timeout would pass a second one on).
    local lab="^[^ ]*python[^ ]* /vagrant/[.]venv/bin/zcube-lab up"
    guest "sudo pkill -INT -f '$lab'; for i in \$(seq 60); do pgrep -f '$lab' >/dev/null || break; sleep 2; done; tail -25 /tmp/serve.log" |
        tee "$RUN/serve.log"
    ((ok))
}
if [[ "$SERVE" == 1 ]]; then
    step serve serve_check || log "up --serve check failed (see $RUN/serve.log); going on"
fi

# The datapath: capacity first (the paced load must be within both), then CPU per Mb at the same
# paced load, the kernel and userspace datapaths alternating.
bench="cd /vagrant && sudo .venv/bin/python -m bench.datapath"
if [[ "$RATE" == auto ]]; then
    for dp in kernel user; do
        step "capacity-$dp" guest "$bench --datapath $dp --mtus ${MTUS%% *} --flows 1 --seconds 5 --out /tmp/capacity-$dp.json"
        guest "cat /tmp/capacity-$dp.json" >"$RUN/capacity-$dp.json"
    done
    RATE="$(python3 -c '
import json, sys
gbps = [max(p["gbps"] for p in json.load(open(f))["points"]) for f in sys.argv[1:]]
print(max(1, int(min(gbps) * 1000 / 2)))
' "$RUN/capacity-kernel.json" "$RUN/capacity-user.json")"
fi
log "paced load: $RATE Mb/s"
for rep in $(seq "$REPEATS"); do
    for dp in kernel user; do
        step "cpu-$dp-$rep" guest "$bench --datapath $dp --rate $RATE --mtus $MTUS --flows 1 --seconds $SECONDS_PER_POINT --out /tmp/cpu-$dp-$rep.json"
        guest "cat /tmp/cpu-$dp-$rep.json" >"$RUN/cpu-$dp-$rep.json"
    done
done

# Medians and the kernel/userspace ratio of machine CPU per Mb, by MTU.
python3 - "$RUN" <<'EOF' | tee "$RUN/summary.txt"
import json, pathlib, statistics, sys
run = pathlib.Path(sys.argv[1])
by = {}
for f in sorted(run.glob("cpu-*-*.json")):
    data = json.loads(f.read_text())
    for p in data["points"]:
        by.setdefault((p["mtu"], data["datapath"]), []).append(p)
print(f"{'MTU':>6} {'datapath':>8} {'n':>2} {'Mb/s':>7} {'CPU-ms/Mb':>10} {'vswitchd':>9}")
for (mtu, dp), ps in sorted(by.items()):
    med = lambda k: statistics.median(p[k] for p in ps)
    print(f"{mtu:>6} {dp:>8} {len(ps):>2} {med('mbps'):>7.1f} {med('cpu_ms_per_mb'):>10.3f} "
          f"{med('vswitchd_ms_per_mb'):>9.3f}")
for mtu in sorted({m for m, _ in by}):
    if (mtu, "kernel") in by and (mtu, "user") in by:
        k = statistics.median(p["cpu_ms_per_mb"] for p in by[(mtu, "kernel")])
        u = statistics.median(p["cpu_ms_per_mb"] for p in by[(mtu, "user")])
        print(f"MTU {mtu}: userspace / kernel machine CPU per Mb = {u / k:.2f}")
EOF
log "done: $RUN"
