#!/bin/sh
# The GPU check cannot give a false PASS (scripts/gpu-check.sh, docs/cuda.md "The GPU check"), on
# a machine without a GPU:
#
#   gpu_check.sh SRC BUILD
#
# bundles BUILD (scripts/gpu-bundle.sh), then runs the check on the bundle twice: with no
# nvidia-smi, which must end after the environment with the verdict NO GPU and exit 3; and with a
# stand-in nvidia-smi that lists an H200 while no driver is here, where every step that needs the
# GPU must FAIL (a skip or "no CUDA device" counts as a failure there), none PASS, and the verdict
# be FAIL, exit 1, in at most four files. Skipped (77) where a real nvidia-smi is on PATH.
set -u
src=$1 build=$2
command -v nvidia-smi >/dev/null 2>&1 && { echo "SKIP: a real nvidia-smi is here"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    for f in "$tmp"/out*/report.txt; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
    exit 1
}
"$src/scripts/gpu-bundle.sh" "$build" "$tmp/bundle" || fail "gpu-bundle.sh failed"

"$tmp/bundle/gpu-check.sh" --prebuilt "$tmp/bundle" "$tmp/out1" >"$tmp/log1" 2>&1
rc=$?
[ "$rc" -eq 3 ] || fail "without a GPU: exit $rc, expected 3"
grep -q '"verdict": "NO GPU' "$tmp/out1/summary.json" || fail "without a GPU: the verdict is not NO GPU"
grep -q '"status": "PASS"' "$tmp/out1/summary.json" || fail "without a GPU: the environment did not run"
[ "$(grep -c '"name"' "$tmp/out1/summary.json")" -eq 1 ] || fail "without a GPU: steps beyond the environment ran"
echo "ok: no GPU gives NO GPU, exit 3"

mkdir "$tmp/smi"
cat >"$tmp/smi/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
-L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-stand-in)" ;;
*--query-gpu*) echo "NVIDIA H200, 580.65.06, 143771 MiB, 9.0, Default" ;;
*) echo "stand-in nvidia-smi | CUDA Version: 13.0" ;;
esac
EOF
chmod +x "$tmp/smi/nvidia-smi"
PATH="$tmp/smi:$PATH" GPU_CHECK_DEADLINE=300 "$tmp/bundle/gpu-check.sh" --prebuilt "$tmp/bundle" "$tmp/out2" \
    >"$tmp/log2" 2>&1
rc=$?
cat "$tmp/log2"
[ "$rc" -eq 1 ] || fail "a GPU listed, no driver: exit $rc, expected 1"
grep -q '"verdict": "FAIL' "$tmp/out2/summary.json" || fail "a GPU listed, no driver: the verdict is not FAIL"
grep -q '"status": "SKIP"' "$tmp/out2/summary.json" && fail "a step skipped on a machine with a GPU"
# Only the environment and the host-buffer baseline can pass without a working GPU.
passed=$(grep -c '"status": "PASS"' "$tmp/out2/summary.json")
[ "$passed" -le 2 ] || fail "$passed steps passed without a working GPU"
grep -q '"name": "kernels bit for bit", "status": "FAIL"' "$tmp/out2/summary.json" ||
    fail "the kernels' step did not fail"
grep -q '"name": "PyTorch DDP on CUDA tensors, default stream", "status": "FAIL"' "$tmp/out2/summary.json" ||
    fail "the DDP step (no CUDA torch: exit 77) did not fail"
[ "$(find "$tmp/out2" -type f | wc -l)" -le 8 ] || fail "more than 8 files in the output folder"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/out2/summary.json" 2>/dev/null ||
    fail "summary.json is not JSON"
echo "ok: a GPU listed without a driver gives FAIL, every GPU step failed, exit 1"
