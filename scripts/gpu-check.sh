#!/bin/sh
# The GPU check: one run of at most 450 s, on a GPU machine, of the prebuilt folder that
# scripts/gpu-bundle.sh makes, nothing built or installed there, with one verdict that cannot be
# a false PASS (docs/cuda.md, "The GPU check"):
#
#   gpu-check.sh --prebuilt DIR OUTDIR [--rehearse]
#
# Steps, by value: 1. the environment (GPU, driver, compute mode, kernel, the Python that imports
# a CUDA torch, torch, NCCL, whether the kernels' machine code has 128-bit loads); 2. the kernels
# bit for bit against the CPU's; 3. their bandwidth beside a device-to-device copy; 4. stream
# ordering, every mode, the legacy stream and one hardware queue included; 5. every collective
# on device buffers at 2, 3 and 4 ranks on one GPU (CUDA IPC, staging over shared memory and
# TCP, stream-ordered); 6. PyTorch DistributedDataParallel on CUDA tensors with backend hoop, on
# torch's default stream; 7. all-reduce bus bandwidth over CUDA IPC at 2 and 4 ranks, staged
# over TCP and on host buffers beside it; 8. NCCL side by side (bench/nccl-side: its launch floor,
# 2 ranks as two hosts over loopback sockets, 2 ranks on one GPU where NCCL allows it).
#
# No false PASS: on a machine with a GPU, a step that skips (exit 77), or whose output says "no
# usable CUDA driver" or "no CUDA device", FAILS; a step cut by its limit or the deadline fails;
# the verdict is PASS only when every step passed. Without a GPU the verdict is NO GPU (exit 3)
# after the environment. --rehearse runs every step against the CUDA test double in DIR/double
# instead (a machine without a GPU: steps that need a real GPU skip), verdict REHEARSAL, exit 3
# when nothing failed: a rehearsal is never a PASS.
#
# OUTDIR gets four files: summary.json (verdict, environment, every step's status and time, the
# key figures), report.txt (the same, for people), steps.log (every step's output) and perf.txt
# (the bandwidth tables). Exit: 0 PASS, 1 FAIL, 2 bad usage, 3 NO GPU or REHEARSAL.
# Environment: GPU_CHECK_DEADLINE (seconds, default 450), GPU_CHECK_PYTHON (the Python to use).
# shellcheck disable=SC2317 # the steps are called by name, through --step
set -u

# ---- the steps (each runs as `gpu-check.sh --step NAME ARGS...`, under timeout) --------------

env_info() {
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "host: $(uname -n), $(nproc 2>/dev/null) CPUs, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
    kv kernel "$(uname -srm)"
    kv glibc "$(ldd --version 2>/dev/null | head -n 1)"
    sed -n '1,7p' "$D/MANIFEST" 2>/dev/null
    if [ "$gpus" -gt 0 ]; then
        nvidia-smi -L
        q=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,compute_mode --format=csv,noheader 2>/dev/null | head -n 1)
        echo "nvidia-smi: $q"
        kv gpu "$(echo "$q" | cut -d, -f1,3,4 | sed 's/^ *//')"
        kv driver "$(echo "$q" | cut -d, -f2 | tr -d ' ') ($(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n 1))"
        kv compute_mode "$(echo "$q" | cut -d, -f5 | tr -d ' ')"
        nvidia-smi 2>/dev/null | head -n 20
    else
        kv gpu "none ($(command -v nvidia-smi >/dev/null 2>&1 && echo 'nvidia-smi lists none' || echo 'no nvidia-smi'))"
        kv driver none
    fi
    # The kernels' machine code: 128-bit loads and stores (LDG.E.128, STG.E.128) per architecture.
    dump=$(command -v cuobjdump 2>/dev/null || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null)
    if [ -n "$dump" ]; then
        "$dump" -sass "$D/lib/libhoop-cuda.so" >"$work/sass.txt" 2>&1
        ld=$(grep -c 'LDG\.E\.128' "$work/sass.txt")
        st=$(grep -c 'STG\.E\.128' "$work/sass.txt")
        arch=$(grep -o 'arch = sm_[0-9a-z]*' "$work/sass.txt" | sort -u | tr '\n' ' ')
        kv sass_128bit "$ld 128-bit loads, $st 128-bit stores ($arch)"
    else
        kv sass_128bit "unknown (no cuobjdump here)"
    fi
    kv python "$PY ($("$PY" --version 2>&1))"
    "$PY" - <<'PY' >>"$work/env.kv" 2>&1
import os
try:
    import torch
    print("torch=%s" % torch.__version__)
    if torch.version.cuda is None:
        print("torch_cuda=no (this torch has no CUDA)")
    else:
        print("torch_cuda=CUDA %s, available: %s, %d device(s)"
              % (torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count()))
    try:
        v = torch.cuda.nccl.version()
        print("nccl=%s (torch's)" % ".".join(map(str, v)) if isinstance(v, tuple) else "nccl=%s" % v)
    except Exception as e:  # noqa: BLE001 - no NCCL in this torch
        print("nccl=none in torch (%s)" % e)
except Exception as e:  # noqa: BLE001 - no torch at all
    print("torch=does not import (%s)" % e)
try:
    import nvidia.nccl
    d = os.path.dirname(nvidia.nccl.__file__ or list(nvidia.nccl.__path__)[0])
    print("nccl_lib=%s" % os.path.join(d, "lib", "libnccl.so.2"))
except Exception:  # noqa: BLE001 - no NCCL wheel
    print("nccl_lib=")
PY
    cat "$work/env.kv"
    [ "$gpus" -gt 0 ] && ! nvidia-smi -L >/dev/null 2>&1 && return 1
    return 0
}

kv() { echo "$1=$2" >>"$work/env.kv"; }

run() { # run NRANKS ENV... -- PROGRAM ARGS...: under hooprun
    n=$1
    shift
    set -- env HOOP_TIMEOUT=60 "$@"
    echo "+ hooprun -n $n $*"
    "$D/bin/hooprun" --timeout 120 -n "$n" "$@"
}

kernels_exact() { "$D/tests/test_kernels" "$MOD"; }

kernels_bw() {
    [ "$REHEARSE" = 1 ] && { echo "needs a real GPU: the benchmark links the CUDA runtime"; return 77; }
    "$D/bin/cuda-kernels" -b 1M -e 256M -f 16 -n 10 -w 2 -d all -o sum
}

stream_mode() { # NRANKS MODE ENV...
    n=$1 mode=$2
    shift 2
    run "$n" "$@" "$D/tests/cuda_stream" "$MOD" "$mode"
}

colls() { # NRANKS ENV... [--stream]
    n=$1
    shift
    extra=
    [ "${1:-}" = --stream ] && { extra=--stream; shift; }
    # shellcheck disable=SC2086
    run "$n" "$@" "$D/tests/coll_test" --device "$MOD" $extra --mode colls \
        --large-dtypes float32,bfloat16 --large-ops sum,avg
}

ddp() {
    PYTHONPATH=$D/python HOOP_LIBRARY=$D/lib/libhoop.so.0 HOOP_TIMEOUT=60 \
        "$PY" "$D/tests/torch_cuda.py" --launch "$D/bin/hooprun" 2 150
}

hperf() { # NRANKS ENV... HOOP-PERF ARGS: its table without rank prefixes
    n=$1
    shift
    echo "+ hooprun -n $n $*"
    "$D/bin/hooprun" --no-prefix --timeout 120 -n "$n" env HOOP_TIMEOUT=60 "$@"
}

# NCCL's all-reduce in hoop-perf's columns: its launch floor on 1 rank; 2 ranks on the GPU as two
# hosts over loopback sockets (beside hoop's staging over TCP); 2 ranks with
# NCCL_MULTI_RANK_GPU_ENABLE where NCCL is 2.30 or later (beside hoop's CUDA IPC).
nccl_side() {
    [ "$REHEARSE" = 1 ] && { echo "needs a real GPU and NCCL: nccl-side links the CUDA runtime"; return 77; }
    NCCL_LIB=$(sed -n 's/^nccl_lib=//p' "$work/env.kv")
    export NCCL_LIB
    rc=0
    for m in 1:floor 2:hosts 2:multi; do
        hperf "${m%%:*}" "$D/bin/nccl-side" --mode "${m#*:}" -b 1M -e "$perf_max" -f 4 -n 5 -w 2 ||
            rc=1
    done
    return "$rc"
}

if [ "${1:-}" = --step ]; then
    shift
    fn=$1
    shift
    "$fn" "$@"
    exit $?
fi

# ---- the run --------------------------------------------------------------------------------

usage() {
    echo "usage: $0 --prebuilt DIR OUTDIR [--rehearse]   (scripts/gpu-bundle.sh makes DIR)" >&2
    exit 2
}
if [ "${1:-}" != --prebuilt ] || [ $# -lt 3 ]; then usage; fi
D=$(cd "$2" 2>/dev/null && pwd) || usage
if [ ! -f "$D/MANIFEST" ] || [ ! -x "$D/bin/hooprun" ]; then
    echo "gpu-check: $D is not a bundle of gpu-bundle.sh" >&2
    exit 2
fi
mkdir -p "$3" || usage
out=$(cd "$3" && pwd)
REHEARSE=0
[ "${4:-}" = --rehearse ] && REHEARSE=1
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
start=$(date +%s)
deadline=${GPU_CHECK_DEADLINE:-450}
work=$(mktemp -d "${TMPDIR:-/tmp}/hoop-gpu-check.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
: >"$work/env.kv"
gpus=0
command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
MOD=$D/lib/libhoop-cuda.so
perf_max=256M
export LD_LIBRARY_PATH="$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ "$REHEARSE" = 1 ]; then
    # Every step against the double, which stands for the driver too; its delays kept short.
    MOD=$D/double/libhoop-cuda-double.so
    gpus=0
    perf_max=16M
    export HOOP_TEST_CUDA_MODULE="$MOD" HOOP_TEST_CUDA_DRIVER="$MOD" HOOP_CUDA_DOUBLE_DELAY_US=100
fi

# The Python that imports a CUDA torch (the venv's, not the system's); else the first that
# imports torch; else python3.
PY=
first_torch=
for p in ${GPU_CHECK_PYTHON:-} ${VIRTUAL_ENV:+"$VIRTUAL_ENV/bin/python"} "$(command -v python3 2>/dev/null)" \
    "$(command -v python 2>/dev/null)" /usr/bin/python3 "$HOME/venv/bin/python" "$HOME/.venv/bin/python" \
    /opt/venv/bin/python /venv/bin/python; do
    if [ -z "$p" ] || [ ! -x "$p" ]; then continue; fi
    if timeout 30 "$p" -c 'import sys, torch; sys.exit(0 if torch.version.cuda and torch.cuda.is_available() else 1)' 2>/dev/null; then
        PY=$p
        break
    fi
    [ -z "$first_torch" ] && timeout 30 "$p" -c 'import torch' 2>/dev/null && first_torch=$p
done
[ -z "$PY" ] && PY=${first_torch:-$(command -v python3 2>/dev/null || echo python3)}
export D MOD PY REHEARSE work gpus perf_max

: >"$out/steps.log"
: >"$out/perf.txt"
: >"$work/results"
running=
elapsed() { echo $(($(date +%s) - start)); }
interrupted() {
    [ -n "$running" ] && kill "$running" 2>/dev/null
    echo "FAIL|$(elapsed)|${name:-the start}|interrupted from outside" >>"$work/results"
    finish
}
# step NAME LIMIT [perf] FUNCTION ARGS...: the function under a limit (capped by what is left of
# the deadline); records PASS, SKIP, FAIL, TIMEOUT or NOT RUN with a reason. perf: its output
# also goes to perf.txt.
step() {
    name=$1 limit=$2
    shift 2
    keep=0
    [ "$1" = perf ] && { keep=1; shift; }
    left=$((deadline - $(elapsed)))
    if [ "$left" -lt 5 ]; then
        echo "NOT RUN|0|$name|the ${deadline}s deadline was reached" >>"$work/results"
        printf '%-44s NOT RUN\n' "$name"
        return 1
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    t0=$(date +%s)
    timeout -k 5 "$limit" sh "$self" --step "$@" >"$work/step.log" 2>&1 &
    running=$!
    wait "$running"
    rc=$?
    running=
    t=$(($(date +%s) - t0))
    {
        echo "===== $name (limit ${limit}s, ${t}s, exit $rc)"
        cat "$work/step.log"
        echo
    } >>"$out/steps.log"
    [ "$keep" = 1 ] && { echo "===== $name"; cat "$work/step.log"; echo; } >>"$out/perf.txt"
    why=
    case $rc in
    0) st=PASS ;;
    77) st=SKIP why="skipped (exit 77): $(grep -m 1 -iE 'skip|no CUDA|needs' "$work/step.log" | cut -c1-160)" ;;
    124 | 137) st=TIMEOUT why="cut at its ${limit}s limit" ;;
    *) st=FAIL why="exit $rc: $(grep -m 1 -E 'FAIL|error|cannot|refused|timed out' "$work/step.log" | cut -c1-160)" ;;
    esac
    if [ "$gpus" -gt 0 ]; then
        # On a GPU machine a skip is a failure, and so is a driver the module cannot use.
        [ "$st" = SKIP ] && st=FAIL
        if grep -qE 'no usable CUDA driver|no CUDA device' "$work/step.log"; then
            st=FAIL why="$(grep -m 1 -oE '(no usable CUDA driver|no CUDA device).{0,140}' "$work/step.log")"
        fi
    fi
    echo "$st|$t|$name|$why" >>"$work/results"
    printf '%-44s %s (%ss) %s\n' "$name" "$st" "$t" "$why"
}

json_str() { printf '"%s"' "$(printf '%s' "$1" | tr '\t\n\r' '   ' | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

finish() {
    total=$(wc -l <"$work/results")
    pass=$(grep -c '^PASS|' "$work/results")
    skip=$(grep -c '^SKIP|' "$work/results")
    bad=$((total - pass - skip))
    if [ "$REHEARSE" = 1 ]; then
        verdict="REHEARSAL (the test double, not a GPU): $pass passed, $bad failed, $skip skipped"
        rc=3
        [ "$bad" -gt 0 ] && rc=1
    elif [ "$gpus" -eq 0 ]; then
        verdict="NO GPU: nothing ran on a GPU"
        rc=3
    elif [ "$bad" -eq 0 ] && [ "$skip" -eq 0 ] && [ "$total" -gt 0 ]; then
        verdict=PASS
        rc=0
    else
        verdict="FAIL: $bad of $total steps did not pass"
        rc=1
    fi
    # Key figures: the kernels' ratio lines, and each hoop-perf run's largest row.
    grep -E '0\.90' "$out/perf.txt" >"$work/figures" 2>/dev/null
    awk '/^===== / {name = substr($0, 7)} /^ +[0-9]+ +[0-9]+ / {last[name] = $0} END {for (n in last) print n ": " last[n]}' \
        "$out/perf.txt" | sort >>"$work/figures"
    {
        echo "# hoop GPU check: $verdict"
        echo "elapsed: $(elapsed)s of a ${deadline}s deadline; bundle: $D"
        echo
        echo "## environment"
        sed 's/=/: /' "$work/env.kv"
        echo
        echo "## steps"
        awk -F'|' '{printf "%-8s %4ss  %s%s\n", $1, $2, $3, ($4 != "" ? "  -- " $4 : "")}' "$work/results"
        echo
        echo "## figures (perf.txt has the tables)"
        cat "$work/figures"
    } >"$out/report.txt"
    {
        printf '{\n  "verdict": %s,\n  "gpu": %s,\n  "rehearsal": %s,\n' "$(json_str "$verdict")" \
            "$([ "$gpus" -gt 0 ] && echo true || echo false)" "$([ "$REHEARSE" = 1 ] && echo true || echo false)"
        printf '  "elapsed_s": %s,\n  "deadline_s": %s,\n  "environment": {' "$(elapsed)" "$deadline"
        sep=
        while IFS='=' read -r k v; do
            printf '%s\n    %s: %s' "$sep" "$(json_str "$k")" "$(json_str "$v")"
            sep=,
        done <"$work/env.kv"
        printf '\n  },\n  "steps": ['
        sep=
        while IFS='|' read -r st t nm why; do
            printf '%s\n    {"name": %s, "status": %s, "seconds": %s, "detail": %s}' "$sep" \
                "$(json_str "$nm")" "$(json_str "$st")" "$t" "$(json_str "$why")"
            sep=,
        done <"$work/results"
        printf '\n  ],\n  "figures": ['
        sep=
        while IFS= read -r l; do
            printf '%s\n    %s' "$sep" "$(json_str "$l")"
            sep=,
        done <"$work/figures"
        printf '\n  ]\n}\n'
    } >"$out/summary.json"
    echo
    echo "verdict: $verdict"
    echo "report: $out/report.txt, $out/summary.json"
    exit "$rc"
}
trap interrupted INT TERM

echo "hoop GPU check: $D -> $out ($([ "$REHEARSE" = 1 ] && echo 'rehearsal on the test double' || echo "$gpus GPU(s)"); deadline ${deadline}s)"
step "environment" 60 env_info
if [ "$gpus" -eq 0 ] && [ "$REHEARSE" = 0 ]; then finish; fi

step "kernels bit for bit" 90 kernels_exact
step "kernel bandwidth" 60 perf kernels_bw
for m in ordered unordered reuse group legacy-ordered; do
    step "stream ordering: $m" 30 stream_mode 2 "$m"
done
step "stream ordering: legacy, staged" 30 stream_mode 2 legacy HOOP_ALGO=p2p
step "stream ordering: legacy, CUDA IPC" 30 stream_mode 2 legacy HOOP_ALGO=ipc
step "stream ordering: one hardware queue" 30 stream_mode 2 ordered CUDA_DEVICE_MAX_CONNECTIONS=1
[ "$REHEARSE" = 1 ] && step "stream ordering: capture (double only)" 30 stream_mode 2 capture
for n in 2 3 4; do
    step "collectives $n ranks, auto (CUDA IPC)" 60 colls "$n"
done
step "collectives 3 ranks, staged over shm" 60 colls 3 HOOP_ALGO=p2p HOOP_TRANSPORT=shm
step "collectives 2 ranks, staged over TCP" 60 colls 2 HOOP_TRANSPORT=tcp
step "collectives 3 ranks, stream-ordered" 60 colls 3 --stream
step "PyTorch DDP on CUDA tensors, default stream" 150 ddp
for n in 2 4; do
    step "all-reduce bandwidth $n ranks, CUDA IPC" 45 perf hperf "$n" HOOP_ALGO=ipc HOOP_TRANSPORT=shm \
        "$D/bin/hoop-perf" allreduce --device cuda -b 1M -e "$perf_max" -f 4 -n 5 -w 2 -d float32 -o sum
done
step "all-reduce bandwidth 2 ranks, staged over TCP" 45 perf hperf 2 HOOP_ALGO=p2p HOOP_TRANSPORT=tcp \
    "$D/bin/hoop-perf" allreduce --device cuda -b 1M -e "$perf_max" -f 4 -n 5 -w 2 -d float32 -o sum
step "all-reduce bandwidth 2 ranks, host buffers over TCP" 45 perf hperf 2 HOOP_TRANSPORT=tcp \
    "$D/bin/hoop-perf" allreduce -b 1M -e "$perf_max" -f 4 -n 5 -w 2 -d float32 -o sum
if [ -x "$D/bin/nccl-side" ]; then
    step "NCCL side by side" 60 perf nccl_side
fi
finish
