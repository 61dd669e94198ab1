#!/bin/sh
# `make test` (docs/testing.md, "make test's run"): the builds and the whole suite, arranged so that the two cores
# are kept busy, then one report of every test and of where the time went. Called by the Makefile, with MAKE,
# RELEASE_BIN, RELEASE_CORE and TEST_BINARIES (release or debug) from it.
#
# 1. The release build (then its man page) and the booted-systemd test's root file system start in the background
#    (`make test-release`); their output goes to a log printed once they are done.
# 2. The debug build with the tests, in the foreground.
# 3. If the release build is still running then, the tests that need nothing of it (NO_RELEASE_NEEDED below: the
#    in-process targets, keymgr's in-process classes and the CLI's classes run in the test process) beside it: the release build is a chain of whole-module
#    compiles, one compiler at a time for most of its length, and the longer of the two builds.
# 4. Once the release build is done, every other test (every test, if step 3 did not run), the process tests on the
#    release binaries (KEYMGR_BIN, KEYMGR_CORE_BIN) unless TEST_BINARIES=debug.
# The report covers both runs of the tests: the 20 slowest tests, the time per target, and last the plain
# `tests: N passed, N failed` line; then the wall and CPU seconds (user + system of every process reaped below it)
# of each step. The exit status is 1 when a build failed, a test failed or no test ran, else 0.
set -u
: "${MAKE:=make}" "${RELEASE_BIN:?}" "${RELEASE_CORE:?}" "${TEST_BINARIES:=release}"
# The CLI's classes that run keymgr in the test process (Sandbox.CLIRun.inProcess: make check's CHECK_CLI, and the two
# fault suites, which mostly wait on slow servers) run so here, on the debug build; not AuditLogTests, whose
# million-entry pipeline runs the binaries.
CLI_IN_PROCESS='CommandTests|ReadOnlyCommandTests|OperatorCommandTests|TableWidthTests|UserIdTests|BadInputTests|AuditArchiveTests|TamperingTests|SchemaWalkTamperingTests|AuditAndInputTamperingTests|PINTests|StoreSafetyTests|OAuthCommandTests|OAuthEdgeTests|OAuthlibInteropTests|AdminCommandTests|SyncCommandTests|JourneyCommandTests|JourneyUserBoundaryTests|ServerGivenURITests|MissingProfileTests|ReadsPerRequestTests|FaultSuiteTests|OAuthFaultSuiteTests'
NO_RELEASE_NEEDED="^(StorageTests|KeyManagerTests|AgentWireTests|ServerClientsTests|SyncTests|RefServerTests)\\.|^keymgrTests\\.(LayoutTests|HotPathParserTests|PolicyTemplateTests|SharedDeviceTests|RequestContextPerRunTests|$CLI_IN_PROCESS)/"

work=$(mktemp -d "${TMPDIR:-/tmp}/keymgr-make-test.XXXXXX") || exit 1
release_pid=
finish() {
    [ -n "$release_pid" ] && kill "$release_pid" 2>/dev/null
    rm -rf "$work"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
timed() { # timed NAME COMMAND...: runs COMMAND, keeping its CPU seconds in $work/NAME.cpu.
    name=$1
    shift
    /usr/bin/time -q -f '%U %S' -o "$work/$name.cpu" "$@"
}
now() { date +%s; }

t0=$(now)
$MAKE --no-print-directory deps || exit 1
t_deps=$(now)

(
    timed release $MAKE --no-print-directory -j2 test-release >"$work/release.log" 2>&1
    echo $? >"$work/release.status"
    now >"$work/release.end"
) &
release_pid=$!

timed debug $MAKE --no-print-directory debug-tests
debug_status=$?
t_debug=$(now)
if [ "$debug_status" -ne 0 ]; then
    wait "$release_pid"
    release_pid=
    exit 1
fi

early=
early_status=0
rm -f .build/test-results-early.xml
if [ ! -e "$work/release.end" ]; then
    early=yes
    TEST_REPORT=none timed early ./scripts/run-tests.sh .build/test-results-early.xml \
        --filter "$NO_RELEASE_NEEDED"
    early_status=$?
fi
t_early=$(now)

wait "$release_pid"
release_pid=
cat "$work/release.log"
if [ "$(cat "$work/release.status" 2>/dev/null)" != 0 ]; then
    echo "make test: the release build failed (above)" >&2
    exit 1
fi
t_release=$(cat "$work/release.end")
t_wait=$(now)

if [ "$TEST_BINARIES" = release ]; then
    KEYMGR_BIN=$RELEASE_BIN KEYMGR_CORE_BIN=$RELEASE_CORE KEYMGR_TEST_CLI=process
    export KEYMGR_BIN KEYMGR_CORE_BIN KEYMGR_TEST_CLI
fi
if [ -n "$early" ]; then
    TEST_REPORT=none timed rest ./scripts/run-tests.sh .build/test-results.xml --skip "$NO_RELEASE_NEEDED"
else
    TEST_REPORT=none timed rest ./scripts/run-tests.sh .build/test-results.xml
fi
rest_status=$?
t_end=$(now)

python3 scripts/test-report.py --wall $(( (t_early - t_debug) + (t_end - t_wait) )) \
    ${early:+.build/test-results-early.xml} .build/test-results.xml
status=$?
# swift test's own failure (a crash the xUnit file does not show) fails the run too.
[ "$early_status" -ne 0 ] || [ "$rest_status" -ne 0 ] && status=1

line() { # line NAME WALL LABEL
    awk -v w="$2" -v label="$3" '{ printf "%6d s wall, %6.0f s CPU   %s\n", w, $1 + $2, label }' "$work/$1.cpu"
}
echo
echo "== where make test's time went =="
printf '%6d s wall                 deps\n' $(( t_deps - t0 ))
line debug $(( t_debug - t_deps )) "the debug build with the tests"
line release $(( t_release - t_deps )) "the release build, its man page and the container's root (from the start)"
if [ -n "$early" ]; then
    line early $(( t_early - t_debug )) "the tests that need no release build, beside it"
    printf '%6d s wall                 waiting for the release build after those tests\n' $(( t_wait - t_early ))
    line rest $(( t_end - t_wait )) "every other test"
else
    line rest $(( t_end - t_wait )) "the tests (the release build was done)"
fi
printf '%6d s wall                 in all\n' $(( t_end - t0 ))
exit "$status"
