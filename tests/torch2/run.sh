#!/usr/bin/env bash
# Runs one command inside a Debian 13 (trixie) root whose python3-torch is torch 2.6 (CPU), with a
# Debian 12 build of hoop: Debian 12's own torch is 1.13, and the backend must work on both.
#
#   tests/torch2/run.sh [-b BUILD_DIR] [-t SECONDS] [--] COMMAND [ARG...]
#   tests/torch2/run.sh --build     build the root if it is not cached yet, nothing else
#   tests/torch2/run.sh --check     exit 0 if a run can happen now (a cached root), else 77
#
# COMMAND runs as root in the source tree, which is bound into the root at its own path, as is
# BUILD_DIR (default: build); PYTHONPATH and HOOP_LIBRARY name the tree's python/ and the build's
# libhoop.so, USE_LIBUV=0 (Debian built torch 2.6 without libuv, which init_process_group's
# TCP store asks for by default), OMP_NUM_THREADS=1. The run has a mount and PID namespace of its
# own (unshare): /proc, /sys, /dev with a private /dev/shm and /tmp are mounted there and go away
# with it, as does any process the command leaves behind. Output streams to ours; we exit with the
# command's status, 124 when it ran past SECONDS (default 3600), 77 where the root cannot be had
# (meson's skip), 125 on a setup error.
#
# torch 2.6's torchrun does not start on Debian 13 for any backend; launch ranks with hooprun.
#
# The root is built once with debootstrap (needs root, debootstrap and the Debian archive) into
# ${HOOP_TORCH2_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hoop-torch2}, and built again when what
# goes into it changes (its recipe's hash is stored beside it). Runs never change it (its /tmp
# is a tmpfs of the run's), so they may run side by side.
#
# Variables: HOOP_TORCH2=0 skips every run; HOOP_TORCH2_CACHE (above); HOOP_TORCH2_MIRROR (default:
# the archive this host's apt uses).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
CACHE=${HOOP_TORCH2_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hoop-torch2}
BUILD=$src/build
TIMEOUT=3600
MODE=run

# torch and what hoop's tests use beside it; libsodium is libhoop's one run-time dependency;
# g++, python3-dev, libtorch-dev and pybind11-dev compile the C++ backend (build_ext.sh).
PKGS=(python3-torch python3-numpy python3-setuptools libsodium23 libopenblas0-pthread
    g++ python3-dev libtorch-dev pybind11-dev)
SUITE=trixie

say() { printf 'torch2: %s\n' "$*" >&2; }
skip() { printf 'SKIP: %s\n' "$*"; exit 77; }
die() { say "error: $*"; exit 125; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

while [ $# -gt 0 ]; do
    case $1 in
    -b) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -t) TIMEOUT=$2; shift 2 ;;
    --build) MODE=build; shift ;;
    --check) MODE=check; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
    esac
done
[ "$MODE" != run ] || [ $# -gt 0 ] || die "no command given (see --help)"
[ "${HOOP_TORCH2:-1}" != 0 ] || skip "HOOP_TORCH2=0: no torch 2 runs"
[ "$(id -u)" = 0 ] || skip "the torch 2.6 root needs root (debootstrap, chroot, unshare)"
command -v unshare >/dev/null || skip "unshare not found (util-linux)"

# ---------------------------------------------------------------------------------------- the root
# Runs in the new root (chroot, with /proc mounted): the packages, then nothing apt keeps.
install_recipe() {
    cat <<EOF
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends ${PKGS[*]} >/dev/null
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/*
python3 -c 'import torch, torch.distributed as d; assert d.is_available()
print("torch", torch.__version__)'
EOF
}

# What decides the root's content; a cached root built from anything else is built again.
recipe_hash() {
    { echo "$SUITE ${PKGS[*]}"; install_recipe; declare -f build_root in_root; } |
        sha256sum | cut -c1-16
}

host_mirror() {
    sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
        head -n 1 | grep . ||
        awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true
}

# in_root SECONDS ROOT SCRIPT [BIND...]: runs the shell script SCRIPT (a file outside ROOT) as
# root in ROOT through chroot, in a mount and PID namespace of its own (whatever it leaves
# running is killed with it), for at most SECONDS; each BIND (a directory) appears at its own
# path. The script starts with an empty environment but for PATH, HOME and LANG.
in_root() {
    local limit=$1 root=$2 script=$3
    shift 3
    timeout -k 10 "$limit" unshare --mount --propagation private --pid --fork --kill-child \
        /bin/sh -s "$root" "$script" "$@" <<'EOF'
set -e
root=$1; script=$2; shift 2
mount -t proc proc "$root/proc"
mount -t sysfs -o ro sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o size=50% shm "$root/dev/shm"
mount -t tmpfs -o size=50% tmp "$root/tmp"
for d in "$@"; do
    mkdir -p "$root$d"
    mount --bind "$d" "$root$d"
done
mkdir -p "$root/run/hoop-torch2"
mount -t tmpfs -o size=1m ctl "$root/run/hoop-torch2"
cp "$script" "$root/run/hoop-torch2/cmd.sh"
exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    /bin/sh /run/hoop-torch2/cmd.sh
EOF
}

build_root() {
    local t0 t new mirror
    t0=$(now)
    command -v debootstrap >/dev/null ||
        skip "debootstrap not found (scripts/install-deps.sh installs it)"
    mirror=${HOOP_TORCH2_MIRROR:-$(host_mirror)}
    [ -n "$mirror" ] || skip "no Debian archive known (set HOOP_TORCH2_MIRROR)"
    new=$CACHE/new
    rm -rf "$new"
    mkdir -p "$new"
    say "building the Debian 13 root with torch 2.6 in $CACHE (minutes, once)"
    t=$(now)
    if ! debootstrap --variant=minbase "$SUITE" "$new/root" "$mirror" >"$new/debootstrap.log" 2>&1
    then
        tail -n 15 "$new/debootstrap.log" >&2
        rm -rf "$new"
        skip "cannot build the root: debootstrap of $SUITE from $mirror failed (log above)"
    fi
    say "debootstrap: $(secs "$t") s"
    t=$(now)
    install_recipe >"$new/install.sh"
    # apt needs the host's name servers; the root keeps none of them afterwards.
    cp /etc/resolv.conf "$new/root/etc/resolv.conf" 2>/dev/null || true
    if ! in_root 3600 "$new/root" "$new/install.sh" >"$new/install.log" 2>&1; then
        tail -n 15 "$new/install.log" >&2
        rm -rf "$new"
        skip "cannot build the root: installing ${PKGS[*]} failed (log above)"
    fi
    : >"$new/root/etc/resolv.conf"
    say "$(tail -n 1 "$new/install.log"): $(secs "$t") s"
    recipe_hash >"$new/recipe"
    rm -rf "$CACHE/root" "$CACHE/recipe"
    mv "$new/root" "$CACHE/root"
    mv "$new/recipe" "$CACHE/recipe"
    rm -rf "$new"
    say "root built in $(secs "$t0") s; the cache holds $(du -sh "$CACHE" | cut -f1)"
}

root_ok() {
    [ -x "$CACHE/root/usr/bin/python3" ] &&
        [ "$(cat "$CACHE/recipe" 2>/dev/null)" = "$(recipe_hash)" ]
}

if ! root_ok; then
    [ "$MODE" != check ] ||
        skip "no torch 2.6 root in $CACHE (tests/torch2/run.sh --build makes one)"
    mkdir -p "$CACHE"
    # One build at a time; whoever waited finds the root made.
    exec 9>"$CACHE/lock"
    flock 9
    root_ok || build_root
    flock -u 9
fi
[ "$MODE" = run ] || exit 0

# ----------------------------------------------------------------------------------------- the run
[ -f "$BUILD/libhoop.so" ] || die "no libhoop.so in $BUILD (build hoop first, or pass -b)"
ctl=$(mktemp "${TMPDIR:-/tmp}/hoop-torch2.XXXXXX")
trap 'rm -f "$ctl"' EXIT
{
    # The variables hoop's and the tests' runs read pass through; nothing else of this
    # environment.
    while IFS='=' read -r name _; do
        case $name in
        HOOP_* | TORCH_* | OMP_NUM_THREADS) printf 'export %s=%q\n' "$name" "${!name}" ;;
        esac
    done < <(env)
    printf 'export PYTHONPATH=%q HOOP_LIBRARY=%q\n' "$src/python" "$BUILD/libhoop.so"
    echo 'export USE_LIBUV=0 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}'
    printf 'cd %q || exit 125\n' "$PWD"
    printf 'exec'
    printf ' %q' "$@"
    echo
} >"$ctl"
binds=("$src")
case $BUILD/ in "$src"/*) ;; *) binds+=("$BUILD") ;; esac
case $PWD/ in "$src"/* | "$BUILD"/*) ;; *) binds+=("$PWD") ;; esac
set +e
in_root "$TIMEOUT" "$CACHE/root" "$ctl" "${binds[@]}"
rc=$?
set -e
[ "$rc" != 124 ] || say "no result within $TIMEOUT s"
exit "$rc"
