#!/bin/sh
# A link shaped to 400 Mbit/s (tc tbf on both ends of the veth pair) between the two hosts, and
# HOOP_TIMEOUT=1: a 128 MB send/recv across it (blocking, then nonblocking) and a gather of 64 MB
# per rank each take several timeouts, but their bytes keep moving, so all must succeed with the
# right data.
#
#   slowlink.sh SLOWLINK
set -u
SLOWLINK=$1
. "$(dirname "$0")/lib.sh"

RATE=400mbit
MIN_MS=2000 # each run must take at least twice the timeout, or it proves nothing

setup_hosts
command -v tc >/dev/null 2>&1 || skip "tc (iproute2) is not installed"
for ns in $NS_A $NS_B; do
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate $RATE burst 256kb latency 100ms \
        2>"$WORK/tc.err" || skip "cannot shape the link: $(cat "$WORK/tc.err")"
done
echo "link shaped to $RATE each way"

for run in "sendrecv 134217728" "isendrecv 134217728" "gather 67108864"; do
    name=${run% *}
    t0=$(now_ms)
    # shellcheck disable=SC2086 # run is two words
    start_ranks "$name" HOOP_TIMEOUT=1 -- "$SLOWLINK" $run
    wait_ranks "$name" 20000 || fail "$name: ranks still running after 20 s"
    ms=$(($(now_ms) - t0))
    echo "    $name: ${ms} ms"
    for r in 0 1 2 3; do
        rc=$(cat "$WORK/$name.$r.rc" 2>/dev/null || echo running)
        line=$(grep "^rank $r: " "$WORK/$name.$r.log")
        echo "    rank $r: exit status $rc: ${line#rank "$r": }"
        [ "$rc" = 0 ] || fail "$name: rank $r: exit status $rc"
    done
    [ "$ms" -ge $MIN_MS ] || fail "$name took $ms ms, under $MIN_MS ms: the link was not slow enough to test the timeout"
done
check_no_leftovers "the slow transfers"

finish
