#!/bin/sh
# The suite's runner for `make test` and `make check` (docs/testing.md): run-tests.sh XUNIT_FILE [swift test options…].
# Runs the already built tests in parallel (two workers per core unless TEST_WORKERS says: the tests wait on servers,
# agents, containers and deadlines more than they compute), each test in a process of
# its own, then prints scripts/test-report.py's report (the 20 slowest tests, the time per target, a closing
# `tests: N passed, N failed` line). The exit status is swift test's, or 1 when the report found no test or a failure.
set -u
[ $# -ge 1 ] || { echo "usage: run-tests.sh XUNIT_FILE [swift test options…]" >&2; exit 64; }
results=$1
shift
workers=${TEST_WORKERS:-$(( $(nproc) * 2 ))}
rm -f "$results"
started=$(date +%s)
swift test --skip-build --disable-swift-testing --parallel --num-workers "$workers" --xunit-output "$results" "$@"
status=$?
python3 "$(dirname "$0")/test-report.py" "$results" "$(( $(date +%s) - started ))"
report=$?
[ "$status" -ne 0 ] && exit "$status"
exit "$report"
