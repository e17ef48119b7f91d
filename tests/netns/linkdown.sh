#!/bin/sh
# The network between two hosts (network namespaces joined by a veth pair) goes down in the middle
# of a long all-reduce loop, 2 ranks on each host. Nothing resets the TCP connections, so only
# HOOP_TIMEOUT can notice: every rank must then exit with an error (a timeout, or the abort of a
# peer that timed out) well within the bound, and no process may be left behind.
#
#   linkdown.sh HOOP_PERF
set -u
HOOP_PERF=$1
. "$(dirname "$0")/lib.sh"

TIMEOUT_S=5
BOUND_MS=20000 # from the link going down to the last rank's exit

tx_bytes() {
    ip -n "$NS_A" -s link show eth0 | awk 'f { print $1; exit } /TX:/ { f = 1 }'
}

setup_hosts

# Blocking calls (each all-reduce followed by a barrier), 8 MiB each, far more iterations than can finish: the loop only ends by failing.
start_ranks loop HOOP_DEBUG=INFO HOOP_TIMEOUT=$TIMEOUT_S -- \
    "$HOOP_PERF" allreduce -b 8M -e 8M -n 1000000 -w 0 -c 0 -z 1

# Running means: every rank has connected, and data crosses the link.
t0=$(now_ms)
while :; do
    n=0
    for r in 0 1 2 3; do grep -q ' transport per peer: ' "$WORK/loop.$r.log" 2>/dev/null && n=$((n + 1)); done
    [ $n -eq 4 ] && break
    for r in 0 1 2 3; do
        [ -f "$WORK/loop.$r.rc" ] && { fail "rank $r ended before the link went down"; finish; }
    done
    [ $(($(now_ms) - t0)) -ge 20000 ] && { fail "the ranks did not connect within 20 s"; finish; }
    sleep 0.1
done
# (A rank fills its buffers before its first call: with sanitizers that takes a while.)
b1=$(tx_bytes)
while :; do
    b0=$b1
    sleep 0.5
    b1=$(tx_bytes)
    [ $((b1 - b0)) -ge 1000000 ] && break
    [ $(($(now_ms) - t0)) -ge 30000 ] && { fail "no traffic between the hosts 30 s after start"; finish; }
done
echo "    loop running: $(((b1 - b0) * 2 / 1000000)) MB/s from host A to host B"

note "link down (host B's end of the veth pair)"
ip -n "$NS_B" link set eth0 down || {
    fail "cannot bring the link down"
    finish
}
t_down=$(now_ms)
if ! wait_ranks loop $BOUND_MS; then
    fail "ranks still running $((BOUND_MS / 1000)) s after the link went down"
fi
echo "    last rank ended $(($(now_ms) - t_down)) ms after the link went down"

for r in 0 1 2 3; do
    rc=$(cat "$WORK/loop.$r.rc" 2>/dev/null || echo running)
    msg=$(grep -m1 -E "^hoop-perf: rank $r: [a-z_]+ failed: (timed out|peer lost|communicator aborted)" "$WORK/loop.$r.log")
    if [ "$rc" = 0 ] || [ "$rc" = running ]; then
        fail "rank $r: exit status $rc, want an error"
    elif [ -z "$msg" ]; then
        fail "rank $r (exit status $rc) did not report a timeout, a lost peer or an abort"
    else
        echo "    rank $r: exit status $rc: ${msg#hoop-perf: rank "$r": }"
    fi
done
check_no_leftovers "the link went down"

finish
