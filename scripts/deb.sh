#!/bin/sh
# Builds keymgr's Debian package with dpkg-deb (`make deb`): deb.sh CLIENT CORE MANPAGE VERSION OUTPUT.deb
# (CLIENT = the release `keymgr`, CORE = the release `keymgr-core`).
# The tree is what `make install PREFIX=/usr` writes (both programs, completions, keymgr(1) and keymgr-policy(5),
# the README and docs/ in /usr/share/doc/keymgr, the agent's systemd units, sysusers.d and tmpfiles.d files, the
# policy /etc/keymgr/policy.toml as a conffile) and the documentation Debian asks for. Depends: the packages that own the libraries the binaries link (ldd) and load on first network use
# (libcurl.so.4, through dlopen), each found with dpkg -S: not guessed, so a build on another release names its own.
set -eu
binary=$1; core=$2; manpage=$3; version=$4; output=$5
# A tree of its own and the package written aside, then moved into place: two builds at once (two tests) never mix.
root=$(mktemp -d "$(dirname "$output")/deb-root.XXXXXX")
packaged_manpage=$(mktemp "$(dirname "$output")/keymgr.1.XXXXXX")
partial=$(mktemp "$output.partial.XXXXXX")
trap 'rm -rf "$root" "$partial" "$packaged_manpage"' EXIT
chmod 0755 "$root"
mkdir -p "$root/DEBIAN"
# keymgr(1) with this package's paths in FILES (the MANPAGE given was written for `make install`'s PREFIX).
python3 scripts/manpage.py --prefix /usr "$core" > "$packaged_manpage"
make --no-print-directory install PREFIX=/usr DESTDIR="$(realpath "$root")" \
  SYSTEMD_UNIT_DIR=/usr/lib/systemd/system SYSUSERS_DIR=/usr/lib/sysusers.d TMPFILES_DIR=/usr/lib/tmpfiles.d \
  SYSCONFDIR=/etc ZSH_COMPLETION_DIR=/usr/share/zsh/vendor-completions \
  RELEASE_BIN="$binary" RELEASE_CORE="$core" MANPAGE="$packaged_manpage" >/dev/null
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/keymgr" \
  "$root/usr/libexec/keymgr/keymgr-core"
gzip -9n "$root/usr/share/man/man1/keymgr.1" "$root/usr/share/man/man5/keymgr-policy.5"
# As dh_compress: documentation over 4 KiB is compressed (the copyright file never is).
find "$root/usr/share/doc/keymgr" -type f -size +4k -name '*.md' -exec gzip -9n {} +
# bash-completion sources the script: no interpreter line.
sed -i '1{/^#!/d}' "$root/usr/share/bash-completion/completions/keymgr"

# The policy is a conffile: dpkg keeps the administrator's edits on upgrade and asks before replacing them.
printf '/etc/keymgr/policy.toml\n' > "$root/DEBIAN/conffiles"
# The maintainer scripts, as debhelper writes them (dh_installsysusers, dh_installtmpfiles and dh_installsystemd
# --no-enable --no-start with restart after upgrade: autoscripts postinst-systemd-dont-enable,
# postinst-systemd-restartnostart, prerm-systemd, postrm-systemd and postrm-systemd-reload-only).
# On configure: the keymgr user and groups, the store's and policy's directories; the units' enablement recorded
# with deb-systemd-helper (an administrator's `systemctl enable` is kept on upgrade and its links are removed on
# purge); daemon-reload, so a new or upgraded unit is what systemd runs; on upgrade, a running agent or timer is
# restarted on the new program, and on an upgrade or a reinstall after `remove` (which stopped and masked them),
# the socket and the timer are started if the administrator had enabled them (deb-systemd-invoke start starts only
# enabled units). Nothing is enabled or started on a first install: the socket waits for the master key's
# credential and `keymgr init` (README, "Deploying on a shared device").
units="keymgr.socket keymgr.service keymgr-sync.timer keymgr-sync.service"
{
  printf '#!/bin/sh\nset -e\n'
  printf 'if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] || [ "$1" = "abort-remove" ] ; then\n'
  printf '\tsystemd-sysusers ${DPKG_ROOT:+--root="$DPKG_ROOT"} keymgr.conf\n'
  printf '\tif [ -x "$(command -v systemd-tmpfiles)" ]; then\n'
  printf '\t\tsystemd-tmpfiles ${DPKG_ROOT:+--root="$DPKG_ROOT"} --create keymgr.conf || true\n'
  printf '\tfi\n'
  for unit in $units; do
    printf '\tif deb-systemd-helper debian-installed '\''%s'\''; then\n' "$unit"
    printf '\t\tdeb-systemd-helper unmask '\''%s'\'' >/dev/null || true\n' "$unit"
    printf '\t\tif deb-systemd-helper --quiet was-enabled '\''%s'\''; then\n' "$unit"
    printf '\t\t\tdeb-systemd-helper enable '\''%s'\'' >/dev/null || true\n' "$unit"
    printf '\t\tfi\n\tfi\n'
    printf '\tdeb-systemd-helper update-state '\''%s'\'' >/dev/null || true\n' "$unit"
  done
  printf '\tif [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then\n'
  printf '\t\tsystemctl --system daemon-reload >/dev/null || true\n'
  printf '\t\tif [ -n "$2" ]; then\n'
  printf '\t\t\tdeb-systemd-invoke try-restart keymgr.service keymgr-sync.timer >/dev/null || true\n'
  printf '\t\t\tdeb-systemd-invoke start keymgr.socket keymgr-sync.timer >/dev/null || true\n'
  printf '\t\tfi\n\tfi\nfi\n'
} > "$root/DEBIAN/postinst"

# On remove: the socket, the agent and the timer are stopped (before their files go), so nothing runs a deleted
# program and no timer fires a unit that is gone.
{
  printf '#!/bin/sh\nset -e\n'
  printf 'if [ -z "${DPKG_ROOT:-}" ] && [ "$1" = remove ] && [ -d /run/systemd/system ] ; then\n'
  printf '\tdeb-systemd-invoke stop %s >/dev/null || true\n' "$units"
  printf 'fi\n'
} > "$root/DEBIAN/prerm"

# After remove: daemon-reload, so systemd forgets the units; masked (debhelper's way of keeping a removed
# package's units off) until a reinstall or purge. On purge: the enablement links and the masks go; the data an
# administrator made stays, and the script says what it is and how to remove it.
{
  printf '#!/bin/sh\nset -e\n'
  printf 'if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ] && [ "$1" = remove ]; then\n'
  printf '\tsystemctl --system daemon-reload >/dev/null || true\n'
  printf 'fi\n'
  printf 'if [ "$1" = "remove" ]; then\n\tif [ -x "/usr/bin/deb-systemd-helper" ]; then\n'
  printf '\t\tdeb-systemd-helper mask %s >/dev/null || true\n' "$units"
  printf '\tfi\nfi\n'
  printf 'if [ "$1" = "purge" ]; then\n\tif [ -x "/usr/bin/deb-systemd-helper" ]; then\n'
  printf '\t\tdeb-systemd-helper purge %s >/dev/null || true\n' "$units"
  printf '\t\tdeb-systemd-helper unmask %s >/dev/null || true\n' "$units"
  printf '\tfi\n'
  printf '\trmdir --ignore-fail-on-non-empty /etc/keymgr 2>/dev/null || true\n'
  cat <<'PURGE'
	left=""
	for kept in /var/lib/keymgr /etc/credstore.encrypted/keymgr.master /etc/credstore.encrypted/keymgr.admin; do
		if [ -e "$kept" ]; then left="$left $kept"; fi
	done
	if [ -n "$left" ]; then
		echo "keymgr: purged; the data it made is kept:$left" >&2
		echo "keymgr: the store (keys, audit log) and the master key and admin token credentials. Revoke the" >&2
		echo "keymgr: device's bindings on the identity server first (keymgr admin revoke), then remove them:" >&2
		echo "keymgr:   rm -rf$left" >&2
		echo "keymgr: the keymgr user and groups stay too (userdel keymgr)." >&2
	fi
fi
PURGE
} > "$root/DEBIAN/postrm"
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

# The client is static on purpose: it starts in a fraction of the dynamic loader's time on every command
# (docs/output-and-packaging.md, "Start-up"). The price is a glibc security update reaching it only with a rebuild;
# it resolves no names through NSS and loads no iconv or locale modules, the parts of glibc a static program misses.
install -d "$root/usr/share/lintian/overrides"
printf 'keymgr: statically-linked-binary [usr/bin/keymgr]\n' > "$root/usr/share/lintian/overrides/keymgr"
chmod 0644 "$root/usr/share/lintian/overrides/keymgr"

doc="$root/usr/share/doc/keymgr"
install -d "$doc"
cat > "$doc/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: keymgr
Source: https://example.com/keymgr

Files: *
Copyright: 2026 The keymgr authors
License: proprietary
 Distributed with the keymgr sources; no licence to redistribute is granted beyond them.
COPYRIGHT
date=$(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")
printf 'keymgr (%s) unstable; urgency=medium\n\n  * Release %s.\n\n -- keymgr maintainers <keymgr@example.com>  %s\n' \
  "$version" "$version" "$date" | gzip -9n > "$doc/changelog.gz"

# The owning package of each library: ldd's paths, and libcurl.so.4 where the dynamic loader finds it.
owner() {
  dpkg -S "$1" 2>/dev/null | head -n 1 | cut -d: -f1 \
    || true
}
# The client is a static executable (Package.swift): only keymgr-core links shared libraries.
libraries=$(ldd "$core" | awk '/=>/ { print $3 } /^\t\/.*ld-linux/ { print $1 }' | sort -u)
libraries="$libraries $(ldconfig -p | awk '/libcurl\.so\.4 .*x86-64/ { print $NF; exit }')"
depends=""
for library in $libraries; do
  package=$(owner "$library")
  [ -n "$package" ] || package=$(owner "$(realpath "$library")")
  [ -n "$package" ] || package=$(owner "/usr$library")
  if [ -z "$package" ]; then echo "deb.sh: no package owns $library" >&2; exit 1; fi
  case " $depends " in *" $package "*) ;; *) depends="$depends $package" ;; esac
done
depends=$(echo $depends | tr ' ' '\n' | sort | paste -sd, - | sed 's/,/, /g')
# keymgr-core's relative relocations are packed (DT_RELR, Package.swift), which the loader reads since glibc 2.36.
depends=$(echo "$depends" | sed 's/\blibc6\b/libc6 (>= 2.36)/')
# The postinst runs systemd-sysusers (what debhelper adds for a sysusers.d file).
depends="$depends, systemd | systemd-standalone-sysusers | systemd-sysusers"
# deb-systemd-helper and deb-systemd-invoke, which the maintainer scripts call (debhelper adds the same).
depends="$depends, init-system-helpers (>= 1.54~)"

find "$root" -type d -exec chmod 0755 {} +
find "$root/usr" -type f -exec md5sum {} + | sed "s| $root/| |" > "$root/DEBIAN/md5sums"
installed=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: keymgr
Version: $version
Architecture: amd64
Maintainer: keymgr maintainers <keymgr@example.com>
Installed-Size: $installed
Depends: $depends
Section: admin
Priority: optional
Homepage: https://example.com/keymgr
Description: device-bound signing keys for shared devices
 keymgr binds per-user ES256 signing keys on a device (a kiosk, a shared
 workstation), keeps them wrapped under a master key in a local SQLite store,
 signs challenges with them, and keeps the bindings in step with a PingAM or
 OAuth identity server. The package holds the keymgr command (a small
 client, and the full program keymgr-core it runs or asks the agent to run),
 its manual and shell completions, and the agent that serves each person on
 a shared device as themselves: its systemd socket and service, accounts,
 directories and policy, and the periodic sync's timer.
CONTROL
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums" "$root/DEBIAN/conffiles"
dpkg-deb --root-owner-group -Zgzip --build "$root" "$partial" >/dev/null
chmod 0644 "$partial"
mv "$partial" "$output"
echo "$output"
