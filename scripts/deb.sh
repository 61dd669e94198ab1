#!/bin/sh
# Builds keymgr's Debian package with dpkg-deb (`make deb`): deb.sh CLIENT CORE MANPAGE VERSION OUTPUT.deb
# (CLIENT = the release `keymgr`, CORE = the release `keymgr-core`).
# The tree is what `make install PREFIX=/usr` writes (both programs, completions, man page, the agent's systemd
# units, sysusers.d and tmpfiles.d files, the policy /etc/keymgr/policy.toml as a conffile) and the documentation
# Debian asks for. Depends: the packages that own the libraries the binaries link (ldd) and load on first network use
# (libcurl.so.4, through dlopen), each found with dpkg -S: not guessed, so a build on another release names its own.
set -eu
binary=$1; core=$2; manpage=$3; version=$4; output=$5
# A tree of its own and the package written aside, then moved into place: two builds at once (two tests) never mix.
root=$(mktemp -d "$(dirname "$output")/deb-root.XXXXXX")
trap 'rm -rf "$root" "$output.partial"' EXIT
chmod 0755 "$root"
mkdir -p "$root/DEBIAN"
make --no-print-directory install PREFIX=/usr DESTDIR="$(realpath "$root")" \
  SYSTEMD_UNIT_DIR=/usr/lib/systemd/system SYSUSERS_DIR=/usr/lib/sysusers.d TMPFILES_DIR=/usr/lib/tmpfiles.d \
  SYSCONFDIR=/etc ZSH_COMPLETION_DIR=/usr/share/zsh/vendor-completions \
  RELEASE_BIN="$binary" RELEASE_CORE="$core" MANPAGE="$manpage" >/dev/null
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/keymgr" \
  "$root/usr/libexec/keymgr/keymgr-core"
gzip -9n "$root/usr/share/man/man1/keymgr.1"
# bash-completion sources the script: no interpreter line.
sed -i '1{/^#!/d}' "$root/usr/share/bash-completion/completions/keymgr"

# The policy is a conffile: dpkg keeps the administrator's edits on upgrade and asks before replacing them.
printf '/etc/keymgr/policy.toml\n' > "$root/DEBIAN/conffiles"
# As debhelper's dh_installsysusers and dh_installtmpfiles would write them: the keymgr user and groups, and the
# store's and policy's directories, on configure. Nothing is enabled: the socket waits for the master key's
# credential and `keymgr init` (README, "Deploying on a shared device"). Removal keeps the store and the user.
cat > "$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] || [ "$1" = "abort-remove" ] ; then
	systemd-sysusers ${DPKG_ROOT:+--root="$DPKG_ROOT"} keymgr.conf
	if [ -x "$(command -v systemd-tmpfiles)" ]; then
		systemd-tmpfiles ${DPKG_ROOT:+--root="$DPKG_ROOT"} --create keymgr.conf || true
	fi
fi
POSTINST
chmod 0755 "$root/DEBIAN/postinst"

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
dpkg-deb --root-owner-group -Zgzip --build "$root" "$output.partial" >/dev/null
mv "$output.partial" "$output"
echo "$output"
