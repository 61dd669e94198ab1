#!/usr/bin/env bash
# The walkthrough behind `make demo`: a temporary home, then keymgr as a user would run it.
set -euo pipefail
bin="${1:?usage: demo.sh BIN_DIR}"
home="$(mktemp -d)/keymgr-demo"
trap 'rm -rf "$(dirname "$home")"' EXIT
# Arguments as a shell would need them typed: quoted when they hold anything unusual.
quoted() { local arg; for arg in "$@"; do
    if [[ "$arg" =~ ^[A-Za-z0-9_./=,:@%+-]+$ ]]; then printf ' %s' "$arg"; else printf " '%s'" "${arg//\'/\'\\\'\'}"; fi
done; }
run() { printf '\n$ keymgr%s\n' "$(quoted "$@")"; "$bin/keymgr" --home "$home" "$@"; }
# PINs go in on stdin, never as arguments; the transcript shows the variable, not the PIN.
run_with_pin() {
    local pin="$1"; shift
    printf '\n$ printf '"'"'%%s\\n'"'"' "$PIN" | keymgr%s\n' "$(quoted "$@")"
    printf '%s\n' "$pin" | "$bin/keymgr" --home "$home" "$@"
}

# Small Argon2 parameters keep the demo quick (the default is RFC 9106's 64 MiB, t=3, p=4).
# /bin/true stands in for a fingerprint reader: every finger it sees is the right one.
run init --device-name "demo kiosk" --argon2-memory 19456 --argon2-iterations 2 --argon2-parallelism 1 \
    --biometric-verifier /bin/true
run status

# Three users, three auth types.
run bind --user alice --username "Alice Liddell"
run_with_pin 482916 bind --user bob --username "Bob Dylan" --auth-type app-pin --pin-stdin
run bind --user "id=carol,ou=user,o=alpha" --username carol --auth-type biometric-only
run list

# The identity server sends a challenge; bob signs it with his PIN.
challenge="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
run_with_pin 482916 sign --user bob --challenge "$challenge" --claim purpose=demo --pin-stdin

# alice moves to a PIN: a new key, the old one superseded.
run_with_pin 731905 rebind --user alice --auth-type app-pin --pin-stdin
# carol's badge was lost: her key is revoked and its private key destroyed.
run revoke --user "id=carol,ou=user,o=alpha" --reason "badge lost"
run list --status all
run users

# Everything above is in the hash-chained audit log.
run audit
run audit verify
