/* libFuzzer target: the rendezvous store's request parser, which rank 0's server runs on bytes from
 * any client that connects. */
#include <stddef.h>
#include <stdint.h>

#include "rendezvous/proto.h"
#include "rendezvous/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The server parses a buffer that may hold several requests back to back. */
    size_t off = 0;
    while (off < size) {
        hoop__store_req_t req;
        long n = hoop__store_parse(data + off, size - off, &req);
        if (n <= 0) break;
        if ((size_t)n > size - off) __builtin_trap();
        if (req.keylen > HOOP__STORE_MAX_KEY || req.vallen > HOOP__STORE_MAX_VALUE)
            __builtin_trap();
        const uint8_t *end = data + off + (size_t)n;
        if ((const uint8_t *)req.key < data + off || (const uint8_t *)req.key + req.keylen > end)
            __builtin_trap();
        if (req.vallen > 0 && (req.val < data + off || req.val + req.vallen > end))
            __builtin_trap();
        /* Set, get ('W') and claim are the only requests. */
        if (req.op != 'S' && req.op != 'W' && req.op != 'C') __builtin_trap();
        /* A waiting get's hold is one the server grants. */
        if (req.op == 'W' && (req.vallen != HOOP__STORE_HOLD_LEN ||
                              hoop__store_hold_ms(&req) > HOOP__STORE_MAX_HOLD_MS))
            __builtin_trap();
        off += (size_t)n;
    }
    return 0;
}
