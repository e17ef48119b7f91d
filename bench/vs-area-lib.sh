# shellcheck shell=sh
# Sourced by bench/cma-vs-area.sh and bench/sym-vs-area.sh: one all-reduce variant against the
# shared area's rounds (copy in, fold, copy out) on one host, the two alternating in every
# repetition, each row against its memory-traffic bound (hoop-perf --bound).
#
#   vs_area NAME AREA_ENV ENV FLAG ALGO BUILD_DIR [REPS]
#
# NAME's runs take the environment assignment ENV and hoop-perf option FLAG, the area's runs
# AREA_ENV (each may be empty); ALGO, where not empty, is the algo every row of NAME must show (a
# run that fell back would measure the wrong thing). RANKS (2) and SIZES (hoop-perf's size options)
# come from the environment. Prints per size and variant (out of place, in place) the medians of
# REPS (default 5) runs of each: bus bandwidth (GB/s), the fraction of the bound, and NAME / area
# with the spread (the smallest and largest ratio of a repetition's pair). --warm-each: every size
# is warmed before it is timed, so that no timed call is the first to touch a page of a row larger
# than the one before (that first touch can cost many calls, either kind of buffer).
vs_area() {
    name=$1 area_env=$2 env=$3 flag=$4 algo=$5 build=$6 reps=${7:-5}
    ranks=${RANKS:-2}
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    i=1
    while [ "$i" -le "$reps" ]; do
        for v in area "$name"; do
            set --
            [ "$v" = area ] && [ -n "$area_env" ] && set -- "$area_env"
            [ "$v" = "$name" ] && [ -n "$env" ] && set -- "$env"
            f=""
            [ "$v" = "$name" ] && f=$flag
            # shellcheck disable=SC2086
            env "$@" "$build/tools/hooprun" --no-prefix -n "$ranks" "$build/bench/hoop-perf" \
                $SIZES -n 5 -w 2 --warm-each -c 0 --bound $f --csv "$tmp/$v.$i.csv" \
                >"$tmp/$v.$i.out"
            grep '^# copy rate' "$tmp/$v.$i.out" | sed "s/^/# $v run $i: /"
        done
        i=$((i + 1))
    done
    python3 - "$tmp" "$reps" "$name" "$algo" <<'PY'
import csv, statistics, sys
tmp, reps, name, algo = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}
for v in ("area", name):
    for i in range(1, reps + 1):
        for r in csv.DictReader(open(f"{tmp}/{v}.{i}.csv")):
            if v == name and algo and r["algo"] != algo:
                sys.exit(f"{name}: the {r['size_bytes']}-byte row ran {r['algo']}, not {algo}")
            for w in ("oop", "ip"):
                k = (int(r["size_bytes"]), w, v)
                rows.setdefault(k, []).append((float(r[w + "_busbw"]), float(r[w + "_bound"])))
print(f"| size | variant | area GB/s | area / bound | {name} GB/s | {name} / bound "
      f"| {name} / area (spread) |")
print("|---|---|---|---|---|---|---|")
for size in sorted({k[0] for k in rows}):
    for w in ("oop", "ip"):
        a, s = rows[(size, w, "area")], rows[(size, w, name)]
        ab, abd = statistics.median(x[0] for x in a), statistics.median(x[1] for x in a)
        sb, sbd = statistics.median(x[0] for x in s), statistics.median(x[1] for x in s)
        ratios = [y[0] / x[0] for x, y in zip(a, s) if x[0] > 0]
        print(f"| {size >> 20} MiB | {'out of place' if w == 'oop' else 'in place'} | {ab:.2f} "
              f"| {abd:.2f} | {sb:.2f} | {sbd:.2f} | {sb / ab:.2f}x ({min(ratios):.2f}-"
              f"{max(ratios):.2f}) |")
PY
}
