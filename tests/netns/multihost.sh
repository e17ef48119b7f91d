#!/bin/sh
# Two hosts (network namespaces joined by a veth pair), 2 ranks on each under hooprun
# --nnodes 2. With the default transport the ranks of a host must reach each other through shared
# memory and the other host's ranks through TCP, and every collective must still give the
# reference's results; HOOP_TRANSPORT=tcp must use TCP to everyone; HOOP_TRANSPORT=shm must fail
# at once, on every rank, naming a rank of the other host.
#
#   multihost.sh HOOPRUN COLL_TEST HOOP_PERF
set -u
HOOPRUN=$1
COLL_TEST=$2
HOOP_PERF=$3
. "$(dirname "$0")/lib.sh"

# The same on every path of the transport log line: "[R] ... transport per peer: shm to rank(s)
# [..], ..., tcp to rank(s) [..]", exactly once per rank and with exactly these lists.
check_routes() {
    run=$1
    for r in 0 1 2 3; do
        want=$(echo "$2" | cut -d' ' -f$((r + 1)) | tr '/' ' ')
        lines=$(cat "$WORK/$run.A.log" "$WORK/$run.B.log" | grep "^\[$r\] .* transport per peer: ")
        n=$(printf '%s' "$lines" | grep -c .)
        if [ "$n" -ne 1 ]; then
            fail "$run: rank $r logged the transport choice $n times, want once"
            continue
        fi
        # Each row on its own: a build may list others (ibverbs) between them.
        shm=$(printf '%s' "$lines" | sed -n 's/.* shm to rank(s) \[\([0-9,]*\)\].*/\1/p')
        tcp=$(printf '%s' "$lines" | sed -n 's/.* tcp to rank(s) \[\([0-9,]*\)\].*/\1/p')
        if [ "shm=[$shm] tcp=[$tcp]" != "$want" ]; then
            fail "$run: rank $r uses shm=[$shm] tcp=[$tcp], want $want"
        else
            echo "    rank $r: shm=[$shm] tcp=[$tcp]"
        fi
    done
}

# Every rank of a coll_test run reported its checks, all passed.
check_coll_test() {
    run=$1
    if [ "$RC_A" -ne 0 ] || [ "$RC_B" -ne 0 ]; then
        fail "$run: hooprun exited with A=$RC_A B=$RC_B"
    fi
    for r in 0 1 2 3; do
        line=$(cat "$WORK/$run.A.log" "$WORK/$run.B.log" | grep "^\[$r\] rank $r: [0-9]* checks passed, [0-9]* failed$")
        case "$line" in
        *" checks passed, 0 failed") echo "    rank $r: ${line#*: }" ;;
        "") fail "$run: rank $r did not report its checks" ;;
        *) fail "$run: rank $r: ${line#*: }" ;;
        esac
    done
    check_no_leftovers "$run"
}

setup_hosts

# 1. Default transport, every collective x dtype x op x root at counts 0, 1, 7 and 1031.
run_hooprun colls 60 HOOP_DEBUG=INFO HOOP_TIMEOUT=30 -- "$COLL_TEST" --mode colls --large-dtypes none
check_coll_test colls
check_routes colls "shm=[1]/tcp=[2,3] shm=[0]/tcp=[2,3] shm=[3]/tcp=[0,1] shm=[2]/tcp=[0,1]"

# Same host name and boot id everywhere: the two hosts differ by their network namespace only.
ids=$(cat "$WORK/colls.A.log" "$WORK/colls.B.log" | sed -n 's/^\[\([0-3]\)\] .* host identity \([0-9a-f]*\): .*/\1 \2/p' | sort)
id_of() { echo "$ids" | sed -n "s/^$1 //p"; }
if [ "$(echo "$ids" | grep -c .)" -ne 4 ]; then
    fail "colls: want one host identity line per rank, got: $ids"
elif [ "$(id_of 0)" != "$(id_of 1)" ] || [ "$(id_of 2)" != "$(id_of 3)" ] || [ "$(id_of 0)" = "$(id_of 2)" ]; then
    fail "colls: host identities $(echo "$ids" | tr '\n' ' '): want ranks 0,1 alike, 2,3 alike, the two differing"
fi

# 2. Large messages, pipelined in chunks over both transports at once, checked element by element.
for coll in allreduce reducescatter allgather broadcast alltoall; do
    run_hooprun "perf-$coll" 60 HOOP_TIMEOUT=30 -- "$HOOP_PERF" $coll -b 64K -e 4M -f 8 -n 2 -w 1 -c 1
    if [ "$RC_A" -ne 0 ] || [ "$RC_B" -ne 0 ]; then
        fail "perf-$coll: hooprun exited with A=$RC_A B=$RC_B"
    fi
    grep -q '^\[0\] # Out of bounds values : 0 OK$' "$WORK/perf-$coll.A.log" || fail "perf-$coll: rank 0 did not report 0 wrong elements"
    check_no_leftovers "perf-$coll"
done

# 2b. The hierarchical all-reduce forced (auto picks it too from HOOP_SMALL_BYTES up): shared memory
# inside each host, one TCP ring per local rank across; the traced schedule must show every rank
# in its cross-host stage.
run_hooprun hier 60 HOOP_TIMEOUT=30 HOOP_ALGO=hier HOOP_TRACE=1 -- "$COLL_TEST" --mode colls --colls allreduce --large-dtypes float32 --large-ops sum,avg
check_coll_test hier
for r in 0 1 2 3; do
    grep -q "^\[$r\] .* allreduce#[0-9]* hier step [0-9]*: cross-host all-reduce: rank $r " "$WORK/hier.A.log" "$WORK/hier.B.log" ||
        fail "hier: rank $r traced no cross-host stage of the hierarchical all-reduce"
done

# 3. Sub-communicators (some inside a host, some across) and nonblocking calls.
run_hooprun split 60 HOOP_TIMEOUT=30 -- "$COLL_TEST" --mode split --quick
check_coll_test split
run_hooprun nonblocking 60 HOOP_TIMEOUT=30 -- "$COLL_TEST" --mode nonblocking
check_coll_test nonblocking

# 4. TCP forced: no shared memory at all, and still correct.
run_hooprun tcp 60 HOOP_DEBUG=INFO HOOP_TIMEOUT=30 HOOP_TRANSPORT=tcp -- "$COLL_TEST" --mode colls --quick --large-dtypes none
check_coll_test tcp
check_routes tcp "shm=[]/tcp=[1,2,3] shm=[]/tcp=[0,2,3] shm=[]/tcp=[0,1,3] shm=[]/tcp=[0,1,2]"

# 5. Shared memory forced across hosts: every rank must fail by itself, quickly (long before the
# 30 s HOOP_TIMEOUT), naming a rank of the other host. Separate processes, so that each rank's
# own report is seen.
start_ranks shm HOOP_TIMEOUT=30 HOOP_TRANSPORT=shm -- "$COLL_TEST" --mode init-env
if ! wait_ranks shm 10000; then
    fail "shm: ranks still running 10 s after start (a hang instead of an error)"
fi
for r in 0 1 2 3; do
    rc=$(cat "$WORK/shm.$r.rc" 2>/dev/null || echo running)
    if [ $r -lt 2 ]; then other='[23]'; else other='[01]'; fi
    msg=$(grep -m1 "HOOP_TRANSPORT=shm but rank $other is on another host" "$WORK/shm.$r.log")
    if [ "$rc" = 0 ] || [ "$rc" = running ]; then
        fail "shm: rank $r: exit status $rc, want an error"
    elif [ -z "$msg" ]; then
        fail "shm: rank $r (exit status $rc) did not name a rank of the other host"
    else
        echo "    rank $r: exit status $rc: ${msg#* hoop WARN }"
    fi
done
check_no_leftovers shm

finish
