#!/bin/sh
# Open MPI's mpirun: `mpirun -np 4 launched` with no hoop variables, the ranks meeting through
# the launcher's PMIx. Traffic and mpirun's session folder stay on this machine (loopback, a
# temporary TMPDIR). Exit 77 (skipped) only where mpirun is not installed.
#   mpirun_test.sh LAUNCHED
set -u
launched=$1
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found (Debian: openmpi-bin)"; exit 77; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/hoop-mpirun.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 1' INT TERM HUP
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE HOOP_JOB_ID
export TMPDIR="$dir" OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
root=""
[ "$(id -u)" -eq 0 ] && root=--allow-run-as-root
status=0
# -np 4 exactly as a user runs it; -np 3 also logs (HOOP_DEBUG only logs), to check that every
# rank met rank 0 through PMIx in both of its rounds.
for n in 4 3; do
    debug=""
    [ $n -eq 3 ] && debug=HOOP_DEBUG=INFO
    # mpirun ends its ranks itself when it is stopped; timeout stops it.
    out=$(env $debug timeout 60 mpirun $root --oversubscribe -np $n "$launched" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v " hoop INFO " | sed "s/^/[mpirun -np $n] /"
    ok=$(printf '%s\n' "$out" | grep -c "checks passed, 0 failed")
    via=$(printf '%s\n' "$out" | grep -c "rendezvous through PMIx")
    want=0
    [ -n "$debug" ] && want=$((2 * n))
    if [ $rc -ne 0 ] || [ "$ok" -ne $n ] || [ "$via" -ne $want ]; then
        echo "FAIL: mpirun -np $n: exit status $rc, $ok of $n ranks passed, $via of $want PMIx rendezvous logged"
        status=1
    else
        echo "ok: mpirun -np $n"
    fi
done
exit $status
