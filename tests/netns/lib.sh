# Two emulated hosts on one machine, sourced by the netns tests: network namespaces $NS_A and $NS_B
# joined by one veth pair, 10.211.0.1 (host A, the master) and 10.211.0.2 (host B). Both ends of the
# pair are created inside the namespaces, so the machine's own interfaces are never touched, and
# the names carry this shell's pid so that concurrent runs do not clash. Everything is removed on
# every exit path.
#
# Ranks: 2 per host, global rank = node * 2 + local rank (as hooprun --nnodes 2 numbers them), so
# ranks 0 and 1 live on A, 2 and 3 on B.

ADDR_A=10.211.0.1
ADDR_B=10.211.0.2
PORT=29500 # inside the namespaces only: no clash with anything outside them
NS_A=
NS_B=
WORK=
FAILED=0

skip() {
    echo "SKIP: $*"
    exit 77
}

fail() {
    echo "FAIL: $*"
    FAILED=1
}

note() {
    echo "--- $*"
}

# Milliseconds since the epoch (GNU date).
now_ms() {
    echo $(($(date +%s%N) / 1000000))
}

ns_of_rank() {
    if [ "$1" -lt 2 ]; then echo "$NS_A"; else echo "$NS_B"; fi
}

# Ends the processes still inside our namespaces (only ours can be there: we made them), then
# removes the namespaces; the kernel frees each with its end of the veth pair, and with it the
# other end, once its last process has gone. Quick, as meson follows its SIGTERM with a SIGKILL
# half a second later.
cleanup() {
    trap - EXIT INT TERM HUP
    for ns in $NS_A $NS_B; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    wait # the shells of start_ranks, which write a status file once their rank is gone
    [ -n "$WORK" ] && rm -rf "$WORK"
}

# Prints every log of the run (for meson's test log) when a check failed.
dump_logs() {
    for f in "$WORK"/*.log; do
        [ -f "$f" ] || continue
        echo "===== $(basename "$f")"
        grep -v ' hoop INFO host identity' "$f" | tail -n 40
    done
}

finish() {
    if [ "$FAILED" -ne 0 ]; then
        dump_logs
        echo "FAILED"
        exit 1
    fi
    echo "PASSED"
    exit 0
}

setup_hosts() {
    [ "$(id -u)" = 0 ] || skip "network namespaces need root"
    command -v ip >/dev/null 2>&1 || skip "iproute2 (ip) is not installed"
    ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available"
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/hoop-netns.XXXXXX") || skip "mktemp failed"
    NS_A=hoopt$$a
    ip netns add "$NS_A" 2>"$WORK/ns.err" || { NS_A=; skip "cannot create a network namespace: $(cat "$WORK/ns.err")"; }
    NS_B=hoopt$$b
    ip netns add "$NS_B" 2>"$WORK/ns.err" || { NS_B=; skip "cannot create a network namespace: $(cat "$WORK/ns.err")"; }
    ip link add eth0 netns "$NS_A" type veth peer name eth0 netns "$NS_B" 2>"$WORK/ns.err" ||
        skip "cannot create a veth pair between namespaces: $(cat "$WORK/ns.err")"
    ip -n "$NS_A" addr add "$ADDR_A/24" dev eth0 || skip "cannot configure the veth pair"
    ip -n "$NS_B" addr add "$ADDR_B/24" dev eth0 || skip "cannot configure the veth pair"
    for ns in $NS_A $NS_B; do
        if ! ip -n "$ns" link set lo up || ! ip -n "$ns" link set eth0 up; then
            skip "cannot bring the veth pair up"
        fi
    done
    echo "hosts: $NS_A ($ADDR_A) and $NS_B ($ADDR_B), joined by a veth pair; logs in $WORK"
}

# run_hooprun NAME TIMEOUT_S ENV... -- PROGRAM ARGS...
# hooprun in both namespaces, node 0 on A and node 1 on B, 2 ranks each; waits for both. Output
# in $WORK/NAME.A.log and $WORK/NAME.B.log, exit statuses in RC_A and RC_B, elapsed ms in ELAPSED.
run_hooprun() {
    name=$1
    limit=$2
    shift 2
    envs=
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        envs="$envs $1"
        shift
    done
    shift
    note "$name:$envs $*"
    t0=$(now_ms)
    # shellcheck disable=SC2086 # envs is a list of words without spaces
    ip netns exec "$NS_A" env $envs "$HOOPRUN" --timeout "$limit" -n 2 --nnodes 2 --node-rank 0 \
        --master-addr "$ADDR_A" --master-port "$PORT" "$@" >"$WORK/$name.A.log" 2>&1 &
    pid_a=$!
    # shellcheck disable=SC2086
    ip netns exec "$NS_B" env $envs "$HOOPRUN" --timeout "$limit" -n 2 --nnodes 2 --node-rank 1 \
        --master-addr "$ADDR_A" --master-port "$PORT" "$@" >"$WORK/$name.B.log" 2>&1 &
    pid_b=$!
    wait "$pid_a"
    RC_A=$?
    wait "$pid_b"
    RC_B=$?
    ELAPSED=$(($(now_ms) - t0))
    echo "    exit status A=$RC_A B=$RC_B, ${ELAPSED} ms"
}

# start_ranks NAME ENV... -- PROGRAM ARGS...
# Starts the 4 ranks as separate processes without a launcher (hooprun stops a job's other ranks
# at the first failure, before they could say what they saw), each with torchrun's variables.
# Rank r writes $WORK/NAME.r.log and, once it has ended, its exit status to $WORK/NAME.r.rc.
start_ranks() {
    name=$1
    shift
    envs=
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        envs="$envs $1"
        shift
    done
    shift
    note "$name (4 separate ranks):$envs $*"
    for r in 0 1 2 3; do
        (
            # shellcheck disable=SC2086
            ip netns exec "$(ns_of_rank $r)" env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) \
                LOCAL_WORLD_SIZE=2 GROUP_RANK=$((r / 2)) MASTER_ADDR="$ADDR_A" MASTER_PORT="$PORT" \
                $envs "$@" >"$WORK/$name.$r.log" 2>&1
            echo $? >"$WORK/$name.$r.rc"
        ) &
    done
}

# wait_ranks NAME LIMIT_MS: waits until the 4 ranks of start_ranks NAME have ended, at most
# LIMIT_MS; returns 1 if some are still running then.
wait_ranks() {
    t0=$(now_ms)
    while :; do
        n=0
        for r in 0 1 2 3; do [ -f "$WORK/$1.$r.rc" ] && n=$((n + 1)); done
        [ $n -eq 4 ] && return 0
        [ $(($(now_ms) - t0)) -ge "$2" ] && return 1
        sleep 0.1
    done
}

# Fails unless no process is left in either namespace.
check_no_leftovers() {
    for ns in $NS_A $NS_B; do
        left=$(ip netns pids "$ns")
        if [ -n "$left" ]; then
            fail "processes left behind in $ns after $1:"
            for p in $left; do ps -o pid=,args= -p "$p"; done
        fi
    done
}
