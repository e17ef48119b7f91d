#!/bin/sh
# All-reduce bus bandwidth of 2 hosts x 2 ranks (network namespaces joined by a veth pair, no rate
# limit) with HOOP_TRANSPORT=auto (shared memory inside a host, TCP across) against tcp (TCP to
# every peer), alternating the two, and the median of RUNS runs of each. A measurement, not a test.
#
#   tests/netns/busbw.sh BUILD_DIR [RUNS] [HOOP-PERF ARGS...]
#   (default: 5 runs, allreduce -b 64K -e 16M -f 16 -n 20 -w 5 -c 0, i.e. 64K, 1M and 16M)
set -u
BUILD=$1
RUNS=${2:-5}
if [ $# -ge 2 ]; then shift 2; else shift $#; fi
[ $# -gt 0 ] || set -- allreduce -b 64K -e 16M -f 16 -n 20 -w 5 -c 0
HOOPRUN=$BUILD/tools/hooprun
HOOP_PERF=$BUILD/bench/hoop-perf
. "$(dirname "$0")/lib.sh"

setup_hosts
i=1
while [ "$i" -le "$RUNS" ]; do
    for tp in auto tcp; do
        run_hooprun "$tp.$i" 300 HOOP_TRANSPORT=$tp HOOP_TIMEOUT=60 -- \
            "$HOOP_PERF" "$@" --csv "$WORK/$tp.$i.csv"
        if [ "$RC_A" -ne 0 ] || [ "$RC_B" -ne 0 ]; then
            fail "$tp run $i: hooprun exited with A=$RC_A B=$RC_B"
        fi
        # Written by rank 0 only, inside host A's namespace, which shares this file system.
        awk -F, -v tp="$tp" 'NR == 1 { for (k = 1; k <= NF; k++) c[$k] = k; next }
            { print tp, $c["size_bytes"], $c["oop_busbw"] }' "$WORK/$tp.$i.csv" >>"$WORK/rows"
    done
    i=$((i + 1))
done
[ "$FAILED" -eq 0 ] || finish

echo
echo "all-reduce busbw (GB/s, out of place), median of $RUNS runs; every run after the colon"
printf '%10s %8s %8s %9s\n' bytes auto tcp auto/tcp
awk '{ print $2 }' "$WORK/rows" | sort -nu | while read -r size; do
    runs=
    for tp in auto tcp; do
        vals=$(awk -v tp="$tp" -v s="$size" '$1 == tp && $2 == s { print $3 }' "$WORK/rows" | sort -g)
        med=$(echo "$vals" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
        eval "med_$tp=$med"
        runs="$runs  $tp: $(echo "$vals" | awk '{ printf "%s%.3f", (NR > 1 ? " " : ""), $1 }')"
    done
    # shellcheck disable=SC2154 # set by the eval above
    awk -v s="$size" -v a="$med_auto" -v t="$med_tcp" -v r="$runs" \
        'BEGIN { printf "%10d %8.3f %8.3f %9.2f %s\n", s, a, t, (t > 0 ? a / t : 0), r }'
done
finish
