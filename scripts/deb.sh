#!/bin/sh
# Builds keymgr's Debian package with dpkg-deb (`make deb`): deb.sh CLIENT CORE MANPAGE VERSION OUTPUT.deb
# (CLIENT = the release `keymgr`, CORE = the release `keymgr-core`).
# The tree is what `make install PREFIX=/usr` writes (both binaries, completions, systemd units, man page), plus the
# sysusers.d and tmpfiles.d files and the policy template when contrib/ has them, and the documentation Debian asks
# for. Depends: the packages that own the libraries the binaries link (ldd) and load on first network use
# (libcurl.so.4, through dlopen), each found with dpkg -S: not guessed, so a build on another release names its own.
set -eu
binary=$1; core=$2; manpage=$3; version=$4; output=$5
root=$(dirname "$output")/deb-root
rm -rf "$root"
mkdir -p "$root/DEBIAN"
make --no-print-directory install PREFIX=/usr DESTDIR="$(realpath "$root")" \
  SYSTEMD_UNIT_DIR=/usr/lib/systemd/system ZSH_COMPLETION_DIR=/usr/share/zsh/vendor-completions \
  RELEASE_BIN="$binary" RELEASE_CORE="$core" MANPAGE="$manpage" >/dev/null
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/keymgr" \
  "$root/usr/libexec/keymgr/keymgr-core"
gzip -9n "$root/usr/share/man/man1/keymgr.1"
# bash-completion sources the script: no interpreter line.
sed -i '1{/^#!/d}' "$root/usr/share/bash-completion/completions/keymgr"

# What the agent's deployment adds to contrib/, when it is there.
for conf in contrib/sysusers.d/*.conf; do [ -f "$conf" ] && install -D -m 0644 "$conf" "$root/usr/lib/sysusers.d/$(basename "$conf")"; done
for conf in contrib/tmpfiles.d/*.conf; do [ -f "$conf" ] && install -D -m 0644 "$conf" "$root/usr/lib/tmpfiles.d/$(basename "$conf")"; done
for template in contrib/policy/*; do [ -f "$template" ] && install -D -m 0644 "$template" "$root/usr/share/keymgr/$(basename "$template")"; done

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
libraries=$(ldd "$binary" "$core" | awk '/=>/ { print $3 } /^\t\/.*ld-linux/ { print $1 }' | sort -u)
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
 its manual, shell completions and the systemd units of the periodic sync.
CONTROL
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
dpkg-deb --root-owner-group -Zgzip --build "$root" "$output" >/dev/null
echo "$output"
