#!/bin/sh
# hoop side by side with Open MPI and gloo on this machine: the same collectives (float32, sum), the
# same sizes, the same columns (hoop-perf, bench/peers/mpi_coll.c and bench/peers/gloo_coll.py all
# write hoop-perf's --csv), run in turn R times, hoop and the peer alternating, then one table per
# comparison of median bus bandwidths with the ratio hoop/peer and PASS/MISS against the targets.
#
#   bench/vs-peers.sh [options] [BUILD_DIR]          (BUILD_DIR: default build)
#
# Runs per repetition, for every rank count and collective: hoop with HOOP_TRANSPORT=shm and =tcp,
# Open MPI with shared memory (--mca pml ob1 --mca btl self,vader, single copy by CMA where the
# kernel allows it) and with TCP over loopback (--mca btl self,tcp), and gloo through
# torch.distributed. Each run is up to three jobs: the all-reduce latency (-z 1: every call then a
# barrier, the same loop in every library), sizes up to 1 MiB with many iterations, and larger
# sizes with few. A plain TCP stream between two processes (bench/peers/tcp_stream.c) is measured
# too, as the yardstick for hoop's TCP, and for 2 ranks over shared memory a cache line's one-way
# time and two processes copying at once (line-pingpong, mem-copy), the yardsticks of the
# latency and of large all-reduces. Every library's ranks keep large blocks on the heap
# (--malloc-default explains why and turns that off).
#
# hoop over RDMA verbs (--hoop ibverbs): on a host with an active RDMA port, like the others; on
# any other host inside the soft-RoCE test guest (tests/rdma/vm.sh, device rxe0), in one boot for
# every repetition, rank count and collective, beside hoop over TCP in that same guest, the raw
# CSV files written to a folder shared with the host and the tables made here. Neither Open MPI
# nor gloo is in the guest, and its CPUs are emulated: the guest's table (verbs against TCP) is
# for correctness and ratios, not speeds.
set -u
here=$(pwd)
cd "$(dirname "$0")/.." || exit 2
repo=$(pwd)

usage() {
    cat <<'EOF'
usage: bench/vs-peers.sh [options] [BUILD_DIR]
  -n, --ranks LIST       rank counts, comma-separated (default 2; e.g. 2,4)
  -c, --colls LIST       collectives: allreduce, broadcast, allgather, reduce or all
                         (default allreduce)
  -r, --reps R           repetitions, libraries alternating (default 5)
  -s, --sizes MIN:MAX    bandwidth sizes, by 4x (default 64K:256M)
  -l, --lat BYTES        all-reduce latency size, 0 for none (default 8)
  -i, --iters A:B:C      iterations: latency, sizes up to 1M, larger sizes (default 500:50:5)
      --hoop LIST        hoop transports: shm, tcp, ibverbs, sym (default shm,tcp). sym is
                         shared memory with every buffer from hoop_mem_alloc (hoop-perf
                         --sym: the zero-copy schedules), set beside Open MPI's shared memory
                         and beside hoop shm (the area's copies) when that runs too. ibverbs runs
                         inside the soft-RoCE test guest (tests/rdma/vm.sh: one boot for every
                         run, beside hoop tcp in the same guest; emulated CPUs, so ratios only)
                         unless this host has an active RDMA port; with no guest to boot it is
                         skipped with a note. The guest has 1536 MiB (HOOP_RDMA_VM_MEM) and 2
                         CPUs (HOOP_RDMA_VM_CPUS): keep --sizes to 16M or so there
      --vm-timeout S     the guest's whole boot may take S seconds (default 3600)
      --peers LIST       ompi-shm, ompi-tcp, gloo (default all three; '' for none)
      --gloo-colls LIST  of those, the ones also run with gloo (default allreduce)
      --tcp-colls LIST   of those, the ones also run over TCP, hoop's and Open MPI's, where
                         hoop has shared memory (default allreduce)
      --hoop-z N         how hoop-perf calls outside the latency job: 2, blocking calls back to
                         back like the peers (default); 0, all posted nonblocking, then waited
      --mpirun-args STR  more mpirun arguments (for example "--bind-to none")
      --malloc-default   leave glibc's malloc as it is. By default every library's ranks
                         run with MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ set high, so
                         that large blocks freed and allocated again come back from the heap:
                         Open MPI's large all-reduce and gloo allocate buffers per call, which
                         glibc otherwise maps afresh each time, and page faults are slow in
                         some VMs (about 20 us a page on the 2-vCPU development VM: over 1 s
                         per 256 MiB)
  -o, --out DIR          keep the raw CSV files and logs there (default: removed at the end)
      --quick            a smoke test: 1 repetition, sizes 4K:64K, few iterations, TCP on
                         every collective
  -h, --help             this text
Prints the tables on stdout; exit status 1 when a run failed or an element was wrong (a MISS
against a target is a report, not a failure), 2 on bad usage.
EOF
}

ranks=2 colls=allreduce reps=5 sizes=64K:256M lat=8
iters=500:50:5 hoops=shm,tcp peers=ompi-shm,ompi-tcp,gloo gloo_colls=allreduce tcp_colls=allreduce
mpirun_args="" out="" quick=0 build="" malloc_heap=1 hoop_z=2 vm_timeout=3600
need() { [ $# -ge 2 ] || { echo "vs-peers.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
    -n | --ranks) need "$@"; ranks=$2; shift ;;
    -c | --colls) need "$@"; colls=$2; shift ;;
    -r | --reps) need "$@"; reps=$2; shift ;;
    -s | --sizes) need "$@"; sizes=$2; shift ;;
    -l | --lat) need "$@"; lat=$2; shift ;;
    -i | --iters) need "$@"; iters=$2; shift ;;
    --hoop) need "$@"; hoops=$2; shift ;;
    --peers) need "$@"; peers=$2; shift ;;
    --gloo-colls) need "$@"; gloo_colls=$2; shift ;;
    --tcp-colls) need "$@"; tcp_colls=$2; shift ;;
    --mpirun-args) need "$@"; mpirun_args=$2; shift ;;
    --hoop-z) need "$@"; hoop_z=$2; shift ;;
    --vm-timeout) need "$@"; vm_timeout=$2; shift ;;
    --malloc-default) malloc_heap=0 ;;
    -o | --out) need "$@"; out=$2; shift ;;
    --quick) quick=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "vs-peers.sh: unknown option $1 (see -h)" >&2; exit 2 ;;
    *) [ -z "$build" ] || { echo "vs-peers.sh: one build directory only" >&2; exit 2; }; build=$1 ;;
    esac
    shift
done
if [ "$quick" = 1 ]; then
    reps=1 sizes=4K:64K iters=20:5:2 tcp_colls=all
fi

# ---- checking the arguments ----

all_colls=allreduce,broadcast,allgather,reduce
[ "$colls" = all ] && colls=$all_colls
[ "$gloo_colls" = all ] && gloo_colls=$all_colls
[ "$tcp_colls" = all ] && tcp_colls=$all_colls
bad() { echo "vs-peers.sh: $*" >&2; exit 2; }
# bytes VALUE: VALUE with an optional K/M/G suffix, in bytes.
bytes() {
    case $1 in
    *[Kk]) v=${1%?} m=1024 ;;
    *[Mm]) v=${1%?} m=1048576 ;;
    *[Gg]) v=${1%?} m=1073741824 ;;
    *) v=$1 m=1 ;;
    esac
    case $v in '' | *[!0-9]*) return 1 ;; esac
    echo $((v * m))
}
in_list() { case ",$2," in *",$1,"*) return 0 ;; esac; return 1; }
case $reps in '' | *[!0-9]* | 0*) bad "--reps $reps: a positive number" ;; esac
case $vm_timeout in '' | *[!0-9]* | 0*) bad "--vm-timeout $vm_timeout: seconds" ;; esac
for n in $(echo "$ranks" | tr , ' '); do
    case $n in '' | *[!0-9]* | 0 | 1) bad "--ranks $ranks: counts of 2 or more" ;; esac
done
for c in $(echo "$colls,$gloo_colls,$tcp_colls" | tr , ' '); do
    in_list "$c" "$all_colls" || bad "unknown collective '$c'"
done
for h in $(echo "$hoops" | tr , ' '); do in_list "$h" shm,tcp,ibverbs,sym || bad "--hoop: unknown '$h'"; done
for p in $(echo "$peers" | tr , ' '); do
    in_list "$p" ompi-shm,ompi-tcp,gloo || bad "--peers: unknown '$p'"
done
minb=$(bytes "${sizes%%:*}") && maxb=$(bytes "${sizes#*:}") && [ "$minb" -le "$maxb" ] ||
    bad "--sizes $sizes: MIN:MAX with MIN <= MAX"
latb=$(bytes "$lat") || bad "--lat $lat: a size"
case $iters in *:*:*:* | *:*:*) ;; *) bad "--iters $iters: A:B:C" ;; esac
it_lat=${iters%%:*} rest=${iters#*:}
it_small=${rest%%:*} it_large=${rest#*:}
for v in "$it_lat" "$it_small" "$it_large"; do
    case $v in '' | *[!0-9]* | 0) bad "--iters $iters: A:B:C, positive numbers" ;; esac
done

# Paths given are relative to where the script was started; the default build is the repository's.
case ${build:-build} in /*) ;; *) build=${build:+$here/$build} ;; esac
case $out in /* | '') ;; *) out=$here/$out ;; esac
given=${build:-build}
build=$(cd "$given" 2>/dev/null && pwd) || bad "no build directory $given (meson setup build && meson compile -C build)"
hooprun=$build/tools/hooprun perf=$build/bench/hoop-perf
[ -x "$hooprun" ] && [ -x "$perf" ] || bad "$build has no tools/hooprun or bench/hoop-perf: build it first"
command -v python3 >/dev/null || bad "python3 is needed for the tables"

keep=0
if [ -n "$out" ]; then
    keep=1
    mkdir -p "$out" || exit 2
    out=$(cd "$out" && pwd)
    rm -rf "$out/raw" "$out/logs"
else
    out=$(mktemp -d) || exit 2
    trap 'rm -rf "$out"' EXIT
    trap 'exit 130' INT TERM
fi
mkdir -p "$out/raw" "$out/logs"
meta=$out/meta
: >"$meta"
note() { echo "note=$*" >>"$meta"; echo "# $*" >&2; }

# ---- which libraries can run here ----

if [ "$malloc_heap" = 1 ]; then
    # Large blocks freed and allocated again come back from the heap instead of fresh mappings.
    MALLOC_MMAP_THRESHOLD_=2147483647 MALLOC_TRIM_THRESHOLD_=2147483647
    export MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_
fi

ncpu=$(nproc 2>/dev/null || echo 1)

# Open MPI: mpi-coll from the build, else compiled here with mpicc.
mpicoll=$build/bench/peers/mpi-coll
mpirun_base=""
if in_list ompi-shm "$peers" || in_list ompi-tcp "$peers"; then
    if ! command -v mpirun >/dev/null; then
        note "SKIP Open MPI: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
        peers=$(echo ",$peers," | sed 's/,ompi-shm,/,/; s/,ompi-tcp,/,/; s/^,//; s/,$//')
    else
        if [ ! -x "$mpicoll" ]; then
            mpicoll=$out/mpi-coll
            mpicc -O2 -o "$mpicoll" "$repo/bench/peers/mpi_coll.c" 2>"$out/logs/mpicc.log" || {
                note "SKIP Open MPI: mpi-coll not built and mpicc failed (see $out/logs/mpicc.log)"
                peers=$(echo ",$peers," | sed 's/,ompi-shm,/,/; s/,ompi-tcp,/,/; s/^,//; s/,$//')
            }
        fi
        mpirun_base="mpirun --mca pml ob1"
        [ "$(id -u)" -eq 0 ] && mpirun_base="$mpirun_base --allow-run-as-root"
        mpirun_base="$mpirun_base $mpirun_args"
    fi
fi

# gloo: torch.distributed in the system python (torch 1.13 from Debian).
python=${PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3
if in_list gloo "$peers" &&
    ! "$python" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    note "SKIP gloo: $python cannot import torch.distributed with gloo (apt-get install python3-torch)"
    peers=$(echo ",$peers," | sed 's/,gloo,/,/; s/^,//; s/,$//')
fi

# hoop over verbs: here where this host has an active RDMA port, else in the test guest.
guest=0
if in_list ibverbs "$hoops" && ! grep -qs ACTIVE /sys/class/infiniband/*/ports/*/state; then
    if bash "$repo/tests/rdma/vm.sh" --check >"$out/logs/vm-check.log" 2>&1; then
        guest=1
        note "hoop ibverbs: inside the soft-RoCE test guest (tests/rdma/vm.sh, rxe0; no active RDMA port here), against hoop tcp in the same boot (hoop-guest-tcp); the guest's CPUs are emulated: ratios and correctness, not speeds"
    else
        note "SKIP hoop ibverbs: no active RDMA port here and no test guest to boot: $(grep -m1 . "$out/logs/vm-check.log" | cut -c1-160)"
        hoops=$(echo ",$hoops," | sed 's/,ibverbs,/,/; s/^,//; s/,$//')
    fi
fi
if in_list ibverbs "$hoops"; then
    note "no peer over verbs: Open MPI and gloo are not in the test guest (no Open MPI, no python3 there), and this script runs Open MPI over shared memory and TCP only"
fi

# hoop's runs: "sym" is shared memory with hoop-perf's buffers in symmetric memory.
hoop_transport() { if [ "$1" = sym ]; then echo shm; else echo "$1"; fi; }
hoop_flags() { [ "$1" = sym ] && echo --sym; }

# hoop: is each transport accepted? (The guest's are known when it has run.)
hoops_ok=""
for h in $(echo "$hoops" | tr , ' '); do
    [ "$guest" = 1 ] && [ "$h" = ibverbs ] && { hoops_ok=${hoops_ok:+$hoops_ok,}$h; continue; }
    # shellcheck disable=SC2046
    if HOOP_TRANSPORT=$(hoop_transport "$h") HOOP_TIMEOUT=30 "$hooprun" --no-prefix --timeout 60 \
        -n 2 "$perf" allreduce -b 8 -e 8 -n 1 -w 0 $(hoop_flags "$h") \
        >"$out/logs/probe-hoop-$h.log" 2>&1; then
        hoops_ok=${hoops_ok:+$hoops_ok,}$h
    else
        why=$(grep -m1 -i -E 'invalid|not valid|error|fail' "$out/logs/probe-hoop-$h.log" | cut -c1-160)
        note "SKIP hoop $h: HOOP_TRANSPORT=$h rejected: ${why:-see $out/logs/probe-hoop-$h.log}"
    fi
done
hoops=$hoops_ok
[ -n "$hoops" ] || { echo "vs-peers.sh: no hoop transport runs (see $out/logs)" >&2; exit 1; }

# Open MPI's shared memory: ask for single copy by CMA (process_vm_readv); where the kernel
# refuses it, vader says so and copies twice through shared memory instead.
ompi_shm_args="--mca btl self,vader"
if in_list ompi-shm "$peers"; then
    if $mpirun_base -np 2 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma \
        "$mpicoll" allreduce -b 1M -e 1M -n 2 -w 1 >"$out/logs/probe-cma.log" 2>&1 &&
        ! grep -q -i -E 'single.copy|cma|process_vm' "$out/logs/probe-cma.log"; then
        ompi_shm_args="$ompi_shm_args --mca btl_vader_single_copy_mechanism cma"
        note "Open MPI shared memory: btl vader, single copy by CMA"
    else
        ompi_shm_args="$ompi_shm_args --mca btl_vader_single_copy_mechanism none"
        note "Open MPI shared memory: btl vader WITHOUT single copy (CMA refused, see $out/logs/probe-cma.log)"
    fi
fi
ompi_tcp_args="--mca btl self,tcp --mca btl_tcp_if_include lo"

# ---- the runs ----

# Sizes by 4x, split at 1 MiB into the many-iteration and the few-iteration job.
split=1048576 small_b="" small_e="" large_b="" large_e=""
s=$minb
while [ "$s" -le "$maxb" ]; do
    if [ "$s" -le "$split" ]; then
        small_b=${small_b:-$s} small_e=$s
    else
        large_b=${large_b:-$s} large_e=$s
    fi
    [ "$s" -eq 0 ] && s=1 || s=$((s * 4))
done

failures=0
# The guest's jobs, queued while the host's run, then run in one boot (guest_run).
gjobs=$out/guest-jobs.sh
: >"$gjobs"
# q WORD: WORD quoted for the guest's /bin/sh.
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

# run N COLL CONFIG TAG REP ARGS...: one job (ARGS name its CSV files); its output goes to logs/.
run() {
    n=$1 coll=$2 cfg=$3 tag=$4 rep=$5
    shift 5
    log=$out/logs/n$n-$coll-$cfg.$tag.$rep.log
    case $guest:$cfg in 1:hoop-ibverbs | 1:hoop-guest-tcp)
        tr=${cfg#hoop-}
        line="g $(q "$cfg $coll n=$n $tag rep=$rep") $(q "$log") ${tr#guest-} $n $coll"
        for a in "$@"; do line="$line $(q "$a")"; done
        echo "$line" >>"$gjobs"
        return 0 ;;
    esac
    over=""
    [ "$n" -gt "$ncpu" ] && over=--oversubscribe
    t0=$(date +%s)
    case $cfg in
    hoop-*)
        # -a 3: the slowest rank's time, as the peers report theirs.
        # shellcheck disable=SC2046
        HOOP_TRANSPORT=$(hoop_transport "${cfg#hoop-}") "$hooprun" --no-prefix --timeout 900 \
            -n "$n" "$perf" "$coll" -a 3 "$@" $(hoop_flags "${cfg#hoop-}") ;;
    ompi-shm)
        # shellcheck disable=SC2086
        timeout 900 $mpirun_base $over -np "$n" $ompi_shm_args "$mpicoll" "$coll" "$@" ;;
    ompi-tcp)
        # shellcheck disable=SC2086
        timeout 900 $mpirun_base $over -np "$n" $ompi_tcp_args "$mpicoll" "$coll" "$@" ;;
    gloo)
        "$hooprun" --no-prefix --timeout 900 -n "$n" "$python" "$repo/bench/peers/gloo_coll.py" \
            "$coll" "$@" ;;
    esac >"$log" 2>&1
    rc=$?
    echo "$cfg $coll n=$n $tag rep=$rep rc=$rc $(($(date +%s) - t0)) s" >>"$out/logs/jobs.txt"
    if [ "$rc" -ne 0 ]; then
        failures=$((failures + 1))
        echo "vs-peers.sh: $cfg $coll on $n ranks ($tag, repetition $rep) exited $rc:" >&2
        tail -n 5 "$log" | sed 's/^/    /' >&2
    fi
}

# parts COLL: the jobs of one run. lat: the all-reduce latency, every call then a barrier (-z 1);
# small: sizes up to 1 MiB, many iterations; large: the others, few. Every library warms up before
# every row (--warm-each, as the OSU benchmarks do): what is timed is the steady state at that size,
# not the first touch of buffers that size needs.
parts() {
    [ "$1" = allreduce ] && [ "$latb" -gt 0 ] && printf ' lat'
    [ -n "$small_b" ] && printf ' small'
    [ -n "$large_b" ] && printf ' large'
    echo
}

# run_config N COLL CONFIG REP: every part of one library's run, each job writing its own CSV;
# gloo's parts share one process (--then), since starting torch takes seconds.
run_config() {
    n=$1 coll=$2 cfg=$3 rep=$4
    dir=$out/raw/n$n/$coll
    mkdir -p "$dir"
    set --
    for part in $(parts "$coll"); do
        [ "$cfg" != gloo ] && set --
        [ $# -gt 0 ] && set -- "$@" --then
        case $part in
        lat) set -- "$@" -b "$latb" -e "$latb" -n "$it_lat" -w $((it_lat / 10 + 1)) -z 1 ;;
        small) set -- "$@" -b "$small_b" -e "$small_e" -f 4 -n "$it_small" -w $((it_small / 10 + 1)) --warm-each ;;
        # Checking 256 MiB costs more than timing it: large sizes are checked in repetition 1.
        large) set -- "$@" -b "$large_b" -e "$large_e" -f 4 -n "$it_large" -w 1 --warm-each -c $((rep == 1)) ;;
        esac
        case $cfg:$part in hoop-*:small | hoop-*:large) set -- "$@" -z "$hoop_z" ;; esac
        set -- "$@" --csv "$dir/$cfg.$part.$rep.csv"
        [ "$cfg" != gloo ] && run "$n" "$coll" "$cfg" "$part" "$rep" "$@"
    done
    [ "$cfg" = gloo ] && [ $# -gt 0 ] && run "$n" "$coll" "$cfg" all "$rep" "$@"
    return 0
}

configs=""
for h in $(echo "$hoops" | tr , ' '); do
    # hoop and a peer alternate: hoop shm, Open MPI shm, hoop tcp, Open MPI tcp, gloo; in the
    # guest, hoop ibverbs and hoop tcp.
    configs="$configs hoop-$h"
    [ "$guest" = 1 ] && [ "$h" = ibverbs ] && configs="$configs hoop-guest-tcp"
    in_list "ompi-$h" "$peers" && configs="$configs ompi-$h"
done
for p in $(echo "$peers" | tr , ' '); do
    case " $configs " in *" $p "*) ;; *) configs="$configs $p" ;; esac
done

stream=$build/bench/peers/tcp-stream
if in_list tcp "$hoops" && in_list 2 "$ranks" && in_list allreduce "$colls" && [ ! -x "$stream" ]; then
    stream=$out/tcp-stream
    cc -O2 -o "$stream" "$repo/bench/peers/tcp_stream.c" 2>"$out/logs/cc-tcp-stream.log" ||
        note "no tcp-stream: not built and cc failed"
fi
stream_bytes=1G
[ "$quick" = 1 ] && stream_bytes=256M

# The machine's own limits beside 2-rank hoop shm all-reduce, each repetition: a cache line's
# one-way time and the smallest two-rank exchange (line-pingpong), and two processes copying
# the largest size at once (mem-copy, at most 256 MiB), which bounds an out-of-cache
# all-reduce (bench/peers/report.py says how).
yard=0
if { in_list shm "$hoops" || in_list sym "$hoops"; } && in_list 2 "$ranks" &&
    in_list allreduce "$colls" && [ -x "$build/bench/peers/line-pingpong" ] && [ -x "$build/bench/peers/mem-copy" ]; then
    yard=1
    copy_bytes=$maxb
    [ "$copy_bytes" -gt 268435456 ] && copy_bytes=268435456
    [ "$copy_bytes" -lt 1048576 ] && copy_bytes=1048576
fi

start=$(date +%s)
echo "# vs-peers: ranks $ranks, collectives $colls, $reps repetition(s), sizes $sizes," \
    "latency ${lat}, iterations $iters; runs: $configs" >&2
rep=1
while [ "$rep" -le "$reps" ]; do
    echo "# repetition $rep of $reps ($(($(date +%s) - start)) s so far)" >&2
    if [ -x "$stream" ] && in_list tcp "$hoops" && in_list 2 "$ranks" && in_list allreduce "$colls"; then
        "$stream" -s "$stream_bytes" >"$out/raw/tcp-stream.$rep.txt" 2>"$out/logs/tcp-stream.$rep.log" || {
            failures=$((failures + 1))
            echo "vs-peers.sh: tcp-stream failed: $(cat "$out/logs/tcp-stream.$rep.log")" >&2
        }
    fi
    if [ "$yard" = 1 ]; then
        "$build/bench/peers/line-pingpong" >"$out/raw/line.$rep.txt" 2>"$out/logs/line.$rep.log" &&
            "$build/bench/peers/mem-copy" -p 2 -s "$copy_bytes" -n 3 >"$out/raw/mem-copy.$rep.txt" \
                2>"$out/logs/mem-copy.$rep.log" || {
            failures=$((failures + 1))
            echo "vs-peers.sh: line-pingpong or mem-copy failed (see $out/logs)" >&2
        }
    fi
    for n in $(echo "$ranks" | tr , ' '); do
        for coll in $(echo "$colls" | tr , ' '); do
            for cfg in $configs; do
                [ "$cfg" = gloo ] && ! in_list "$coll" "$gloo_colls" && continue
                case $cfg in hoop-tcp | ompi-tcp)
                    in_list shm "$hoops" && ! in_list "$coll" "$tcp_colls" && continue ;;
                esac
                run_config "$n" "$coll" "$cfg" "$rep"
            done
        done
    done
    rep=$((rep + 1))
done

# guest_run: every queued guest job in one boot, the CSV files and logs landing in $out (shared).
guest_run() {
    [ -s "$gjobs" ] || return 0
    njobs=$(wc -l <"$gjobs")
    echo "# the test guest: $njobs job(s) of hoop ibverbs and hoop tcp in one boot" >&2
    {
        echo "hooprun=$(q "$hooprun") perf=$(q "$perf") jobs=$(q "$out/logs/jobs.txt")"
        # The host's hoop settings (HOOP_ALGO...) and malloc's thresholds hold in the guest too.
        for v in $(env | sed -n 's/^\(HOOP_[A-Z0-9_]*\|MALLOC_[A-Z_]*_\)=.*/\1/p'); do
            case $v in HOOP_TRANSPORT | HOOP_RDMA_VM* | HOOP_VM_*) continue ;; esac
            eval "echo \"export $v=\$(q \"\$$v\")\""
        done
        # g LABEL LOG TRANSPORT N COLL ARGS...: as run() on the host; -a 3, the slowest rank's time.
        cat <<'EOF'
export HOOP_TIMEOUT=${HOOP_TIMEOUT:-120}
g() {
    label=$1 log=$2 tr=$3 n=$4 coll=$5
    shift 5
    t0=$(date +%s)
    HOOP_TRANSPORT=$tr "$hooprun" --no-prefix --timeout 900 -n "$n" "$perf" "$coll" -a 3 "$@" >"$log" 2>&1
    rc=$?
    echo "$label rc=$rc $(($(date +%s) - t0)) s" >>"$jobs"
    echo "guest: $label rc=$rc"
    [ "$rc" -eq 0 ] || tail -n 5 "$log" | sed 's/^/    /'
}
EOF
        cat "$gjobs"
    } >"$out/guest.sh"
    t0=$(date +%s)
    bash "$repo/tests/rdma/vm.sh" -t "$vm_timeout" -w "$out" -s "$build" -- sh "$out/guest.sh" \
        >"$out/logs/guest.log" 2>&1
    rc=$?
    if [ "$rc" -eq 77 ]; then
        note "SKIP hoop ibverbs: the test guest could not boot: $(grep -m1 SKIP "$out/logs/guest.log" | cut -c1-160)"
        hoops=$(echo ",$hoops," | sed 's/,ibverbs,/,/; s/^,//; s/,$//')
        return 0
    fi
    : >>"$out/logs/jobs.txt"
    ran=$(grep -c -E '^hoop-(ibverbs|guest-tcp) ' "$out/logs/jobs.txt")
    bad_jobs=$(grep -E '^hoop-(ibverbs|guest-tcp) ' "$out/logs/jobs.txt" | grep -c -v ' rc=0 ')
    grep -E -A5 '^guest: .* rc=[1-9]' "$out/logs/guest.log" | sed 's/^/vs-peers.sh: /' >&2
    failures=$((failures + bad_jobs))
    if [ "$ran" -lt "$njobs" ]; then
        failures=$((failures + njobs - ran))
        echo "vs-peers.sh: the guest ran $ran of $njobs job(s) (exit $rc; see $out/logs/guest.log):" >&2
        tail -n 8 "$out/logs/guest.log" | sed 's/^/    /' >&2
    fi
    note "the test guest: $njobs job(s) in one boot of $(($(date +%s) - t0)) s, exit $rc"
}
guest_run
elapsed=$(($(date +%s) - start))

{
    echo "ranks=$ranks"
    echo "colls=$colls"
    echo "reps=$reps"
    echo "hoop=$hoops"
    echo "guest=$guest"
    echo "peers=$peers"
    echo "gloo_colls=$gloo_colls"
    echo "tcp_colls=$tcp_colls"
    echo "note=vs-peers: $(uname -n), $ncpu CPUs, $(date -u +%Y-%m-%dT%H:%MZ), ${elapsed} s of runs, load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
    echo "note=iterations: latency $it_lat (-z 1), sizes up to 1 MiB $it_small, above $it_large (checked in repetition 1), warm-up before every row; the peers call their blocking collective back to back, hoop-perf runs with -z $hoop_z (2: the same; 0: nonblocking calls posted, then waited for)"
    [ -n "$mpirun_base" ] && echo "note=Open MPI: $mpirun_base [--oversubscribe] -np N, shm: $ompi_shm_args; tcp: $ompi_tcp_args"
    if [ "$malloc_heap" = 1 ]; then
        echo "note=every library: MALLOC_MMAP_THRESHOLD_=$MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_=$MALLOC_TRIM_THRESHOLD_ (buffers allocated per call reuse the heap; --malloc-default to leave glibc as it is)"
    else
        echo "note=glibc malloc as it is: large buffers allocated per call (Open MPI's all-reduce, gloo) are mapped and page-faulted in on every call"
    fi
    [ "$keep" = 1 ] && echo "note=raw CSV files: $out/raw, logs and seconds per job: $out/logs"
} >>"$meta"

python3 "$repo/bench/peers/report.py" "$out"
rc=$?
[ "$failures" -eq 0 ] || { echo "vs-peers.sh: $failures run(s) failed (logs: $out/logs)" >&2; rc=1; }
exit "$rc"
