#!/bin/sh
# The folders of src/ and which others each may include: the layers of docs/design.md, checked.
# A folder includes its own headers and those of the folders below it, never one above, so data
# and calls flow one way (core -> collectives -> local -> runtime -> transport, rendezvous,
# reduce -> base; runtime -> cuda, the CUDA module's table, which stands alone). Nothing in src/
# reaches outside it by a relative path ("../"): what the library needs lives in the library.
#   scripts/check-layers.sh [SRC_DIR]      exit 1 naming each include that goes the wrong way
cd "${1:-$(dirname "$0")/../src}" || exit 2
allowed() {
    case $1 in
        base) echo "base" ;;
        reduce) echo "base reduce" ;;
        rendezvous) echo "base rendezvous" ;;
        transport) echo "base transport" ;;
        cuda) echo "cuda" ;;
        runtime) echo "base reduce transport cuda runtime" ;;
        local) echo "base reduce transport runtime local" ;;
        collectives) echo "base reduce transport runtime local collectives" ;;
        core) echo "base reduce rendezvous transport runtime collectives core" ;;
        *) echo "" ;;
    esac
}
bad=0
for dir in */; do
    dir=${dir%/}
    ok=$(allowed "$dir")
    if [ -z "$ok" ]; then
        echo "src/$dir: a folder with no place in the layers (add it to scripts/check-layers.sh)"
        bad=1
        continue
    fi
    for f in "$dir"/*.[ch] "$dir"/*.cu; do
        [ -e "$f" ] || continue
        for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\([^>"]*\.\.\/[^>"]*\)[>"].*/\1/p' "$f"); do
            echo "src/$f includes $inc: nothing in src/ may climb out with ../ (move what it needs into src/)"
            bad=1
        done
        for inc in $(sed -n 's/^#include "\([a-z_]*\)\/.*/\1/p' "$f" | sort -u); do
            case " $ok " in
                *" $inc "*) ;;
                *) echo "src/$f includes $inc/, which $dir/ may not"; bad=1 ;;
            esac
        done
    done
done
[ $bad = 0 ] && echo "layers: every include goes down"
exit $bad
