#!/bin/sh
# The verbs transport on a real RDMA stack, as meson runs it (suite rdma).
#
#   verbs_test.sh suites VM_SH CONFORMANCE HOOPRUN COLL_TEST FAULT ...
#       in one boot of the test guest (VM_SH), on soft-RoCE rxe0, every rank sharing that one
#       device: the transport conformance suite over HOOP_TRANSPORT=ibverbs, the multi-process
#       collective suite at small sizes over it (every collective, dtype and op; 2, 3 and 4 ranks,
#       blocking and nonblocking), and HOOP_TRANSPORT=auto with two hosts faked by HOOP_HOSTID,
#       which must take verbs between the hosts and shared memory inside each; and faults: a rank
#       killed mid-collective (survivors fail naming it, also while the dead rank's partner sleeps
#       outside the library), mismatched calls (a short one, and a long one that goes zero copy);
#       then guest_more.sh: the registration cache against remapped buffers, the faults of the test
#       double of the verbs table, split communicators, and (in the guest) rxe0's interface taken
#       down. On a host with an active RDMA port the same runs happen there instead (without the
#       port taken down). Skipped (77) where neither can be had.
#   verbs_test.sh suites VM_SH CONFORMANCE HOOPRUN COLL_TEST FAULT MR_TEST FAULT_RANK IBV_DOUBLE
#       SPLIT_RANK ANYSOURCE_TEST is the whole argument list (the last: receives from any source
#       over verbs, 3 ranks).
#   verbs_test.sh bw VM_SH HOOPRUN HOOP_PERF MR_TEST
#       hoop's point-to-point bandwidth over verbs (hoop-perf sendrecv, 2 ranks) beside
#       ib_write_bw on rxe0 in the same boot, then what registering memory costs (mr_test cost)
#       and hoop-perf allreduce over verbs. The guest's CPUs are emulated: ratios for correctness,
#       not speeds.
set -u
mode=$1
shift

abspath() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

case $mode in
suites)
    vm=$1 conf=$(abspath "$2") run=$(abspath "$3") coll=$(abspath "$4") fault=$(abspath "$5")
    mr=$(abspath "$6") frank=$(abspath "$7") dbl=$(abspath "$8") split=$(abspath "$9")
    anysrc=$(abspath "${10}") finished=$(abspath "${11}")
    more=$(abspath "$(dirname "$0")/guest_more.sh")
    script="
        set -e
        export HOOP_TIMEOUT=60
        echo '--- conformance over ibverbs'
        '$conf' --transport ibverbs
        echo '--- collectives over ibverbs, 2 ranks'
        HOOP_TRANSPORT=ibverbs '$run' -n 2 '$coll' --mode colls --large-dtypes float32 --large-ops sum
        echo '--- collectives over ibverbs, 4 ranks'
        HOOP_TRANSPORT=ibverbs '$run' -n 4 '$coll' --mode colls --large-dtypes none
        echo '--- nonblocking collectives over ibverbs, 3 ranks'
        HOOP_TRANSPORT=ibverbs '$run' -n 3 '$coll' --mode nonblocking
        echo '--- receives from any source over ibverbs, 3 ranks'
        HOOP_TRANSPORT=ibverbs '$run' -n 3 '$anysrc' --large-count 40003
        echo '--- auto, two hosts faked: verbs between them, shared memory inside'
        HOOP_DEBUG=INFO HOOP_TRANSPORT=auto '$run' -n 4 '$coll' --mode colls --fake-hosts 2 \
            --large-dtypes none --colls allreduce,broadcast,alltoall >out.auto 2>&1 ||
            { tail -30 out.auto; exit 1; }
        grep 'transport per peer' out.auto
        grep -q 'transport per peer: shm to rank(s) \[[0-9]\], ibverbs to rank(s) \[[0-9],[0-9]\]' out.auto
        grep -q 'ibverbs: rank [0-9] over rxe0:1 RoCE v2 GID 1 ::ffff:10.11.0.1 MTU 1024 (GID index 1)' out.auto
        grep 'checks passed' out.auto
        rm -f out.auto
        echo '--- faults over ibverbs'
        for c in allreduce alltoall sendrecv; do
            '$fault' --transport ibverbs --mode kill --coll \$c --ranks 4 --mib 1 --names chain
        done
        '$fault' --transport ibverbs --mode kill --coll allreduce --ranks 4 --mib 1 --names chain \
            --detect 1 --sleeper partner
        '$fault' --transport ibverbs --mode mismatch --what coll --count 1000 --victim 0 --ranks 3 \
            --timeout 2
        '$fault' --transport ibverbs --mode mismatch --what count --count 100003 --victim 2 --ranks 3 \
            --timeout 2
        echo '--- a call every rank finished survives rank 1 aborting right after it'
        HOOP_TRANSPORT=ibverbs '$run' -n 3 '$finished' --scenario abort-after --rounds 100 \
            --count 100000
        sh '$more' '$run' '$mr' '$frank' '$dbl' '$split' \$NETDEV
        echo '--- every verbs run passed'
    "
    if grep -qs ACTIVE /sys/class/infiniband/*/ports/*/state; then
        echo "--- this host has an active RDMA port: running there"
        NETDEV= exec sh -c "$script"
    fi
    dir=$(cd "$(dirname "$conf")/../.." && pwd)
    # In the guest, rxe0 sits on dummy0, which the last check takes down.
    exec bash "$vm" -t 900 -w "$dir" -s "$(dirname "$more")" -e NETDEV=dummy0 -- sh -c "$script"
    ;;
bw)
    vm=$1 run=$(abspath "$2") perf=$(abspath "$3") mr=$(abspath "$4")
    dir=$(cd "$(dirname "$perf")/.." && pwd)
    exec bash "$vm" -t 900 -w "$dir" -- sh -c "
        set -e
        for how in '' -b; do
            echo \"--- ib_write_bw \$how on rxe0, 4 MiB messages\"
            ib_write_bw -d rxe0 -x 1 -F \$how -s 4194304 -n 200 >bw.srv 2>&1 &
            sleep 1
            ib_write_bw -d rxe0 -x 1 -F \$how -s 4194304 -n 200 10.11.0.1 >bw.cli
            wait
            grep -A1 '#bytes' bw.cli
            awk '\$1 == 4194304 { print \$4 }' bw.cli >bw.ib\$how
        done
        echo '--- hoop-perf sendrecv over ibverbs, 2 ranks (each sends and receives at once)'
        HOOP_TRANSPORT=ibverbs '$run' -n 2 '$perf' sendrecv -b 4M -e 4M -n 50 -w 5 -c 0 | tee bw.hoop
        uni=\$(cat bw.ib) bi=\$(cat bw.ib-b)
        hoop=\$(awk '\$2 == 4194304 && \$4 == \"float32\" { printf \"%.2f\", \$2 / \$7 }' bw.hoop)
        echo \"ib_write_bw: \$uni MB/s one way, \$bi MB/s both ways; hoop sendrecv: \$hoop MB/s each way\"
        awk -v u=\"\$uni\" -v b=\"\$bi\" -v h=\"\$hoop\" 'BEGIN { printf \"ratio hoop / ib_write_bw: %.2f one way, %.2f both ways\\n\", h / u, 2 * h / b }'
        rm -f bw.srv bw.cli bw.hoop bw.ib bw.ib-b
        echo '--- registering memory on rxe0'
        '$mr' cost rxe0
        echo '--- hoop-perf allreduce over ibverbs, 2 ranks'
        HOOP_TRANSPORT=ibverbs '$run' -n 2 '$perf' allreduce -b 1K -e 4M -f 4 -n 20 -w 3 -c 1
    "
    ;;
*)
    echo "usage: verbs_test.sh suites|bw ..." >&2
    exit 2
    ;;
esac
