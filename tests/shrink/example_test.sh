#!/bin/sh
# examples/survive run as its comment says: 4 ranks started by hand, one SIGKILLs itself at step
# 5; the survivors' every step is checked by the example itself against the members it knows of.
#   example_test.sh TRANSPORT VICTIM PROGRAM [ARGS...]
# The victim must die of SIGKILL (status 137), the survivors end with 0, and the first survivor
# reports all 10 steps checked on 3 ranks.
set -u
tp=$1
victim=$2
shift 2
T=$(mktemp -d "${TMPDIR:-/tmp}/survive-example.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
for r in 0 1 2 3; do
    HOOP_TRANSPORT=$tp RANK=$r WORLD_SIZE=4 "$@" "file://$T/rdv" >"$T/out$r" 2>"$T/err$r" &
    eval "pid$r=\$!"
done
bad=0
for r in 0 1 2 3; do
    eval "wait \$pid$r"
    rc=$?
    want=0
    [ "$r" -eq "$victim" ] && want=137
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL: rank $r: status $rc, expected $want" >&2
        cat "$T/err$r" >&2
        bad=1
    fi
done
first=0
[ "$victim" -eq 0 ] && first=1
grep -q '^survive: 10 steps checked, 3 ranks at the end$' "$T/out$first" ||
    { echo "FAIL: rank $first did not check 10 steps on 3 ranks" >&2; cat "$T/out$first" >&2; bad=1; }
[ "$bad" -eq 0 ] && echo ok
exit "$bad"
