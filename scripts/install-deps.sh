#!/bin/sh
# Installs what hoop needs to build and test on Debian 12 (as root, or through sudo).
set -eu
pkgs="meson ninja-build gcc clang libclang-rt-14-dev pkg-config libcmocka-dev valgrind iproute2"
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
