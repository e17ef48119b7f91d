#!/bin/sh
# hoop on one host at many ranks: for each count, a job of hoop_init, one checked 8-byte
# all-reduce and hoop_comm_destroy (bench/scale.c), with the time to init (first rank in to last
# rank out), the all-reduce and destroy, each rank's resident memory, shared memory mapped and
# file descriptors, the host's shared memory in use, and the launch (first rank into hoop_init
# to the last, part of init_s). Ranks outnumber the cores: most of them sleep in waits, which is
# what this measures (init's cost, not bandwidth).
#
#   bench/scale.sh [-b BUILD_DIR] [-t SECONDS] [--csv FILE] [RANKS...]   (default: 16 32 64)
#
# A count whose job fails or passes SECONDS (default 600) is reported as such, with the reason,
# and the counts after it still run. Exit status: 0 when every count ran, 1 otherwise.
set -u
build=build timeout=600 csv=
while [ $# -gt 0 ]; do
    case $1 in
    -b) build=$2; shift 2 ;;
    -t) timeout=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "scale.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || set -- 16 32 64
hooprun=$build/tools/hooprun probe=$build/bench/scale
[ -x "$hooprun" ] && [ -x "$probe" ] || { echo "scale.sh: build $build first (meson compile -C $build)" >&2; exit 2; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

echo "# hoop at scale on one host: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) memory, HOOP_TRANSPORT=${HOOP_TRANSPORT:-auto}"
printf '# %6s  %8s  %12s  %9s  %11s  %12s  %11s  %7s  %10s  %8s\n' ranks init_s allreduce_us destroy_s \
    rss_mib_max rss_mib_mean shm_mib_max fds_max shmem_mib launch_s
[ -z "$csv" ] || echo "ranks,init_s,allreduce_us,destroy_s,rss_mib_max,rss_mib_mean,shm_mib_max,fds_max,shmem_mib,launch_s,status" >"$csv"
status=0
for n in "$@"; do
    before=$(awk '/^Shmem:/ {print $2}' /proc/meminfo)
    SCALE_SHMEM_BEFORE=$before HOOP_TIMEOUT=${HOOP_TIMEOUT:-$timeout} "$hooprun" --no-prefix \
        --timeout "$timeout" -n "$n" "$probe" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    line=$(grep '^ranks=' "$tmp/out" | tail -n 1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        why=$(grep -v '^hooprun: note' "$tmp/err" | head -n 1)
        [ $rc -eq 124 ] && why="past $timeout s"
        printf '  %6s  failed (exit %d): %s\n' "$n" "$rc" "${why:-no line from rank 0}"
        [ -z "$csv" ] || echo "$n,,,,,,,,,,failed" >>"$csv"
        status=1
        continue
    fi
    # shellcheck disable=SC2086
    set -- $(echo "$line" | tr ' ' '\n' | sed 's/^[a-z_]*=//')
    printf '  %6s  %8s  %12s  %9s  %11s  %12s  %11s  %7s  %10s  %8s\n' "$@"
    [ -z "$csv" ] || echo "$(echo "$@" | tr ' ' ','),ok" >>"$csv"
done
exit $status
