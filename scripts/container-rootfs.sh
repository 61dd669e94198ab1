#!/bin/sh
# Builds the Debian bookworm root file system the systemd deployment test boots (scripts/container.sh), once:
# container-rootfs.sh DIR. A DIR that holds a complete build (its stamp names the same package list) is re-used as
# it is; anything else is built aside in DIR.partial and moved into place only when debootstrap finished, so an
# interrupted build never passes for a complete one. About two minutes and 260 MB on a first run.
# The packages: systemd as PID 1 and its D-Bus, and the shared libraries keymgr-core links or loads (SQLite,
# OpenSSL, Argon2, libcurl on first network use, libtss2 for a TPM master key: esys, mu, rc, the TCTI loader and
# the device TCTI it loads for /dev/tpmrm0). The mirror is the one the host's apt uses, unless KEYMGR_MIRROR says.
set -eu
[ $# -eq 1 ] || { echo "usage: container-rootfs.sh DIR" >&2; exit 64; }
dir=$1
packages=systemd,systemd-sysv,dbus,libsqlite3-0,libssl3,libargon2-1,libcurl4,libtss2-esys-3.0.2-0,libtss2-tctildr0,libtss2-mu0,libtss2-rc0,libtss2-tcti-device0
stamp="$dir/.keymgr-rootfs-complete"
mkdir -p "$(dirname "$dir")"
# One build at a time: a second caller waits, then finds the first one's tree complete.
exec 9>"$dir.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages" ]; then
  echo "$dir"
  exit 0
fi
mirror=${KEYMGR_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*debian\/*\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)}
mirror=${mirror:-http://deb.debian.org/debian}
partial="$dir.partial"
rm -rf "$partial"
mkdir -p "$(dirname "$dir")"
debootstrap --variant=minbase --include="$packages" bookworm "$partial" "$mirror" >"$partial.log" 2>&1 || {
  tail -n 20 "$partial.log" >&2
  echo "container-rootfs.sh: debootstrap failed (whole log: $partial.log)" >&2
  exit 1
}
# A container has no console login to offer and no hardware clock; these only slow the boot down.
chroot "$partial" systemctl mask getty@tty1.service console-getty.service systemd-timesyncd.service >/dev/null 2>&1 || true
echo "$packages" > "$partial/.keymgr-rootfs-complete"
rm -rf "$dir" "$partial.log"
mv "$partial" "$dir"
echo "$dir"
