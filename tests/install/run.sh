#!/bin/sh
# Installs hoop into a temporary directory, builds a program against it with nothing but the
# installed header and pkg-config (linked shared, then static), and runs it with the installed
# hooprun on 2 to 5 ranks.
#
#   tests/install/run.sh [BUILDDIR]
#
# With BUILDDIR (a configured and built meson build directory) it runs `meson install --destdir`
# from there; without, it configures and builds a fresh copy with --prefix in the temporary directory.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
CC=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hoop-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

fail() {
    echo "install test: FAIL: $*" >&2
    exit 1
}

quietly() {
    "$@" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; fail "$*"; }
}

if [ $# -ge 1 ]; then
    root="$tmp/dest"
    quietly meson install -C "$1" --no-rebuild --destdir "$root"
    # The .pc file still names the configured prefix; the sysroot maps it into the destdir.
    PKG_CONFIG_SYSROOT_DIR=$root
    export PKG_CONFIG_SYSROOT_DIR
else
    root="$tmp/prefix"
    quietly meson setup "$tmp/build" "$src" --prefix "$root" -Dtests=disabled
    quietly meson install -C "$tmp/build"
fi

pc=$(find "$root" -name hoop.pc | head -n 1)
hooprun=$(find "$root" -name hooprun -type f | head -n 1)
header=$(find "$root" -name hoop.h | head -n 1)
[ -n "$pc" ] || fail "no hoop.pc installed"
[ -n "$hooprun" ] || fail "no hooprun installed"
[ -n "$header" ] || fail "no hoop.h installed"
[ -n "$(find "$root" -name 'hoop-perf' -type f)" ] || fail "no hoop-perf installed"
libdir=$(dirname "$(find "$root" -name 'libhoop.so*' | head -n 1)")
[ -f "$libdir/libhoop.a" ] || fail "no libhoop.a next to libhoop.so in $libdir"
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH

cflags=$(pkg-config --cflags hoop) || fail "pkg-config --cflags hoop"
libs=$(pkg-config --libs hoop) || fail "pkg-config --libs hoop"
slibs=$(pkg-config --libs --static hoop) || fail "pkg-config --libs --static hoop"
# shellcheck disable=SC2086
$CC -std=c11 -Wall -Wextra -Werror -o "$tmp/consumer" "$here/consumer.c" $cflags $libs ||
    fail "building against the shared library"
# shellcheck disable=SC2086
$CC -std=c11 -Wall -Wextra -Werror -o "$tmp/consumer-static" "$here/consumer.c" $cflags \
    $(printf '%s\n' "$slibs" | sed 's/-lhoop/-Wl,-Bstatic -lhoop -Wl,-Bdynamic/') ||
    fail "building against the static library"

want=$(pkg-config --modversion hoop)
got=$(LD_LIBRARY_PATH="$libdir" "$tmp/consumer" --version)
[ "$got" = "$want" ] || fail "hoop_version() is '$got', pkg-config says '$want'"

for prog in consumer consumer-static; do
    for n in 2 3 4 5; do
        out="$tmp/out-$prog-$n"
        if [ "$prog" = consumer ]; then
            LD_LIBRARY_PATH="$libdir" HOOP_TIMEOUT=30 "$hooprun" --timeout 60 -n "$n" "$tmp/$prog" >"$out" 2>&1 ||
                { cat "$out" >&2; fail "$prog on $n ranks"; }
        else
            # No library path: the static build must not need libhoop.so.
            HOOP_TIMEOUT=30 "$hooprun" --timeout 60 -n "$n" "$tmp/$prog" >"$out" 2>&1 ||
                { cat "$out" >&2; fail "$prog on $n ranks"; }
        fi
        oks=$(grep -c 'rank [0-9]*: ok$' "$out" || true)
        [ "$oks" -eq "$n" ] || { cat "$out" >&2; fail "$prog on $n ranks: $oks of $n ranks reported ok"; }
        echo "install test: $prog on $n ranks: ok"
    done
done
echo "install test: passed"
