/* libFuzzer target: the status datagram decoder (core/explain.c). Every datagram that reaches a
 * rank's status socket, from a peer or a stranger, goes through it before anything else. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hoop__status_msg_t m;
    if (hoop__status_decode(data, size, &m) != HOOP_OK) return 0;
    /* Accepted: exactly one size, every field in range, and re-encoding gives the same bytes. */
    if (size != HOOP__STATUS_SIZE || (m.type != HOOP__STATUS_REQ && m.type != HOOP__STATUS_ANS) ||
        m.kind >= HOOP__K_COUNT || m.dtype >= HOOP_DTYPE_COUNT || m.state > 4 ||
        (m.flags & ~HOOP__STATUS_FLAGS) != 0)
        __builtin_trap();
    uint8_t again[HOOP__STATUS_SIZE];
    hoop__status_encode(&m, again);
    if (memcmp(again, data, sizeof(again)) != 0) __builtin_trap();
    return 0;
}
