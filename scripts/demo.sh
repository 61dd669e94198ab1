#!/usr/bin/env bash
# The walkthrough behind `make demo`: a temporary home, then keymgr as a user would run it.
set -euo pipefail
bin="${1:?usage: demo.sh BIN_DIR}"
home="$(mktemp -d)/keymgr-demo"
trap 'rm -rf "$(dirname "$home")"' EXIT
run() { printf '\n$ keymgr %s\n' "$*"; "$bin/keymgr" --home "$home" "$@"; }

run init --device-name "demo kiosk"
run status
