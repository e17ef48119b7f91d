#!/bin/sh
# Runs every test (unit, launcher, multi-process) against the build in ./build (created if missing).
# Usage: scripts/test.sh [BUILD_DIR] [extra meson test args]
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build}
[ $# -gt 0 ] && shift
[ -f "$dir/build.ninja" ] || meson setup "$dir"
meson compile -C "$dir"
status=0
meson test -C "$dir" --print-errorlogs "$@" | tee "$dir/test-output.txt" || status=$?
ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$dir/test-output.txt" | tail -1)
fail=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$dir/test-output.txt" | tail -1)
skip=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$dir/test-output.txt" | tail -1)
timeout=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$dir/test-output.txt" | tail -1)
echo "${ok:-0} passed, $(( ${fail:-0} + ${timeout:-0} )) failed, ${skip:-0} skipped" | tee "$dir/test-summary.txt"
# The pipeline's status is tee's: the counts decide.
[ "$(( ${fail:-0} + ${timeout:-0} ))" -eq 0 ] && [ -n "$ok" ] || status=1
exit $status
