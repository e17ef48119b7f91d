#!/bin/sh
# Hierarchical collectives against the flat ring on the emulated cluster (bench/netns-cluster.sh):
# H hosts of L ranks each, every host's link RATE in and out. The two algorithms alternate, RUNS
# times each; each row is the median of the runs' times (hoop-perf -a 3: the slowest rank, out of
# place), beside the least time the host links allow for the bytes each algorithm must send off a
# host (all-reduce of n bytes: 2(H-1)/H n hierarchical, 2(p-1)/p n flat, p = H L; all-gather and
# reduce-scatter of n bytes in all: (H-1)/H n and (p-1)/p n; reduce, the bytes into the root's
# host: 2(H-1)/H n, and (p-1)/p n + (p-L)/p n for the flat ring reduce-scatter and gather, though
# the flat reduce runs a binomial tree up to 4 MiB on 4 ranks). Open MPI runs beside them on the
# same hosts where mpirun and the build's mpi-coll exist (all-reduce, all-gather, reduce): its
# default choice (coll/tuned) and its hierarchical component (coll/han, with its simple all-reduce,
# the fastest of han's all-reduce settings here), alternating with hoop's two.
#
# Usage (root, iproute2): bench/hier-vs-flat.sh [BUILD_DIR]
# Environment: RATE (200mbit; mbit or gbit), LAYOUTS ("2x2 2x4 4x2", hosts x ranks per host),
# COLLS (allreduce; also allgather reducescatter reduce), RUNS (3), MIN (1M), MAX (16M),
# OMPI (auto; 0 leaves Open MPI out).
set -eu
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
rate=${RATE:-200mbit}
runs=${RUNS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"; bench/netns-cluster.sh down' EXIT
bps=$(echo "$rate" | awk '/gbit$/ {print $1 * 1e9; next} /mbit$/ {print $1 * 1e6; next} {print $1}' |
    sed 's/[a-z]//g')
mpicoll=$build/bench/peers/mpi-coll
ompi=${OMPI:-auto}
if [ "$ompi" = auto ]; then
    ompi=0
    command -v mpirun >/dev/null && [ -x "$mpicoll" ] && ompi=1
fi
han="--mca coll_han_priority 100 --mca coll_han_use_simple_allreduce 1"
echo "# hier-vs-flat: RATE=$rate RUNS=$runs $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
for layout in ${LAYOUTS:-2x2 2x4 4x2}; do
    H=${layout%x*} L=${layout#*x}
    bench/netns-cluster.sh up "$H" "$rate"
    for coll in ${COLLS:-allreduce}; do
        algos="ring hier"
        [ "$ompi" = 1 ] && [ "$coll" != reducescatter ] && algos="$algos tuned han"
        sizes="-b ${MIN:-1M} -e ${MAX:-16M} -f 4 -n 3 -w 1"
        i=0
        while [ "$i" -lt "$runs" ]; do
            for algo in $algos; do
                case $algo in
                tuned | han)
                    extra=""
                    [ "$algo" = han ] && extra=$han
                    # shellcheck disable=SC2086 # word lists
                    RANKS_PER_HOST=$L timeout 900 bench/netns-cluster.sh mpirun "$H" $extra \
                        "$mpicoll" "$coll" $sizes 2>&1 ;;
                *)
                    # shellcheck disable=SC2086
                    RANKS_PER_HOST=$L HOOP_ALGO=$algo bench/netns-cluster.sh run "$H" \
                        "$build/bench/hoop-perf" "$coll" $sizes -a 3 2>&1 ;;
                esac | awk '/^ +[0-9]/ {print $1, $6}' >>"$out/$layout.$coll.$algo"
            done
            i=$((i + 1))
        done
        for algo in $algos; do
            sort -n -k1,1 -k2,2 "$out/$layout.$coll.$algo" |
                awk -v r="$runs" '{v[$1] = v[$1] " " $2; c[$1]++; if (c[$1] == int((r + 1) / 2)) m[$1] = $2}
                    END {for (s in m) print s, m[s]}' | sort -n >"$out/$layout.$coll.$algo.med"
        done
        echo "## $coll, $H hosts x $L ranks, $rate links (ms: median; bound: the links' least)"
        hdr="| size | flat ring | bound | hierarchical | bound | flat / hier | hier / its bound |"
        sep="|---|---|---|---|---|---|---|"
        join "$out/$layout.$coll.ring.med" "$out/$layout.$coll.hier.med" >"$out/j"
        if [ "$algos" != "ring hier" ]; then
            hdr="$hdr Open MPI tuned | Open MPI han | best Open MPI / hier |"
            sep="$sep---|---|---|"
            join "$out/j" "$out/$layout.$coll.tuned.med" | join - "$out/$layout.$coll.han.med" >"$out/j2"
            mv "$out/j2" "$out/j"
        fi
        echo "$hdr"
        echo "$sep"
        sort -n "$out/j" |
            awk -v H="$H" -v L="$L" -v bps="$bps" -v coll="$coll" '{
                p = H * L; n = $1
                if (coll == "allreduce") { fb = 2 * (p - 1) / p * n; hb = 2 * (H - 1) / H * n }
                else if (coll == "reduce") { fb = (2 * p - 1 - L) / p * n; hb = 2 * (H - 1) / H * n }
                else { fb = (p - 1) / p * n; hb = (H - 1) / H * n }
                fb = fb * 8 / bps * 1e3; hb = hb * 8 / bps * 1e3
                line = sprintf("| %d KiB | %.1f | %.1f | %.1f | %.1f | %.2fx | %.2f |",
                    n / 1024, $2 / 1e3, fb, $3 / 1e3, hb, $2 / $3, $3 / 1e3 / hb)
                if (NF >= 5) {
                    best = $4 < $5 ? $4 : $5
                    line = line sprintf(" %.1f | %.1f | %.2fx |", $4 / 1e3, $5 / 1e3, best / $3)
                }
                print line }'
    done
done
