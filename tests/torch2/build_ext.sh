#!/usr/bin/env bash
# Builds hoop's C++ torch backend (python/hoop/csrc/backend.cpp) against the torch 2.6 of the
# Debian 13 root, linked to the Debian 12 libhoop.so of a build directory, into
# BUILD/python/hoop/_c10d<EXT_SUFFIX>, where hoop.torch finds it beside HOOP_LIBRARY. Runs inside
# the root (it needs g++, python3-dev and libtorch-dev, which only the root has):
#
#   tests/torch2/run.sh -b BUILD tests/torch2/build_ext.sh BUILD [COMMAND [ARG...]]
#
# then runs COMMAND, if given (the torch2 tests of the C++ backend build it this way first). Does
# not compile when the module is newer than its source, hoop.h, libhoop.so and this script.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
[ $# -eq 0 ] || shift
cpp=$src/python/hoop/csrc/backend.cpp
suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
out=$build/python/hoop/_c10d$suffix
stale=0
if [ -f "$out" ]; then
    for f in "$cpp" "$src/include/hoop.h" "$build/libhoop.so" "$0"; do
        if [ "$f" -nt "$out" ]; then stale=1; fi
    done
fi
if [ ! -f "$out" ] || [ "$stale" = 1 ]; then
    mkdir -p "$build/python/hoop"
    flags=$(python3 - <<'EOF'
import sysconfig
from torch.utils import cpp_extension as ce
inc = ce.include_paths() + [sysconfig.get_paths()["include"]]
print(" ".join(["-I" + p for p in inc] + ["-L" + p for p in ce.library_paths()]))
EOF
    )
    abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
    # -Werror: the extension is held to the library's standard; torch's headers go in with
    # -isystem, their warnings not being ours to fix.
    set -x
    # shellcheck disable=SC2086 # the flags are words
    g++ -std=c++17 -O2 -g -fPIC -shared -Wall -Wextra -Werror -Wno-unused-parameter \
        -D_GLIBCXX_USE_CXX11_ABI="$abi" -DTORCH_EXTENSION_NAME=_c10d -DTORCH_API_INCLUDE_EXTENSION_H \
        ${flags//-I/-isystem } -I"$src/include" "$cpp" -o "$out.tmp" \
        -L"$build" -lhoop -Wl,-rpath,"$build" \
        -lc10 -ltorch -ltorch_cpu -ltorch_python
    mv "$out.tmp" "$out"
    set +x
fi
[ $# -eq 0 ] || exec "$@"
