/* libFuzzer target: the wire-header decoder and the mismatch sentence built from what it accepts.
 * Every header a peer (or a stranger) sends goes through these before anything else. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t buf[HOOP__WIRE_HDR_SIZE] = {0};
    memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
    uint64_t max_payload = size > HOOP__WIRE_HDR_SIZE ? (uint64_t)data[HOOP__WIRE_HDR_SIZE] << 20
                                                      : 1u << 20;
    hoop__wire_hdr_t got;
    if (hoop__wire_decode(buf, max_payload, &got) != HOOP_OK) return 0;
    /* Accepted: every field is in range, and re-encoding gives back the same bytes. */
    if (got.kind == HOOP__K_NONE || got.kind >= HOOP__K_COUNT || got.dtype >= HOOP_DTYPE_COUNT ||
        got.op >= HOOP_OP_COUNT || got.payload_len > max_payload || got.root < -1)
        __builtin_trap();
    uint8_t again[HOOP__WIRE_HDR_SIZE];
    hoop__wire_encode(&got, again);
    if (memcmp(again, buf, sizeof(again)) != 0) __builtin_trap();
    hoop__wire_hdr_t expect = got;
    expect.count ^= 1;
    char msg[512];
    if (hoop__wire_match(&expect, &got) != HOOP_ERR_MISMATCH) __builtin_trap();
    hoop__wire_mismatch_msg(&expect, &got, 1, 0, msg, sizeof(msg));
    if (memchr(msg, '\0', sizeof(msg)) == NULL) __builtin_trap();
    return 0;
}
