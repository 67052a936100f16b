#!/usr/bin/env bash
# The lab VM's second provisioning step (the first is scripts/setup.sh, as in the README), as
# root inside the VM: Grafana from Grafana's own apt repository with our datasource and
# dashboards, and Open vSwitch's kernel datapath when the openvswitch module loads.
# Where Grafana's repository cannot be reached it says so and goes on: the lab, Prometheus and
# Locust work without Grafana. ZCUBE_SKIP_GRAFANA=1 leaves Grafana out without trying.
# Safe to run again (vagrant provision).
set -euo pipefail

ROOT="${ZCUBE_ROOT:-/vagrant}"
GRAFANA_REPO="${ZCUBE_GRAFANA_REPO:-https://apt.grafana.com}"
KEYRING=/etc/apt/keyrings/grafana.gpg
SOURCES=/etc/apt/sources.list.d/grafana.list

log() { printf '[vagrant-provision] %s\n' "$*"; }
# systemd running as init (the VM), not merely installed (containers, CI).
has_systemd() { [[ -d /run/systemd/system ]]; }

if [[ "$(id -u)" -ne 0 ]]; then
    echo "vagrant-provision.sh must run as root: sudo $0" >&2
    exit 1
fi

# --- Open vSwitch kernel datapath --------------------------------------------------------
# `zcube-lab up --datapath auto` (the default) uses the kernel datapath when this module is
# loaded, the userspace one otherwise.
if modprobe openvswitch 2>/dev/null; then
    echo openvswitch >/etc/modules-load.d/zcube-openvswitch.conf
    log "openvswitch kernel module loaded: switches use the kernel datapath"
else
    log "openvswitch kernel module not available: switches use the userspace datapath"
fi

# --- Prometheus on 9090 belongs to the lab ---------------------------------------------------
# Debian's prometheus package starts a system service on :9090; `zcube-lab up --serve` runs the
# lab's own Prometheus there, the port the VM forwards.
if has_systemd && systemctl is-enabled --quiet prometheus 2>/dev/null; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
    log "Debian's prometheus service disabled (zcube-lab up --serve serves :9090)"
fi

# --- Grafana from Grafana's apt repository ---------------------------------------------------
install_grafana() {
    if dpkg-query -W -f='${Status}' grafana 2>/dev/null | grep -q "install ok installed"; then
        log "Grafana installed"
        return 0
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        ca-certificates curl gpg >/dev/null
    install -d -m 0755 /etc/apt/keyrings
    local key
    key="$(mktemp)"
    if ! curl -fsSL --max-time 30 "$GRAFANA_REPO/gpg.key" -o "$key"; then
        rm -f "$key"
        log "cannot reach $GRAFANA_REPO: Grafana is NOT installed."
        log "The lab, Prometheus (:9090) and Locust (:8089) work without it; to add Grafana"
        log "later, run 'sudo /vagrant/scripts/vagrant-provision.sh' once the network allows."
        return 1
    fi
    gpg --dearmor --yes -o "$KEYRING" "$key"
    rm -f "$key"
    echo "deb [signed-by=$KEYRING] $GRAFANA_REPO stable main" >"$SOURCES"
    if ! apt-get update -qq ||
        ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq grafana >/dev/null; then
        rm -f "$SOURCES" # a broken source would fail every later apt-get update
        log "installing Grafana from $GRAFANA_REPO failed: Grafana is NOT installed."
        return 1
    fi
    log "Grafana installed from $GRAFANA_REPO"
}

configure_grafana() {
    # Our provisioning: the lab's Prometheus as datasource, the dashboards read from the
    # synced repository (edit grafana/dashboards/*.json, Grafana reloads them).
    install -D -m 0644 "$ROOT/grafana/provisioning/datasources/prometheus.yaml" \
        /etc/grafana/provisioning/datasources/zcube-lab.yaml
    install -D -m 0644 "$ROOT/grafana/provisioning/dashboards/zcube.yaml" \
        /etc/grafana/provisioning/dashboards/zcube-lab.yaml
    # A lab on a laptop: anonymous viewers, the serving dashboard as home page.
    install -d /etc/systemd/system/grafana-server.service.d
    cat >/etc/systemd/system/grafana-server.service.d/zcube-lab.conf <<EOF
[Service]
Environment=GF_AUTH_ANONYMOUS_ENABLED=true
Environment=GF_AUTH_ANONYMOUS_ORG_ROLE=Viewer
Environment=GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH=$ROOT/grafana/dashboards/serving.json
EOF
    if has_systemd; then
        systemctl daemon-reload
        systemctl enable grafana-server >/dev/null 2>&1
        systemctl restart grafana-server
        log "Grafana running: http://localhost:3000 (admin/admin, or browse anonymously)"
    else
        log "no systemd: start Grafana with 'grafana-server --homepath /usr/share/grafana'"
    fi
}

if [[ "${ZCUBE_SKIP_GRAFANA:-0}" == 1 ]]; then
    log "ZCUBE_SKIP_GRAFANA=1: Grafana left out"
elif install_grafana; then
    configure_grafana
fi
log 'done. Next, on the host:'
log "  vagrant ssh -- -t 'sudo /vagrant/.venv/bin/zcube-lab up --fabric zcube --serve --bind 0.0.0.0'"
