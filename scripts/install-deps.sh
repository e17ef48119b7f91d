#!/bin/sh
# Installs what hoop needs to build and test on Debian 12 (as root, or through sudo).
set -eu
# openmpi-bin and python3-torch are the peers the benchmarks compare against; libsodium does the
# authentication; libopenblas0 gives torch a realistic BLAS; g++ checks the GPU kernels' math on
# the host (tests/cuda). The CUDA toolkit is optional: found where installed, skipped otherwise.
# libibverbs-dev gives the verbs headers (the library is opened at run time); qemu-system-x86,
# debootstrap and e2fsprogs build and boot the guest with a soft-RDMA kernel stack that
# tests/rdma/vm.sh runs the RDMA tests in. slurm-wlm and munge run the one-node Slurm cluster of
# tests/launchers-ext; libpmix-dev gives the PMIx headers (libpmix2 is opened at run time).
pkgs="meson ninja-build gcc g++ clang clang-format libclang-rt-14-dev pkg-config libcmocka-dev valgrind iproute2
      libsodium-dev openmpi-bin libopenmpi-dev python3 python3-numpy python3-torch libopenblas0
      libibverbs-dev qemu-system-x86 debootstrap e2fsprogs slurm-wlm munge libpmix-dev libpmix2"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
