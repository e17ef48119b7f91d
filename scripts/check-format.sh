#!/bin/sh
# Fails where a C source or header of the tree is not laid out as .clang-format says.
# Usage: scripts/check-format.sh [--fix]   (--fix rewrites the files in place)
set -eu
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed" >&2; exit 77; }
files=$(git ls-files 'src/*.[ch]' 'src/*.cu' 'include/*.h' 'common/*.[ch]' 'tools/*.[ch]' 'bench/*.[ch]' \
    'examples/*.[ch]' 'tests/*.[ch]')
if [ "${1:-}" = "--fix" ]; then
    # shellcheck disable=SC2086
    clang-format -i $files
else
    # shellcheck disable=SC2086
    clang-format --dry-run -Werror $files
fi
