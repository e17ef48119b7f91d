#!/bin/sh
# Ring against parameter server, measured on this machine and drawn as two PNG plots:
#   docs/img/busbw-vs-size.png   all-reduce bus bandwidth against message size, 4 ranks, per algorithm
#   docs/img/time-vs-ranks.png   all-reduce time of one fixed size against the number of ranks (2..8)
# Usage: bench/ring-vs-ps.sh [BUILD_DIR]   (needs gnuplot: apt-get install gnuplot-nox)
# Environment: RANKS (default 4), SIZE for the second plot (default 16M), MAXRANKS (default 8).
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
ranks=${RANKS:-4}
size=${SIZE:-16M}
maxranks=${MAXRANKS:-8}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run="$build/tools/hooprun --no-prefix"
perf="$build/bench/hoop-perf"
command -v gnuplot >/dev/null || { echo "gnuplot is needed: apt-get install gnuplot-nox" >&2; exit 2; }

for algo in ring ps ps-sharded rd; do
    echo "== $ranks ranks, --algo $algo" >&2
    $run -n "$ranks" "$perf" allreduce -b 8 -e 64M -f 4 -n 5 -w 2 --algo "$algo" \
        --csv "$out/size-$algo.csv" >&2
done
for algo in ring ps; do
    : >"$out/ranks-$algo.dat"
    n=2
    while [ "$n" -le "$maxranks" ]; do
        echo "== $n ranks, $size, --algo $algo" >&2
        $run -n "$n" "$perf" allreduce -b "$size" -e "$size" -n 5 -w 2 --algo "$algo" \
            --csv "$out/r.csv" >&2
        # oop_time_us is column 10 of the CSV.
        awk -F, -v n="$n" 'NR == 2 { printf "%d %s\n", n, $10 / 1000 }' "$out/r.csv" >>"$out/ranks-$algo.dat"
        n=$((n + 1))
    done
done
for algo in ring ps ps-sharded rd; do
    # size_bytes and oop_busbw: columns 5 and 12.
    awk -F, 'NR > 1 { print $5, $12 }' "$out/size-$algo.csv" >"$out/size-$algo.dat"
done

mkdir -p docs/img
gnuplot <<GP
set terminal pngcairo size 900,560 font "sans,11"
set grid
set key top left
set output "docs/img/busbw-vs-size.png"
set title "All-reduce bus bandwidth, $ranks ranks on one host (TCP loopback)"
set logscale x 2
set xlabel "message size (bytes)"
set ylabel "bus bandwidth (GB/s)"
set format x "%.0b%B"
plot "$out/size-ring.dat" using 1:2 with linespoints lw 2 title "ring", \
     "$out/size-ps.dat" using 1:2 with linespoints lw 2 title "parameter server (rank 0)", \
     "$out/size-ps-sharded.dat" using 1:2 with linespoints lw 2 title "sharded parameter server", \
     "$out/size-rd.dat" using 1:2 with linespoints lw 2 title "recursive doubling"
set output "docs/img/time-vs-ranks.png"
set title "All-reduce of $size: time against the number of ranks"
unset logscale x
set format x "%g"
set xlabel "ranks"
set ylabel "time (ms)"
set xtics 1
plot "$out/ranks-ring.dat" using 1:2 with linespoints lw 2 title "ring", \
     "$out/ranks-ps.dat" using 1:2 with linespoints lw 2 title "parameter server"
GP
echo "ring vs parameter server, time (ms) by ranks:"
paste "$out/ranks-ring.dat" "$out/ranks-ps.dat" | awk '{ printf "  %d ranks: ring %8.2f  ps %8.2f  ps/ring %.2f\n", $1, $2, $4, $4 / $2 }'
echo "wrote docs/img/busbw-vs-size.png and docs/img/time-vs-ranks.png"
