#!/bin/sh
# The suite's runner for `make test` and `make check` (docs/testing.md): run-tests.sh XUNIT_FILE [swift test options…].
# Runs the already built tests in parallel (two workers per core unless TEST_WORKERS says: the tests wait on servers,
# agents, containers and deadlines more than they compute), each test in a process of
# its own, then prints scripts/test-report.py's report (the 20 slowest tests, the time per target, a closing
# `tests: N passed, N failed` line; TEST_REPORT=none leaves it out). The exit status is swift test's, or 1 when the
# report found no test or a failure.
#
# One reference server serves the whole run: started here on 127.0.0.1 port 0 in a temporary directory, named to the
# tests by KEYMGR_TEST_REFSERVER_URL and KEYMGR_TEST_REFSERVER_TOKEN_FILE (each test takes a tenant of its own on it,
# /t/<id>), stopped when the run ends, fails or is interrupted; killed outright (SIGKILL), this script leaves it
# stopping by itself within a second (--parent-pid), or after 30 idle minutes (--idle-exit). Without it (no
# keymgr-refserver built) the tests start their own.
set -u
[ $# -ge 1 ] || { echo "usage: run-tests.sh XUNIT_FILE [swift test options…]" >&2; exit 64; }
results=$1
shift
workers=${TEST_WORKERS:-$(( $(nproc) * 2 ))}
rm -f "$results"
started=$(date +%s)

refserver_dir=$(mktemp -d "${TMPDIR:-/tmp}/keymgr-run-refserver.XXXXXX") || exit 1
refserver_pid=
tests_pid=
stop_refserver() {
    if [ -n "$refserver_pid" ]; then
        kill "$refserver_pid" 2>/dev/null
        wait "$refserver_pid" 2>/dev/null
        refserver_pid=
    fi
    rm -rf "$refserver_dir"
}
# swift test runs in the background so that a signal is handled at once (sh runs a trap only after its foreground
# child ends) and passed on to it as SIGTERM (a background child of sh ignores SIGINT), and the server stopped.
stop_tests() { [ -n "$tests_pid" ] && kill -TERM "$tests_pid" 2>/dev/null; }
trap stop_refserver EXIT
trap 'stop_tests; exit 130' INT
trap 'stop_tests; exit 143' TERM
trap 'stop_tests; exit 129' HUP

refserver=${KEYMGR_REFSERVER_BIN:-$(swift build --show-bin-path 2>/dev/null)/keymgr-refserver}
if [ -x "$refserver" ]; then
    # A test that starts a server of its own starts this same build (not one an older release build left beside
    # $KEYMGR_BIN, which knows no tenants).
    KEYMGR_REFSERVER_BIN=$refserver
    export KEYMGR_REFSERVER_BIN
    "$refserver" --db "$refserver_dir/refserver.db" --port 0 --admin-token-file "$refserver_dir/admin.token" \
        --parent-pid $$ --idle-exit 1800 >"$refserver_dir/listening" 2>"$refserver_dir/log" &
    refserver_pid=$!
    # Its one stdout line says where it listens; 30 s at most.
    deadline=$(( $(date +%s) + 30 ))
    while ! grep -q '^listening on ' "$refserver_dir/listening" && kill -0 "$refserver_pid" 2>/dev/null \
        && [ "$(date +%s)" -lt "$deadline" ]; do
        sleep 0.1
    done
    url=$(sed -n 's/^listening on //p' "$refserver_dir/listening")
    if [ -n "$url" ]; then
        KEYMGR_TEST_REFSERVER_URL=$url
        KEYMGR_TEST_REFSERVER_TOKEN_FILE=$refserver_dir/admin.token
        export KEYMGR_TEST_REFSERVER_URL KEYMGR_TEST_REFSERVER_TOKEN_FILE
    else
        echo "run-tests.sh: the run's keymgr-refserver did not start (each test starts its own): $(cat "$refserver_dir/log")" >&2
    fi
fi

swift test --skip-build --disable-swift-testing --parallel --num-workers "$workers" --xunit-output "$results" "$@" &
tests_pid=$!
wait "$tests_pid"
status=$?
tests_pid=
stop_refserver
# TEST_REPORT=none leaves the report to the caller (make test reports its two runs as one).
report=0
if [ "${TEST_REPORT:-}" != none ]; then
    python3 "$(dirname "$0")/test-report.py" --wall "$(( $(date +%s) - started ))" "$results"
    report=$?
fi
[ "$status" -ne 0 ] && exit "$status"
exit "$report"
