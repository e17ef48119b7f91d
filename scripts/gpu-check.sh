#!/bin/sh
# Everything hoop can check on a GPU, in one run of under 5 minutes, into one report file:
#
#   scripts/gpu-check.sh OUTDIR        writes OUTDIR/gpu-check.txt (and prints the gist as it goes)
#
#   1. the environment: GPUs (nvidia-smi), driver, toolkit (nvcc), compilers, Python, numpy and
#      torch, and whether torch has CUDA;
#   2. a build from a clean copy of this tree (the files git tracks or would track) with CUDA
#      (-Dcuda=enabled; machine code for the GPUs found only, to save time), in its own folder;
#   3. every test that needs a GPU (the meson tests named *-gpu*, cuda-bench-*, cuda-torch-*),
#      each on its own;
#   4. the kernel benchmark (bench/cuda-kernels: every kernel beside cudaMemcpy, up to 256 MiB);
#   5. hoop-perf all-reducing device buffers with 2 and 4 ranks on GPU 0: over CUDA IPC, and
#      staged through host memory over shared memory and over TCP, beside host buffers over TCP
#      (the staging target's reference), with #wrong and bus bandwidth; then every other
#      collective once on device buffers, every dtype and op, for #wrong: as auto runs them (CUDA
#      IPC for broadcast, reduce, all-gather and reduce-scatter) and staged over shared memory.
#
# Every step has its own time limit, and the whole run a deadline: a step that fails or runs out
# of time is recorded as such and the next one runs. Without a GPU the GPU steps are skipped and
# the report says "no GPU". Exit status: 0 when every step that ran passed (or skipped), 1 when
# one failed or did not run, 2 for bad usage. Environment: GPU_CHECK_DEADLINE (seconds, default
# 290), GPU_CHECK_BUILD_LIMIT (seconds, default 150), GPU_CHECK_JOBS (build jobs, default the
# CPUs), GPU_CHECK_BUILD=1 builds even without a GPU, GPU_CHECK_PERF_MAX (hoop-perf's largest
# all-reduce, default 256M), GPU_CHECK_KEEP=1 keeps the work folder.
# shellcheck disable=SC2317 # the steps are called by name, through --step
set -u

# The path: HOOP_ALGO=ipc forces CUDA IPC (auto takes it too, on one host); p2p is the staging
# path through pinned host memory (docs/cuda.md).
path_var=HOOP_ALGO

# ---- the steps (each runs as `gpu-check.sh --step NAME ARGS...`, under timeout) --------------

env_info() {
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "host: $(uname -n), $(uname -sr), $(nproc 2>/dev/null) CPUs, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
    echo "tree: $src ($(git -C "$src" describe --always --dirty 2>/dev/null || echo 'not a git checkout'))"
    if [ "$gpus" -gt 0 ]; then
        nvidia-smi -L
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm,clocks.max.mem \
            --format=csv 2>/dev/null || nvidia-smi
        nvidia-smi 2>/dev/null | grep -m 1 'CUDA Version'
    else
        echo "GPU: no GPU ($(command -v nvidia-smi >/dev/null 2>&1 && echo 'nvidia-smi lists none' || echo 'no nvidia-smi'))"
    fi
    if [ -n "$nvcc" ]; then
        echo "toolkit: $nvcc: $("$nvcc" --version | grep -m 1 'release')"
    else
        echo "toolkit: no nvcc (on PATH or in /usr/local/cuda/bin)"
    fi
    echo "compilers: $(cc --version 2>/dev/null | head -n 1); meson $(meson --version 2>/dev/null || echo none); ninja $(ninja --version 2>/dev/null || echo none)"
    echo "python: $python ($("$python" --version 2>&1))"
    "$python" - <<'PY'
import importlib
for m in ("numpy", "torch"):
    try:
        mod = importlib.import_module(m)
        print("  %s %s" % (m, getattr(mod, "__version__", "?")))
    except Exception as e:  # noqa: BLE001 - any failure means "not there"
        print("  %s: not importable (%s)" % (m, e))
try:
    import torch
    if torch.version.cuda is None:
        print("  CUDA torch: no (this torch is built without CUDA)")
    else:
        print("  CUDA torch: built for CUDA %s, available: %s, %d device(s)"
              % (torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count()))
except Exception:  # noqa: BLE001
    print("  CUDA torch: no (torch does not import)")
PY
    "$python" -m pip list 2>/dev/null | grep -iE '^(torch|numpy|nvidia-|triton)' | head -n 20
    return 0
}

build() {
    mkdir -p "$work/src" || return 1
    if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
        # Tracked files and untracked ones git does not ignore: what a clean checkout holds.
        (cd "$src" && git ls-files -z --cached --others --exclude-standard |
            xargs -0 tar cf - --no-recursion) | tar xf - -C "$work/src" || return 1
    else
        (cd "$src" && tar cf - --exclude='./build*' .) | tar xf - -C "$work/src" || return 1
    fi
    echo "copied $(find "$work/src" -type f | wc -l) files into $work/src"
    set -- -Dcuda=enabled -Dbuildtype=release
    [ -n "$archs" ] && set -- "$@" "-Dgpu_archs=$archs"
    meson setup "$b" "$work/src" "$@" && meson compile -C "$b" -j "$jobs"
}

# One meson test; 77 when meson skipped it (it exits 0 then).
gpu_test() {
    meson test -C "$b" --no-rebuild --print-errorlogs "$1" >"$work/test-$1.log" 2>&1
    rc=$?
    cat "$work/test-$1.log"
    [ "$rc" -eq 0 ] && grep -qE '^ *1/1 .* SKIP ' "$work/test-$1.log" && return 77
    return "$rc"
}

kernels() { "$b/bench/cuda-kernels" -b 1M -e 256M -f 16 -n 20; }

# One hoop-perf job: ranks, how the device buffers travel, then hoop-perf's own arguments.
perf() {
    n=$1 mode=$2
    shift 2
    case $mode in
    ipc) set -- env "$path_var=ipc" HOOP_TRANSPORT=shm "$b/bench/hoop-perf" --device cuda "$@" ;;
    auto) set -- env "$path_var=auto" HOOP_TRANSPORT=auto "$b/bench/hoop-perf" --device cuda "$@" ;;
    staging-shm) set -- env "$path_var=p2p" HOOP_TRANSPORT=shm "$b/bench/hoop-perf" --device cuda "$@" ;;
    staging-tcp) set -- env "$path_var=p2p" HOOP_TRANSPORT=tcp "$b/bench/hoop-perf" --device cuda "$@" ;;
    host-tcp) set -- env HOOP_TRANSPORT=tcp "$b/bench/hoop-perf" "$@" ;;
    *) echo "unknown mode $mode" && return 2 ;;
    esac
    echo "+ hooprun -n $n $*"
    HOOP_TIMEOUT=60 "$b/tools/hooprun" --timeout 120 -n "$n" "$@"
}

if [ "${1:-}" = --step ]; then
    shift
    fn=$1
    shift
    "$fn" "$@"
    exit $?
fi

# ---- the run --------------------------------------------------------------------------------

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd)
report=$out/gpu-check.txt
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
src=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)
deadline=${GPU_CHECK_DEADLINE:-290}
jobs=${GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}
work=$(mktemp -d "${TMPDIR:-/tmp}/hoop-gpu-check.XXXXXX") || exit 1
[ "${GPU_CHECK_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
b=$work/build
nvcc=$(command -v nvcc 2>/dev/null || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
[ -n "$nvcc" ] && PATH=$(dirname "$nvcc"):$PATH
gpus=0
command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
archs=
# Machine code for the GPUs here only (compute capability 9.0 -> 90), PTX for the newest.
[ "$gpus" -gt 0 ] && archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
    tr -d ' .' | sort -u | paste -sd, -)
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3 2>/dev/null || echo python3)
export PATH src work b nvcc gpus archs python jobs path_var

: >"$report"
failed=0
running=
say() { printf '%s\n' "$*" | tee -a "$report"; }
# Stopped from outside (a limit on the whole run): end the running step too, and say so.
interrupted() {
    [ -n "$running" ] && kill "$running" 2>/dev/null
    wait 2>/dev/null
    say "== interrupted after $(elapsed)s, during: ${name:-the start}"
    exit 1
}
trap interrupted INT TERM
elapsed() { echo $(($(date +%s) - start)); }
# step NAME LIMIT FUNCTION ARGS...: the function under a limit (capped by what is left of the
# deadline), its output into the report; records PASS, SKIP (exit 77), FAIL or TIMEOUT.
step() {
    name=$1 limit=$2
    shift 2
    left=$((deadline - $(elapsed)))
    if [ "$left" -lt 5 ]; then
        say "== $name: NOT RUN (the ${deadline}s deadline is reached)"
        failed=1
        return 1
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    say "== $name (limit ${limit}s)"
    t0=$(date +%s)
    timeout -k 5 "$limit" sh "$self" --step "$@" >"$work/step.log" 2>&1 &
    running=$!
    wait "$running"
    rc=$?
    running=
    cat "$work/step.log" >>"$report"
    tail -n 12 "$work/step.log"
    t=$(($(date +%s) - t0))
    case $rc in
    0) say "== $name: PASS (${t}s)" ;;
    77) say "== $name: SKIP (${t}s)" ;;
    124 | 137) say "== $name: TIMEOUT after ${t}s" && failed=1 ;;
    *) say "== $name: FAIL, exit status $rc (${t}s)" && failed=1 ;;
    esac
    say ""
    return $rc
}
skip() {
    say "== $1: SKIP ($2)"
    say ""
}

say "# hoop GPU check"
step "environment" 30 env_info
if [ "$gpus" -gt 0 ]; then
    say "GPUs: $gpus, building for sm_$archs"
else
    say "no GPU: the steps that need one are skipped"
fi
say ""

built=0
if [ -z "$nvcc" ]; then
    skip "build with CUDA" "no nvcc"
elif [ "$gpus" -eq 0 ] && [ "${GPU_CHECK_BUILD:-0}" != 1 ]; then
    skip "build with CUDA" "no GPU to run it on; GPU_CHECK_BUILD=1 builds anyway"
elif step "build with CUDA" "${GPU_CHECK_BUILD_LIMIT:-150}" build; then
    built=1
fi

if [ "$gpus" -eq 0 ]; then
    skip "GPU tests" "no GPU"
    skip "kernel benchmark" "no GPU"
    skip "hoop-perf on device buffers" "no GPU"
elif [ "$built" = 0 ]; then
    say "== GPU tests, kernel benchmark, hoop-perf: NOT RUN (no build)"
    failed=1
else
    tests=$(meson test -C "$b" --list 2>/dev/null | sed 's/^.* \/ //' |
        grep -E -- '-gpu|^cuda-bench-|^cuda-torch-' | sort -u)
    [ -n "$tests" ] || { say "== GPU tests: FAIL (none in this build)"; failed=1; }
    for t in $tests; do
        step "test $t" 60 gpu_test "$t"
    done
    step "kernel benchmark" 40 kernels
    say "hoop-perf: all-reduce, float32 sum, device buffers of ranks on GPU 0 ($path_var forces the path)"
    for n in 2 4; do
        for mode in ipc staging-shm staging-tcp host-tcp; do
            step "hoop-perf allreduce $n ranks $mode" 40 perf "$n" "$mode" \
                -b 1M -e "${GPU_CHECK_PERF_MAX:-256M}" -f 4 -n 10 -w 2 -d float32 -o sum
        done
    done
    for c in broadcast reduce allgather reducescatter; do
        step "hoop-perf $c 4 ranks auto" 20 perf 4 auto "$c" -b 8 -e 1M -f 128 -n 2 -w 1 -d all -o all
    done
    for c in broadcast reduce allgather gather scatter reducescatter alltoall sendrecv; do
        step "hoop-perf $c 4 ranks staging-shm" 20 perf 4 staging-shm "$c" -b 8 -e 1M -f 128 -n 2 -w 1 -d all -o all
    done
fi

grep -E '^== .*: (PASS|FAIL|TIMEOUT|SKIP|NOT RUN)' "$report" | sed 's/^== /  /' >"$work/summary"
say "# summary: $(grep -c ': PASS' "$work/summary") passed, $(grep -cE ': (FAIL|TIMEOUT|NOT RUN)' "$work/summary") failed, $(grep -c ': SKIP' "$work/summary") skipped, in $(elapsed)s"
tee -a "$report" <"$work/summary"
[ "$gpus" -gt 0 ] || say "no GPU: nothing ran on a GPU here"
say "report: $report"
exit "$failed"
