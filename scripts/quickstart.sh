#!/bin/sh
# One command from a fresh clone: install dependencies, build, and run a 4-rank all-reduce benchmark
# on this machine (its ranks meet over TCP and move the data through shared memory, as ranks on one
# host do). Every row's #wrong column must be 0.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build
meson compile -C build
exec build/tools/hooprun -n 4 build/bench/hoop-perf -b 8 -e 16M -f 4
