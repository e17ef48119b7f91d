#!/bin/sh
# hoop on one host at more ranks than cores.
#
#   scale_test.sh gets HOOPRUN PROBE N
#       init's address exchange through the store: rank 0 reads each rank's address once and
#       publishes them all as one value, which every other rank reads once. Counted in the
#       store's trace: N - 1 reads of single addresses and N - 1 of the whole, not N (N - 1).
#   scale_test.sh run SCALE_SH BUILD N MAX_RSS_MIB [MAX_SHM_MIB MAX_FDS]
#       bench/scale.sh at N ranks: init, a checked all-reduce and destroy, with the figures; no
#       rank's resident memory after init above MAX_RSS_MIB (the rings of pairs that never talk
#       must not be faulted in: at 64 ranks they were 126 MiB a rank), and, where given, no
#       rank's shared memory mapped above MAX_SHM_MIB nor its descriptors above MAX_FDS after
#       init (peers' segments are mapped at their first transfer beyond 16 peers: at 64 ranks
#       every rank mapped all 64 segments, 4097 MiB, with 139 descriptors).
set -u
mode=$1
shift
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    tail -n 30 "$tmp/out" 2>/dev/null
    exit 1
}
case $mode in
gets)
    hooprun=$1 probe=$2 n=$3
    HOOP_DEBUG=TRACE HOOP_DEBUG_SUBSYS=rendezvous "$hooprun" --timeout 120 -n "$n" "$probe" \
        >"$tmp/out" 2>&1 || fail "the job failed ($?)"
    grep -q "^\[0\] ranks=$n " "$tmp/out" || fail "no figures from rank 0"
    one=$(grep -c 'rendezvous store: get "hoop/addr/[0-9]*"' "$tmp/out")
    all=$(grep -c 'rendezvous store: get "hoop/addrs"' "$tmp/out")
    echo "store reads at $n ranks: $one of one address, $all of all of them"
    [ "$one" -eq $((n - 1)) ] && [ "$all" -eq $((n - 1)) ] ||
        fail "expected $((n - 1)) reads of each kind"
    ;;
run)
    scale=$1 build=$2 n=$3 max=$4
    "$scale" -b "$build" -t 240 "$n" >"$tmp/out" 2>&1 || fail "scale.sh $n failed ($?)"
    cat "$tmp/out"
    rss=$(awk -v n="$n" '$1 == n { print $5 }' "$tmp/out")
    [ -n "$rss" ] || fail "no row for $n ranks"
    awk -v r="$rss" -v m="$max" 'BEGIN { exit !(r <= m) }' ||
        fail "resident memory $rss MiB a rank after init, more than $max"
    if [ $# -ge 6 ]; then
        shm=$(awk -v n="$n" '$1 == n { print $7 }' "$tmp/out")
        fds=$(awk -v n="$n" '$1 == n { print $8 }' "$tmp/out")
        awk -v r="$shm" -v m="$5" 'BEGIN { exit !(r <= m) }' ||
            fail "shared memory mapped $shm MiB a rank after init, more than $5"
        awk -v r="$fds" -v m="$6" 'BEGIN { exit !(r <= m) }' ||
            fail "$fds descriptors a rank after init, more than $6"
    fi
    ;;
*)
    echo "scale_test.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
