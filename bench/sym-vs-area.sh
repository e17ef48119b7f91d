#!/bin/sh
# The zero-copy all-reduce on symmetric memory against the shared area's rounds (copy in, fold,
# copy out), on one host, the two alternating in every repetition, each row against its
# memory-traffic bound (hoop-perf --bound; docs/performance.md, "Symmetric memory").
#
#   bench/sym-vs-area.sh BUILD_DIR [REPS]        (RANKS=2 SIZES="-b 16M -e 256M -f 2" by default)
#
# Prints per size and variant (out of place, in place) the medians of REPS (default 5) runs of
# each: bus bandwidth (GB/s), the fraction of the bound, and sym / area. --warm-each: every size
# is warmed before it is timed, so that no timed call is the first to touch a page of a row larger
# than the one before (on the VM that first touch cost up to 50x a call, either kind of buffer).
set -eu
build=$1
reps=${2:-5}
ranks=${RANKS:-2}
sizes=${SIZES:-"-b 16M -e 256M -f 2"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=1
while [ "$i" -le "$reps" ]; do
    for v in area sym; do
        flag=""
        [ "$v" = sym ] && flag="--sym"
        # shellcheck disable=SC2086
        "$build/tools/hooprun" --no-prefix -n "$ranks" "$build/bench/hoop-perf" \
            $sizes -n 5 -w 2 --warm-each -c 0 --bound $flag --csv "$tmp/$v.$i.csv" >"$tmp/$v.$i.out"
        grep '^# copy rate' "$tmp/$v.$i.out" | sed "s/^/# $v run $i: /"
    done
    i=$((i + 1))
done
python3 - "$tmp" "$reps" <<'PY'
import csv, statistics, sys
tmp, reps = sys.argv[1], int(sys.argv[2])
rows = {}
for v in ("area", "sym"):
    for i in range(1, reps + 1):
        for r in csv.DictReader(open(f"{tmp}/{v}.{i}.csv")):
            for w in ("oop", "ip"):
                k = (int(r["size_bytes"]), w, v)
                rows.setdefault(k, []).append((float(r[w + "_busbw"]), float(r[w + "_bound"])))
print("| size | variant | area GB/s | area / bound | sym GB/s | sym / bound | sym / area |")
print("|---|---|---|---|---|---|---|")
for size in sorted({k[0] for k in rows}):
    for w in ("oop", "ip"):
        a, s = rows[(size, w, "area")], rows[(size, w, "sym")]
        ab, abd = statistics.median(x[0] for x in a), statistics.median(x[1] for x in a)
        sb, sbd = statistics.median(x[0] for x in s), statistics.median(x[1] for x in s)
        print(f"| {size >> 20} MiB | {'out of place' if w == 'oop' else 'in place'} | {ab:.2f} "
              f"| {abd:.2f} | {sb:.2f} | {sbd:.2f} | {sb / ab:.2f}x |")
PY
