#!/usr/bin/env bash
# The walkthrough behind `make demo`: a temporary home, then keymgr as a user would run it.
set -euo pipefail
bin="${1:?usage: demo.sh BIN_DIR}"
home="$(mktemp -d)/keymgr-demo"
server_pid=""
# The reference server, if started, stops with the demo; then the temporary files go.
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$(dirname "$home")"
}
trap cleanup EXIT
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
# Journey passwords go in on file descriptor 3, never as arguments.
run_with_password() {
    printf '\n$ keymgr%s 3<<<"$PASSWORD"\n' "$(quoted "$@")"
    "$bin/keymgr" --home "$home" "$@" 3<<<"$password"
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

# An identity server: keymgr-refserver stands in for PingAM on 127.0.0.1 (a port the OS picks). It stops
# with this script, or by itself if the script dies (--parent-pid) or nothing talks to it for 5 minutes.
server_dir="$(dirname "$home")/refserver"
mkdir -p "$server_dir"
token_file="$server_dir/admin.token"   # created by the server: a random admin token, mode 0600
password="correct horse battery staple"
printf '\n$ keymgr-refserver --db refserver.db --port 0 --admin-token-file admin.token'
printf ' --add-user "dave:$PASSWORD" --add-user "erin:$PASSWORD" --add-user "frank:$PASSWORD" --parent-pid $$ --idle-exit 300 &\n'
"$bin/keymgr-refserver" --db "$server_dir/refserver.db" --port 0 --admin-token-file "$token_file" \
    --add-user "dave:$password" --add-user "erin:$password" --add-user "frank:$password" \
    --parent-pid $$ --idle-exit 300 >"$server_dir/stdout" 2>"$server_dir/stderr" &
server_pid=$!
url=""
for _ in $(seq 300); do
    url="$(sed -n 's/^listening on //p' "$server_dir/stdout")"
    [ -n "$url" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$url" ]; then echo "keymgr-refserver did not start:" >&2; cat "$server_dir/stderr" >&2; exit 1; fi
echo "listening on $url"

run server set --dialect pingam --base-url "$url" --credential-file "$token_file"
run server show

# Three users register this device through the server's binding journey (name and password callbacks).
for user in dave erin frank; do
    run_with_password bind --journey RegisterDevice --user "$user" --password-fd 3
done
# dave signs in: the signing journey's challenge, answered with his key.
run sign --journey SignIn --user dave --claim purpose=demo
run sync

# erin's tablet is reported stolen: an administrator deletes her binding with PingAM's device REST.
# (The admin token goes to curl in a header file, never on its command line.)
erin_kid="$("$bin/keymgr" --home "$home" list --json | python3 -c '
import json, sys
print(next(k["kid"] for k in json.load(sys.stdin) if k["username"] == "erin" and k["status"] == "active"))')"
headers="$server_dir/admin.headers"
(umask 077 && printf 'Authorization: Bearer %s\n' "$(<"$token_file")" >"$headers")
binding="$url/json/realms/root/users/erin/devices/2fa/binding/$erin_kid"
printf '\n$ curl -X DELETE -H @admin.headers -H "Accept-API-Version: resource=1.0" %s\n' "$binding"
curl -sS --fail-with-body -X DELETE -H @"$headers" -H "Accept-API-Version: resource=1.0" "$binding" >/dev/null
echo "deleted binding $erin_kid of erin"

# The next sync sees it gone and revokes erin's key here.
run sync
run list --status all
run audit --event key.revokedByServer
run audit verify

# The same server also speaks OAuth as Curity does. gina gets her own client (templatized dynamic client
# registration), logs in through the device grant (a person approves on another device: here curl plays the
# person at the verification page), and keymgr keeps her DPoP-bound tokens sealed.
run server set --dialect curity --base-url "$url" --issuer "$url" --bound
run dcr register --user gina --software-id keymgr-template
run dcr show --user gina
printf '\n$ keymgr login --user gina &\n'
"$bin/keymgr" --home "$home" login --user gina &
login_pid=$!
user_code=""
for _ in $(seq 100); do
    user_code="$(curl -sS -H @"$headers" "$url/__refserver/oauth/device" | python3 -c '
import json, sys
print(next((d["user_code"] for d in json.load(sys.stdin)["result"] if d["status"] == "pending"), ""))')"
    [ -n "$user_code" ] && break
    sleep 0.1
done
printf '\n(on the verification page, gina enters %s and approves)\n' "$user_code"
curl -sS --fail-with-body -X POST -H @"$headers" -H "Content-Type: application/json" \
    -d "{\"user_code\":\"$user_code\",\"subject\":\"gina\"}" "$url/__refserver/oauth/device/approve" >/dev/null
wait "$login_pid"
run token refresh --user gina
# A script calls an API with a fresh access token and a DPoP proof for the request (the token never shows).
userinfo="$url/oauth/v2/oauth-userinfo"
printf '\n$ at="$(keymgr token print --user gina)"\n'
at="$("$bin/keymgr" --home "$home" token print --user gina)"
printf '$ proof="$(printf %%s "$at" | keymgr dpop proof --user gina --htm GET --htu %s --access-token-stdin)"\n' "$userinfo"
proof="$(printf %s "$at" | "$bin/keymgr" --home "$home" dpop proof --user gina --htm GET --htu "$userinfo" --access-token-stdin)"
printf '$ curl -H "Authorization: DPoP $at" -H "DPoP: $proof" %s\n' "$userinfo"
curl -sS --fail-with-body -H "Authorization: DPoP $at" -H "DPoP: $proof" "$userinfo"
echo
unset at proof
run token show --user gina
run token revoke --user gina
run audit --user gina
run audit verify

# The stolen-device story. frank binds his tablet (home A) and the service desk (home B) through the journey;
# the tablet is stolen; an administrator at the desk finds it and revokes it; the tablet's next sync wipes it.
tablet="$(dirname "$home")/tablet"
desk="$(dirname "$home")/desk"
on() {
    local where="$1" dir; shift
    if [ "$where" = tablet ]; then dir="$tablet"; else dir="$desk"; fi
    printf '\n%s$ keymgr%s\n' "$where" "$(quoted "$@")"
    "$bin/keymgr" --home "$dir" "$@" 3<<<"$password"
}
# A step that must fail with exit status $1 (the demo stops if it does anything else).
on_failing() {
    local expected="$1" status=0; shift
    on "$@" || status=$?
    if [ "$status" -ne "$expected" ]; then echo "expected exit status $expected, got $status" >&2; exit 1; fi
    echo "(exit status $status)"
}
for where in tablet desk; do
    name="frank's tablet"; [ "$where" = desk ] && name="service desk"
    on "$where" init --device-name "$name" --argon2-memory 19456 --argon2-iterations 2 --argon2-parallelism 1
    on "$where" server set --dialect pingam --base-url "$url" --credential-file "$token_file" --issuer "$url"
    on "$where" bind --journey RegisterDevice --user frank --password-fd 3
done
# The tablet also holds frank's own OAuth client.
on tablet dcr register --user "id=frank,ou=user,ou=am-config" --software-id keymgr-template
on tablet sync
tablet_id="$("$bin/keymgr" --home "$tablet" status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["deviceId"])')"

# At the service desk: frank's bindings (the kiosk's, the tablet's and the desk's own), then the tablet revoked.
on desk admin devices --user frank
on desk admin revoke --user frank --device-id "$tablet_id" --reason stolen --yes
on desk admin revoke --user frank --device-id "$tablet_id" --reason stolen --yes    # again: nothing changes
on desk admin stale --days 30

# The tablet syncs: its key is revoked, frank's client deleted and his registration and tokens wiped.
on tablet sync
on tablet list --status all
on_failing 66 tablet dcr show --user "id=frank,ou=user,ou=am-config"
on_failing 66 tablet sign --user frank --challenge "$challenge"
on tablet audit --event key.revokedByServer --wide
# The desk still signs for frank, and its log says who revoked the tablet and why.
on desk sign --user frank --challenge "$challenge"
on desk audit --event admin.deviceRevoked --wide
on desk audit verify
