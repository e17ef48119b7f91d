#!/usr/bin/env bash
# Runs one command inside a small Debian 12 guest whose kernel has a real RDMA stack: soft-RoCE v2
# (rdma_rxe, device rxe0) and soft-iWARP (siw, device siw0), each on a dummy interface. The hosts
# hoop is developed on have no RDMA hardware and no RDMA drivers; the guest's kernel has both.
#
#   tests/rdma/vm.sh [-t SECONDS] [-w DIR] [-s DIR]... [-e NAME=VALUE]... [--] COMMAND [ARG...]
#   tests/rdma/vm.sh --build     build the guest image if it is not cached yet, nothing else
#   tests/rdma/vm.sh --check     exit 0 if a run can happen now (qemu and a cached image), else 77
#
# COMMAND runs as root in DIR (default: the current directory) through /bin/sh. DIR and every -s DIR
# are shared from the host over virtio-9p at the same absolute path, so a build directory made on a
# Debian 12 host runs there unchanged. Its output streams to our stdout, and we exit with its status.
# Other exits: 77 where qemu or the image cannot be had (meson's skip), 124 when the guest ran past
# SECONDS (default 600) or never reported, 125 a setup error.
#
# In the guest: rxe0 on dummy0 10.11.0.1 (HOOP_VM_RXE_DEV, HOOP_VM_RXE_IP), siw0 on dummy1 10.12.0.1
# (HOOP_VM_SIW_DEV, HOOP_VM_SIW_IP), `ulimit -l` unlimited, no network beyond those. Installed:
# what hoop needs at run time (libsodium, libcmocka, libibverbs with its providers, librdmacm) and
# rdma-core's tools (ibv_devinfo, rping, perftest) to compare with.
#
# The image (a kernel, a tiny initramfs and an ext4 root) is built once with debootstrap (needs root
# and the Debian archive) into ${HOOP_RDMA_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hoop-rdma-vm},
# and rebuilt when what goes into it changes (its recipe's hash is stored with it). Each run boots it
# with the root disk in snapshot mode, so runs never change it and may run side by side. What the
# guest does at boot is tests/rdma/guest-init.sh, passed in at every run, so changing it costs no
# rebuild.
#
# Variables: HOOP_RDMA_VM=0 skips every run; HOOP_RDMA_VM_CACHE (above); HOOP_RDMA_VM_ACCEL=kvm|tcg
# (default: KVM where it really boots a kernel, probed once and remembered); HOOP_RDMA_VM_CPUS (2),
# HOOP_RDMA_VM_MEM (MiB, 1536); HOOP_RDMA_VM_MIRROR (default: the archive this host's apt uses).
#
# Measured on a 2-core host without usable KVM (software emulation), Debian's archive near by:
#   image build from nothing 75-90 s: debootstrap 36-48 s, siw.ko built from linux-source 29-48 s,
#   initramfs 0.1 s, ext4 root 1-3 s; the cache then holds 296 MiB. The first run on a new image
#   also asks once whether KVM works (15 s where it does not).
#   each run: 10-14 s from qemu start to power-off; the guest is at rdma up 6-8 s after its kernel
#   starts; tests/rdma/probe_test.sh's five probe runs add 2-4 s.
# The guest's CPUs are emulated: use it for correctness, never for speed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${HOOP_RDMA_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hoop-rdma-vm}
CPUS=${HOOP_RDMA_VM_CPUS:-2}
MEM=${HOOP_RDMA_VM_MEM:-1536}
TIMEOUT=600
WORKDIR=$PWD
SHARES=()
ENVS=()
MODE=run

# At run time: hoop's own needs (libsodium, cmocka for the unit binaries, verbs and the RDMA CM with
# their providers) and the stack's tools. busybox-static makes the initramfs. The siw build's
# packages are installed and removed again inside build_image.
PKGS=(linux-image-amd64 busybox-static kmod iproute2 procps
      libsodium23 libcmocka0 libibverbs1 ibverbs-providers librdmacm1 rdma-core
      ibverbs-utils rdmacm-utils perftest)

say() { printf 'vm: %s\n' "$*" >&2; }
skip() { printf 'SKIP: %s\n' "$*"; exit 77; }
die() { say "error: $*"; exit 125; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# One word for the guest's /bin/sh (bash's %q writes $'...', which dash does not read).
shq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

while [ $# -gt 0 ]; do
    case $1 in
    -t) TIMEOUT=$2; shift 2 ;;
    -w) WORKDIR=$(cd "$2" && pwd); shift 2 ;;
    -s) SHARES+=("$(cd "$2" && pwd)"); shift 2 ;;
    -e) ENVS+=("$2"); shift 2 ;;
    --build) MODE=build; shift ;;
    --check) MODE=check; shift ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
    esac
done
[ "$MODE" != run ] || [ $# -gt 0 ] || die "no command given (see --help)"
[ "${HOOP_RDMA_VM:-1}" != 0 ] || skip "HOOP_RDMA_VM=0: no guest runs"
command -v qemu-system-x86_64 >/dev/null ||
    skip "qemu-system-x86_64 not found (scripts/install-deps.sh installs qemu-system-x86)"

# ------------------------------------------------------------------------------------- the image
# PID 1 as baked into the image: just enough to reach the control share, whose init.sh does the rest.
write_stub() {
    cat >"$1" <<'EOF'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
modprobe 9pnet_virtio && modprobe 9p &&
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 ctl /ctl &&
    exec /bin/sh /ctl/init.sh
echo "hoop-vm: no control share" >/dev/console
echo o >/proc/sysrq-trigger
sleep 60
EOF
    chmod 755 "$1"
}

# The initramfs /init: loads the modules that reach the root disk and switches to it.
write_initramfs_init() {
    cat >"$1" <<'EOF'
#!/bin/busybox sh
B=/bin/busybox
$B mkdir -p /dev /proc /root
$B mount -t devtmpfs dev /dev
$B mount -t proc proc /proc
for m in $($B cat /modules/order); do
    $B insmod "/modules/$m" || echo "initramfs: insmod $m failed"
done
n=0
while [ ! -b /dev/vda ] && [ $n -lt 200 ]; do $B sleep 0.05; n=$((n + 1)); done
$B mount -t ext4 /dev/vda /root || { echo "initramfs: cannot mount /dev/vda"; $B poweroff -f; }
$B umount /proc
$B mount --move /dev /root/dev
exec $B switch_root /root /sbin/hoop-vm-init
EOF
    chmod 755 "$1"
}

# Runs in the new root (chroot): siw is not enabled in Debian's kernels, so it is built out of tree
# from the linux-source package of the same kernel, then the compiler and sources are removed.
siw_recipe() {
    cat <<'EOF'
set -eu
export DEBIAN_FRONTEND=noninteractive
kver=$(ls /lib/modules)
series=${kver%%.0-*}
apt-get update -qq
apt-get install -y -qq --no-install-recommends linux-headers-$kver linux-source-$series xz-utils \
    gcc make libc6-dev >/dev/null
mkdir -p /tmp/siw
tar -xJf /usr/src/linux-source-$series.tar.xz -C /tmp/siw --strip-components=5 \
    --wildcards '*/drivers/infiniband/sw/siw/*'
make -s -C /lib/modules/$kver/build M=/tmp/siw CONFIG_RDMA_SIW=m modules 2>&1 | grep -v BTF || true
mkdir -p /lib/modules/$kver/updates
strip --strip-debug /tmp/siw/siw.ko -o /lib/modules/$kver/updates/siw.ko
rm -rf /tmp/siw
apt-get purge -y -qq --autoremove linux-headers-$kver linux-source-$series xz-utils gcc make \
    libc6-dev >/dev/null
apt-get clean
depmod -a $kver
EOF
}

# What decides the image's content; a cached image built from anything else is rebuilt.
recipe_hash() {
    { echo "${PKGS[*]}"; declare -f write_stub write_initramfs_init build_image; siw_recipe; } |
        sha256sum | cut -c1-16
}

host_mirror() {
    sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
        head -n 1 | grep . ||
        awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true
}

build_image() {
    local t0 t new root kver mirror
    t0=$(now)
    [ "$(id -u)" = 0 ] || skip "no guest image in $CACHE, and building one needs root (debootstrap)"
    command -v debootstrap >/dev/null ||
        skip "debootstrap not found (scripts/install-deps.sh installs it)"
    command -v mkfs.ext4 >/dev/null || skip "mkfs.ext4 not found (e2fsprogs)"
    mirror=${HOOP_RDMA_VM_MIRROR:-$(host_mirror)}
    [ -n "$mirror" ] || skip "no Debian archive known (set HOOP_RDMA_VM_MIRROR)"
    new=$CACHE/new
    rm -rf "$new"
    mkdir -p "$new"
    root=$new/root
    say "building the guest image in $CACHE (a few minutes, once)"

    t=$(now)
    local include
    include=$(IFS=,; echo "${PKGS[*]}")
    if ! INITRD=No debootstrap --variant=minbase --include="$include" bookworm "$root" "$mirror" \
        >"$new/debootstrap.log" 2>&1; then
        tail -n 15 "$new/debootstrap.log" >&2
        rm -rf "$root"
        skip "cannot build the guest image: debootstrap from $mirror failed (log above)"
    fi
    say "debootstrap: $(secs "$t") s"

    t=$(now)
    if ! siw_recipe | chroot "$root" /bin/sh >"$new/siw.log" 2>&1; then
        tail -n 15 "$new/siw.log" >&2
        rm -rf "$root"
        skip "cannot build the guest image: building siw.ko failed (log above)"
    fi
    kver=$(ls "$root/lib/modules")
    [ -f "$root/lib/modules/$kver/updates/siw.ko" ] || skip "cannot build the guest image: no siw.ko"
    say "siw.ko for $kver: $(secs "$t") s"

    # Nothing a guest without hardware uses: documentation, package lists, most drivers.
    local k=$root/lib/modules/$kver/kernel
    rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/* \
        "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/boot/initrd.img* \
        "$k"/sound "$k"/drivers/{gpu,media,staging,usb,bluetooth,hid,iio,input,isdn,mmc,mtd,video} \
        "$k"/drivers/{hwmon,nfc,platform,scsi,ata,infiniband/hw} "$k"/drivers/net/{wireless,ethernet} \
        "$k"/net/{wireless,bluetooth,mac80211}
    chroot "$root" depmod -a "$kver"
    write_stub "$root/sbin/hoop-vm-init"
    mkdir -p "$root/ctl"
    echo hoop-vm >"$root/etc/hostname"

    t=$(now)
    local ird=$new/initramfs m
    mkdir -p "$ird/bin" "$ird/modules"
    cp "$root/bin/busybox" "$ird/bin/"
    write_initramfs_init "$ird/init"
    : >"$ird/modules/order"
    # modprobe lists each module after what it depends on (built-in ones as "builtin").
    for m in $(chroot "$root" modprobe -S "$kver" --show-depends -a virtio_pci virtio_blk \
                   crc32c_generic ext4 | awk '$1 == "insmod" && !seen[$2]++ { print $2 }'); do
        cp "$root$m" "$ird/modules/"
        echo "${m##*/}" >>"$ird/modules/order"
    done
    (cd "$ird" && find . | "$root/bin/busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$new/initrd.gz"
    cp "$root/boot/vmlinuz-$kver" "$new/vmlinuz"
    say "initramfs ($(wc -l <"$ird/modules/order") modules): $(secs "$t") s"

    t=$(now)
    local mib
    mib=$(($(du -sm "$root" | cut -f1) + 512)) # room for what a run writes (in its snapshot)
    mkfs.ext4 -q -F -L hoop-vm -d "$root" "$new/root.img" "${mib}M" >/dev/null
    rm -rf "$root" "$ird"
    say "ext4 root (${mib} MiB): $(secs "$t") s"

    recipe_hash >"$new/recipe"
    rm -rf "$CACHE/image"
    mv "$new" "$CACHE/image"
    say "image built in $(secs "$t0") s; the cache holds $(du -sh "$CACHE" | cut -f1)"
}

image_ok() {
    [ -f "$CACHE/image/root.img" ] && [ -f "$CACHE/image/vmlinuz" ] && [ -f "$CACHE/image/initrd.gz" ] &&
        [ "$(cat "$CACHE/image/recipe" 2>/dev/null)" = "$(recipe_hash)" ]
}

if ! image_ok; then
    [ "$MODE" != check ] || skip "no guest image in $CACHE (tests/rdma/vm.sh --build makes one)"
    mkdir -p "$CACHE"
    # One build at a time; whoever waited finds the image made.
    exec 9>"$CACHE/lock"
    flock 9
    image_ok || build_image
    flock -u 9
fi
[ "$MODE" = run ] || exit 0

# ------------------------------------------------------------------------------- the accelerator
# /dev/kvm can open and still not run a stock kernel (nested or paravirtual hosts): the verdict comes
# from booting the guest kernel once, remembered per image.
accel=${HOOP_RDMA_VM_ACCEL:-}
if [ -z "$accel" ]; then
    if [ ! -f "$CACHE/image/accel" ]; then
        accel=tcg
        if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
            banner=$(timeout 15 qemu-system-x86_64 -accel kvm -cpu host -m 256 -display none \
                -nodefaults -no-reboot -serial stdio -kernel "$CACHE/image/vmlinuz" \
                -append "console=ttyS0 panic=-1 rdinit=/none" </dev/null 2>/dev/null | head -c 65536 || true)
            case $banner in *"Linux version"*) accel=kvm ;; esac
        fi
        echo "$accel" >"$CACHE/image/accel"
    fi
    accel=$(cat "$CACHE/image/accel")
fi
case $accel in
kvm) accel_args=(-accel kvm -cpu host) ;;
tcg) accel_args=(-accel tcg,thread=multi -cpu max) ;;
*) die "HOOP_RDMA_VM_ACCEL=$accel: kvm or tcg" ;;
esac
bios_args=()
[ -f /usr/share/qemu/qboot.rom ] && bios_args=(-bios /usr/share/qemu/qboot.rom) # boots seconds faster

# ---------------------------------------------------------------------------------------- the run
ctl=$(mktemp -d "${TMPDIR:-/tmp}/hoop-vm.XXXXXX")
qpid=
cleanup() {
    [ -z "$qpid" ] || kill "$qpid" 2>/dev/null || true
    rm -rf "$ctl"
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP

cp "$here/guest-init.sh" "$ctl/init.sh"
share_args=()
all_shares=("$WORKDIR" "${SHARES[@]}")
{
    echo "WORKDIR=$(shq "$WORKDIR")"
    i=0
    for d in "${all_shares[@]}"; do
        case $d in
        / | /bin* | /boot* | /dev* | /etc* | /lib* | /proc* | /run* | /sbin* | /sys* | /usr* | /var* | /ctl*)
            die "cannot share $d into the guest (it would hide the guest's own)" ;;
        esac
        share_args+=(-virtfs "local,path=$d,mount_tag=s$i,security_model=none,id=s$i")
        echo "SHARE_$i=$(shq "$d")"
        i=$((i + 1))
    done
    printf 'NSHARES=%d\n' "$i"
    for kv in "${ENVS[@]}"; do echo "export ${kv%%=*}=$(shq "${kv#*=}")"; done
} >"$ctl/env"
# One argument is a shell command line; several are a command and its arguments, kept as words.
if [ $# -eq 1 ]; then
    printf '%s\n' "$1" >"$ctl/cmd.sh"
else
    for a in "$@"; do printf '%s ' "$(shq "$a")"; done >"$ctl/cmd.sh"
    echo >>"$ctl/cmd.sh"
fi

t=$(now)
set +e
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 "${accel_args[@]}" "${bios_args[@]}" -smp "$CPUS" -m "$MEM" \
    -display none -nodefaults -no-reboot \
    -kernel "$CACHE/image/vmlinuz" -initrd "$CACHE/image/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1 mitigations=off" \
    -drive "file=$CACHE/image/root.img,if=virtio,format=raw,snapshot=on" \
    -device virtio-rng-pci \
    -virtfs "local,path=$ctl,mount_tag=ctl,security_model=none,id=ctl" "${share_args[@]}" \
    -serial "file:$ctl/console.log" -serial stdio </dev/null &
qpid=$!
wait "$qpid"
qrc=$?
qpid=
set -e
if [ -f "$ctl/rc" ]; then
    rc=$(cat "$ctl/rc")
    marks=$(tr '\n' ' ' <"$ctl/times" 2>/dev/null || true)
    say "exit $rc; $accel, $(secs "$t") s from qemu start to power-off (guest uptime: ${marks% })"
    exit "$rc"
fi
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    say "no result within ${TIMEOUT} s; the console's end:"
else
    say "the guest stopped (qemu exit $qrc) without a result; the console's end:"
fi
tail -n 30 "$ctl/console.log" >&2 || true
[ ! -f "$ctl/setup.log" ] || { say "RDMA set-up:"; cat "$ctl/setup.log" >&2; }
exit 124
