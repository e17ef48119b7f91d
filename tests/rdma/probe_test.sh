#!/bin/sh
# The verbs probe (probe.c) as meson runs it.
#
#   probe_test.sh probe VM_SH PROBE
#       on this host's RDMA ports where one is active, else in the test guest (VM_SH, one boot):
#       the full probe on soft-RoCE rxe0, the probe on soft-iWARP siw0 (registration only),
#       HOOP_IB_HCA leaving rxe0 out, HOOP_IB_GID_INDEX choosing another GID and an empty one.
#       Skipped (77) where neither a port nor the guest can be had.
#   probe_test.sh hidden PROBE LIBHOOP
#       libhoop does not link libibverbs, and the probe, run where libibverbs.so.1 is absent, says
#       so with the sentence that names the packages. The library is hidden in a private mount
#       namespace (an overlay whiting it out of its directory), so the system stays as it is;
#       skipped without root, unshare or overlayfs.
set -u
mode=$1
shift

skip() {
    echo "SKIP: $*"
    exit 77
}

fail() {
    echo "FAIL: $*"
    exit 1
}

case $mode in
probe)
    vm=$1 probe=$2
    if grep -qs ACTIVE /sys/class/infiniband/*/ports/*/state; then
        echo "--- this host has an active RDMA port: probing it"
        exec "$probe"
    fi
    # The guest sees the probe's folder at the same path; its output streams here.
    dir=$(cd "$(dirname "$probe")" && pwd)
    exe=$dir/$(basename "$probe")
    bash "$vm" -t 300 -w "$dir" -- sh -c "
        set -e
        echo '--- rxe0 (soft-RoCE v2)'
        '$exe' --dev rxe0
        echo '--- siw0 (soft-iWARP)'
        '$exe' --dev siw0
        echo '--- HOOP_IB_HCA=^rxe: discovery leaves rxe0 out'
        HOOP_IB_HCA='^rxe' '$exe' >out.hca 2>&1 || { cat out.hca; exit 1; }
        cat out.hca
        grep -q 'rxe0:1 not used: HOOP_IB_HCA leaves it out' out.hca
        grep -q '^probing siw0:1' out.hca
        echo '--- HOOP_IB_GID_INDEX=0: the link-local RoCE v2 GID instead of the IPv4 one'
        HOOP_IB_GID_INDEX=0 '$exe' --dev rxe0 >out.hca 2>&1 || { cat out.hca; exit 1; }
        grep '^probing' out.hca
        grep -q '^probing rxe0:1 RoCE v2 GID 0 fe80:' out.hca
        echo '--- HOOP_IB_GID_INDEX=5: an empty entry, so no usable port'
        if HOOP_IB_GID_INDEX=5 '$exe' --dev rxe0 >out.hca 2>&1; then cat out.hca; exit 1; fi
        grep 'not used' out.hca
        grep -q 'rxe0:1 not used: HOOP_IB_GID_INDEX=5 names an empty GID table entry' out.hca
        rm -f out.hca
    "
    exit $?
    ;;
hidden)
    probe=$1 lib=$2
    if readelf -d "$lib" | grep -q 'NEEDED.*libibverbs'; then
        fail "$lib links libibverbs: it must only open it at run time"
    fi
    echo "--- $(basename "$lib") does not link libibverbs"
    want='libibverbs.so.1 not found: install rdma-core (Debian: libibverbs1 ibverbs-providers)'
    soname=$(ldconfig -p 2>/dev/null | sed -n 's/^[[:space:]]*libibverbs\.so\.1 (.*) => //p' | head -n 1)
    if [ -z "$soname" ]; then
        echo "--- rdma-core is not installed here: nothing to hide"
        out=$("$probe" 2>&1)
        rc=$?
    else
        [ "$(id -u)" = 0 ] || skip "hiding $soname needs root (a mount namespace)"
        command -v unshare >/dev/null || skip "hiding $soname needs unshare (util-linux)"
        grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null ||
            skip "hiding $soname needs overlayfs"
        dir=$(dirname "$(readlink -f "$soname")")
        tmp=$(mktemp -d) || exit 1
        trap 'rm -rf "$tmp"' EXIT
        mkdir "$tmp/upper" "$tmp/work"
        # A whiteout (a 0:0 character device) in the upper layer: the name is absent in the overlay.
        mknod "$tmp/upper/libibverbs.so.1" c 0 0 || skip "cannot make an overlay whiteout here"
        # ld.so's cache may name it through an alias of the folder (/lib on merged /usr): the check
        # after the mount looks where the cache points.
        out=$(unshare -m sh -c '
            mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$1" ||
                { echo "HIDE-FAILED: no overlay on $1"; exit 3; }
            [ ! -e "$3" ] || { echo "HIDE-FAILED: $3 is still there"; exit 3; }
            exec "$4"
        ' sh "$dir" "$tmp" "$soname" "$probe" 2>&1)
        rc=$?
        case $out in *HIDE-FAILED*) skip "cannot hide $soname in a mount namespace: $out" ;; esac
    fi
    echo "$out"
    [ "$rc" = 77 ] || fail "the probe without libibverbs exited $rc, not 77"
    case $out in
    *"SKIP: $want"*) echo "--- said: $want" ;;
    *) fail "the probe did not say \"$want\"" ;;
    esac
    ;;
*)
    fail "unknown mode $mode"
    ;;
esac
