#!/bin/sh
# The area's single-copy all-reduce (HOOP_CMA=on: every rank reads its peers' buffers with
# process_vm_readv) against its rounds (HOOP_CMA=off), on one host (bench/vs-area-lib.sh;
# docs/performance.md, "Single copy"). Every HOOP_CMA=on row must have run single copy.
#
#   bench/cma-vs-area.sh BUILD_DIR [REPS]        (RANKS=2 SIZES="-b 4M -e 256M -f 2" by default)
set -eu
SIZES=${SIZES:-"-b 4M -e 256M -f 2"}
# shellcheck source=bench/vs-area-lib.sh
. "$(dirname "$0")/vs-area-lib.sh"
vs_area cma HOOP_CMA=off HOOP_CMA=on "" cma "$@"
