#!/bin/sh
# Builds the Debian bookworm root file system the systemd deployment test boots (scripts/container.sh), once:
# container-rootfs.sh DIR. A DIR that holds a complete build (its stamp names the same package list) is re-used as
# it is; anything else is built aside in DIR.partial and moved into place only when debootstrap finished, so an
# interrupted build never passes for a complete one. About two minutes and 260 MB on a first run.
# The packages: systemd as PID 1 and its D-Bus, and the shared libraries keymgr-core links or loads (SQLite,
# OpenSSL, Argon2, libcurl on first network use, libtss2 for a TPM master key: esys, mu, rc, the TCTI loader and
# the device TCTI it loads for /dev/tpmrm0). The mirror is the one the host's apt uses (never a host named here), unless KEYMGR_MIRROR says.
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
# The first Debian archive apt's own sources name (deb822 *.sources, then the one-line format), and no other:
# the repository names no mirror of its own.
apt_mirror() {
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] && sed -n 's/^URIs: *\([^ ]*\/debian\)\/*$/\1/p' "$file"
  done
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$file" ] && sed -n 's/^deb  *\(\[[^]]*\]  *\)\{0,1\}\([^ ]*\/debian\)\/*  *bookworm .*/\2/p' "$file"
  done
}
mirror=${KEYMGR_MIRROR:-$(apt_mirror | head -n 1)}
if [ -z "$mirror" ]; then
  echo "container-rootfs.sh: apt's sources (/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list) name no Debian" >&2
  echo "  archive (a URI ending in /debian) to debootstrap bookworm from: add one there, or set KEYMGR_MIRROR=URL" >&2
  exit 78
fi
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
