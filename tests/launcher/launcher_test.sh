#!/bin/sh
# Tests of hooprun, run from outside as a user would.
#   launcher_test.sh CASE HOOPRUN CHILD [PIPE_FAIL]
# CASE: env output fail kill stubborn signal stopped omp timeout missing args restart restart-port
#       restart-stop restart-start fail-together escalate strays
# CHILD is launcher_child (see launcher_child.c for its modes); PIPE_FAIL the library of
# pipe_fail.c, which restart-start preloads into hooprun.
set -u

case_name=$1
HOOPRUN=$2
CHILD=$3
PIPE_FAIL=${4:-}

T=$(mktemp -d "${TMPDIR:-/tmp}/hooprun-test.XXXXXX") || exit 1
# Processes a case started or found that must not outlive it, whatever its result.
leftover=""
cleanup() {
    for p in $leftover; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT

# A failure shows the head of the output: the first lines say what went wrong.
FAIL_FROM=head FAIL_LINES=40
# shellcheck source=tests/common/lib.sh
. "$(dirname "$0")/../common/lib.sh"

# run ARGS...: runs hooprun with stdout/stderr in $T/out and $T/err; sets rc and ms (elapsed).
run() {
    t0=$(now_ms)
    "$HOOPRUN" "$@" >"$T/out" 2>"$T/err"
    rc=$?
    ms=$(($(now_ms) - t0))
}

# want_bigline R BIG: what rank R of launcher_child bigline BIG writes to stdout (a BIG-byte line
# of one letter, a for rank 0 and b for rank 1, then its tail), as hooprun prefixes it.
want_bigline() {
    printf '[%d] ' "$1"
    head -c "$2" /dev/zero | tr '\0' "$(echo "$1" | tr 01 ab)"
    printf '\n[%d] tail %d\n' "$1" "$1"
}

expect_rc() {
    [ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1"
}

# Exactly one line of stderr is the given text (a sed basic regex matched against the whole line).
expect_err_line() {
    n=$(grep -c "^$1\$" "$T/err")
    [ "$n" -eq 1 ] || fail "stderr has $n lines matching '$1', expected 1"
}

# The pids printed as "[R] rank R pid P" must all be gone (hooprun reaped them all).
expect_pids_gone() {
    pids=$(sed -n 's/^\[[0-9]*\] rank [0-9]* pid \([0-9]*\)$/\1/p' "$T/out")
    npids=$(echo "$pids" | grep -c .)
    [ "$npids" -eq "$1" ] || fail "found $npids rank pids in the output, expected $1"
    for p in $pids; do
        if kill -0 "$p" 2>/dev/null; then
            kill -KILL "$p" 2>/dev/null
            fail "rank process $p is still alive after hooprun returned"
        fi
    done
}

pid_of_rank() {
    sed -n "s/^\[$1\] rank $1 pid \([0-9]*\)\$/\1/p" "$T/out"
}

# Waits (at most 10 s) until $T/out has $1 lines matching $2.
wait_lines() {
    i=0
    while [ "$(grep -c "$2" "$T/out")" -lt "$1" ]; do
        i=$((i + 1))
        [ $i -le 200 ] || fail "timed out waiting for $1 lines matching '$2'"
        sleep 0.05
    done
}

env_line() {
    # RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK NODE_RANK ADDR PORT
    echo "[$1] RANK=$1 WORLD_SIZE=$2 LOCAL_RANK=$3 LOCAL_WORLD_SIZE=$4 GROUP_RANK=$5 NODE_RANK=$6 MASTER_ADDR=$7 MASTER_PORT=$8 HOOP_LAUNCHER=hooprun dups=0"
}

test_env() {
    # One node, defaults; stale values in the environment must be replaced, not duplicated.
    export RANK=99 WORLD_SIZE=99 LOCAL_RANK=7 MASTER_PORT=1
    run -n 3 "$CHILD" env
    unset RANK WORLD_SIZE LOCAL_RANK MASTER_PORT
    expect_rc 0
    [ "$(wc -l <"$T/out")" -eq 3 ] || fail "expected 3 lines"
    port=$(sed -n 's/^\[0\] .*MASTER_PORT=\([0-9]*\) .*/\1/p' "$T/out")
    [ -n "$port" ] || fail "no MASTER_PORT for rank 0"
    if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ] || [ "$port" -eq 1 ]; then fail "bad port $port"; fi
    {
        env_line 0 3 0 3 0 0 127.0.0.1 "$port"
        env_line 1 3 1 3 0 0 127.0.0.1 "$port"
        env_line 2 3 2 3 0 0 127.0.0.1 "$port"
    } >"$T/want"
    sort "$T/out" | cmp -s - "$T/want" || fail "env differs from: $(cat "$T/want")"

    # Second of two nodes, three ranks each.
    run --nnodes 2 --node-rank 1 -n 3 --master-addr 10.9.8.7 --master-port 29511 "$CHILD" env
    expect_rc 0
    {
        env_line 3 6 0 3 1 1 10.9.8.7 29511
        env_line 4 6 1 3 1 1 10.9.8.7 29511
        env_line 5 6 2 3 1 1 10.9.8.7 29511
    } >"$T/want"
    sort "$T/out" | cmp -s - "$T/want" || fail "multi-node env differs from: $(cat "$T/want")"

    # torchrun spellings, --opt=value, -nN.
    run --nnodes=4 --node_rank=3 --nproc_per_node=2 --master_addr=h0 --master_port=1234 "$CHILD" env
    expect_rc 0
    {
        env_line 6 8 0 2 3 3 h0 1234
        env_line 7 8 1 2 3 3 h0 1234
    } >"$T/want"
    sort "$T/out" | cmp -s - "$T/want" || fail "torchrun-style options: env differs"
    run -n2 --master-port 4321 "$CHILD" env
    expect_rc 0
    {
        env_line 0 2 0 2 0 0 127.0.0.1 4321
        env_line 1 2 1 2 0 0 127.0.0.1 4321
    } >"$T/want"
    sort "$T/out" | cmp -s - "$T/want" || fail "-n2: env differs"

    # The ranks share one process group of their own, led by rank 0.
    run -n 3 "$CHILD" pgrp
    expect_rc 0
    pid0=$(sed -n 's/^\[0\] rank 0 pid \([0-9]*\) pgid .*/\1/p' "$T/out")
    [ -n "$pid0" ] || fail "no pgrp line for rank 0"
    n=$(grep -c "^\[[0-2]\] rank [0-2] pid [0-9]* pgid $pid0\$" "$T/out")
    [ "$n" -eq 3 ] || fail "ranks are not all in process group $pid0"
    [ "$pid0" -ne "$$" ] || fail "ranks run in the test's process group"

    # Arguments reach the program untouched, including ones that look like options.
    run -n 1 -- "$CHILD" args -n 5 --timeout "two words" ""
    expect_rc 0
    printf '[0] arg=-n\n[0] arg=5\n[0] arg=--timeout\n[0] arg=two words\n[0] arg=\n' >"$T/want"
    cmp -s "$T/out" "$T/want" || fail "arguments were changed"

    # PATH lookup.
    oldpath=$PATH
    PATH="$(dirname "$CHILD"):$PATH"
    export PATH
    run -n 2 "$(basename "$CHILD")" args x
    PATH=$oldpath
    expect_rc 0
    [ "$(sort "$T/out")" = "$(printf '[0] arg=x\n[1] arg=x')" ] || fail "PATH lookup"
}

test_output() {
    k=400
    run -n 4 "$CHILD" lines $k
    expect_rc 0
    for stream in out err; do
        [ "$stream" = out ] && word=line || word=err
        # Every line whole, with the right prefix, and per rank in the order written.
        awk -v k=$k -v w="$word" '
            {
                if ($0 !~ ("^\\[[0-9]+\\] rank [0-9]+ " w " [0-9]+$")) { print "bad line: " $0; bad = 1; next }
                r = substr($1, 2, length($1) - 2)
                if ($3 != r) { print "prefix " r " on a line of rank " $3; bad = 1 }
                if ($5 != next_i[r] + 0) { print "rank " r ": line " $5 " where " next_i[r] + 0 " was due"; bad = 1 }
                next_i[r] = $5 + 1
            }
            END {
                for (r = 0; r < 4; r++) if (next_i[r] != k) { print "rank " r ": " next_i[r] + 0 " lines"; bad = 1 }
                if (NR != 4 * k) { print NR " lines in all"; bad = 1 }
                exit bad
            }' "$T/$stream" >"$T/awk" || fail "std$stream: $(head -n 5 "$T/awk")"
    done

    # A last line without newline is still printed, as a line.
    run -n 3 "$CHILD" partial
    expect_rc 0
    [ "$(sort "$T/out")" = "$(printf '[0] rank 0 tail\n[1] rank 1 tail\n[2] rank 2 tail')" ] ||
        fail "partial stdout lines"
    [ "$(sort "$T/err")" = "$(printf '[0] rank 0 errtail\n[1] rank 1 errtail\n[2] rank 2 errtail')" ] ||
        fail "partial stderr lines"

    # A line of any length comes out whole, with its prefix once; a last line without newline
    # gets its prefix and a newline.
    big=1048576
    run -n 2 "$CHILD" bigline $big
    expect_rc 0
    for r in 0 1; do
        want_bigline $r $big >"$T/want"
        grep -a "^\[$r\] " "$T/out" | cmp -s - "$T/want" ||
            fail "rank $r: stdout is not its $big-byte line and its tail, each whole and prefixed once"
    done
    [ "$(wc -c <"$T/out")" -eq $((2 * (4 + big + 1 + 4 + 6 + 1))) ] || fail "stdout has bytes no rank wrote"
    [ "$(sort "$T/err")" = "$(printf '[0] errtail 0\n[1] errtail 1')" ] || fail "stderr of bigline"

    # A line longer than hooprun holds (4 MiB) goes out in pieces, with every byte and one prefix,
    # and hooprun says so.
    big=10000000
    run -n 1 "$CHILD" bigline $big
    expect_rc 0
    want_bigline 0 $big | cmp -s - "$T/out" || fail "a line longer than 4 MiB lost or gained bytes"
    expect_err_line "hooprun: rank 0: a line of more than 4194304 bytes; it goes out in pieces"
    expect_err_line "\[0\] errtail 0"
    big=1048576

    # Without the memory to hold a line whole (address space limited to 4 MB, short of the 4 MiB
    # above), it still comes out with every byte and one prefix, and hooprun says that it could
    # not hold it.
    # (ulimit -v is not POSIX: a shell without it skips the round, as an ASan build does.)
    # shellcheck disable=SC3045
    if (ulimit -v 4000 && exec "$HOOPRUN" -n 1 true) >/dev/null 2>&1; then
        big=40000000
        # shellcheck disable=SC3045
        (ulimit -v 4000 && exec "$HOOPRUN" -n 1 "$CHILD" bigline $big) >"$T/out" 2>"$T/err"
        rc=$?
        expect_rc 0
        want_bigline 0 $big | cmp -s - "$T/out" ||
            fail "a line too long for the memory lost or gained bytes"
        expect_err_line "hooprun: rank 0: no memory to hold a line of more than [0-9]* bytes whole; it goes out in pieces"
        expect_err_line "\[0\] errtail 0"
        rm -f "$T/out"
        big=1048576
    else
        echo "hooprun does not start with its address space limited to 4 MB: that round is skipped" >&2
    fi

    # --no-prefix: the bytes as written, with no newline added at the end.
    run --no-prefix -n 1 "$CHILD" bigline $big
    expect_rc 0
    {
        head -c $big /dev/zero | tr '\0' a
        printf '\ntail 0'
    } | cmp -s - "$T/out" || fail "--no-prefix: stdout differs from what the rank wrote"
    printf 'errtail 0' | cmp -s - "$T/err" || fail "--no-prefix: stderr differs from what the rank wrote"
    # Two ranks: each long line in one piece, nothing else in it.
    run --no-prefix -n 2 "$CHILD" bigline $big
    expect_rc 0
    for c in a b; do
        # (Runs of one letter: the one in "tail" is left out.)
        runs=$(tr -c "$c" '\n' <"$T/out" | awk 'length($0) > 1 { print length($0) }')
        [ "$runs" = "$big" ] || fail "--no-prefix: the line of $c came as pieces of $(echo "$runs" | tr '\n' ' ')bytes"
    done
    [ "$(wc -c <"$T/out")" -eq $((2 * (big + 1 + 6))) ] || fail "--no-prefix: stdout has bytes no rank wrote"
    [ "$(wc -c <"$T/err")" -eq 18 ] || fail "--no-prefix: stderr is not the two tails as written"

    # --no-prefix: the lines as written.
    run --no-prefix -n 2 "$CHILD" lines 2
    expect_rc 0
    [ "$(sort "$T/out")" = "$(printf 'rank 0 line 0\nrank 0 line 1\nrank 1 line 0\nrank 1 line 1')" ] ||
        fail "--no-prefix stdout"

    # --no-prefix: after a rank's last stderr line without newline, hooprun's own message starts
    # a line of its own; stdout, where hooprun writes nothing, keeps the rank's bytes as they are.
    run --no-prefix -n 1 sh -c 'printf out; printf half >&2; exit 3'
    expect_rc 3
    printf out | cmp -s - "$T/out" || fail "--no-prefix: stdout of a failed rank is not its bytes"
    [ "$(sed -n 1p "$T/err")" = half ] || fail "--no-prefix: the rank's stderr does not come first, as written"
    [ "$(wc -l <"$T/err")" -eq 2 ] || fail "--no-prefix: hooprun's message did not start a line of its own"
    expect_err_line "hooprun: rank 0 (pid [0-9]*) exited with status 3"
}

test_fail() {
    run -n 4 "$CHILD" fail 2 3
    expect_rc 3
    [ "$ms" -lt 5000 ] || fail "took $ms ms: the sleeping ranks kept the job alive"
    p=$(pid_of_rank 2)
    expect_err_line "hooprun: rank 2 (pid $p) exited with status 3"
    [ "$(grep -c '^hooprun: ' "$T/err")" -eq 1 ] || fail "more than one launcher message"
    expect_pids_gone 4

    # All ranks succeed: 0, and nothing from the launcher.
    run -n 3 "$CHILD" args ok
    expect_rc 0
    [ -s "$T/err" ] && fail "stderr not empty on success"
    return 0
}

# Two ranks fail while hooprun is stopped (SIGSTOP), so that it finds both ended in one look: the
# one the kernel lists first is the failure, and the other is named as having failed too. (A
# rank that hooprun's own SIGTERM ends is never named: test_fail sees one message.)
test_fail_together() {
    bg_run -n 4 "$CHILD" fail-when "$T/go" 3 1 2
    wait_lines 4 '^\[[0-9]\] rank [0-9] pid '
    p1=$(pid_of_rank 1)
    p2=$(pid_of_rank 2)
    kill -STOP "$bg"
    : >"$T/go"
    i=0
    while ! { is_zombie "$p1" && is_zombie "$p2"; }; do
        i=$((i + 1))
        if [ $i -gt 200 ]; then
            kill -CONT "$bg"
            fail "ranks 1 and 2 did not end"
        fi
        sleep 0.05
    done
    signal_bg CONT
    expect_rc 3
    first=$(sed -n 's/^hooprun: rank \([12]\) (pid [0-9]*) exited with status 3$/\1/p' "$T/err")
    [ -n "$first" ] || fail "no report of rank 1 or 2 failing"
    other=$((3 - first))
    expect_err_line "hooprun: rank $other (pid $(pid_of_rank $other)) had failed too: exited with status 3"
    [ "$(grep -c '^hooprun: ' "$T/err")" -eq 2 ] || fail "expected two launcher messages"
    expect_pids_gone 4
}

# Whether process $1 has ended and is not yet reaped.
is_zombie() {
    [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" = Z ]
}

test_kill() {
    run -n 3 "$CHILD" selfkill 1
    expect_rc 137
    [ "$ms" -lt 5000 ] || fail "took $ms ms: the sleeping ranks kept the job alive"
    p=$(pid_of_rank 1)
    expect_err_line "hooprun: rank 1 (pid $p) was killed by signal 9 (SIGKILL)"
    expect_pids_gone 3
}

test_stubborn() {
    # The other rank ignores SIGTERM: SIGKILL after the 3 s grace period.
    run -n 2 "$CHILD" stubborn 1 5
    expect_rc 5
    [ "$ms" -ge 2500 ] || fail "SIGKILL came after $ms ms, before the grace period"
    [ "$ms" -lt 8000 ] || fail "took $ms ms"
    p=$(pid_of_rank 1)
    expect_err_line "hooprun: rank 1 (pid $p) exited with status 5"
    grep -q 'SIGKILL' "$T/err" || fail "no word of SIGKILL"
    expect_pids_gone 2
}

# bg_run ARGS...: hooprun in the background; sets bg.
bg_run() {
    # Emptied here, not by the redirection below, which happens in the background process and
    # could come after wait_lines has read the previous run's lines.
    : >"$T/out"
    : >"$T/err"
    "$HOOPRUN" "$@" >>"$T/out" 2>>"$T/err" &
    bg=$!
}

test_signal() {
    # A signal ignored where the test runs (HUP under nohup) stays ignored for hooprun's ranks
    # too, by design: that round is left out.
    sigs="TERM:15 HUP:1"
    ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status 2>/dev/null)
    if [ -n "$ign" ] && [ $((0x$ign & 1)) -ne 0 ]; then
        echo "SIGHUP is ignored here (nohup?): its round is skipped" >&2
        sigs="TERM:15"
    fi
    for s in $sigs; do
        name=${s%%:*}
        num=${s##*:}
        bg_run -n 3 "$CHILD" wait-signal
        wait_lines 3 '^\[[0-9]\] rank [0-9] ready'
        kill -"$name" "$bg"
        wait "$bg"
        rc=$?
        expect_rc 0
        for r in 0 1 2; do
            grep -qx "\[$r\] rank $r got signal $num" "$T/out" || fail "rank $r did not get SIG$name"
        done
        [ "$(grep -c 'got signal' "$T/out")" -eq 3 ] || fail "a rank got SIG$name more than once"
    done

    # Ranks that die of the forwarded signal: reported, 128+15, quickly.
    t0=$(now_ms)
    bg_run -n 2 "$CHILD" sleep 60
    wait_lines 2 'ready'
    signal_bg TERM
    ms=$(($(now_ms) - t0))
    expect_rc 143
    [ "$ms" -lt 5000 ] || fail "took $ms ms"
    grep -q '^hooprun: stopped by SIGTERM from outside hooprun: rank [01] (pid [0-9]*) ended by SIGTERM$' "$T/err" ||
        fail "no report of the signal"
}

# A job stopped by the user is reported as stopped, with 128+S, never as a rank that crashed.
test_stopped() {
    # timeout(1) around hooprun: SIGTERM to hooprun, forwarded.
    t0=$(now_ms)
    timeout -s TERM 1 "$HOOPRUN" -n 2 "$CHILD" sleep 60 >"$T/out" 2>"$T/err"
    rc=$?
    ms=$(($(now_ms) - t0))
    expect_rc 124 # timeout's own status
    [ "$ms" -lt 5000 ] || fail "took $ms ms"
    expect_err_line 'hooprun: stopped by SIGTERM from outside hooprun: rank [01] (pid [0-9]*) ended by SIGTERM'
    grep -q 'killed by\|exited with' "$T/err" && fail "reported as a failure"

    # Ctrl-C: SIGINT to hooprun (a background job of sh ignores SIGINT unless told otherwise).
    if env --default-signal=INT true 2>/dev/null; then
        : >"$T/out"
        : >"$T/err"
        env --default-signal=INT "$HOOPRUN" -n 3 "$CHILD" sleep 60 >>"$T/out" 2>>"$T/err" &
        bg=$!
        wait_lines 3 'ready'
        signal_bg INT
        expect_rc 130
        expect_err_line 'hooprun: stopped by SIGINT from outside hooprun: rank [012] (pid [0-9]*) ended by SIGINT'
    else
        echo "env --default-signal is missing: the SIGINT round is skipped" >&2
    fi

    # SIGTERM to one rank itself, not through hooprun: stopped from outside, the others stopped.
    bg_run -n 2 "$CHILD" sleep 60
    wait_lines 2 'ready'
    p1=$(sed -n 's/^\[1\] rank 1 ready pid \([0-9]*\)$/\1/p' "$T/out")
    [ -n "$p1" ] || fail "no pid of rank 1"
    kill -TERM "$p1"
    wait "$bg"
    rc=$?
    expect_rc 143
    expect_err_line "hooprun: rank 1 (pid [0-9]*) was stopped by SIGTERM from outside hooprun"

    # timeout(1) as the program, around each rank: its status 124 is said to be its time out.
    run -n 2 timeout 0.5 "$CHILD" sleep 60
    expect_rc 124
    expect_err_line 'hooprun: rank [01] (pid [0-9]*) was stopped by its timeout(1): the time ran out (status 124)'
}

# OMP_NUM_THREADS=1 for every rank unless set, as torchrun; said once; one rank is left alone.
test_omp() {
    # shellcheck disable=SC2016
    show='echo "OMP_NUM_THREADS=${OMP_NUM_THREADS-unset}"'
    omp_out() { sed -n "s/^\[$1\] OMP_NUM_THREADS=//p" "$T/out"; }
    (unset OMP_NUM_THREADS && exec "$HOOPRUN" -n 2 sh -c "$show") >"$T/out" 2>"$T/err"
    rc=$?
    expect_rc 0
    if [ "$(omp_out 0)" != 1 ] || [ "$(omp_out 1)" != 1 ]; then fail "OMP_NUM_THREADS not 1 on both ranks"; fi
    expect_err_line 'hooprun: note: OMP_NUM_THREADS=1 for every rank, as torchrun sets it .*'
    OMP_NUM_THREADS=3 run -n 2 sh -c "$show"
    expect_rc 0
    if [ "$(omp_out 0)" != 3 ] || [ "$(omp_out 1)" != 3 ]; then fail "a set OMP_NUM_THREADS was changed"; fi
    grep -q OMP_NUM_THREADS "$T/err" && fail "a note although OMP_NUM_THREADS was set"
    (unset OMP_NUM_THREADS && exec "$HOOPRUN" -n 1 sh -c "$show") >"$T/out" 2>"$T/err"
    [ "$(omp_out 0)" = unset ] || fail "OMP_NUM_THREADS set for a single rank"
    return 0
}

# --bind auto (the default): with no more ranks than CPUs, each rank gets its own equal share of
# hooprun's CPUs, the shares disjoint; --bind none and more ranks than CPUs leave the mask alone.
test_bind() {
    mine=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
    # Counted from the mask: nproc follows OMP_NUM_THREADS, which the test harness sets to 1.
    expand() { echo "$1" | tr ',' '\n' | awk -F- '{ e = NF > 1 ? $2 : $1; for (c = $1; c <= e; c++) print c }'; }
    ncpu=$(expand "$mine" | grep -c .)
    if [ "$ncpu" -lt 2 ]; then
        echo "SKIP: binding needs 2 CPUs, this process may use $ncpu"
        return 0
    fi
    # shellcheck disable=SC2016
    show='echo "cpus $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"'
    cpus_of() { sed -n "s/^\[$1\] cpus //p" "$T/out"; }
    run -n 2 sh -c "$show"
    expect_rc 0
    a=$(cpus_of 0) b=$(cpus_of 1)
    [ -n "$a" ] && [ -n "$b" ] || fail "no CPU list from the ranks"
    [ "$a" != "$b" ] || fail "both ranks bound to the same CPUs ($a)"
    [ "$a" != "$mine" ] || fail "rank 0 not bound (its CPUs: $a, hooprun's: $mine)"
    # Disjoint: no CPU of rank 0's list in rank 1's (lists expanded to single CPUs).
    for c in $(expand "$a"); do
        expand "$b" | grep -qx "$c" && fail "CPU $c is in both ranks' lists ($a; $b)"
    done
    [ -s "$T/err" ] && grep -v OMP_NUM_THREADS "$T/err" | grep -q . && fail "binding said something"
    run --bind none -n 2 sh -c "$show"
    expect_rc 0
    [ "$(cpus_of 0)" = "$mine" ] && [ "$(cpus_of 1)" = "$mine" ] || fail "--bind none changed the CPUs"
    run -n $((ncpu + 1)) sh -c "$show"
    expect_rc 0
    for r in $(seq 0 "$ncpu"); do
        [ "$(cpus_of "$r")" = "$mine" ] || fail "more ranks than CPUs, yet rank $r was bound"
    done
    run --bind sideways -n 2 true
    expect_rc 2
    return 0
}

test_timeout() {
    run --timeout 1 -n 2 "$CHILD" sleep 60
    expect_rc 124
    [ "$ms" -ge 900 ] || fail "stopped after $ms ms, before the timeout"
    [ "$ms" -lt 5000 ] || fail "took $ms ms"
    grep -q '^hooprun: .*timeout' "$T/err" || fail "no timeout message"

    # Ranks that ignore SIGTERM are killed too.
    run --timeout 0.5 -n 2 "$CHILD" stubborn 9 0
    expect_rc 124
    [ "$ms" -lt 8000 ] || fail "took $ms ms"
    expect_pids_gone 2

    # A job that ends in time is not affected.
    run --timeout 30 -n 2 "$CHILD" args x
    expect_rc 0
    [ "$ms" -lt 5000 ] || fail "took $ms ms"
}

test_missing() {
    run -n 2 /nonexistent/dir/prog
    [ "$rc" -eq 127 ] || fail "missing path: exit status $rc"
    grep -q '/nonexistent/dir/prog' "$T/err" || fail "message does not name the program"

    run -n 2 hoop-no-such-program-xyz
    [ "$rc" -eq 127 ] || fail "missing command: exit status $rc"
    grep -q 'hoop-no-such-program-xyz' "$T/err" || fail "message does not name the program"

    printf '#!/bin/sh\necho hi\n' >"$T/noexec"
    chmod 644 "$T/noexec"
    run -n 2 "$T/noexec"
    [ "$rc" -eq 126 ] || fail "not executable: exit status $rc"
    grep -q 'noexec' "$T/err" || fail "message does not name the program"

    run -n 2 "$T"
    [ "$rc" -eq 126 ] || fail "directory: exit status $rc"
    [ -s "$T/out" ] && fail "output from a job that never ran"
    [ "$ms" -lt 5000 ] || fail "took $ms ms"

    # A program that passes the checks before the start but whose exec fails in every rank (an
    # interpreter that does not exist): all ranks are started before their execs are heard
    # from; the failure is said once, for the lowest rank, with exec's status.
    printf '#!/nonexistent/interpreter\n' >"$T/badinterp"
    chmod 755 "$T/badinterp"
    run -n 6 "$T/badinterp"
    expect_rc 127
    expect_err_line "hooprun: rank 0: cannot execute '$T/badinterp': No such file or directory"
    [ -s "$T/out" ] && fail "output from a job that never ran"
    [ "$ms" -lt 5000 ] || fail "took $ms ms"
    return 0
}

test_args() {
    marker="$T/ran"
    for a in "" "-n" "-n 0" "-n -1" "-n abc" "-n 2x" "-n 99999" "--bogus -n 1" "-x -n 1" \
        "--nnodes 2 -n 1" "--nnodes 0 -n 1" "--nnodes 2 --node-rank 2 --master-port 5000 -n 1" \
        "--node-rank -1 -n 1" "--master-port 0 -n 1" "--master-port 70000 -n 1" \
        "--master-port x -n 1" "--timeout 0 -n 1" "--timeout -1 -n 1" "--timeout abc -n 1" \
        "--master-addr= -n 1" "--no-prefix=1 -n 1" "-n 1 --timeout"; do
        # shellcheck disable=SC2086
        run $a sh -c "touch '$marker'"
        [ "$rc" -eq 2 ] || fail "'$a': exit status $rc, expected 2"
        grep -q '^hooprun: ' "$T/err" || fail "'$a': no message"
        grep -q '^usage: hooprun' "$T/err" || fail "'$a': no usage"
        [ -e "$marker" ] && fail "'$a': the program was started"
    done
    # Options only, no program.
    run -n 2
    [ "$rc" -eq 2 ] || fail "no program: exit status $rc"
    grep -q 'usage: hooprun' "$T/err" || fail "no program: no usage"

    run --help
    expect_rc 0
    grep -q '^usage: hooprun' "$T/out" || fail "--help prints no usage"
    run -h
    expect_rc 0
    grep -q '^usage: hooprun' "$T/out" || fail "-h prints no usage"
    run --version
    expect_rc 0
    grep -q '^hooprun .*[0-9]\.[0-9]' "$T/out" || fail "--version"
}

# flaky_line RANK ATTEMPT: what a rank of "flaky" printed in that attempt, as "TORCHELASTIC PORT".
flaky_line() {
    sed -n "s/^\[$1\] rank $1 restart $2 torchelastic \([0-9]*\) port \([0-9]*\) pid [0-9]*\$/\1 \2/p" "$T/out"
}

# check_flaky ATTEMPTS: both ranks ran attempts 0..ATTEMPTS-1 (and no other), each attempt with
# one MASTER_PORT for both and TORCHELASTIC_RESTART_COUNT equal to the attempt; the ports of the
# attempts go to $T/ports, one a line.
check_flaky() {
    : >"$T/ports"
    n=$(grep -c '^\[[01]\] rank [01] restart [0-9]* torchelastic ' "$T/out")
    [ "$n" -eq $((2 * $1)) ] || fail "$n rank starts, expected $((2 * $1))"
    a=0
    while [ $a -lt "$1" ]; do
        l0=$(flaky_line 0 $a)
        l1=$(flaky_line 1 $a)
        if [ -z "$l0" ] || [ -z "$l1" ]; then fail "attempt $a: a rank did not report"; fi
        [ "${l0%% *}" = "$a" ] || fail "attempt $a: TORCHELASTIC_RESTART_COUNT=${l0%% *}"
        [ "$l0" = "$l1" ] || fail "attempt $a: the ranks disagree ('$l0' and '$l1')"
        grep -qx "\[0\] rank 0 restart $a listening" "$T/out" ||
            fail "attempt $a: rank 0 could not listen on its MASTER_PORT"
        echo "${l0#* }" >>"$T/ports"
        a=$((a + 1))
    done
}

restart_lines() {
    grep -c '^hooprun: restarting all ranks (restart [0-9]* of [0-9]*) after rank [0-9]* failed' "$T/err"
}

test_restart() {
    # Rank 1 fails in attempts 0 and 1: two restarts are enough.
    run --max-restarts 2 -n 2 "$CHILD" flaky 1
    expect_rc 0
    check_flaky 3
    [ "$(restart_lines)" -eq 2 ] || fail "expected 2 restart lines"
    expect_err_line "hooprun: restarting all ranks (restart 1 of 2) after rank 1 failed.*"
    expect_err_line "hooprun: restarting all ranks (restart 2 of 2) after rank 1 failed.*"
    [ "$(grep -c '^hooprun: rank 1 (pid [0-9]*) exited with status 3$' "$T/err")" -eq 2 ] ||
        fail "expected 2 reports of rank 1 failing"
    # A fresh rendezvous each time: hooprun chose the port, so it changes.
    p0=$(sed -n 1p "$T/ports")
    p1=$(sed -n 2p "$T/ports")
    p2=$(sed -n 3p "$T/ports")
    if [ "$p0" = "$p1" ] || [ "$p1" = "$p2" ]; then fail "MASTER_PORT did not change: $p0 $p1 $p2"; fi

    # One restart is not enough: the status of the failed rank, and nothing left running.
    run --max-restarts 1 -n 2 "$CHILD" flaky 1
    expect_rc 3
    check_flaky 2
    [ "$(restart_lines)" -eq 1 ] || fail "expected 1 restart line"
    tail -n 1 "$T/err" | grep -q '^hooprun: rank 1 (pid [0-9]*) exited with status 3$' ||
        fail "the last message does not name the failed rank"
    sed -n 's/^\[[01]\] rank [01] restart [0-9]* .* pid \([0-9]*\)$/\1/p' "$T/out" >"$T/pids"
    [ "$(wc -l <"$T/pids")" -eq 4 ] || fail "expected 4 rank pids"
    while read -r p; do
        kill -0 "$p" 2>/dev/null && fail "rank process $p is still alive"
    done <"$T/pids"

    # No restarts by default, and the count is there from the start.
    run -n 2 "$CHILD" flaky 1
    expect_rc 3
    check_flaky 1
    [ "$(restart_lines)" -eq 0 ] || fail "restarted without --max-restarts"

    for a in "--max-restarts -1" "--max-restarts x" "--max-restarts=" "--max-restarts 99999999"; do
        # shellcheck disable=SC2086
        run $a -n 1 "$CHILD" args x
        [ "$rc" -eq 2 ] || fail "'$a': exit status $rc, expected 2"
        [ -s "$T/out" ] && fail "'$a': the program was started"
    done
    run --help
    grep -q -- '--max-restarts N' "$T/out" || fail "--help does not mention --max-restarts"
}

# A port that is free now, as hooprun itself finds one.
free_port() {
    run -n 1 "$CHILD" env
    sed -n 's/.*MASTER_PORT=\([0-9]*\) .*/\1/p' "$T/out"
}

# start_holder HOLD_MS: launcher_child's holder, outside any job, ready at $T/holder.sock.
start_holder() {
    rm -f "$T/holder.sock"
    "$CHILD" holder "$T/holder.sock" "$1" >"$T/holder.out" 2>&1 &
    holder=$!
    leftover="$leftover $holder"
    i=0
    while ! grep -q ready "$T/holder.out"; do
        i=$((i + 1))
        [ $i -le 200 ] || fail "the holder did not start: $(cat "$T/holder.out")"
        sleep 0.05
    done
}

test_restart_port() {
    # A given port is kept; something outside the job holds it for 1.5 s after each failed
    # attempt, and the new attempt must not start before it is free (rank 0 exits 4 if it
    # cannot listen).
    port=$(free_port)
    [ -n "$port" ] || fail "no free port"
    start_holder 1500
    run --master-port "$port" --max-restarts 2 -n 2 "$CHILD" flaky 1 "$T/holder.sock"
    expect_rc 0
    check_flaky 3
    [ "$(sort -u "$T/ports")" = "$port" ] || fail "MASTER_PORT changed: $(tr '\n' ' ' <"$T/ports")"
    [ "$(restart_lines)" -eq 2 ] || fail "expected 2 restart lines"
    grep -q "^hooprun: waiting for master port $port to be free" "$T/err" ||
        fail "did not wait for the port"
}

test_restart_start() {
    # A rank whose start fails at a restart (its pipe2 fails; 3 a rank at the first attempt):
    # the failure is said, with status 1, and the ranks not started yet have no exec pipe to
    # wait for. hooprun's stdin holds bytes, which a wait on a stale exec pipe of 0 (stdin)
    # would take for an exec's errno.
    [ -n "$PIPE_FAIL" ] || fail "no pipe_fail library given"
    if ! LD_PRELOAD="$PIPE_FAIL" "$HOOPRUN" -n 1 true >/dev/null 2>&1; then
        echo "skipped: hooprun does not run with a preloaded library (a sanitizer build)"
        return 0
    fi
    printf 'abcdefgh' >"$T/stdin"
    t0=$(now_ms)
    LD_PRELOAD="$PIPE_FAIL" HOOP_TEST_PIPE2_FAIL_AT=7 "$HOOPRUN" --max-restarts 1 -n 2 \
        "$CHILD" flaky 1 <"$T/stdin" >"$T/out" 2>"$T/err"
    rc=$?
    ms=$(($(now_ms) - t0))
    expect_rc 1
    [ "$(restart_lines)" -eq 1 ] || fail "expected 1 restart line"
    expect_err_line "hooprun: cannot start rank 0: pipe: Too many open files"
    grep -q 'cannot execute' "$T/err" && fail "a rank never started was said to fail its exec"
    [ "$ms" -lt 5000 ] || fail "took $ms ms"
    return 0
}

test_restart_stop() {
    # A signal to hooprun ends the job; it is not a failure to restart after.
    t0=$(now_ms)
    bg_run --max-restarts 5 -n 2 "$CHILD" sleep 60
    wait_lines 2 'ready'
    signal_bg TERM
    ms=$(($(now_ms) - t0))
    expect_rc 143
    [ "$ms" -lt 5000 ] || fail "took $ms ms"
    sleep 0.3
    [ "$(grep -c 'ready' "$T/out")" -eq 2 ] || fail "ranks were started again"
    [ "$(restart_lines)" -eq 0 ] || fail "restarted after SIGTERM"

    # Also while waiting for the master port between attempts.
    port=$(free_port)
    [ -n "$port" ] || fail "no free port"
    t0=$(now_ms)
    start_holder 5000
    bg_run --master-port "$port" --max-restarts 5 -n 2 "$CHILD" flaky 1 "$T/holder.sock"
    i=0
    while ! grep -q '^hooprun: waiting for master port' "$T/err"; do
        i=$((i + 1))
        [ $i -le 200 ] || fail "hooprun never waited for the port"
        sleep 0.05
    done
    signal_bg TERM
    ms=$(($(now_ms) - t0))
    expect_rc 3
    [ "$ms" -lt 4000 ] || fail "took $ms ms"
    [ "$(restart_lines)" -eq 0 ] || fail "restarted after SIGTERM"

    # --timeout covers the restarts: a rank that always fails, more restarts than time allows.
    run --timeout 2 --max-restarts 100 -n 2 "$CHILD" fail 1 3
    expect_rc 124
    [ "$ms" -ge 1900 ] || fail "stopped after $ms ms, before the timeout"
    [ "$ms" -lt 6000 ] || fail "took $ms ms"
    [ "$(restart_lines)" -ge 1 ] || fail "never restarted"
    grep -q '^hooprun: .*timeout' "$T/err" || fail "no timeout message"
    expect_pids_gone "$(grep -c '^\[[01]\] rank [01] pid' "$T/out")"
}

# wait_bg S: waits for the background hooprun ($bg) at most S seconds, then SIGKILLs it and fails.
# Sets rc.
wait_bg() {
    rm -f "$T/watchdog"
    (
        trap 'kill "$s" 2>/dev/null; exit 0' TERM
        sleep "$1" &
        s=$!
        wait "$s" && : >"$T/watchdog" && kill -KILL "$bg"
    ) >/dev/null 2>&1 &
    wd=$!
    wait "$bg"
    rc=$?
    kill "$wd" 2>/dev/null
    wait "$wd" 2>/dev/null
    [ -e "$T/watchdog" ] && fail "hooprun still running $1 s later; killed it"
    return 0
}

# signal_bg SIG: sends SIG to the background hooprun and waits for it (wait_bg: at most 30 s).
# Sets rc.
signal_bg() {
    kill -"$1" "$bg"
    wait_bg 30
}

# Whether process $1 is there and has not ended (an init that does not reap keeps orphans as
# zombies, which kill -0 still finds).
alive() {
    st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ -n "$st" ] && [ "$st" != Z ]
}

ready_pid() {
    sed -n "s/^\[$1\] rank $1 ready pid \([0-9]*\)\$/\1/p" "$T/out"
}

# Ranks that ignore the signal forwarded to them: SIGKILL after the grace period, or at once on a
# second SIGINT or SIGTERM to hooprun; each timed.
test_escalate() {
    rounds="TERM:143"
    # A background job of sh ignores SIGINT unless told otherwise.
    intenv=""
    if env --default-signal=INT true 2>/dev/null; then
        intenv="env --default-signal=INT"
        rounds="$rounds INT:130"
    else
        echo "env --default-signal is missing: the SIGINT rounds are skipped" >&2
    fi
    for s in $rounds; do
        name=${s%%:*}
        want=${s##*:}
        # A forwarded signal's grace period is 30 s by default, as torchrun waits, not the 3 s
        # of a failed rank: the ranks are still there 3.5 s later. A second signal then ends the
        # job at once.
        : >"$T/out"
        : >"$T/err"
        # shellcheck disable=SC2086
        $intenv "$HOOPRUN" -n 2 "$CHILD" deaf >>"$T/out" 2>>"$T/err" &
        bg=$!
        wait_lines 2 'ready'
        p0=$(ready_pid 0)
        p1=$(ready_pid 1)
        leftover="$leftover $p0 $p1"
        kill -"$name" "$bg"
        sleep 3.5
        for p in $p0 $p1; do
            alive "$p" || fail "SIG$name: rank pid $p was ended within 3.5 s of the first signal"
        done
        t0=$(now_ms)
        kill -"$name" "$bg"
        wait_bg 10
        ms=$(($(now_ms) - t0))
        expect_rc "$want"
        [ "$ms" -lt 1500 ] || fail "SIG$name: the second one took $ms ms to end the job"
        expect_err_line "hooprun: interrupted while stopping; sending SIGKILL to 2 rank(s)"
        for p in $p0 $p1; do
            alive "$p" && fail "SIG$name: rank pid $p is still alive"
        done

        # One signal: SIGKILL once the grace period (here 3 s) is over.
        : >"$T/out"
        : >"$T/err"
        # shellcheck disable=SC2086
        $intenv "$HOOPRUN" --kill-after 3 -n 2 "$CHILD" deaf >>"$T/out" 2>>"$T/err" &
        bg=$!
        wait_lines 2 'ready'
        leftover="$leftover $(ready_pid 0) $(ready_pid 1)"
        t0=$(now_ms)
        kill -"$name" "$bg"
        wait_bg 15
        ms=$(($(now_ms) - t0))
        expect_rc "$want"
        [ "$ms" -ge 2900 ] || fail "SIG$name: SIGKILL after $ms ms, before the grace period"
        [ "$ms" -lt 6000 ] || fail "SIG$name: took $ms ms"
        expect_err_line "hooprun: 2 rank(s) still running 3 s after SIG$name; sending SIGKILL"
        expect_err_line "hooprun: stopped by SIG$name from outside hooprun: rank [01] (pid [0-9]*) ended by SIGKILL"
        for r in 0 1; do
            alive "$(ready_pid $r)" && fail "SIG$name: rank $r is still alive"
        done
    done

    # --kill-after sets the grace period, for a signal to hooprun and for a failed rank alike.
    bg_run --kill-after 1 -n 2 "$CHILD" deaf
    wait_lines 2 'ready'
    leftover="$leftover $(ready_pid 0) $(ready_pid 1)"
    t0=$(now_ms)
    kill -TERM "$bg"
    wait_bg 10
    ms=$(($(now_ms) - t0))
    expect_rc 143
    [ "$ms" -ge 950 ] || fail "--kill-after 1: SIGKILL after $ms ms"
    [ "$ms" -lt 2500 ] || fail "--kill-after 1: took $ms ms"
    expect_err_line "hooprun: 2 rank(s) still running 1 s after SIGTERM; sending SIGKILL"
    run --kill-after 0.2 -n 2 "$CHILD" stubborn 1 5
    expect_rc 5
    [ "$ms" -lt 2000 ] || fail "--kill-after 0.2 after a failure: took $ms ms"
    expect_pids_gone 2
    run --kill-after 0 -n 2 "$CHILD" stubborn 1 5
    expect_rc 5
    expect_pids_gone 2

    # A repeat within 0.2 s is the same request (timeout(1) signals hooprun and then its process
    # group): ranks that take 0.5 s to end after SIGTERM get to end by themselves. The gap between
    # the two kills is measured: on a loaded machine it can pass 0.2 s, and then the second one
    # is rightly a second request, so the check is made only when the gap was under 150 ms.
    bg_run -n 2 "$CHILD" wait-signal 500
    wait_lines 2 'ready'
    t0=$(now_ms)
    kill -TERM "$bg"
    sleep 0.05
    kill -TERM "$bg"
    gap=$(($(now_ms) - t0))
    wait_bg 10
    if [ "$gap" -lt 150 ]; then
        expect_rc 0
        [ "$(grep -c '^\[[01]\] rank [01] got signal 15$' "$T/out")" -eq 2 ] || fail "a rank did not get SIGTERM once"
        grep -q SIGKILL "$T/err" && fail "a repeat $gap ms after the first SIGTERM was taken as a second request"
    else
        echo "the two SIGTERMs were $gap ms apart (a loaded machine): the repeat check is skipped" >&2
    fi
    timeout -s TERM 1 "$HOOPRUN" -n 2 "$CHILD" wait-signal 500 >"$T/out" 2>"$T/err"
    rc=$?
    expect_rc 124
    for r in 0 1; do
        grep -qx "\[$r\] rank $r got signal 15" "$T/out" || fail "timeout(1): rank $r did not get SIGTERM"
    done
    grep -q SIGKILL "$T/err" && fail "timeout(1): its one SIGTERM was taken as two"

    for a in "--kill-after -1" "--kill-after x" "--kill-after=" "--kill-after 1e10"; do
        # shellcheck disable=SC2086
        run $a -n 1 "$CHILD" args x
        [ "$rc" -eq 2 ] || fail "'$a': exit status $rc, expected 2"
        [ -s "$T/out" ] && fail "'$a': the program was started"
    done
    return 0
}

# check_strays N: the N stray pids the ranks reported are all gone.
check_strays() {
    pids=$(sed -n 's/^\[[0-9]*\] rank [0-9]* stray \([0-9]*\)$/\1/p' "$T/out")
    leftover="$leftover $pids"
    n=$(echo "$pids" | grep -c .)
    [ "$n" -eq "$1" ] || fail "$n strays reported, expected $1"
    for p in $pids; do
        alive "$p" && fail "process $p that a rank started is alive after hooprun returned"
    done
    return 0
}

# What the ranks leave behind (a child in their process group, one in a session of its own, each
# with a child) is ended with the job, whether it succeeds or fails; nothing else is.
test_strays() {
    sleep 60 &
    outsider=$!
    leftover="$leftover $outsider"

    run -n 2 "$CHILD" strays 0 -1
    expect_rc 0
    check_strays 8
    [ "$ms" -ge 2500 ] || fail "the strays that ignore SIGTERM were killed after $ms ms, before the grace period"
    [ "$ms" -lt 7000 ] || fail "took $ms ms"
    expect_pids_gone 2
    expect_err_line "hooprun: 4 process(es) that the ranks started outlived them; sending SIGTERM"
    expect_err_line "hooprun: 2 process(es) that the ranks started still running after the 3 s grace period; sending SIGKILL"
    [ "$(grep -c '^hooprun: ' "$T/err")" -eq 2 ] || fail "expected two launcher messages"

    # Rank 1 fails once both ranks have left their strays behind; rank 0 ends by SIGTERM and
    # the strays with it, but those that ignore it, killed after the grace period.
    bg_run -n 2 "$CHILD" strays 3 1 "$T/go"
    wait_lines 10 '^\[[01]\] rank [01] \(stray\|pid\) '
    t0=$(now_ms)
    : >"$T/go"
    wait_bg 20
    ms=$(($(now_ms) - t0))
    expect_rc 3
    check_strays 8
    [ "$ms" -ge 2500 ] || fail "the strays that ignore SIGTERM were killed after $ms ms, before the grace period"
    [ "$ms" -lt 7000 ] || fail "took $ms ms"
    expect_pids_gone 2
    expect_err_line "hooprun: rank 1 (pid [0-9]*) exited with status 3"

    # A signal to hooprun while it waits for strays that ignore SIGTERM: SIGKILL at once.
    bg_run -n 1 "$CHILD" strays 0 -1
    i=0
    while ! grep -q 'outlived them; sending SIGTERM' "$T/err"; do
        i=$((i + 1))
        [ $i -le 200 ] || fail "hooprun did not send the strays SIGTERM"
        sleep 0.05
    done
    t0=$(now_ms)
    kill -TERM "$bg"
    wait_bg 10
    ms=$(($(now_ms) - t0))
    expect_rc 0
    check_strays 4
    [ "$ms" -lt 1500 ] || fail "a signal to hooprun took $ms ms to end the strays"
    expect_err_line "hooprun: interrupted; sending SIGKILL to [0-9]* process(es) that the ranks started"

    # A child that hooprun has before it starts a rank (a shell that runs "cmd & exec hooprun"
    # hands hooprun its own) is not the job's: it outlives a job that ends at once, and one
    # whose strays are ended, which are still ended.
    # shellcheck disable=SC2016
    sh -c 'sleep 60 & echo $! >"$1"; exec "$2" -n 1 true' sh "$T/inherited" "$HOOPRUN" >"$T/out" 2>"$T/err"
    rc=$?
    inherited=$(cat "$T/inherited")
    leftover="$leftover $inherited"
    expect_rc 0
    alive "$inherited" || fail "hooprun ended a child that it had before the job"
    [ -s "$T/err" ] && fail "hooprun had something to say of a child that is not the job's"
    kill "$inherited"
    # shellcheck disable=SC2016
    sh -c 'sleep 60 & echo $! >"$1"; exec "$2" -n 1 "$3" strays 0 -1' sh "$T/inherited" "$HOOPRUN" "$CHILD" >"$T/out" 2>"$T/err"
    rc=$?
    inherited=$(cat "$T/inherited")
    leftover="$leftover $inherited"
    expect_rc 0
    check_strays 4
    alive "$inherited" || fail "hooprun ended, with the ranks' strays, a child that it had before the job"
    expect_err_line "hooprun: 2 process(es) that the ranks started outlived them; sending SIGTERM"
    kill "$inherited"

    alive "$outsider" || fail "a process outside the job was killed"
    kill "$outsider"
    wait "$outsider" 2>/dev/null
    return 0
}

case $case_name in
env | output | fail | kill | stubborn | signal | stopped | omp | bind | timeout | missing | args | restart) "test_$case_name" ;;
restart-port) test_restart_port ;;
restart-stop) test_restart_stop ;;
restart-start) test_restart_start ;;
fail-together) test_fail_together ;;
escalate) test_escalate ;;
strays) test_strays ;;
*)
    echo "unknown case '$case_name'" >&2
    exit 2
    ;;
esac
echo "ok [$case_name]"
