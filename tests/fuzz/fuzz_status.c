/* libFuzzer target: the status datagrams (core/explain.c). Every datagram that reaches a rank's
 * status socket, from a peer or a stranger, goes through the unsealing (under a key) and the
 * decoder before anything else. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/auth.h"
#include "base/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW_MS UINT64_C(1700000000000)
#define MAX_MSG 4096

static void decoded(const uint8_t *data, size_t size)
{
    hoop__status_msg_t m;
    if (hoop__status_decode(data, size, &m) != HOOP_OK) return;
    /* Accepted: exactly one size, every field in range, and re-encoding gives the same bytes. */
    if (size != HOOP__STATUS_SIZE || (m.type != HOOP__STATUS_REQ && m.type != HOOP__STATUS_ANS) ||
        m.kind >= HOOP__K_COUNT || m.dtype >= HOOP_DTYPE_COUNT || m.state > 4 ||
        (m.flags & ~HOOP__STATUS_FLAGS) != 0 || m.engine >= 8 || m.algo >= 32 || m.small > 1 ||
        (m.rank > INT32_MAX && (m.type != HOOP__STATUS_REQ || m.rank != HOOP__STATUS_TOOL)))
        __builtin_trap();
    uint8_t again[HOOP__STATUS_SIZE];
    hoop__status_encode(&m, again);
    if (memcmp(again, data, sizeof(again)) != 0) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const hoop__auth_key_t key = {.set = 1, .bytes = "the fuzzer's status key, 32 b.."};
    static const hoop__auth_key_t other = {.set = 1, .bytes = "another key, also thirty-two b."};
    static uint8_t sealed[MAX_MSG + HOOP__AUTH_SEAL_BYTES];
    /* As it came: plain, and as a sealed datagram (which a stranger cannot make pass). */
    decoded(data, size);
    uint64_t t = 0;
    if (hoop__auth_unseal(&key, 0, data, size, NOW_MS, &t) == 0)
        decoded(data, size - HOOP__AUTH_SEAL_BYTES);
    if (size > MAX_MSG) return 0;
    /* Sealed with the key: it unseals, at its clock and within the window only, with the key and
     * label it was sealed with only, and not once any byte is changed. */
    int answer = size > 0 && (data[0] & 1);
    size_t n = size + HOOP__AUTH_SEAL_BYTES;
    hoop__auth_seal(&key, answer, data, size, NOW_MS, sealed);
    if (hoop__auth_unseal(&key, answer, sealed, n, NOW_MS + 1000, &t) != 0 || t != NOW_MS ||
        hoop__auth_unseal(&key, !answer, sealed, n, NOW_MS, NULL) == 0 ||
        hoop__auth_unseal(&other, answer, sealed, n, NOW_MS, NULL) == 0 ||
        hoop__auth_unseal(&key, answer, sealed, n, NOW_MS + HOOP__AUTH_SEAL_WINDOW_MS + 1, NULL) ==
            0)
        __builtin_trap();
    size_t at = size > 1 ? (size_t)data[1] * 7 % n : 0;
    sealed[at] ^= 0x20;
    if (hoop__auth_unseal(&key, answer, sealed, n, NOW_MS, NULL) == 0) __builtin_trap();
    sealed[at] ^= 0x20;
    decoded(sealed, size);
    return 0;
}
