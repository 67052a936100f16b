#!/usr/bin/env bash
# A second lab machine on this one: a Debian 12 system built from Debian's packages (debootstrap),
# run in its own network, mount, PID, UTS and IPC namespaces, with sshd and its own Open vSwitch
# (userspace datapath), reached over a veth "wire" (198.19.254.1 here, 198.19.254.2 there).
# The lab reaches it exactly as it reaches another server: root over ssh with this machine's
# key (docs/SCALE.md, "Setting up a server").
#
#   scripts/peer.sh build    build the system once (cached in $ZCUBE_PEER_CACHE, ~1 min)
#   scripts/peer.sh start    build if needed, start it, wait until ssh and Open vSwitch answer
#   scripts/peer.sh stop     stop it: every process, namespace and interface of it goes
#   scripts/peer.sh status   say whether it runs and answers
#   scripts/peer.sh address  print its address
#
# The repository (and its venv) is bind-mounted at the same path, as a real server would have
# the same checkout at the same path; the server then runs the same scripts/setup.sh.
# Idempotent; needs root.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ZCUBE_VENV:-$ROOT/.venv}"
CACHE="${ZCUBE_PEER_CACHE:-/var/cache/zcube-lab/peer}"
ROOTFS="$CACHE/rootfs"
RUNDIR=/run/zcube-lab-peer
PIDFILE="$RUNDIR/pid"
WIRE=zpeer0
HERE_IP=198.19.254.1  # zcube_lab.core.fabric.addressing.WIRE_HERE
PEER_IP=198.19.254.2  # WIRE_PEER
# The wire's MTU leaves room for the VXLAN header (50 bytes) under the lab's 9000-byte frames.
WIRE_MTU=9100
MIRROR="${ZCUBE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What a lab server needs (scripts/setup.sh's list, which the server's set-up then finds
# installed) and what the cluster edition needs (sshd, sudo).
PACKAGES=(
    openssh-server sudo kmod openvswitch-switch mininet prometheus iperf3 ethtool iputils-ping
    fping iproute2 procps psmisc python3 python3-venv python3-pip shellcheck openssh-client debootstrap
)
KEY=/root/.ssh/id_ed25519
SSH=(ssh -q -o BatchMode=yes -o ConnectTimeout=3 "root@$PEER_IP")

log() { printf '[peer] %s\n' "$*"; }
die() { printf '[peer] error: %s\n' "$*" >&2; exit 1; }

[[ "$(id -u)" -eq 0 ]] || die "must run as root: sudo $0 $*"

stamp_want() { printf '%s\n' bookworm "${PACKAGES[@]}" | sha256sum | cut -d' ' -f1; }

build() {
    if [[ -f "$ROOTFS/.zcube-peer" && "$(cat "$ROOTFS/.zcube-peer")" == "$(stamp_want)" ]]; then
        log "system cached in $ROOTFS"
        return
    fi
    command -v debootstrap >/dev/null || die "debootstrap missing: run scripts/setup.sh"
    local tmp="$CACHE/rootfs.new"
    rm -rf "$tmp"
    mkdir -p "$CACHE"
    log "building a Debian 12 system in $ROOTFS (debootstrap, about a minute)"
    local include
    include="$(IFS=,; echo "${PACKAGES[*]}")"
    if ! debootstrap --variant=minbase --include="$include" bookworm "$tmp" "$MIRROR" \
        >"$CACHE/debootstrap.log" 2>&1; then
        tail -20 "$CACHE/debootstrap.log" >&2
        die "debootstrap failed (log: $CACHE/debootstrap.log)"
    fi
    stamp_want >"$tmp/.zcube-peer"
    rm -rf "$ROOTFS"
    mv "$tmp" "$ROOTFS"
}

running() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

answers() { "${SSH[@]}" test -f /run/zcube-peer-ready 2>/dev/null; }

write_init() {
    cat >"$ROOTFS/usr/local/sbin/zcube-peer-init" <<EOF
#!/bin/bash
# PID 1 of the peer: loopback, sshd, the lab's set-up (Open vSwitch), then reap orphans.
ip link set lo up
for _ in \$(seq 100); do ip link show eth0 >/dev/null 2>&1 && break; sleep 0.1; done
ip addr add $PEER_IP/24 dev eth0
ip link set eth0 up
mkdir -p /run/sshd /var/log
/usr/sbin/sshd -E /var/log/sshd.log
ZCUBE_VENV=$VENV $ROOT/scripts/setup.sh >/var/log/zcube-setup.log 2>&1 && touch /run/zcube-peer-ready
while :; do sleep 3600 & wait \$!; done
EOF
    chmod +x "$ROOTFS/usr/local/sbin/zcube-peer-init"
    # The cluster edition keeps one ssh session per emulated node of the machine, and opens
    # them all at once (docs/SCALE.md: the same lines go on a real server).
    printf 'MaxStartups 200:30:400\nMaxSessions 400\n' \
        >"$ROOTFS/etc/ssh/sshd_config.d/zcube-lab.conf"
    echo zcube-peer >"$ROOTFS/etc/hostname"
    printf '127.0.0.1 localhost\n127.0.1.1 zcube-peer\n%s zcube-peer-wire\n' "$PEER_IP" \
        >"$ROOTFS/etc/hosts"
}

authorize() {
    mkdir -p /root/.ssh && chmod 700 /root/.ssh
    [[ -f "$KEY" ]] || ssh-keygen -q -t ed25519 -N '' -f "$KEY"
    mkdir -p "$ROOTFS/root/.ssh" && chmod 700 "$ROOTFS/root/.ssh"
    cp "$KEY.pub" "$ROOTFS/root/.ssh/authorized_keys"
    chmod 600 "$ROOTFS/root/.ssh/authorized_keys"
}

start() {
    # A peer serves one checkout (bind-mounted at its path): another checkout restarts it.
    if running && answers && [[ "$(cat "$RUNDIR/root" 2>/dev/null)" == "$ROOT:$VENV" ]]; then
        log "running at $PEER_IP"
        return
    fi
    running && stop
    build
    authorize
    write_init
    mkdir -p "$RUNDIR"
    ip link del "$WIRE" 2>/dev/null || true
    # The first stage (in the new namespaces, before chroot) mounts the system's own /proc,
    # /sys (of its own network namespace), /run and /tmp, and the checkout at its own path.
    # shellcheck disable=SC2016  # the inner script gets its values as arguments
    setsid unshare --net --mount --pid --uts --ipc --fork --kill-child --propagation private \
        bash -c '
            set -e
            r="$1"; repo="$2"; venv="$3"
            hostname zcube-peer
            # "/" must be a mount point there: mnexec makes it private.
            mount --bind "$r" "$r"
            mount -t proc proc "$r/proc"
            mount -t sysfs sysfs "$r/sys"
            mount --rbind /dev "$r/dev"
            mount -t tmpfs tmpfs "$r/run"
            mount -t tmpfs tmpfs "$r/tmp"
            # (after /tmp: a checkout under /tmp needs its mount point on the new tmpfs)
            mkdir -p "$r$repo" "$r$venv"
            mount --bind "$repo" "$r$repo"
            if [[ "$venv" != "$repo"/* ]]; then mount --bind "$venv" "$r$venv"; fi
            exec chroot "$r" /usr/local/sbin/zcube-peer-init
        ' peer-init "$ROOTFS" "$ROOT" "$VENV" </dev/null >"$CACHE/init.log" 2>&1 &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    echo "$ROOT:$VENV" >"$RUNDIR/root"
    # unshare itself holds the new network namespace; the wire's far end goes there as eth0.
    for _ in $(seq 50); do
        [[ "$(readlink "/proc/$pid/ns/net")" != "$(readlink /proc/self/ns/net)" ]] && break
        sleep 0.1
    done
    ip link add "$WIRE" mtu "$WIRE_MTU" type veth peer name eth0 mtu "$WIRE_MTU" netns "$pid"
    ip addr add "$HERE_IP/24" dev "$WIRE"
    ip link set "$WIRE" up
    log "started (pid $pid); waiting for sshd and Open vSwitch"
    for _ in $(seq 120); do
        if ! running; then
            cat "$CACHE/init.log" >&2
            die "the peer exited during start"
        fi
        if ssh-keyscan -T 2 "$PEER_IP" >"$RUNDIR/known" 2>/dev/null && [[ -s "$RUNDIR/known" ]]; then
            break
        fi
        sleep 0.5
    done
    [[ -s "$RUNDIR/known" ]] || die "sshd did not answer at $PEER_IP"
    ssh-keygen -q -R "$PEER_IP" >/dev/null 2>&1 || true
    cat "$RUNDIR/known" >>/root/.ssh/known_hosts
    for _ in $(seq 120); do
        answers && { log "running at $PEER_IP"; return; }
        sleep 0.5
    done
    "${SSH[@]}" tail -20 /var/log/zcube-setup.log >&2 || true
    die "the peer's set-up did not finish (its /var/log/zcube-setup.log is above)"
}

stop() {
    if [[ -f "$PIDFILE" ]]; then
        local pid
        pid="$(cat "$PIDFILE")"
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$PIDFILE"
    fi
    ip link del "$WIRE" 2>/dev/null || true
    log "stopped"
}

status() {
    if running && answers; then
        log "running at $PEER_IP (pid $(cat "$PIDFILE"))"
    elif running; then
        log "started but not answering over ssh"; return 1
    else
        log "not running"; return 1
    fi
}

case "${1:-}" in
    build) build ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    address) echo "$PEER_IP" ;;
    *) echo "usage: $0 {build|start|stop|status|address}" >&2; exit 2 ;;
esac
