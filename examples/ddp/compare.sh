#!/bin/sh
# Step times of ddp_train under several communication settings, as a markdown table of medians.
#   examples/ddp/compare.sh [BUILD_DIR] [RUNS] [RANKS] -- [ddp_train options for every run]
# Each run trains the mlp briefly; the settings take turns (ring, ps, each with and without overlap,
# and smaller buckets) so that a machine that gets busier or quieter during the measurement affects
# them all alike. A row gives, over RUNS runs, the median (and the range) of each run's median step
# time, of its median time waiting for communication, and of its samples per second, then the
# median ratio of its step time to that of the first setting (ring) in the same round.
set -eu
build=${1:-build}
runs=${2:-5}
ranks=${3:-2}
if [ $# -ge 3 ]; then shift 3; else shift $#; fi
[ "${1:-}" = "--" ] && shift
common=${*:---model mlp --samples 1024 --epochs 2}
hooprun=$build/tools/hooprun
train=$build/examples/ddp/ddp_train
if [ ! -x "$hooprun" ] || [ ! -x "$train" ]; then
    echo "compare.sh: no $hooprun or $train (build first)" >&2
    exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ddp-compare.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
set -- "ring|--sync ring" "ps|--sync ps" "ring, no overlap|--sync ring --no-overlap" \
    "ps, no overlap|--sync ps --no-overlap" "ring, 1 MiB buckets|--sync ring --bucket-mb 1" \
    "ps, 1 MiB buckets|--sync ps --bucket-mb 1"
i=0
while [ $i -lt "$runs" ]; do
    k=0
    for cfg in "$@"; do
        k=$((k + 1))
        # shellcheck disable=SC2086
        "$hooprun" -n "$ranks" "$train" $common ${cfg#*|} >"$tmp/out" 2>&1 ||
            { cat "$tmp/out" >&2; exit 1; }
        # "... 123.4 samples/s, median step 96.20 ms (compute 65.89 ms, waiting 23.76 ms) ..."
        sed -n 's/.* \([0-9.]*\) samples\/s, median step \([0-9.]*\) ms (compute [0-9.]* ms, waiting \([0-9.]*\) ms).*/\2 \3 \1/p' \
            "$tmp/out" >>"$tmp/r$k"
    done
    i=$((i + 1))
done

# stat K COLUMN: "median (min-max)" of a column of $tmp/rK
stat() {
    cut -d' ' -f"$2" "$tmp/r$1" | sort -n | awk '{ v[NR] = $1 }
        END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%.1f (%.1f-%.1f)\n", m, v[1], v[NR] }'
}
# ratio K: median over the rounds of (step time of setting K / step time of the first setting, in the
# same round): runs next to each other in time see about the same machine, so this cancels much of
# the drift of a shared machine that the absolute times show.
ratio() {
    paste -d' ' "$tmp/r1" "$tmp/r$1" | awk '{ print $4 / $1 }' | sort -n | awk '{ v[NR] = $1 }
        END { printf "%.2f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo "| setting ($ranks ranks, $runs runs: median (min-max)) | step ms | waiting ms | samples/s | step / ring's |"
echo "| --- | ---: | ---: | ---: | ---: |"
k=0
for cfg in "$@"; do
    k=$((k + 1))
    echo "| ${cfg%%|*} | $(stat $k 1) | $(stat $k 2) | $(stat $k 3) | $(ratio $k) |"
done
