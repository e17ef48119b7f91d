#!/bin/sh
# An emulated cluster on one machine: N network namespaces ("hosts"), each joined to one bridge (the
# "switch") by a veth pair whose both directions are rate-limited with tbf, so every host has a link
# of RATE bits per second in and out, as on a real network. Needs root and iproute2.
#
#   bench/netns-cluster.sh up N [RATE]     create hosts hoop-h0 .. hoop-h(N-1) (RATE default 200mbit)
#   bench/netns-cluster.sh run N CMD...    run CMD as one rank on each host, rank i on hoop-hi, with
#                                          RANK, WORLD_SIZE, MASTER_ADDR (host 0), MASTER_PORT set;
#                                          waits for all, exits non-zero if any rank failed;
#                                          RANKS_PER_HOST=L runs L ranks on each (ranks i*L .. i*L+L-1
#                                          on hoop-hi)
#   bench/netns-cluster.sh mpirun N ARGS... Open MPI's mpirun, started on host 0, with
#                                          RANKS_PER_HOST slots on each of hosts 0 .. N-1
#                                          (default 1); ARGS: more mpirun options, then the
#                                          program and its arguments
#   bench/netns-cluster.sh down            remove every host and the switch
#
# Host i has address 10.77.0.(i+1)/24 on its interface eth0. Nothing leaves the machine.
set -eu
PREFIX=hoop-h
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
BR=hoopsw0

up() {
    n=$1
    rate=${2:-200mbit}
    down 2>/dev/null || true
    ip link add "$BR" type bridge
    ip link set "$BR" up
    i=0
    while [ "$i" -lt "$n" ]; do
        ns=$PREFIX$i
        ip netns add "$ns"
        ip link add "hv$i" type veth peer name "hp$i"
        ip link set "hv$i" netns "$ns"
        ip -n "$ns" link set "hv$i" name eth0
        ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        ip link set "hp$i" master "$BR"
        ip link set "hp$i" up
        # Both directions of the host's link: egress of eth0 (host -> switch) and egress of the
        # switch port (switch -> host).
        ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
        tc qdisc add dev "hp$i" root tbf rate "$rate" burst 256kb latency 100ms
        i=$((i + 1))
    done
}

down() {
    # Deleting the switch-side end of each veth removes the pair at once (a namespace's removal
    # frees its devices only later, and a quick "up" would then find them still there).
    for dev in $(ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: \(hp[0-9]*\)@.*/\1/p'); do
        ip link del "$dev" 2>/dev/null || true
    done
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX" || true); do
        ip netns del "$ns"
    done
    ip link del "$BR" 2>/dev/null || true
}

run() {
    n=$1
    shift
    port=${MASTER_PORT:-29577}
    pids=""
    i=0
    per=${RANKS_PER_HOST:-1}
    while [ "$i" -lt "$n" ]; do
        j=0
        while [ "$j" -lt "$per" ]; do
            ip netns exec "$PREFIX$i" env RANK="$((i * per + j))" WORLD_SIZE="$((n * per))" \
                LOCAL_RANK="$j" LOCAL_WORLD_SIZE="$per" MASTER_ADDR=10.77.0.1 MASTER_PORT="$port" "$@" &
            pids="$pids $!"
            j=$((j + 1))
        done
        i=$((i + 1))
    done
    status=0
    for p in $pids; do
        wait "$p" || status=1
    done
    return $status
}

# Every host runs under its own hostname (a UTS namespace of its own): Open MPI names its
# shared-memory segments after the host, so two "hosts" both called by the machine's name would
# open each other's. $1: the host's index; the rest: the command.
on_host() {
    i=$1
    shift
    # shellcheck disable=SC2016 # $0 and $@ are the inner shell's
    ip netns exec "$PREFIX$i" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$PREFIX$i" "$@"
}

mpirun_() {
    n=$1
    shift
    per=${RANKS_PER_HOST:-1}
    hosts=$(seq -s, -f "10.77.0.%g:$per" 1 "$n")
    root=""
    [ "$(id -u)" -eq 0 ] && root=--allow-run-as-root
    # mpirun reaches the other hosts through this script's "agent" in place of ssh; its own
    # traffic and the MPI traffic between hosts stay on eth0, the rate-limited link.
    on_host 0 mpirun $root --host "$hosts" -np "$((n * per))" --mca plm_rsh_agent "$SELF agent" \
        --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include eth0 --mca btl self,vader,tcp \
        --mca btl_tcp_if_include eth0 --mca pml ob1 "$@"
}

# mpirun's launch agent: "agent 10.77.0.(i+1) COMMAND" runs COMMAND (one shell string, as ssh
# would pass it) on host i.
agent() {
    host=$1
    shift
    on_host "$((${host##*.} - 1))" sh -c "$*"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
up) up "$@" ;;
down) down ;;
run) run "$@" ;;
mpirun) mpirun_ "$@" ;;
agent) agent "$@" ;;
*)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
