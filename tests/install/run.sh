#!/bin/sh
# Installs hoop into a temporary directory, builds a program against it with nothing but the
# installed header and pkg-config (linked shared, then static) and the README's C example as the
# README builds it, and runs them with the installed hooprun on 2 to 5 ranks; runs the installed
# hoop-perf, and the installed Python package on 2 ranks. Nothing sets LD_LIBRARY_PATH or
# HOOP_LIBRARY: the programs find libhoop through their RUNPATH, the package through what meson
# install recorded beside it.
#
#   tests/install/run.sh [BUILDDIR [PYTHON]]
#
# With BUILDDIR (a configured and built meson build directory) it runs `meson install --destdir`
# from there; without, it configures and builds a fresh copy with --prefix in the temporary
# directory. PYTHON is the interpreter the package was installed for (none: not tested).
set -eu
unset LD_LIBRARY_PATH HOOP_LIBRARY

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
    python=${2:-}
else
    root="$tmp/prefix"
    quietly meson setup "$tmp/build" "$src" --prefix "$root" -Dtests=disabled
    quietly meson install -C "$tmp/build"
    # The interpreter meson picks by default.
    python=$(command -v /usr/bin/python3 || command -v python3 || echo none)
fi

pc=$(find "$root" -name hoop.pc | head -n 1)
hooprun=$(find "$root" -name hooprun -type f | head -n 1)
header=$(find "$root" -name hoop.h | head -n 1)
[ -n "$pc" ] || fail "no hoop.pc installed"
[ -n "$hooprun" ] || fail "no hooprun installed"
[ -n "$header" ] || fail "no hoop.h installed"
[ -n "$(find "$root" -name 'hoop-perf' -type f)" ] || fail "no hoop-perf installed"
trace=$(find "$root" -name 'hoop-trace' -type f | head -n 1)
[ -n "$trace" ] && [ -x "$trace" ] || fail "no hoop-trace installed"
"$trace" --help >/dev/null 2>&1 || fail "the installed hoop-trace does not run"
libdir=$(dirname "$(find "$root" -name 'libhoop.so*' | head -n 1)")
[ -f "$libdir/libhoop.a" ] || fail "no libhoop.a next to libhoop.so in $libdir"
# libhoop opens its CUDA module from its own directory: where one was built, it must be there.
if [ $# -ge 1 ] && [ -f "$1/libhoop-cuda.so" ]; then
    [ -f "$libdir/libhoop-cuda.so" ] || fail "libhoop-cuda.so was built but is not beside libhoop in $libdir"
fi
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
# Under a destdir the .pc file names the configured prefix: moving the prefix into the destdir
# moves the -I, -L and the RUNPATH with it, as an install there would have written them.
prefix=$(pkg-config --variable=prefix hoop)
case "$root" in
"$tmp/dest") pc_args="--define-variable=prefix=$root$prefix" ;;
*) pc_args="" ;;
esac

# shellcheck disable=SC2086
cflags=$(pkg-config $pc_args --cflags hoop) || fail "pkg-config --cflags hoop"
# shellcheck disable=SC2086
libs=$(pkg-config $pc_args --libs hoop) || fail "pkg-config --libs hoop"
# shellcheck disable=SC2086
slibs=$(pkg-config $pc_args --libs --static hoop) || fail "pkg-config --libs --static hoop"
# shellcheck disable=SC2086
$CC -std=c11 -Wall -Wextra -Werror -o "$tmp/consumer" "$here/consumer.c" $cflags $libs ||
    fail "building against the shared library"
# shellcheck disable=SC2086
$CC -std=c11 -Wall -Wextra -Werror -o "$tmp/consumer-static" "$here/consumer.c" $cflags \
    $(printf '%s\n' "$slibs" | sed 's/-lhoop/-Wl,-Bstatic -lhoop -Wl,-Bdynamic/') ||
    fail "building against the static library"

want=$(pkg-config --modversion hoop)
got=$("$tmp/consumer" --version) || fail "the program linked through pkg-config does not start"
[ "$got" = "$want" ] || fail "hoop_version() is '$got', pkg-config says '$want'"
# The shared build must load the installed library, not one the loader happens to find.
loaded=$(ldd "$tmp/consumer" | sed -n 's/.*libhoop\.so\.0 => \([^ ]*\).*/\1/p')
[ "$loaded" = "$libdir/libhoop.so.0" ] || fail "the program loads libhoop from '$loaded', not $libdir"
case "$(ldd "$tmp/consumer-static")" in *libhoop*) fail "the static build needs libhoop.so" ;; esac

# The README's C example, built and started the way the README says.
# shellcheck disable=SC2016
sed -n '/^## Using it from C/,/^## /p' "$src/README.md" | sed -n '/^```c$/,/^```$/p' | sed '1d;$d' \
    >"$tmp/demo.c"
grep -q hoop_allreduce "$tmp/demo.c" || fail "no C example found in README.md"
# shellcheck disable=SC2086,SC2046
(cd "$tmp" && $CC demo.c $(pkg-config $pc_args --cflags --libs hoop) -o demo) ||
    fail "building the README's example as the README says"
HOOP_TIMEOUT=30 "$hooprun" --timeout 60 -n 4 "$tmp/demo" >"$tmp/out-demo" 2>&1 ||
    { cat "$tmp/out-demo" >&2; fail "the README's example on 4 ranks"; }
echo "install test: the README's example on 4 ranks: ok"

# The installed benchmark, which links the shared libhoop.
perf=$(find "$root" -name 'hoop-perf' -type f | head -n 1)
"$perf" --version >"$tmp/out-perf" 2>&1 || { cat "$tmp/out-perf" >&2; fail "hoop-perf --version"; }
grep -q "$want" "$tmp/out-perf" || { cat "$tmp/out-perf" >&2; fail "hoop-perf --version names no $want"; }
HOOP_TIMEOUT=30 "$hooprun" --timeout 60 -n 2 "$perf" allreduce -b 1K -e 1K -n 2 -w 1 >"$tmp/out-perf" 2>&1 ||
    { cat "$tmp/out-perf" >&2; fail "hoop-perf on 2 ranks"; }
grep -q '# Out of bounds values : 0 OK' "$tmp/out-perf" || { cat "$tmp/out-perf" >&2; fail "hoop-perf's check"; }
echo "install test: hoop-perf on 2 ranks: ok"

for prog in consumer consumer-static; do
    for n in 2 3 4 5; do
        out="$tmp/out-$prog-$n"
        HOOP_TIMEOUT=30 "$hooprun" --timeout 60 -n "$n" "$tmp/$prog" >"$out" 2>&1 ||
            { cat "$out" >&2; fail "$prog on $n ranks"; }
        oks=$(grep -c 'rank [0-9]*: ok$' "$out" || true)
        [ "$oks" -eq "$n" ] || { cat "$out" >&2; fail "$prog on $n ranks: $oks of $n ranks reported ok"; }
        echo "install test: $prog on $n ranks: ok"
    done
done
# The Python package: a real 2-rank all-reduce against a reference computed here, with the
# library found from what meson install recorded. Under a destdir (or a prefix the interpreter
# does not read) the one thing to set is PYTHONPATH to the installed package's directory.
if [ -n "$python" ] && [ "$python" != none ]; then
    mark=$(find "$root" -path '*/hoop/_installed.py' | head -n 1)
    [ -n "$mark" ] || fail "meson install put no Python package (hoop/_installed.py) under $root"
    site=$(dirname "$(dirname "$mark")")
    cat >"$tmp/allreduce.py" <<'PY'
import array, os, sys
import hoop, hoop._library
root = sys.argv[1]
assert hoop._library.path().startswith(root), "loaded %s, not the installed library" % hoop._library.path()
comm = hoop.init()
x = array.array("f", [comm.rank * 10 + i for i in range(7)])
comm.allreduce(x)
want = [sum(r * 10 + i for r in range(comm.size)) for i in range(7)]
assert list(x) == want, (list(x), want)
comm.destroy()
print("rank %d: python ok" % comm.rank)
PY
    PYTHONPATH=$site HOOP_TIMEOUT=30 "$hooprun" --timeout 60 -n 2 "$python" "$tmp/allreduce.py" "$root" \
        >"$tmp/out-py" 2>&1 || { cat "$tmp/out-py" >&2; fail "the installed Python package on 2 ranks"; }
    [ "$(grep -c 'python ok$' "$tmp/out-py")" -eq 2 ] || { cat "$tmp/out-py" >&2; fail "python: not 2 ranks ok"; }
    echo "install test: the Python package ($site) on 2 ranks: ok"

    # A package whose library is gone: the error lists every place it looked.
    mkdir "$tmp/moved"
    cp -r "$site/hoop" "$tmp/moved/"
    printf 'LIBDIR = "/nonexistent-hoop/lib"\nPACKAGE_DIR = "/nonexistent-hoop/site/hoop"\n' \
        >"$tmp/moved/hoop/_installed.py"
    if PYTHONPATH=$tmp/moved "$python" -c 'import hoop._library as L; print(L.path())' >"$tmp/out-nolib" 2>&1; then
        # A libhoop installed on this machine (ldconfig'd, or in /usr/local): nothing to check.
        echo "install test: skipped the missing-library round: $(tail -n 1 "$tmp/out-nolib") is installed here"
    else
        for where in 'LibraryNotFoundError: libhoop.so not found' /nonexistent-hoop/lib "$tmp/moved/hoop" \
            /usr/local/lib /usr/lib "the loader's search for libhoop.so.0"; do
            grep -qF "$where" "$tmp/out-nolib" || { cat "$tmp/out-nolib" >&2; fail "the error does not name $where"; }
        done
        echo "install test: no library: the error names every place looked at: ok"
    fi
fi
# pip, where the interpreter has it: the package's own backend builds the wheel offline and
# writes nothing into the source tree (no build/, no *.egg-info).
if [ -n "$python" ] && [ "$python" != none ] && "$python" -m pip --version >/dev/null 2>&1; then
    (cd "$src/python" && find . -name __pycache__ -prune -o -print | sort) >"$tmp/before"
    PIP_DISABLE_PIP_VERSION_CHECK=1 quietly "$python" -m pip install --no-deps --no-index \
        --target "$tmp/pip" "$src/python"
    (cd "$src/python" && find . -name __pycache__ -prune -o -print | sort) >"$tmp/after"
    cmp -s "$tmp/before" "$tmp/after" ||
        fail "pip wrote into the source tree: $(diff "$tmp/before" "$tmp/after" | grep '^>' | head -n 5)"
    for f in __init__.py _buffer.py _errors.py _library.py torch.py; do
        [ -f "$tmp/pip/hoop/$f" ] || fail "pip's install lacks hoop/$f"
    done
    PYTHONPATH=$tmp/pip "$python" -c 'import hoop' || fail "the package pip installed does not import"
    echo "install test: pip install --target: ok, nothing written into the source tree"
else
    echo "install test: no pip for ${python:-python}: the pip round is skipped"
fi
echo "install test: passed"
