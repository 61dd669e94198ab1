#!/usr/bin/env bash
# `make fuzz`: builds keymgr-fuzz with libFuzzer into .build-fuzz and runs each target for FUZZ_SECONDS
# (default 45; FUZZ_TARGETS picks some). Prints executions and crashes per target; exits 1 if any target crashed. Crash inputs are kept
# under .build-fuzz/crashes/<target>/ (each becomes a regression test, e.g. Tests/ServerClientsTests/HostileAnswerTests.swift).
set -u
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${FUZZ_SECONDS:-45}
SCRATCH=.build-fuzz
# FUZZ_TARGETS="a b" runs only those (e.g. FUZZ_TARGETS=agent-request ./proof/fuzz.sh).
TARGETS=${FUZZ_TARGETS:-"device-listing journey-callbacks jws-jwk json-value cli-inputs token-response registration-response discovery dpop-nonce www-authenticate http-header-lines agent-request policy-toml"}

KEYMGR_FUZZ_BUILD=1 swift build --scratch-path "$SCRATCH" --product keymgr-fuzz >"$SCRATCH.log" 2>&1 || {
  tail -40 "$SCRATCH.log"; echo "fuzz: build failed (log: $SCRATCH.log)"; exit 1; }
BIN="$(KEYMGR_FUZZ_BUILD=1 swift build --scratch-path "$SCRATCH" --show-bin-path)/keymgr-fuzz"

status=0
for target in $TARGETS; do
  corpus="$SCRATCH/corpus/$target"; crashes="$SCRATCH/crashes/$target"
  mkdir -p "$corpus" "$crashes"
  cp -n proof/fuzz-seeds/"$target"/* "$corpus"/ 2>/dev/null
  log="$SCRATCH/$target.log"
  # The Swift backtracer would take the fatal-error trap before libFuzzer could save the input that caused it.
  SWIFT_BACKTRACE=enable=no FUZZ_TARGET="$target" "$BIN" -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 -rss_limit_mb=4096 \
    -max_len=65536 -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1
  rc=$?
  executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  found=$(find "$crashes" -type f | wc -l)
  echo "$target: ${executions:-?} executions, $found crashes (exit $rc)"
  if [ "$rc" != 0 ] || [ "$found" != 0 ]; then
    status=1
    grep -m5 -E 'Fatal error|ERROR: libFuzzer|SUMMARY' "$log"
    find "$crashes" -type f | sed 's/^/  crash input: /'
  fi
done
exit $status
