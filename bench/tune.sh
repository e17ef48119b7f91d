#!/bin/sh
# Measures hoop's tunables one at a time: for each variable, every value is run in turn (values
# alternating within each repetition, so that a noisy minute hits them all alike), and the median
# all-reduce bus bandwidth per size is printed, the best value of each size marked with '*'.
#
#   bench/tune.sh [-r REPS] [-n RANKS] [-o DIR] [-s SWEEP[,SWEEP...]] BUILD
#
# Sweeps (each a transport and one variable; the others keep their defaults):
#   shm-chunk   HOOP_CHUNK_BYTES over shared memory       shm-ring    HOOP_SHM_RING_BYTES
#   shm-cma     HOOP_SHM_CMA_BYTES (0 = ring only)       shm-spin    HOOP_SHM_SPIN_US
#   tcp-chunk   HOOP_CHUNK_BYTES over TCP                 tcp-sockets HOOP_SOCKETS_PER_PEER
# Every run is hoop-perf allreduce, float32 sum, 64 KiB to 64 MiB by 4, nonblocking (-z 0), warmed
# up before every row, results checked in repetition 1, the slowest rank's time (-a 3). The figures
# chosen as defaults are in docs/performance.md.
set -eu

reps=5 ranks=2 out="" sweeps="shm-chunk,shm-ring,shm-cma,shm-spin,tcp-chunk,tcp-sockets"
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    -r) reps=$2; shift ;;
    -n) ranks=$2; shift ;;
    -o) out=$2; shift ;;
    -s) sweeps=$2; shift ;;
    -h | --help) usage ;;
    -*) echo "tune.sh: unknown option $1" >&2; usage ;;
    *) build=$1 ;;
    esac
    shift
done
[ -n "${build:-}" ] || usage
hooprun=$build/tools/hooprun perf=$build/bench/hoop-perf
[ -x "$hooprun" ] && [ -x "$perf" ] || { echo "tune.sh: build $build first" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp -d /tmp/hoop-tune.XXXXXX)
mkdir -p "$out"

# sweep NAME -> "TRANSPORT VARIABLE VALUES..."
sweep() {
    case $1 in
    shm-chunk) echo "shm HOOP_CHUNK_BYTES 64K 128K 256K 512K 1M" ;;
    shm-ring) echo "shm HOOP_SHM_RING_BYTES 256K 1M 4M" ;;
    shm-cma) echo "shm HOOP_SHM_CMA_BYTES 0 256K 1M" ;;
    shm-spin) echo "shm HOOP_SHM_SPIN_US 0 50 200 1000" ;;
    tcp-chunk) echo "tcp HOOP_CHUNK_BYTES 128K 512K 2M" ;;
    tcp-sockets) echo "tcp HOOP_SOCKETS_PER_PEER 1 2 4" ;;
    *) echo "tune.sh: unknown sweep $1" >&2; exit 2 ;;
    esac
}

for s in $(echo "$sweeps" | tr , ' '); do
    set -- $(sweep "$s")
    tp=$1 var=$2
    shift 2
    rep=1
    while [ "$rep" -le "$reps" ]; do
        for v in "$@"; do
            csv=$out/$s.$v.$rep.csv
            env HOOP_TRANSPORT="$tp" "$var=$v" "$hooprun" --no-prefix --timeout 600 -n "$ranks" \
                "$perf" allreduce -a 3 -b 64K -e 64M -f 4 -n 20 -w 3 --warm-each -c $((rep == 1)) --csv "$csv" \
                >"$out/$s.$v.$rep.log" 2>&1 || echo "tune.sh: $s $var=$v repetition $rep failed (see $out/$s.$v.$rep.log)" >&2
        done
        rep=$((rep + 1))
    done
    python3 - "$out" "$s" "$var" "$ranks" "$@" <<'EOF'
import csv, glob, statistics, sys
out, sweep, var, ranks, values = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
med = {}
wrong = 0
for v in values:
    per = {}
    for path in glob.glob("%s/%s.%s.*.csv" % (out, sweep, v)):
        for r in csv.DictReader(open(path)):
            per.setdefault(int(r["size_bytes"]), []).append(float(r["oop_busbw"] or r["ip_busbw"]))
            wrong += int(r["oop_wrong"] or 0) + int(r["ip_wrong"] or 0)
    med[v] = {k: statistics.median(x) for k, x in per.items()}
sizes = sorted({k for m in med.values() for k in m})
print("\n%s: %s, %s ranks, out-of-place all-reduce bus bandwidth GB/s (median)" % (sweep, var, ranks))
print("| %s | " % var + " | ".join("%d KiB" % (k >> 10) if k < 1 << 20 else "%d MiB" % (k >> 20) for k in sizes) + " |")
print("|---" * (len(sizes) + 1) + "|")
for v in values:
    cells = []
    for k in sizes:
        x = med[v].get(k)
        best = max(m.get(k, 0) for m in med.values())
        cells.append("-" if x is None else "%.2f%s" % (x, "*" if x == best else ""))
    print("| %s | " % v + " | ".join(cells) + " |")
if wrong:
    print("WRONG ELEMENTS: %d" % wrong)
    sys.exit(1)
EOF
done
echo "raw CSV and logs: $out"
