#!/usr/bin/env bash
# One idempotent set-up step for a Debian 12 machine, as root: system packages, Open vSwitch
# running, and the project installed with pinned dependencies in ./.venv.
# Safe to run again: it installs only what is missing and reinstalls the project only when
# pyproject.toml changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ZCUBE_VENV:-$ROOT/.venv}"
APT_PACKAGES=(
    openvswitch-switch mininet prometheus iperf3 ethtool iputils-ping fping iproute2 procps psmisc
    python3 python3-venv python3-pip shellcheck sudo openssh-client debootstrap
)

log() { printf '[setup] %s\n' "$*"; }

if [[ "$(id -u)" -ne 0 ]]; then
    echo "setup.sh must run as root (it installs packages and starts Open vSwitch): sudo $0" >&2
    exit 1
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    log "Debian packages present"
fi

# Open vSwitch: there may be no systemd (containers, CI), so start it with ovs-ctl.
if ovs-vsctl --timeout=5 show >/dev/null 2>&1; then
    log "Open vSwitch running"
else
    log "starting Open vSwitch"
    # ovs-ctl tries to raise ulimits, which fails harmlessly in unprivileged containers.
    /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null 2>&1 || true
    if ! ovs-vsctl --timeout=10 show >/dev/null 2>&1; then
        echo "Open vSwitch did not start: see /var/log/openvswitch/ovs-vswitchd.log" >&2
        exit 1
    fi
fi

# The venv uses Debian's python3 and sees its site packages, because Mininet's Python library
# comes from Debian's mininet package (its PyPI release is stale).
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating virtual environment $VENV"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
stamp="$VENV/.zcube-lab-installed"
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    log "installing zcube-lab and its pinned dependencies"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "${ROOT}[test,bench]"
    echo "$want" >"$stamp"
else
    log "zcube-lab installed in $VENV"
fi
log "ready: $VENV/bin/zcube-lab --help"
