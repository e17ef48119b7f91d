#!/bin/sh
# hoop-perf --device cuda on the CUDA runtime test double: every collective with its buffers in
# the double's device memory, each row's #wrong counted on the device result copied back.
#
#   perf_device.sh HOOPRUN PERF NRANKS
#
# Each collective must end with "0 OK", say its buffers are the double's device memory, print
# its rows and exit 0. Where the runtime has no usable driver, hoop-perf must exit 1 with the
# library's reason, naming the driver the module needs, which HOOP_DEBUG=INFO states as well;
# --model with --device and an unknown device are bad usage (exit 2).
set -u
hooprun=$1 perf=$2 n=$3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*"
    for f in "$tmp"/out "$tmp"/err; do [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }; done
    exit 1
}

small="-b 8 -e 64K -f 8 -n 2 -w 1" # 5 sizes: 8, 64, 512, 4K, 32K
# collective, expected rows, extra arguments
while read -r coll rows args; do
    # shellcheck disable=SC2086
    "$hooprun" --no-prefix --timeout 120 -n "$n" "$perf" "$coll" --device cuda $small $args \
        >"$tmp/out" 2>"$tmp/err" || fail "$coll: exit status $?"
    grep -q '^# buffers: CUDA device 0 (CUDA test double)$' "$tmp/out" ||
        fail "$coll: no '# buffers' line naming the double"
    grep -q '^# Out of bounds values : 0 OK$' "$tmp/out" || fail "$coll: no '0 OK' footer"
    got=$(grep -c '^ *[0-9]' "$tmp/out")
    [ "$got" -eq "$rows" ] || fail "$coll: $got rows, expected $rows"
    echo "ok $coll: $rows rows"
done <<LIST
allreduce 250 -d all -o all
broadcast $((5 * n)) -r all -d float16
reduce $((25 * n)) -r all -o all -d bfloat16
allgather 5 -d int32
gather 5 -d int64
scatter 5 -d uint8
reducescatter 25 -o all -d float32
alltoall 5 -d float64
sendrecv 5 -d int8
LIST

HOOP_CUDA_DOUBLE_NODRIVER=1 "$hooprun" --no-prefix --timeout 60 -n "$n" "$perf" --device cuda \
    -e 64 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "a runtime without a usable driver: exit $rc, expected 1"
grep -q 'no usable CUDA driver' "$tmp/err" || fail "no usable driver: not said on stderr"
grep -q 'needs a driver for CUDA 13.0 or newer' "$tmp/err" ||
    fail "no usable driver: the driver the module needs is not named"
# The floor, at HOOP_DEBUG=INFO, once the module is loaded.
HOOP_DEBUG=INFO "$hooprun" --no-prefix --timeout 60 -n "$n" "$perf" allreduce --device cuda \
    -b 8 -e 8 -n 1 -w 0 >"$tmp/out" 2>"$tmp/err" || fail "HOOP_DEBUG=INFO: exit status $?"
grep -q 'CUDA runtime 13.0, which needs a driver for CUDA 13.0 or newer' "$tmp/err" ||
    fail "HOOP_DEBUG=INFO does not state the driver the CUDA module needs"
"$perf" --device cuda --model >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] || fail "--model --device cuda: exit $rc, expected 2"
"$perf" --device gpu >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] || fail "--device gpu: exit $rc, expected 2"
echo "ok errors"
