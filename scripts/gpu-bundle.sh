#!/bin/sh
# Packs what the GPU check runs into one folder, so that a GPU machine needs nothing built or
# installed (docs/cuda.md, "The GPU check"):
#
#   scripts/gpu-bundle.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR: a meson build of this tree with CUDA (libhoop-cuda.so in it; -Dgpu_archs should
# hold the GPU's compute capability, 90 for H100 and H200). OUT_DIR is made (it must not exist
# or be empty) with:
#   lib/      libhoop.so.0 (and libhoop.so), libhoop-cuda.so, libsodium (from libhoop's ldd)
#   bin/      hooprun, hoop-perf, cuda-kernels (the kernel benchmark), nccl-side (when built)
#   tests/    test_kernels, cuda_stream, cuda_placement, coll_test, cuda_stream_cost, torch_cuda.py
#   python/   the hoop package
#   common/   the Python tests' shared checks (tests/common/hooptest.py), which torch_cuda.py imports
#   double/   the CUDA test double, for a rehearsal on a machine without a GPU
#   gpu-check.sh, MANIFEST (what each file is, from which commit, its size and sha256)
# The C and C++ runtime libraries are not packed: the GPU machine's own, newer ones serve (a
# packed older libstdc++ would shadow the one its torch needs). Exit 0, or 1 with a sentence.
set -u
if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR OUT_DIR" >&2
    exit 2
fi
b=$(cd "$1" 2>/dev/null && pwd) || { echo "gpu-bundle: no build folder $1" >&2; exit 1; }
out=$2
src=$(cd "$(dirname "$0")/.." && pwd)
die() {
    echo "gpu-bundle: $*" >&2
    exit 1
}
[ -f "$b/libhoop-cuda.so" ] ||
    die "$b has no libhoop-cuda.so: configure it with nvcc found (-Dcuda=enabled) and build"
libhoop=$(find "$b" -maxdepth 1 -type f -name 'libhoop.so.0.*' | head -n 1)
[ -n "$libhoop" ] || die "$b has no libhoop.so.0.*: the shared library is needed"
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then die "$out exists and is not empty"; fi
mkdir -p "$out/lib" "$out/bin" "$out/tests" "$out/common" "$out/python" "$out/double" ||
    die "cannot make $out"

put() { # put FILE DEST_DIR [NAME]: a file that must be there
    [ -f "$1" ] || die "$1 is missing from the build"
    cp -L "$1" "$2/${3:-$(basename "$1")}" || die "cannot copy $1"
}

put "$libhoop" "$out/lib" libhoop.so.0
ln -s libhoop.so.0 "$out/lib/libhoop.so"
put "$b/libhoop-cuda.so" "$out/lib"
# Libraries libhoop needs that a bare GPU machine may lack (libsodium); not libc, libm,
# libstdc++ or libgcc_s, which any machine with torch has in newer versions.
for l in $(ldd "$libhoop" | awk '/=> \// {print $3}'); do
    case $(basename "$l") in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libstdc++.so* | libgcc_s.so* | ld-linux*) ;;
    *) put "$l" "$out/lib" ;;
    esac
done
put "$b/tools/hooprun" "$out/bin"
put "$b/bench/hoop-perf" "$out/bin"
[ -f "$b/bench/cuda-kernels" ] && put "$b/bench/cuda-kernels" "$out/bin"
[ -f "$b/bench/nccl-side" ] && put "$b/bench/nccl-side" "$out/bin"
for t in cuda/test_kernels cuda/cuda_stream cuda/cuda_placement mp/coll_test cuda/cuda_stream_cost; do
    put "$b/tests/$t" "$out/tests"
done
put "$src/tests/cuda/torch_cuda.py" "$out/tests"
put "$src/tests/common/hooptest.py" "$out/common"
put "$b/tests/cuda/libhoop-cuda-double.so" "$out/double"
mkdir -p "$out/python/hoop" || die "cannot make $out/python/hoop"
cp "$src"/python/hoop/*.py "$out/python/hoop/" || die "no python/hoop in $src"
put "$src/scripts/gpu-check.sh" "$out"
chmod +x "$out/gpu-check.sh"

archs=$(meson introspect "$b" --buildoptions 2>/dev/null |
    python3 -c 'import json,sys; print(next((o["value"] for o in json.load(sys.stdin) if o["name"] == "gpu_archs"), "?"))' 2>/dev/null)
nvcc=$(grep -m 1 -o "nvcc[^ ]*" "$b/build.ninja" 2>/dev/null | head -n 1)
{
    echo "hoop GPU check bundle"
    echo "commit: $(git -C "$src" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "made: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -srm)"
    echo "build: $b"
    echo "gpu_archs: ${archs:-?} (machine code for each, PTX for the last)"
    echo "nvcc: $( (/usr/local/cuda/bin/nvcc --version 2>/dev/null || nvcc --version 2>/dev/null) | grep -m 1 release || echo "${nvcc:-unknown}")"
    echo "glibc: $(ldd --version 2>/dev/null | head -n 1)"
    echo "files (bytes, sha256):"
    (cd "$out" && find . -type f ! -name MANIFEST | sort | while read -r f; do
        printf '  %s %s %s\n' "$f" "$(wc -c <"$f")" "$(sha256sum "$f" | cut -c1-16)"
    done)
} >"$out/MANIFEST"
case ",$archs," in
*,90,*) ;;
*) echo "gpu-bundle: warning: gpu_archs is '$archs', without 90: an H100 or H200 would JIT the PTX" >&2 ;;
esac
bytes=$(du -sb "$out" | cut -f1)
echo "gpu-bundle: $out: $(find "$out" -type f | wc -l) files, $((bytes / 1024)) KiB"
[ "$bytes" -lt $((48 * 1024 * 1024)) ] || die "$out is $((bytes / 1048576)) MiB: over 48 MiB"
exit 0
