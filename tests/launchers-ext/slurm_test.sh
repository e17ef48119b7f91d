#!/bin/sh
# A real Slurm on this machine: munged, slurmctld and slurmd started here from a temporary folder
# as a one-node cluster on localhost (the node claims 8 CPUs whatever it has, and shares them),
# then `srun -n 4 launched` with no hoop variables, and `srun --mpi=pmix` where Slurm offers it.
# Exit 77 (skipped) only where the cluster cannot start: no slurm-wlm or munge, or not root.
#   slurm_test.sh pmix|nopmix LAUNCHED HOLDER [PYTHON LIBHOOP]
# pmix: libhoop has the PMIx rendezvous, which srun --mpi=pmix must use; nopmix: it has not, and
# srun --mpi=pmix must fall back to Slurm's variables. HOLDER: tests/mp's coll_test, as another
# job's rank 0. PYTHON and LIBHOOP: `srun python3 launched.py` too (hoop's Python package from
# this tree), where numpy imports.
set -u
have_pmix=$1
shift
launched=$1
holder=$2
python=${3:-}
libhoop=${4:-}
here=$(dirname "$0")
skip() { echo "SKIP: $*"; exit 77; }
for p in munged slurmctld slurmd srun sinfo scancel; do
    command -v "$p" >/dev/null 2>&1 || skip "$p not found (Debian: apt-get install slurm-wlm munge)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd runs tasks as other users only as root; run as root"

dir=$(mktemp -d "${TMPDIR:-/tmp}/hoop-slurm.XXXXXX") || exit 1
ctld_pid="" slurmd_pid="" holder_pid=""
cleanup() {
    [ -n "$slurmd_pid" ] && SLURM_CONF=$dir/slurm.conf scancel --quiet --full --user=root 2>/dev/null
    for p in $holder_pid $slurmd_pid $ctld_pid; do kill "$p" 2>/dev/null; done
    for p in $slurmd_pid $ctld_pid; do
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        kill -9 "$p" 2>/dev/null
    done
    if [ -f "$dir/munged.pid" ]; then
        p=$(cat "$dir/munged.pid")
        kill "$p" 2>/dev/null
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        kill -9 "$p" 2>/dev/null
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Ports below hoop's derived Slurm range (12000-31999), one pair per test process.
ctld_port=$((7000 + ($$ % 2500) * 2))
# Job ids, and so the ports hoop derives from them, apart per test process too: two runs at
# once (two checkouts) would otherwise both start at one id and meet on one port. The derived
# port repeats every 1250 jobs; this test submits at most 5.
first_job=$((4242 + ($$ % 200) * 6))
slurmd_port=$((ctld_port + 1))
user=$(id -un)

head -c 1024 /dev/urandom >"$dir/munge.key"
chmod 400 "$dir/munge.key"
munged -f --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" ||
    skip "munged does not start: $(tail -n 3 "$dir/munged.log" 2>/dev/null)"

mkdir -p "$dir/state" "$dir/spool"
cat >"$dir/slurm.conf" <<CONF
ClusterName=hooptest
FirstJobId=$first_job
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/linear
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
export SLURM_CONF="$dir/slurm.conf"
# What a hoop launcher sets must come from Slurm alone.
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE HOOP_JOB_ID

slurmctld -D -c -i >"$dir/slurmctld.out" 2>&1 &
ctld_pid=$!
slurmd -D -N localhost >"$dir/slurmd.out" 2>&1 &
slurmd_pid=$!
i=0
until [ "$(sinfo -h -n localhost -o %t 2>/dev/null)" = "idle" ]; do
    i=$((i + 1))
    if [ $i -gt 200 ] || ! kill -0 $ctld_pid 2>/dev/null || ! kill -0 $slurmd_pid 2>/dev/null; then
        tail -n 5 "$dir/slurmctld.log" "$dir/slurmd.log" "$dir/slurmctld.out" "$dir/slurmd.out" 2>&1
        skip "the one-node cluster did not come up within 20 s"
    fi
    sleep 0.1
done
echo "slurm: one-node cluster up after $((i / 10)).$((i % 10)) s"

status=0
nsrun=0
# run WHAT N COMMAND...: COMMAND must exit 0 with N ranks reporting no failed check.
run() {
    nsrun=$((nsrun + 1))
    what=$1
    want=$2
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v " hoop INFO " | sed "s/^/[$what] /"
    n=$(printf '%s\n' "$out" | grep -c "checks passed, 0 failed")
    if [ $rc -ne 0 ] || [ "$n" -ne "$want" ]; then
        echo "FAIL: $what: exit status $rc, $n of $want ranks passed"
        status=1
        return 1
    fi
    echo "ok: $what"
}
run "srun -n 4" 4 timeout 60 srun -n 4 "$launched"
if srun --mpi=list 2>&1 | grep -qw pmix; then
    # HOOP_DEBUG only logs: the PMIx exchange must be the way rank 0 was found.
    if run "srun --mpi=pmix -n 4" 4 timeout 60 env HOOP_DEBUG=INFO srun --mpi=pmix -n 4 \
        "$launched"; then
        if [ "$have_pmix" = pmix ]; then
            n=$(printf '%s\n' "$out" | grep -c "rendezvous through PMIx")
            [ "$n" -eq 8 ] ||
                { echo "FAIL: srun --mpi=pmix: $n of 8 rendezvous went through PMIx"; status=1; }
        else
            n=$(printf '%s\n' "$out" | grep -c "through Slurm's variables instead")
            [ "$n" -eq 8 ] ||
                { echo "FAIL: srun --mpi=pmix: $n of 8 rendezvous fell back to Slurm's variables"; status=1; }
        fi
    fi
else
    echo "note: this Slurm offers no pmix plugin (srun --mpi=list): srun --mpi=pmix not tried"
fi
if [ -n "$python" ] && "$python" -c "import numpy" 2>/dev/null; then
    run "srun -n 3 python3 launched.py" 3 env PYTHONPATH="$here/../../python" \
        HOOP_LIBRARY="$libhoop" OMP_NUM_THREADS=1 timeout 60 srun -n 3 "$python" "$here/launched.py"
else
    echo "note: no Python with numpy given: srun python3 not tried"
fi

# A collision, detected: a rank 0 of another job (HOOP_JOB_ID=stale-job, waiting for a rank that
# never comes) holds the port the next step derives. That step's rank 0 must say the port is in
# use, and its other ranks, which reach the stranger's store, must name the other job; nobody
# joins it or waits out the timeout.
next=$((first_job + nsrun))
port=$((12000 + (next * 16) % 20000))
HOOP_TIMEOUT=20 RANK=0 WORLD_SIZE=2 MASTER_ADDR=localhost MASTER_PORT=$port HOOP_JOB_ID=stale-job \
    SLURM_CONF= "$holder" --mode init-env >"$dir/holder.out" 2>&1 &
holder_pid=$!
i=0
until ss -Hltn "sport = :$port" | grep -q . || [ $i -gt 100 ]; do
    sleep 0.05
    i=$((i + 1))
done
t0=$(date +%s)
out=$(HOOP_TIMEOUT=15 timeout 60 srun -n 4 "$launched" --expect-fail 2>&1)
rc=$?
t1=$(date +%s)
kill $holder_pid 2>/dev/null
wait $holder_pid 2>/dev/null
printf '%s\n' "$out" | sed "s/^/[port taken] /"
failed=$(printf '%s\n' "$out" | grep -c "of job $next: init failed")
if [ $rc -ne 0 ] || [ "$failed" -ne 4 ]; then
    echo "FAIL: port taken: exit status $rc, $failed of 4 ranks of job $next failed to init"
    status=1
elif ! printf '%s\n' "$out" | grep -q "port $port on localhost is already in use"; then
    echo "FAIL: port taken: rank 0 did not say that port $port is in use"
    status=1
elif ! printf '%s\n' "$out" | grep -q "stale-job"; then
    echo "FAIL: port taken: no rank named the other job (stale-job) whose store it reached"
    status=1
elif [ $((t1 - t0)) -ge 15 ]; then
    echo "FAIL: port taken: the ranks took $((t1 - t0)) s, as long as the timeout"
    status=1
else
    echo "ok: a port held by another job is detected ($((t1 - t0)) s)"
fi
if [ $status -ne 0 ]; then
    tail -n 20 "$dir/slurmd.log"
fi
exit $status
