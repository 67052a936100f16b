#!/usr/bin/env bash
# Builds a Debian 12 (bookworm) Vagrant box for the libvirt provider from Debian's packages,
# as root on a Debian host: debootstrap into a raw disk image (one ext4 partition, booted by
# extlinux), the `vagrant` user with Vagrant's well-known insecure key (Vagrant replaces it on
# the first `vagrant up`), then qcow2 and the box tar (metadata.json + box.img).
#
# The lab's Debian packages (those scripts/setup.sh installs) are put in the image too, so that
# provisioning under TCG (no KVM) does not spend its time in dpkg; setup.sh then finds them
# present and goes on with the venv. ZCUBE_BOX_LAB_PACKAGES=0 leaves them out.
#
# Everything is cached in $ZCUBE_VM_CACHE (default /var/cache/zcube-lab-vm): debootstrap's
# .debs (a second build downloads nothing new) and the finished box; an existing box is kept
# unless --force is given.
#
#   sudo scripts/vm/build-box.sh [--force]        # prints the box path on its last line
#
# Host packages: debootstrap qemu-utils fdisk e2fsprogs extlinux syslinux-common vagrant.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${ZCUBE_VM_CACHE:-/var/cache/zcube-lab-vm}"
MIRROR="${ZCUBE_BOX_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
DISK_GB="${ZCUBE_BOX_DISK_GB:-20}"
BOX="$CACHE/zcube-bookworm-libvirt.box"
LAB_PACKAGES="${ZCUBE_BOX_LAB_PACKAGES:-1}"
# Local CA certificates of the host (a TLS-intercepting egress proxy, say) are copied into the
# guest's trust store, so that apt and pip inside reach the network the host reaches.
HOST_CAS="${ZCUBE_BOX_HOST_CAS:-/usr/local/share/ca-certificates}"

log() { printf '[build-box] %s\n' "$*" >&2; }
die() {
    printf '[build-box] error: %s\n' "$*" >&2
    exit 1
}

[[ "$(id -u)" -eq 0 ]] || die "must run as root (debootstrap, loop devices): sudo $0"
force=0
[[ "${1:-}" == "--force" ]] && force=1
if [[ -f "$BOX" && "$force" -eq 0 ]]; then
    log "cached box: $BOX (--force rebuilds it)"
    echo "$BOX"
    exit 0
fi
for tool in debootstrap qemu-img sfdisk mkfs.ext4 extlinux losetup; do
    command -v "$tool" >/dev/null || die "$tool is missing: see the header of $0"
done
MBR=/usr/lib/syslinux/mbr/mbr.bin
[[ -f "$MBR" ]] || die "$MBR is missing: apt-get install syslinux-common"
VAGRANT_PUB=""
for candidate in /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub \
    /opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub; do
    [[ -f "$candidate" ]] && VAGRANT_PUB="$candidate"
done
[[ -n "$VAGRANT_PUB" ]] || die "Vagrant's insecure public key not found: apt-get install vagrant"

# The lab's packages: the same list as scripts/setup.sh.
lab_packages=()
if [[ "$LAB_PACKAGES" == 1 ]]; then
    # shellcheck disable=SC2207
    lab_packages=($(sed -n '/^APT_PACKAGES=(/,/^)/p' "$ROOT/scripts/setup.sh" | sed '1d;$d'))
    ((${#lab_packages[@]})) || die "could not read APT_PACKAGES from scripts/setup.sh"
fi

mkdir -p "$CACHE/debs"
WORK="$(mktemp -d "$CACHE/build.XXXXXX")"
RAW="$WORK/disk.raw"
MNT="$WORK/root"
LOOP=""
cleanup() {
    set +e
    for sub in dev/pts dev proc sys; do
        mountpoint -q "$MNT/$sub" && umount -l "$MNT/$sub"
    done
    mountpoint -q "$MNT" && umount "$MNT"
    [[ -n "$LOOP" ]] && losetup -d "$LOOP"
    rm -rf "$WORK"
}
trap cleanup EXIT

t0=$SECONDS
log "disk: ${DISK_GB} GB raw (sparse), one ext4 partition from 1 MiB"
truncate -s "${DISK_GB}G" "$RAW"
printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q "$RAW"
# No partition scanning needed: a loop device over the partition's byte range.
OFFSET=$((2048 * 512))
LOOP="$(losetup -f --show -o "$OFFSET" --sizelimit $((DISK_GB * 1024 * 1024 * 1024 - OFFSET)) "$RAW")"
# extlinux reads neither 64-bit ext4 nor metadata checksums on every version: leave them out.
mkfs.ext4 -q -L zcube-root -O ^64bit,^metadata_csum "$LOOP"
UUID="$(blkid -s UUID -o value "$LOOP")"
mkdir -p "$MNT"
mount "$LOOP" "$MNT"

log "debootstrap $SUITE from $MIRROR (debs cached in $CACHE/debs)"
# The cache directory lives outside the target; debootstrap wants it absolute.
debootstrap --variant=minbase --cache-dir="$CACHE/debs" \
    --include=systemd-sysv,udev,kmod,ifupdown,isc-dhcp-client,openssh-server,sudo,rsync,ca-certificates,netbase,iproute2,less,linux-image-amd64 \
    "$SUITE" "$MNT" "$MIRROR" >&2

log "configuring the guest"
for sub in proc sys dev dev/pts; do
    mount --bind "/$sub" "$MNT/$sub"
done
# No service starts inside the chroot (Open vSwitch, Prometheus, ssh would run on the host).
printf '#!/bin/sh\nexit 101\n' >"$MNT/usr/sbin/policy-rc.d"
chmod 0755 "$MNT/usr/sbin/policy-rc.d"

cat >"$MNT/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
EOF
echo zcube-lab >"$MNT/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tzcube-lab\n' >"$MNT/etc/hosts"
cat >"$MNT/etc/fstab" <<EOF
UUID=$UUID / ext4 errors=remount-ro 0 1
EOF
# net.ifnames=0 (below) names the NIC eth0.
cat >"$MNT/etc/network/interfaces" <<EOF
auto lo
iface lo inet loopback

allow-hotplug eth0
iface eth0 inet dhcp
EOF

if compgen -G "$HOST_CAS/*.crt" >/dev/null; then
    log "adding the host's local CA certificates from $HOST_CAS"
    cp "$HOST_CAS"/*.crt "$MNT/usr/local/share/ca-certificates/"
    chroot "$MNT" update-ca-certificates >/dev/null
    # pip's own bundle does not know them; Debian's store does.
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$MNT/etc/pip.conf"
fi

if ((${#lab_packages[@]})); then
    log "installing the lab's packages: ${lab_packages[*]}"
    cp -r "$CACHE/debs/." "$MNT/var/cache/apt/archives/" 2>/dev/null || true
    chroot "$MNT" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive chroot "$MNT" apt-get install -y -qq --no-install-recommends \
        "${lab_packages[@]}" >&2
    cp -n "$MNT"/var/cache/apt/archives/*.deb "$CACHE/debs/" 2>/dev/null || true
fi
chroot "$MNT" apt-get clean

log "user vagrant (password vagrant, sudo without password, Vagrant's insecure key)"
chroot "$MNT" useradd -m -s /bin/bash vagrant
echo 'vagrant:vagrant' | chroot "$MNT" chpasswd
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >"$MNT/etc/sudoers.d/vagrant"
chmod 0440 "$MNT/etc/sudoers.d/vagrant"
install -d -m 0700 -o 1000 -g 1000 "$MNT/home/vagrant/.ssh"
install -m 0600 -o 1000 -g 1000 "$VAGRANT_PUB" "$MNT/home/vagrant/.ssh/authorized_keys"
echo 'UseDNS no' >"$MNT/etc/ssh/sshd_config.d/zcube-lab.conf"
# Each VM made from the box gets its own ssh host keys on its first boot.
rm -f "$MNT"/etc/ssh/ssh_host_*
cat >"$MNT/etc/systemd/system/zcube-ssh-hostkeys.service" <<'EOF'
[Unit]
Description=Generate missing ssh host keys
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
EOF
chroot "$MNT" systemctl enable zcube-ssh-hostkeys.service >/dev/null 2>&1
: >"$MNT/etc/machine-id"
rm -f "$MNT/usr/sbin/policy-rc.d"

log "boot loader: extlinux on the partition, syslinux's MBR"
kernel="$(cd "$MNT/boot" && ls vmlinuz-* | sort -V | tail -1)"
initrd="initrd.img-${kernel#vmlinuz-}"
[[ -f "$MNT/boot/$initrd" ]] || die "no $initrd in the image"
install -d "$MNT/boot/extlinux"
cat >"$MNT/boot/extlinux/extlinux.conf" <<EOF
DEFAULT debian
TIMEOUT 1
LABEL debian
    LINUX /boot/$kernel
    INITRD /boot/$initrd
    APPEND root=UUID=$UUID ro net.ifnames=0 console=ttyS0,115200 console=tty0
EOF
extlinux --install "$MNT/boot/extlinux" >/dev/null 2>&1
sync
for sub in dev/pts dev proc sys; do umount -l "$MNT/$sub"; done
umount "$MNT"
losetup -d "$LOOP"
LOOP=""
dd if="$MBR" of="$RAW" bs=440 count=1 conv=notrunc status=none

log "qcow2 and box"
qemu-img convert -O qcow2 "$RAW" "$WORK/box.img"
rm -f "$RAW"
cat >"$WORK/metadata.json" <<EOF
{"provider": "libvirt", "format": "qcow2", "virtual_size": $DISK_GB}
EOF
tar -C "$WORK" -cf "$BOX.tmp" metadata.json box.img
mv "$BOX.tmp" "$BOX"
log "built $BOX ($(du -h "$BOX" | cut -f1)) in $((SECONDS - t0)) s"
echo "$BOX"
