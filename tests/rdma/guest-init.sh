#!/bin/sh
# PID 1 of the RDMA test guest (tests/rdma/vm.sh passes it in at every run through the control share,
# mounted at /ctl with env and cmd.sh beside it): mounts the shared folders, brings up soft-RoCE
# (rxe0) and soft-iWARP (siw0), runs the command, leaves its status in /ctl/rc and powers off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb
up() { cut -d' ' -f1 /proc/uptime; }
mark() { echo "$1 $(up)" >>/ctl/times; }
off() {
    sync
    echo o >/proc/sysrq-trigger
    sleep 30
}
mark init

mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs shm /dev/shm
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
ulimit -l unlimited # verbs pins what it registers
ulimit -n 65536
hostname hoop-vm
ip link set lo up

. /ctl/env
i=0
while [ "$i" -lt "$NSHARES" ]; do
    eval "d=\$SHARE_$i"
    if ! { mkdir -p "$d" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 "s$i" "$d"; }; then
        echo "hoop-vm: cannot mount $d" >/ctl/setup.log
        off
    fi
    i=$((i + 1))
done

# The entropy source before anything reads random bytes (libsodium blocks until the pool is ready).
(
    set -x
    modprobe virtio_rng
    modprobe dummy numdummies=0
    ip link add dummy0 type dummy && ip addr add 10.11.0.1/24 dev dummy0 && ip link set dummy0 up
    ip link add dummy1 type dummy && ip addr add 10.12.0.1/24 dev dummy1 && ip link set dummy1 up
    modprobe rdma_rxe && rdma link add rxe0 type rxe netdev dummy0
    modprobe siw && rdma link add siw0 type siw netdev dummy1
    modprobe rdma_ucm
    rdma link show
) >/ctl/setup.log 2>&1
export HOOP_VM_RXE_DEV=rxe0 HOOP_VM_RXE_IP=10.11.0.1 HOOP_VM_SIW_DEV=siw0 HOOP_VM_SIW_IP=10.12.0.1
mark rdma-up

# Output goes to the second serial port, which is the host's stdout; raw, so lines keep their ends.
stty -F /dev/ttyS1 raw -echo 2>/dev/null
cd "$WORKDIR" || off
{
    /bin/sh /ctl/cmd.sh </dev/null 2>&1
    echo $? >/ctl/rc.tmp
} | cat >/dev/ttyS1
mark done
sync
mv /ctl/rc.tmp /ctl/rc
cd /
i=0
while [ "$i" -lt "$NSHARES" ]; do
    eval "umount \"\$SHARE_$i\"" 2>/dev/null
    i=$((i + 1))
done
off
