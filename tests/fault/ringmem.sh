#!/bin/sh
# Large shared-memory rings are said before init writes them: with HOOP_SHM_RING_BYTES=256M and 3
# ranks on one host (3 x 2 rings of 256 MiB: 1.5 GiB, above the 1 GiB threshold) exactly one rank
# warns, naming the total; with the default (1 MiB) nobody does.
#
#   ringmem.sh HOOPRUN HOOP_PERF
set -u
HOOPRUN=$1
HOOP_PERF=$2
out=$(mktemp "${TMPDIR:-/tmp}/hoop-ringmem.XXXXXX") || exit 2
trap 'rm -f "$out"' EXIT
failed=0
run() {
    HOOP_TRANSPORT=shm HOOP_TIMEOUT=60 "$@" "$HOOPRUN" -n 3 "$HOOP_PERF" allreduce -b 8 -e 8 -n 1 -w 0 >"$out" 2>&1
}
run env HOOP_SHM_RING_BYTES=256M || { echo "FAIL: the job with 256 MiB rings failed:"; cat "$out"; exit 1; }
n=$(grep -c ' hoop WARN shm: 256 MiB rings (HOOP_SHM_RING_BYTES).* 1.5 GiB on this host for its 3 ranks' "$out")
grep ' hoop WARN shm: ' "$out"
[ "$n" -eq 1 ] || { echo "FAIL: $n warnings of the rings' memory with 256 MiB rings, want 1"; failed=1; }
run env || { echo "FAIL: the job with the default rings failed:"; cat "$out"; exit 1; }
n=$(grep -c ' hoop WARN shm: ' "$out")
[ "$n" -eq 0 ] || { echo "FAIL: $n warnings of the rings' memory with the default rings, want 0"; failed=1; }
[ $failed -eq 0 ] && echo PASSED
exit $failed
