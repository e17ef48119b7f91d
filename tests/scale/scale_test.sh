#!/bin/sh
# hoop on one host at more ranks than cores.
#
#   scale_test.sh gets HOOPRUN PROBE N
#       init's address exchange through the store: rank 0 reads each rank's address once and
#       publishes them all as one value, which every other rank reads once. Counted in the
#       store's trace: N - 1 reads of single addresses and N - 1 of the whole, not N (N - 1).
#   scale_test.sh done HOOPRUN PROBE N
#       init's done keys, through the binomial tree: each rank reads its children's and sets its
#       own, so rank 0 makes at most log2(N) store requests for them (it read all N - 1 before)
#       and no rank more than log2(N) + 1; every rank's key is read, by its parent. Counted
#       in the store's trace, each request by the client that published that rank's address.
#   scale_test.sh skipdone HOOPRUN DONE_FAIL N VICTIM TIMEOUT [file]
#       rank VICTIM fails in init after reading the addresses, before it says so
#       (HOOP_TEST_SKIP_DONE): every rank's init must fail within TIMEOUT (HOOP_TIMEOUT) and a
#       margin, and every rank's sentence must name the victim, or a rank whose subtree in
#       init's tree ("ranks A-B") holds it. With "file", through a file:// store.
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
done)
    hooprun=$1 probe=$2 n=$3
    HOOP_DEBUG=TRACE HOOP_DEBUG_SUBSYS=rendezvous "$hooprun" --timeout 120 -n "$n" "$probe" \
        >"$tmp/out" 2>&1 || fail "the job failed ($?)"
    grep -q "^\[0\] ranks=$n " "$tmp/out" || fail "no figures from rank 0"
    lg=0
    while [ $((1 << lg)) -lt "$n" ]; do lg=$((lg + 1)); done
    # Lines: ... store: set "hoop/addr/J" (B bytes) from ADDR; get "KEY" (B bytes) by ADDR[, ...].
    awk -v n="$n" -v lg="$lg" '
        function client(   i, a) {
            for (i = 1; i < NF; i++) if ($i == "by" || $i == "from") a = $(i + 1)
            sub(/,$/, "", a)
            return a
        }
        / store: set "hoop\/addr\/[0-9]+" / {
            k = $0; sub(/.*"hoop\/addr\//, "", k); sub(/".*/, "", k)
            rank[client()] = k
        }
        / store: (get|set) "hoop\/done\/[0-9]+" / {
            reqs[client()]++
            if ($0 ~ / get /) {
                gets++
                k = $0; sub(/.*"hoop\/done\//, "", k); sub(/".*/, "", k)
                if (!(k in read)) { read[k] = 1; keys++ }
            }
        }
        END {
            bad = 0
            for (a in reqs) {
                if (!(a in rank)) { print "a client that published no address: " a; bad = 1; continue }
                r = rank[a]
                lim = r == 0 ? lg : lg + 1
                if (r == 0) zero = reqs[a]
                if (reqs[a] > lim) {
                    printf "rank %d made %d requests for the done keys, more than %d\n", r, reqs[a], lim
                    bad = 1
                }
            }
            printf "done keys at %d ranks: rank 0 made %d requests, %d reads of %d keys in all\n", n, zero, gets, keys
            # Every rank but 0 read by its parent; a parent whose first look before connect
            # timed out reads that key once more, which the per-rank bound above allows.
            if (keys != n - 1) { printf "expected the %d done keys of ranks 1-%d read\n", n - 1, n - 1; bad = 1 }
            exit bad
        }' "$tmp/out" || fail "the done keys do not go through the tree"
    ;;
skipdone)
    hooprun=$1 prog=$2 n=$3 v=$4 t=$5 method=
    [ "${6:-}" = file ] && method=file://$tmp/store
    HOOP_TIMEOUT=$t "$hooprun" --timeout $((t * 4)) -n "$n" "$prog" "$v" $method >"$tmp/out" 2>&1 ||
        fail "the job failed ($?)"
    cat "$tmp/out"
    awk -v n="$n" -v v="$v" -v lim="$((t + 3))" '
        # "named": the sentence names rank v, or a range of ranks that holds it.
        function named(s,   m, a, b) {
            if (s ~ ("rank " v "([^0-9-]|$)")) return 1
            while (match(s, /ranks [0-9]+-[0-9]+/)) {
                m = substr(s, RSTART + 6, RLENGTH - 6); s = substr(s, RSTART + RLENGTH)
                split(m, ab, "-"); a = ab[1] + 0; b = ab[2] + 0
                if (a <= v && v <= b) return 1
            }
            return 0
        }
        /done_fail: rank [0-9]+ init / {
            r = $4 + 0; secs = $(NF - 1) + 0; seen[r] = 1
            if (secs > lim) { printf "rank %d failed after %.2f s, past %d\n", r, secs, lim; bad = 1 }
        }
        /hoop WARN hoop_init failed: / {
            r = substr($1, 2) + 0; said[r] = 1
            if (!named($0)) { printf "rank %d does not name rank %d: %s\n", r, v, $0; bad = 1 }
        }
        END {
            for (r = 0; r < n; r++) {
                if (!(r in seen)) { printf "rank %d did not return from init\n", r; bad = 1 }
                if (!(r in said)) { printf "rank %d did not say why init failed\n", r; bad = 1 }
            }
            exit bad
        }' "$tmp/out" || fail "not every rank failed in time, naming rank $v"
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
