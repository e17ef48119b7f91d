#!/bin/sh
# The area's single-copy all-reduce (HOOP_CMA=on: every rank reads its peers' buffers with
# process_vm_readv) against its rounds (HOOP_CMA=off: copy in, fold, copy out), on one host, the
# two alternating in every repetition, each row against its memory-traffic bound (hoop-perf
# --bound; docs/performance.md, "Single copy").
#
#   bench/cma-vs-area.sh BUILD_DIR [REPS]        (RANKS=2 SIZES="-b 4M -e 256M -f 2" by default)
#
# Prints per size and variant (out of place, in place) the medians of REPS (default 5) runs of
# each: bus bandwidth (GB/s), the fraction of the bound, and cma / area, with the spread (the
# smallest and largest ratio of a repetition's pair).
set -eu
build=$1
reps=${2:-5}
ranks=${RANKS:-2}
sizes=${SIZES:-"-b 4M -e 256M -f 2"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=1
while [ "$i" -le "$reps" ]; do
    for v in area cma; do
        mode=off
        [ "$v" = cma ] && mode=on
        # shellcheck disable=SC2086
        HOOP_CMA=$mode "$build/tools/hooprun" --no-prefix -n "$ranks" "$build/bench/hoop-perf" \
            $sizes -n 5 -w 2 --warm-each -c 0 --bound --csv "$tmp/$v.$i.csv" >"$tmp/$v.$i.out"
        grep '^# copy rate' "$tmp/$v.$i.out" | sed "s/^/# $v run $i: /"
    done
    i=$((i + 1))
done
python3 - "$tmp" "$reps" <<'PY'
import csv, statistics, sys
tmp, reps = sys.argv[1], int(sys.argv[2])
rows = {}
for v in ("area", "cma"):
    for i in range(1, reps + 1):
        for r in csv.DictReader(open(f"{tmp}/{v}.{i}.csv")):
            if v == "cma" and r["algo"] != "cma":
                sys.exit(f"HOOP_CMA=on: the {r['size_bytes']}-byte row did not run single copy")
            for w in ("oop", "ip"):
                k = (int(r["size_bytes"]), w, v)
                rows.setdefault(k, []).append((float(r[w + "_busbw"]), float(r[w + "_bound"])))
print("| size | variant | area GB/s | area / bound | cma GB/s | cma / bound | cma / area (spread) |")
print("|---|---|---|---|---|---|---|")
for size in sorted({k[0] for k in rows}):
    for w in ("oop", "ip"):
        a, s = rows[(size, w, "area")], rows[(size, w, "cma")]
        ab, abd = statistics.median(x[0] for x in a), statistics.median(x[1] for x in a)
        sb, sbd = statistics.median(x[0] for x in s), statistics.median(x[1] for x in s)
        ratios = [y[0] / x[0] for x, y in zip(a, s) if x[0] > 0]
        print(f"| {size >> 20} MiB | {'out of place' if w == 'oop' else 'in place'} | {ab:.2f} "
              f"| {abd:.2f} | {sb:.2f} | {sbd:.2f} | {sb / ab:.2f}x ({min(ratios):.2f}-"
              f"{max(ratios):.2f}) |")
PY
