#!/bin/sh
# Builds the libFuzzer targets (clang) and runs each for SECONDS (default 20) from the seed corpus.
# Usage: tests/fuzz/run.sh [SECONDS]. New inputs go to a temporary directory, not into the seeds.
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-20}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common="-std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Isrc -fno-sanitize-recover=undefined"
status=0
# The library's sources are built once, for every target (the PMIx files need libpmix-dev's
# headers and are not called without HOOP__HAVE_PMIX).
rdv=$(ls src/rendezvous/*.c | grep -v pmix)
mkdir -p "$out/obj"
# shellcheck disable=SC2086
for f in src/base/*.c src/core/*.c $rdv src/runtime/*.c src/transport/*.c src/collectives/*.c \
    src/local/*.c src/reduce/*.c; do
    echo "$f"
done | xargs -P "$(nproc)" -I{} sh -c 'clang '"$common"' -fsanitize=fuzzer-no-link,address,undefined \
    -c "{}" -o "'"$out"'/obj/$(echo "{}" | tr / _).o"'
for t in wire store nodelist status; do
    # shellcheck disable=SC2086
    clang $common -fsanitize=fuzzer,address,undefined "tests/fuzz/fuzz_$t.c" "$out"/obj/*.o \
        -lpthread -lsodium -o "$out/fuzz_$t"
    mkdir -p "$out/corpus_$t"
    cp tests/fuzz/corpus/"$t"/* "$out/corpus_$t/"
    echo "== fuzz_$t for $secs s"
    if "$out/fuzz_$t" -max_total_time="$secs" -max_len=4096 -print_final_stats=1 \
        "$out/corpus_$t" >"$out/log_$t" 2>&1; then
        grep -E "stat::number_of_executed_units|stat::new_units_added" "$out/log_$t" | sed 's/^/   /'
    else
        tail -n 40 "$out/log_$t"
        status=1
    fi
done
exit $status
