#!/bin/sh
# Ring against parameter server, measured and drawn as two PNG plots:
#   docs/img/busbw-vs-size.png   all-reduce bus bandwidth against message size, 4 ranks, per algorithm
#   docs/img/time-vs-ranks.png   all-reduce time of one size against the number of ranks (2..8)
# and the numbers behind them in docs/img/ring-vs-ps.txt.
#
# As root (with iproute2), every rank runs on its own emulated host with a RATE link to a switch
# (bench/netns-cluster.sh), which is what a parameter server is up against on a real network.
# Otherwise (or with LOOPBACK=1) all ranks share this machine's loopback and CPUs.
#
# Usage: bench/ring-vs-ps.sh [BUILD_DIR]      (needs gnuplot: apt-get install gnuplot-nox)
# Environment: RATE (default 200mbit), SIZE for the second plot (default 1M), MAXRANKS (default 8).
set -eu
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
rate=${RATE:-200mbit}
size=${SIZE:-1M}
maxranks=${MAXRANKS:-8}
perf="$build/bench/hoop-perf"
command -v gnuplot >/dev/null || { echo "gnuplot is needed: apt-get install gnuplot-nox" >&2; exit 2; }
out=$(mktemp -d)
mode=loopback
if [ "${LOOPBACK:-0}" != 1 ] && [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null &&
    bench/netns-cluster.sh up 2 "$rate" 2>/dev/null; then
    mode=cluster
fi
cleanup() {
    rm -rf "$out"
    [ "$mode" = cluster ] && bench/netns-cluster.sh down
    return 0
}
trap cleanup EXIT

# perf N ALGO CSV ARGS...: one hoop-perf run on N ranks, timed by the slowest rank (-a 3).
perf() {
    n=$1 algo=$2 csv=$3
    shift 3
    echo "== $mode, $n ranks, --algo $algo $*" >&2
    if [ "$mode" = cluster ]; then
        bench/netns-cluster.sh up "$n" "$rate"
        bench/netns-cluster.sh run "$n" "$perf" allreduce -a 3 --algo "$algo" --csv "$csv" "$@" |
            grep -v '^#' >&2 || return 1
    else
        "$build/tools/hooprun" --no-prefix -n "$n" "$perf" allreduce -a 3 --algo "$algo" --csv "$csv" "$@" |
            grep -v '^#' >&2
    fi
}

if [ "$mode" = cluster ]; then
    range="-b 4K -e 4M -f 4"
    where="4 emulated hosts, $rate links"
    wherer="one rank per emulated host, $rate links"
else
    range="-b 8 -e 64M -f 4"
    where="4 ranks on one host, TCP loopback"
    wherer="all ranks on one host, TCP loopback"
fi
for algo in ring ps ps-sharded rd; do
    # shellcheck disable=SC2086
    perf 4 "$algo" "$out/size-$algo.csv" $range -n 5 -w 1
    # size_bytes and oop_busbw are columns 5 and 12 of the CSV.
    awk -F, 'NR > 1 { print $5, $12 }' "$out/size-$algo.csv" >"$out/size-$algo.dat"
done
for algo in ring ps ps-sharded; do
    : >"$out/ranks-$algo.dat"
    n=2
    while [ "$n" -le "$maxranks" ]; do
        perf "$n" "$algo" "$out/r.csv" -b "$size" -e "$size" -n 5 -w 1
        # oop_time_us is column 10.
        awk -F, -v n="$n" 'NR == 2 { printf "%d %.3f\n", n, $10 / 1000 }' "$out/r.csv" >>"$out/ranks-$algo.dat"
        n=$((n + 1))
    done
done

mkdir -p docs/img
gnuplot <<GP
set terminal pngcairo size 900,560 font "sans,11"
set grid
set key top left
set output "docs/img/busbw-vs-size.png"
set title "All-reduce bus bandwidth, $where"
set logscale x 2
set xlabel "message size (bytes)"
set ylabel "bus bandwidth (GB/s)"
set format x "%.0b%B"
plot "$out/size-ring.dat" using 1:2 with linespoints lw 2 title "ring", \
     "$out/size-ps.dat" using 1:2 with linespoints lw 2 title "parameter server (rank 0)", \
     "$out/size-ps-sharded.dat" using 1:2 with linespoints lw 2 title "sharded parameter server", \
     "$out/size-rd.dat" using 1:2 with linespoints lw 2 title "recursive doubling"
set output "docs/img/time-vs-ranks.png"
set title "All-reduce of $size: time against the number of ranks ($wherer)"
unset logscale x
set format x "%g"
set xlabel "ranks"
set ylabel "time (ms)"
set xtics 1
set yrange [0:*]
plot "$out/ranks-ring.dat" using 1:2 with linespoints lw 2 title "ring", \
     "$out/ranks-ps.dat" using 1:2 with linespoints lw 2 title "parameter server", \
     "$out/ranks-ps-sharded.dat" using 1:2 with linespoints lw 2 title "sharded parameter server"
GP
{
    echo "# bench/ring-vs-ps.sh, $mode ($where), $(date -u +%Y-%m-%d)"
    echo "# all-reduce bus bandwidth (GB/s, out of place) by size, 4 ranks"
    echo "# size ring ps ps-sharded rd"
    paste "$out/size-ring.dat" "$out/size-ps.dat" "$out/size-ps-sharded.dat" "$out/size-rd.dat" |
        awk '{ printf "%10d %8.4f %8.4f %8.4f %8.4f\n", $1, $2, $4, $6, $8 }'
    echo "# all-reduce time (ms) of $size by ranks"
    echo "# ranks ring ps ps-sharded ps/ring"
    paste "$out/ranks-ring.dat" "$out/ranks-ps.dat" "$out/ranks-ps-sharded.dat" |
        awk '{ printf "%5d %9.2f %9.2f %9.2f %7.2f\n", $1, $2, $4, $6, $4 / $2 }'
} | tee docs/img/ring-vs-ps.txt
echo "wrote docs/img/busbw-vs-size.png, docs/img/time-vs-ranks.png and docs/img/ring-vs-ps.txt"
