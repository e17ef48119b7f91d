#!/bin/sh
# The zero-copy all-reduce on symmetric memory (hoop-perf --sym) against the shared area's rounds,
# on one host (bench/vs-area-lib.sh; docs/performance.md, "Symmetric memory").
#
#   bench/sym-vs-area.sh BUILD_DIR [REPS]        (RANKS=2 SIZES="-b 16M -e 256M -f 2" by default)
set -eu
SIZES=${SIZES:-"-b 16M -e 256M -f 2"}
# shellcheck source=bench/vs-area-lib.sh
. "$(dirname "$0")/vs-area-lib.sh"
vs_area sym "" "" --sym "" "$@"
