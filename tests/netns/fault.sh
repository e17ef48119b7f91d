#!/bin/sh
# The fault driver (tests/fault/fault) on two real hosts as the kernel sees them: network
# namespaces joined by a veth pair, ranks 0 and 1 on host A, 2 and 3 on host B, so each rank has a
# shared-memory peer and two TCP peers. The driver starts each rank in its namespace itself and
# checks what it always checks (every survivor fails in time, none by a signal, ...).
#
#   fault.sh FAULT ARGS...      (ARGS as for fault, without --netns, --master-addr, --ranks)
set -u
FAULT=$1
shift
. "$(dirname "$0")/lib.sh"

setup_hosts
"$FAULT" "$@" --ranks 4 --netns "$NS_A,$NS_A,$NS_B,$NS_B" --master-addr "$ADDR_A"
