#!/bin/sh
# Authentication, strangers and abort propagation, with real rank processes over loopback TCP.
#   auth_test.sh CASE AUTH_RANK STRANGER
# CASE:
#   keys             different keys fail init with HOOP_ERR_AUTH and a sentence, within the timeout,
#                    in every combination; the same key (string, or files) works; no key works; a
#                    key file others can read is refused
#   strangers        a 4-rank job with a key runs 40 checked all-reduces while strangers knock on
#                    the store's port and every transport port (random bytes, a wrong key, a wire
#                    header with a huge length, silence); each is dropped and logged with its
#                    address, the job is undisturbed, and every listener is bound to 127.0.0.1
#   strangers-nokey  the same without a key (no handshake to fail: garbage is still dropped)
#   abort            rank 1 calls hoop_comm_abort: the others fail with "rank 1 aborted: <reason>"
#   kill             rank 1 is killed: the others fail naming the lost rank 1
#   mismatch         rank 1 calls another collective: every rank's error names it, none says only
#                    that a connection was lost
#   hooprun          (HOOPRUN as a 4th argument) a fresh key per job, passed to every rank; a key
#                    already set is kept; --no-auth; none across nodes; and the ranks' logs agree
set -u

case_name=$1
RANK_BIN=$2
STRANGER=$3
HOOPRUN=${4:-}

T=$(mktemp -d "${TMPDIR:-/tmp}/hoop-auth-test.XXXXXX") || exit 1
cleanup() {
    # Ranks still running after a failed check: they print their pid first.
    for f in "$T"/out*; do
        [ -f "$f" ] || continue
        p=$(sed -n 's/^rank [0-9]* pid \([0-9]*\)$/\1/p' "$f")
        [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
    done
    for p in $stranger_pids; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$T"
}
stranger_pids=""
trap cleanup EXIT

unset HOOP_AUTH_KEY HOOP_AUTH_KEY_FILE HOOP_DEBUG_FILE AUTH_TEST_DELAY_RANK AUTH_TEST_DELAY_S
export HOOP_TRANSPORT=tcp HOOP_DEBUG=INFO

FAIL_FILES="$T/out* $T/err* $T/s_*"
# shellcheck source=tests/common/lib.sh
. "$(dirname "$0")/../common/lib.sh"

hexkey() {
    od -An -tx1 -N32 /dev/urandom | tr -d ' \n'
}

# start R N [VAR=VALUE...] -- MODE ARGS...: rank R of N in the background; its exit status goes to rcR.
start() {
    r=$1
    n=$2
    shift 2
    rm -f "$T/rc$r"
    (
        while [ "$1" != "--" ]; do
            export "$1"
            shift
        done
        shift
        RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT "$RANK_BIN" "$@" \
            >"$T/out$r" 2>"$T/err$r"
        echo $? >"$T/rc$r"
    ) &
}

# wait_ranks N SECONDS: until rc0..rc(N-1) exist.
wait_ranks() {
    i=0
    r=0
    while [ "$r" -lt "$1" ]; do
        if [ -f "$T/rc$r" ]; then
            r=$((r + 1))
            continue
        fi
        i=$((i + 1))
        [ $i -le $(($2 * 20)) ] || fail "rank $r did not finish within $2 s"
        sleep 0.05
    done
}

rc_of() {
    cat "$T/rc$1"
}

new_port() {
    PORT=$("$RANK_BIN" free-port) || fail "no free port"
}

expect_in() { # FILE TEXT
    grep -qF -- "$2" "$1" || fail "$(basename "$1") has no line containing '$2'"
}

expect_not_in() { # FILE TEXT
    if grep -qF -- "$2" "$1"; then fail "$(basename "$1") has a line containing '$2'"; fi
}

# ---- keys ---------------------------------------------------------------------------------------

# pair_fails VARS0 VARS1: two ranks that must both fail init with AUTH, well within HOOP_TIMEOUT.
pair_fails() {
    new_port
    t0=$(now_ms)
    # shellcheck disable=SC2086
    start 0 2 HOOP_TIMEOUT=5 $1 -- init
    # shellcheck disable=SC2086
    start 1 2 HOOP_TIMEOUT=5 $2 -- init
    wait_ranks 2 30
    ms=$(($(now_ms) - t0))
    [ "$ms" -lt 9000 ] || fail "init took $ms ms to fail with a 5 s timeout"
    for r in 0 1; do
        [ "$(rc_of $r)" -ne 0 ] || fail "rank $r passed init with a wrong key"
        expect_in "$T/out$r" "init failed: AUTH"
    done
}

case_keys() {
    A=$(hexkey)
    B=$(hexkey)
    pair_fails "HOOP_AUTH_KEY=$A" "HOOP_AUTH_KEY=$B"
    expect_in "$T/err1" "rejected our key (is HOOP_AUTH_KEY the same on every rank?)"
    expect_in "$T/err0" "failed authentication (is HOOP_AUTH_KEY the same on every rank?)"
    expect_in "$T/err0" "rejected client 127.0.0.1:"

    pair_fails "HOOP_AUTH_KEY=$A" "HOOP_DEBUG=INFO"
    expect_in "$T/err1" "requires authentication: set the same HOOP_AUTH_KEY"

    pair_fails "HOOP_DEBUG=INFO" "HOOP_AUTH_KEY=$A"
    expect_in "$T/err1" "the peer has no key: set the same HOOP_AUTH_KEY"
    expect_in "$T/err0" "wants to authenticate: this store has no key"

    # The same key as a string and in key files (with white space around it) works.
    printf '%s\n' "$A" >"$T/key1"
    printf '  %s \n\n' "$A" >"$T/key2"
    chmod 600 "$T/key1" "$T/key2"
    new_port
    start 0 3 HOOP_TIMEOUT=20 "HOOP_AUTH_KEY=$A" -- init
    start 1 3 HOOP_TIMEOUT=20 "HOOP_AUTH_KEY_FILE=$T/key1" -- init
    start 2 3 HOOP_TIMEOUT=20 "HOOP_AUTH_KEY_FILE=$T/key2" -- init
    wait_ranks 3 40
    for r in 0 1 2; do
        [ "$(rc_of $r)" -eq 0 ] || fail "rank $r failed init with the same key"
        expect_in "$T/out$r" "rank $r: init ok"
        expect_in "$T/err$r" "tcp: peer connections are authenticated"
    done

    # No key anywhere works, and says so.
    new_port
    start 0 2 HOOP_TIMEOUT=20 -- init
    start 1 2 HOOP_TIMEOUT=20 -- init
    wait_ranks 2 40
    for r in 0 1; do
        [ "$(rc_of $r)" -eq 0 ] || fail "rank $r failed init without keys"
        expect_in "$T/err$r" "no HOOP_AUTH_KEY, connections are not authenticated"
    done

    # A key file that others may read is refused, with the fix in the sentence.
    chmod 644 "$T/key1"
    new_port
    start 0 1 "HOOP_AUTH_KEY_FILE=$T/key1" -- init
    wait_ranks 1 20
    [ "$(rc_of 0)" -ne 0 ] || fail "a world-readable key file was accepted"
    expect_in "$T/out0" "init failed: INVALID_ARGUMENT"
    expect_in "$T/err0" "accessible by group or others (mode 0644)"
    expect_in "$T/err0" "chmod 600 $T/key1"
}

# ---- strangers ----------------------------------------------------------------------------------

# knock NAME PORT MODE [ARGS...]: a stranger in the background, output in s_NAME.
knock() {
    name=$1
    shift
    (
        if [ $# -ge 4 ]; then
            "$STRANGER" "$2" "$1" "$3" "$4"
        else
            "$STRANGER" "$2" "$1"
        fi >"$T/s_$name" 2>&1
        echo $? >"$T/src_$name"
    ) &
    stranger_pids="$stranger_pids $!"
}

# from NAME: the stranger's own address, as the rank logs it.
from() {
    i=0
    while ! grep -q "^stranger .* from " "$T/s_$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -le 200 ] || fail "stranger $1 did not connect"
        sleep 0.05
    done
    sed -n 's/^stranger .* from \(.*\)$/\1/p' "$T/s_$1"
}

wait_strangers() {
    for name in "$@"; do
        i=0
        while [ ! -f "$T/src_$name" ]; do
            i=$((i + 1))
            [ $i -le 800 ] || fail "stranger $name is still connected"
            sleep 0.05
        done
        [ "$(cat "$T/src_$name")" -eq 0 ] || fail "stranger $name was not turned away: $(cat "$T/s_$name")"
    done
}

# Every listening TCP socket of process PID must be bound to 127.0.0.1 (no wildcard address).
check_bound() {
    pid=$1
    inodes=$(ls -l "/proc/$pid/fd" 2>/dev/null | sed -n 's/.*socket:\[\([0-9]*\)\]$/\1/p' | tr '\n' ' ')
    [ -n "$inodes" ] || fail "no sockets found for pid $pid"
    listening=$(awk -v ino=" $inodes" '$4 == "0A" && index(ino, " " $10 " ") { print $2 }' \
        /proc/net/tcp /proc/net/tcp6)
    [ -n "$listening" ] || fail "pid $pid has no listening socket"
    for a in $listening; do
        case $a in
        0100007F:*) ;;
        *) fail "pid $pid listens on $a, not on 127.0.0.1" ;;
        esac
    done
    echo "$listening" | wc -w
}

strangers() {
    with_key=$1
    new_port
    if [ "$with_key" = 1 ]; then
        export HOOP_AUTH_KEY="$(hexkey)"
    fi
    # Rank 3 comes 4 s late: the others listen and wait meanwhile, which is when strangers knock.
    for r in 0 1 2 3; do
        start $r 4 HOOP_TIMEOUT=30 AUTH_TEST_DELAY_RANK=3 AUTH_TEST_DELAY_S=4 -- loop 40
    done
    i=0
    for r in 0 1 2; do
        while ! grep -q "tcp: listening on" "$T/err$r" 2>/dev/null; do
            i=$((i + 1))
            [ $i -le 300 ] || fail "rank $r did not start listening"
            sleep 0.05
        done
    done
    comm=$(sed -n 's/.*tcp: listening on .*communicator \([0-9a-f]*\)$/\1/p' "$T/err0")
    [ -n "$comm" ] || fail "no communicator id in rank 0's log"
    names=""
    if [ "$with_key" = 1 ]; then
        store_modes="random wrongkey huge silent"
        data_modes="random wrongkey huge silent"
    else
        store_modes="random wrongkey storehuge silent"
        data_modes="random huge silent"
    fi
    for m in $store_modes; do
        knock "store_$m" "$PORT" "$m"
        names="$names store_$m"
    done
    for r in 0 1 2; do
        dport=$(sed -n 's/.*tcp: listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "$T/err$r")
        [ -n "$dport" ] || fail "no transport port in rank $r's log"
        for m in $data_modes; do
            # The wrong-key stranger claims to be rank 3, whose slot must stay free for it.
            knock "data${r}_$m" "$dport" "$m" "$comm" 3
            names="$names data${r}_$m"
        done
    done
    # Listeners are bound to the interface, not to every address.
    for r in 0 1 2; do
        pid=$(sed -n 's/^rank [0-9]* pid \([0-9]*\)$/\1/p' "$T/out$r")
        n=$(check_bound "$pid") || exit 1
        want=1
        [ "$r" -eq 0 ] && want=2
        [ "$n" -ge "$want" ] || fail "rank $r has $n listening socket(s), expected $want"
    done

    wait_ranks 4 80
    for r in 0 1 2 3; do
        [ "$(rc_of $r)" -eq 0 ] || fail "rank $r failed while strangers knocked"
        expect_in "$T/out$r" "rank $r: 40 all-reduces correct"
    done
    wait_strangers $names

    # Each stranger was dropped and logged with its address, for the reason it deserved.
    if [ "$with_key" = 1 ]; then
        expect_in "$T/err0" "rejected client $(from store_random): authentication failed: the peer did not start"
        expect_in "$T/err0" "rejected client $(from store_wrongkey): authentication failed: the peer's proof is wrong"
        expect_in "$T/err0" "rejected client $(from store_huge): authentication failed: the peer did not start"
        expect_in "$T/err0" "client $(from store_silent)"
        grep -E "closing client $(from store_silent), which never authenticated|dropping client $(from store_silent): it did not authenticate" \
            "$T/err0" >/dev/null || fail "the silent stranger on the store was not logged"
        expect_in "$T/s_store_wrongkey" "rejected our key"
    else
        expect_in "$T/err0" "dropping client $(from store_random) after a malformed request"
        expect_in "$T/err0" "dropping client $(from store_storehuge) after a malformed request"
        expect_in "$T/err0" "dropping client $(from store_wrongkey), which wants to authenticate"
        expect_in "$T/err0" "no HOOP_AUTH_KEY, connections are not authenticated"
    fi
    for r in 0 1 2; do
        expect_in "$T/err$r" "dropped a connection from $(from "data${r}_random"): it sent 24 bytes that are not a hoop hello"
        expect_in "$T/err$r" "dropped a connection from $(from "data${r}_huge"): it sent 24 bytes that are not a hoop hello"
        grep -E "dropped a connection from $(from "data${r}_silent"): it (had not identified itself when every peer was connected|did not identify itself)" \
            "$T/err$r" >/dev/null || fail "the silent stranger on rank $r's port was not logged"
        if [ "$with_key" = 1 ]; then
            expect_in "$T/err$r" "dropped a connection from $(from "data${r}_wrongkey"): it claims to be rank 3 but failed authentication"
            expect_in "$T/s_data${r}_wrongkey" "the listener rejected our key"
        fi
    done
    expect_in "$T/err1" "tcp: connected to 3 peer(s)"
}

# ---- failures -----------------------------------------------------------------------------------

three() { # MODE [VAR=VALUE...]
    mode=$1
    shift
    new_port
    t0=$(now_ms)
    for r in 0 1 2; do
        start $r 3 HOOP_TIMEOUT=30 "$@" -- "$mode"
    done
    wait_ranks 3 60
    ms=$(($(now_ms) - t0))
    # The failure must travel at once, not wait for the 30 s timeout (slow tools like valgrind
    # included).
    [ "$ms" -lt 25000 ] || fail "$mode took $ms ms to reach every rank"
    for r in 0 1 2; do
        [ "$mode" = kill ] && [ "$r" = 1 ] && continue
        [ "$(rc_of $r)" -eq 0 ] || fail "rank $r exited with status $(rc_of $r)"
    done
}

case_abort() {
    for s in 1 4; do
        three abort HOOP_SOCKETS_PER_PEER=$s
        expect_in "$T/out1" "rank 1: aborted"
        for r in 0 2; do
            expect_in "$T/out$r" "rank $r: result ABORTED:"
            expect_in "$T/out$r" "rank 1 aborted: hoop_comm_abort was called on rank 1"
            expect_not_in "$T/out$r" "lost connection"
        done
    done
}

case_kill() {
    three kill
    lost=0
    for r in 0 2; do
        expect_in "$T/out$r" "lost connection to rank 1"
        grep -q "rank $r: result PEER_LOST:" "$T/out$r" && lost=$((lost + 1))
        grep -qE "rank $r: result (PEER_LOST|ABORTED):" "$T/out$r" || fail "rank $r: unexpected result"
    done
    [ "$lost" -ge 1 ] || fail "no rank reported HOOP_ERR_PEER_LOST"
}

case_mismatch() {
    three mismatch
    for r in 0 1 2; do
        grep -qE "rank $r: result (MISMATCH|ABORTED):.*broadcast\(count=10" "$T/out$r" ||
            fail "rank $r does not name the mismatched broadcast"
        expect_not_in "$T/out$r" "lost connection"
    done
}

# ---- hooprun ------------------------------------------------------------------------------------

# hr ARGS...: hooprun's output in hr.out, its status in rc.
hr() {
    "$HOOPRUN" "$@" >"$T/hr.out" 2>"$T/hr.err"
    rc=$?
}

case_hooprun() {
    [ -n "$HOOPRUN" ] || fail "no hooprun given"
    show='echo "key=${HOOP_AUTH_KEY:-unset} file=${HOOP_AUTH_KEY_FILE:-unset}"'
    hr -n 3 sh -c "$show"
    [ "$rc" -eq 0 ] || fail "hooprun exited $rc"
    keys=$(sed -n 's/^\[[0-9]\] key=\([0-9a-f]*\) file=unset$/\1/p' "$T/hr.out" | sort -u)
    [ "$(sed -n 's/^\[[0-9]\] key=\([0-9a-f]*\) file=unset$/\1/p' "$T/hr.out" | wc -l)" -eq 3 ] ||
        fail "not every rank got a key: $(cat "$T/hr.out")"
    [ "$(echo "$keys" | wc -l)" -eq 1 ] || fail "the ranks got different keys"
    [ "${#keys}" -eq 64 ] || fail "the key is not 64 hex digits: $keys"
    hr -n 1 sh -c "$show"
    grep -q "key=$keys" "$T/hr.out" && fail "two jobs got the same key"

    HOOP_AUTH_KEY=preset hr -n 2 sh -c "$show"
    [ "$(grep -c '^\[[01]\] key=preset file=unset$' "$T/hr.out")" -eq 2 ] || fail "a set key was not kept"
    HOOP_AUTH_KEY_FILE=/some/key hr -n 2 sh -c "$show"
    [ "$(grep -c '^\[[01]\] key=unset file=/some/key$' "$T/hr.out")" -eq 2 ] || fail "a key file was not kept"
    HOOP_AUTH_KEY=preset HOOP_AUTH_KEY_FILE=/some/key hr --no-auth -n 2 sh -c "$show"
    [ "$(grep -c '^\[[01]\] key=unset file=unset$' "$T/hr.out")" -eq 2 ] || fail "--no-auth passed a key on"
    HOOP_AUTH_KEY= hr -n 1 sh -c 'env | grep -c "^HOOP_AUTH_KEY="'
    expect_in "$T/hr.out" "[0] 1"
    hr --nnodes 2 --node-rank 1 --master-port 1 -n 1 sh -c "$show"
    expect_in "$T/hr.out" "key=unset file=unset"
    expect_in "$T/hr.err" "set the same key on every node"
    hr --help
    expect_in "$T/hr.out" "--no-auth"

    # End to end: the ranks of a job authenticate with hooprun's key, or say they do not.
    HOOP_TRANSPORT=tcp hr -n 3 "$RANK_BIN" init
    [ "$rc" -eq 0 ] || fail "a job with hooprun's key failed: $(cat "$T/hr.out" "$T/hr.err")"
    [ "$(grep -c 'tcp: peer connections are authenticated' "$T/hr.err")" -eq 3 ] || fail "not every rank authenticated"
    [ "$(grep -c 'init ok' "$T/hr.out")" -eq 3 ] || fail "not every rank passed init"
    HOOP_TRANSPORT=tcp hr --no-auth -n 3 "$RANK_BIN" init
    [ "$rc" -eq 0 ] || fail "a job without a key failed"
    [ "$(grep -c 'no HOOP_AUTH_KEY, peer connections are not authenticated' "$T/hr.err")" -eq 3 ] ||
        fail "not every rank said it was unauthenticated"
}

case $case_name in
hooprun) case_hooprun ;;
keys) case_keys ;;
strangers) strangers 1 ;;
strangers-nokey) strangers 0 ;;
abort) case_abort ;;
kill) case_kill ;;
mismatch) case_mismatch ;;
*) fail "unknown case" ;;
esac
echo "PASS [$case_name]"
