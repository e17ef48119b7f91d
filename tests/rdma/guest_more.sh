#!/bin/sh
# The part of verbs_test.sh's boot that checks the registration cache and the faults (run inside the
# guest, or on a host with an active port, after the suites):
#
#   guest_more.sh HOOPRUN MR_TEST FAULT_RANK IBV_DOUBLE SPLIT_RANK [NETDEV]
#
# 1. mr_test stale over 2 ranks, with the cache (it must hit, and see the remapped buffers as stale)
#    and with HOOP_IB_REG_CACHE=off: every byte intact either way.
# 2. the TEST DOUBLE of the verbs table (IBV_DOUBLE, through HOOP_TEST_IBV_DOUBLE) injecting, in rank 1
#    of 3, a completion with error, RNR retry exceeded, transport retry exceeded, a CQ overrun and a
#    queue pair gone to error, each at a chosen completion: every rank must fail (PEER_LOST, SYSTEM or
#    ABORTED, and at once on the next call), rank 1 naming a peer and the verbs status text, and a
#    peer showing rank 1's abort reason.
# 3. split communicators over verbs (their queue pairs connected through an exchange over the
#    parent): 4 ranks under auto on two faked hosts, where the new communicators that span both
#    hosts must take verbs between them; and 3 ranks where rank 0 aborts a split's communicator
#    while rank 2 still settles its connections (the double holds rank 1's ready notice to it):
#    the split succeeds on every rank and the first call fails with rank 0's abort.
# 4. last (it takes the port away): NETDEV, the interface under rxe0 (dummy0), set down while 3 ranks
#    loop: every rank must fail within HOOP_TIMEOUT naming a peer.
set -u
run=$1 mr=$2 frank=$3 dbl=$4 split=$5 netdev=${6:-}
failed=0
bad() {
    echo "FAIL: $*"
    failed=1
}

echo '--- registration cache: buffers remapped, dropped and reallocated at the same address'
HOOP_DEBUG=INFO HOOP_TRANSPORT=ibverbs "$run" -n 2 "$mr" stale >out.mr 2>&1 || bad "mr_test stale"
grep -c 'intact' out.mr | grep -qx 18 || bad "not every round of mr_test came intact"
grep 'registration cache:' out.mr
for r in 0 1; do
    line=$(grep "^\[$r\].*registration cache:" out.mr)
    hits=$(echo "$line" | sed -n 's/.*cache: \([0-9]*\) hits.*/\1/p')
    stale=$(echo "$line" | sed -n 's/.* \([0-9]*\) stale.*/\1/p')
    [ "${hits:-0}" -gt 0 ] || bad "rank $r: the cache never hit"
    [ "${stale:-0}" -gt 0 ] || bad "rank $r: no cached registration was found stale"
done
[ $failed = 0 ] || tail -40 out.mr
HOOP_DEBUG=INFO HOOP_IB_REG_CACHE=off HOOP_TRANSPORT=ibverbs "$run" -n 2 "$mr" stale >out.mr 2>&1 ||
    bad "mr_test stale, cache off"
grep -c 'intact' out.mr | grep -qx 18 || bad "not every round came intact without the cache"
grep -q 'no registration cache (HOOP_IB_REG_CACHE=off)' out.mr || bad "HOOP_IB_REG_CACHE=off unsaid"
rm -f out.mr

# KIND N TEXT: the fault KIND at rank 1's N-th completion; TEXT must be in rank 1's line.
inject() {
    echo "--- test double: $1 at rank 1's completion $2"
    HOOP_TEST_IBV_DOUBLE=$dbl HOOP_TEST_IBV_FAULT=$1@1:$2 HOOP_TRANSPORT=ibverbs HOOP_TIMEOUT=20 \
        "$run" -n 3 "$frank" >out.f 2>&1 || { bad "$1: a rank did not end as it should"; cat out.f; }
    grep -E 'FAILED|ibv double' out.f
    for r in 0 1 2; do
        grep -q "^\[$r\] FAILED rank $r round [0-9]*: HOOP_ERR_\(PEER_LOST\|SYSTEM\|ABORTED\)" out.f ||
            bad "$1: rank $r did not fail as it should"
    done
    grep "^\[1\] FAILED" out.f | grep -q "$3" || bad "$1: rank 1 does not say '$3'"
    grep "^\[1\] FAILED" out.f | grep -q "$4" || bad "$1: rank 1 does not name '$4'"
    grep "^\[[02]\] FAILED" out.f | grep -q "rank 1 aborted: .*$3" ||
        bad "$1: rank 1's abort reason reached no peer"
    rm -f out.f
}
inject wc_err 150 'remote access error' 'lost connection to rank [02]'
inject rnr 333 'RNR retry counter exceeded' 'lost connection to rank [02]'
inject retry 97 'transport retry counter exceeded' 'lost connection to rank [02]'
inject qp_err 260 'Work Request Flushed Error' 'lost connection to rank [02]'
inject cq_overflow 500 'ibv_poll_cq failed (the completion queue overran or broke)' 'HOOP_ERR_SYSTEM'

echo '--- split communicators over ibverbs (auto, two faked hosts)'
HOOP_DEBUG=INFO HOOP_TRANSPORT=auto "$run" -n 4 "$split" --fake-hosts 2 >out.s 2>&1 ||
    { bad "split under auto"; tail -20 out.s; }
[ "$(grep -c ': checked' out.s)" = 12 ] || bad "split under auto: not every communicator checked"
grep 'transport per peer' out.s | sed 's/.*transport per peer/transport per peer/' | sort | uniq -c
# the world and the reversed group span both hosts (verbs between them); even and odd do not
[ "$(grep -c 'transport per peer: .*ibverbs to rank(s) \[[0-9]' out.s)" = 8 ] ||
    bad "split under auto: the communicators spanning both hosts did not all take verbs"
rm -f out.s

# Rank 1 sends its ready notices to rank 0, then to rank 2, once for the world and once for the
# split: its 4th is held, so that rank 2 hears rank 0's abort of the new communicator first.
echo '--- test double: an abort while a peer settles (rank 1 ready notice 4 held)'
HOOP_TEST_IBV_DOUBLE=$dbl HOOP_TEST_IBV_FAULT=hold_ready@1:4 HOOP_TRANSPORT=ibverbs HOOP_TIMEOUT=20 \
    "$run" -n 3 "$split" --abort-after-split >out.s 2>&1 || { bad "abort while settling"; cat out.s; }
grep -E 'FAIL|ibv double' out.s
grep -q 'ready notice 4 on QP [0-9]* held' out.s || bad "abort while settling: nothing was held"
[ "$(grep -c 'abort after split: rank [0-2]: checked' out.s)" = 3 ] ||
    bad "abort while settling: not every rank checked"
rm -f out.s

if [ -n "$netdev" ]; then
    echo "--- $netdev (under rxe0) set down while 3 ranks loop"
    HOOP_TRANSPORT=ibverbs HOOP_TIMEOUT=20 "$run" -n 3 "$frank" 100000 >out.p 2>&1 &
    pid=$!
    end=$(($(cut -d. -f1 /proc/uptime) + 60))
    while [ "$(grep -c STARTED out.p)" -lt 3 ] && [ "$(cut -d. -f1 /proc/uptime)" -lt $end ]; do
        sleep 0.2
    done
    t0=$(cut -d' ' -f1 /proc/uptime)
    ip link set "$netdev" down
    wait $pid || bad "port down: a rank did not end as it should"
    t1=$(cut -d' ' -f1 /proc/uptime)
    grep FAILED out.p
    for r in 0 1 2; do
        grep "^\[$r\] FAILED rank $r round [0-9]*: HOOP_ERR_\(PEER_LOST\|SYSTEM\|ABORTED\)" out.p |
            grep -q 'rank [0-9]' || bad "port down: rank $r did not fail naming a peer"
    done
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "every rank ended %.1f s after the port went down\n", b - a;
        exit !(b - a < 20) }' || bad "port down: not within HOOP_TIMEOUT"
    ip link set "$netdev" up
    rm -f out.p
fi
exit $failed
