/* Wire header: encode/decode round trip, validation of every field, fingerprint matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/wire.h"

static hoop__wire_hdr_t sample(void)
{
    hoop__wire_hdr_t h;
    memset(&h, 0, sizeof(h)); /* padding too: the round trip compares whole structs */
    h.kind = HOOP__K_REDUCE;
    h.dtype = HOOP_BFLOAT16;
    h.op = HOOP_MAX;
    h.flags = 3;
    h.root = 5;
    h.src = 7;
    h.comm_id = 0x0123456789abcdefull;
    h.seq = 0xfedcba9876543210ull;
    h.count = 1ull << 40;
    h.payload_len = 123457;
    h.algo = 3;
    h.sched = 0xa5c3e1f7u;
    return h;
}

static void round_trip(void **state)
{
    (void)state;
    hoop__wire_hdr_t h = sample(), g;
    uint8_t b[HOOP__WIRE_HDR_SIZE];
    hoop__wire_encode(&h, b);
    assert_int_equal(hoop__wire_decode(b, UINT64_MAX, &g), HOOP_OK);
    assert_memory_equal(&h, &g, sizeof(h));
    /* Little-endian on the wire whatever the host: the magic spells HOOP. */
    assert_memory_equal(b, "HOOP", 4);
    assert_int_equal(b[4], HOOP__WIRE_VERSION);
    /* A root of -1 survives the unsigned packing. */
    h.root = -1;
    hoop__wire_encode(&h, b);
    assert_int_equal(hoop__wire_decode(b, UINT64_MAX, &g), HOOP_OK);
    assert_int_equal(g.root, -1);
}

static void rejects_bad_fields(void **state)
{
    (void)state;
    hoop__wire_hdr_t h = sample(), g;
    uint8_t b[HOOP__WIRE_HDR_SIZE], t[HOOP__WIRE_HDR_SIZE];
    hoop__wire_encode(&h, b);
    /* Each byte of magic and version matters. */
    for (int i = 0; i < 6; i++) {
        memcpy(t, b, sizeof(t));
        t[i] ^= 0x40;
        assert_int_equal(hoop__wire_decode(t, UINT64_MAX, &g), HOOP_ERR_MISMATCH);
    }
    memcpy(t, b, sizeof(t));
    t[6] = HOOP__K_COUNT;
    assert_int_equal(hoop__wire_decode(t, UINT64_MAX, &g), HOOP_ERR_MISMATCH);
    t[6] = HOOP__K_NONE;
    assert_int_equal(hoop__wire_decode(t, UINT64_MAX, &g), HOOP_ERR_MISMATCH);
    memcpy(t, b, sizeof(t));
    t[7] = HOOP_DTYPE_COUNT;
    assert_int_equal(hoop__wire_decode(t, UINT64_MAX, &g), HOOP_ERR_MISMATCH);
    memcpy(t, b, sizeof(t));
    t[8] = HOOP_OP_COUNT;
    assert_int_equal(hoop__wire_decode(t, UINT64_MAX, &g), HOOP_ERR_MISMATCH);
    memcpy(t, b, sizeof(t));
    t[10] = HOOP__WIRE_ALGO_COUNT;
    assert_int_equal(hoop__wire_decode(t, UINT64_MAX, &g), HOOP_ERR_MISMATCH);
    /* Root below -1. */
    h.root = -2;
    hoop__wire_encode(&h, t);
    assert_int_equal(hoop__wire_decode(t, UINT64_MAX, &g), HOOP_ERR_MISMATCH);
    /* Reserved bytes must be zero. */
    for (int i = 11; i < HOOP__WIRE_HDR_SIZE; i = i == 11 ? 56 : i + 1) {
        memcpy(t, b, sizeof(t));
        t[i] = 1;
        assert_int_equal(hoop__wire_decode(t, UINT64_MAX, &g), HOOP_ERR_MISMATCH);
    }
    /* Lengths are bounded before anything is allocated. */
    assert_int_equal(hoop__wire_decode(b, 123456, &g), HOOP_ERR_MISMATCH);
    assert_int_equal(hoop__wire_decode(b, 123457, &g), HOOP_OK);
}

static void decode_never_overreads(void **state)
{
    (void)state;
    /* Pseudo-random headers: the decoder must only ever accept what it validated. */
    uint64_t x = 88172645463325252ull;
    uint8_t b[HOOP__WIRE_HDR_SIZE];
    hoop__wire_hdr_t g;
    int accepted = 0;
    for (int n = 0; n < 200000; n++) {
        for (int i = 0; i < HOOP__WIRE_HDR_SIZE; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b[i] = (uint8_t)x;
        }
        if (n % 2) {
            memcpy(b, "HOOP\x02\x00", 6);
            /* Mostly-plausible headers reach the later checks too. */
            b[6] = (uint8_t)(b[6] % (HOOP__K_COUNT + 1));
            b[7] = (uint8_t)(b[7] % (HOOP_DTYPE_COUNT + 1));
            b[8] = (uint8_t)(b[8] % (HOOP_OP_COUNT + 1));
            memset(b + 13, (b[13] & 1) ? 0xff : 0, 3);
            memset(b + 47, 0, 5);
            b[46] &= 0x1f;
            if (n % 4 == 1) {
                b[10] = (uint8_t)(b[10] % (HOOP__WIRE_ALGO_COUNT + 1));
                b[11] = 0;
                memset(b + 56, 0, HOOP__WIRE_HDR_SIZE - 56);
            }
        }
        if (hoop__wire_decode(b, 1 << 20, &g) == HOOP_OK) {
            accepted++;
            assert_true(g.kind > 0 && g.kind < HOOP__K_COUNT);
            assert_true(g.dtype < HOOP_DTYPE_COUNT && g.op < HOOP_OP_COUNT);
            assert_true(g.payload_len <= (1 << 20) && g.root >= -1);
            assert_true(g.algo < HOOP__WIRE_ALGO_COUNT);
        }
    }
    assert_true(accepted > 0);
}

static void match_names_every_field(void **state)
{
    (void)state;
    hoop__wire_hdr_t e = sample(), g = sample();
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_OK);
    g.kind = HOOP__K_ALLREDUCE;
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_ERR_MISMATCH);
    g = sample();
    g.count++;
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_ERR_MISMATCH);
    g = sample();
    g.dtype = HOOP_FLOAT32;
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_ERR_MISMATCH);
    g = sample();
    g.op = HOOP_SUM;
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_ERR_MISMATCH);
    g = sample();
    g.root = 0;
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_ERR_MISMATCH);
    g = sample();
    g.seq++;
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_ERR_MISMATCH);
    g = sample();
    g.comm_id++;
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_ERR_MISMATCH);
    g = sample();
    g.payload_len--;
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_ERR_MISMATCH);
    /* Same call, other schedule: the case where headers and lengths coincide. */
    g = sample();
    g.algo = 2;
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_ERR_MISMATCH);
    g = sample();
    g.sched ^= 1;
    assert_int_equal(hoop__wire_match(&e, &g), HOOP_ERR_MISMATCH);
}

static void mismatch_names_the_algorithm(void **state)
{
    (void)state;
    char buf[400];
    hoop__wire_hdr_t e = {.kind = HOOP__K_ALLREDUCE,
                          .dtype = HOOP_INT32,
                          .op = HOOP_SUM,
                          .root = -1,
                          .count = 8,
                          .seq = 4,
                          .algo = 2,
                          .payload_len = 32};
    hoop__wire_hdr_t g = e;
    g.algo = 3;
    assert_string_equal(
        hoop__wire_mismatch_msg(&e, &g, 1, 0, buf, sizeof(buf)),
        "rank 1 ran allreduce(count=8, int32, sum) as call #4 with the ps algorithm "
        "where rank 0 ran it with rd (hoop_comm_set_algo or HOOP_ALGO must be the "
        "same on every rank)");
    g = e;
    g.sched = 7;
    assert_non_null(
        strstr(hoop__wire_mismatch_msg(&e, &g, 1, 0, buf, sizeof(buf)), "other schedule settings"));
    /* Point to point: the sender's call is a send, the checking one's a receive. */
    e = (hoop__wire_hdr_t){.kind = HOOP__K_SEND, .dtype = HOOP_INT32, .root = -1, .count = 6};
    g = e;
    g.count = 5;
    assert_string_equal(hoop__wire_mismatch_msg(&e, &g, 1, 0, buf, sizeof(buf)),
                        "rank 1 called send(count=5, int32) as call #0 where rank 0 called "
                        "recv(count=6, int32) as call #0");
}

/* The check every transport applies to an arrived header: the posted length counts, and a header
 * the transport could not read fails even where its fields would match. */
static void check_recv(void **state)
{
    (void)state;
    char buf[400] = "";
    hoop__wire_hdr_t posted = {.kind = HOOP__K_ALLREDUCE,
                               .dtype = HOOP_INT32,
                               .op = HOOP_SUM,
                               .root = -1,
                               .count = 8,
                               .seq = 4};
    hoop__wire_hdr_t got = posted;
    got.payload_len = 32;
    assert_int_equal(hoop__wire_check_recv(&posted, 32, &got, 1, 1, 0, buf, sizeof(buf)), HOOP_OK);
    assert_string_equal(buf, "");
    assert_int_equal(hoop__wire_check_recv(&posted, 32, &got, 0, 1, 0, buf, sizeof(buf)),
                     HOOP_ERR_MISMATCH);
    assert_int_equal(hoop__wire_check_recv(&posted, 16, &got, 1, 1, 0, buf, sizeof(buf)),
                     HOOP_ERR_MISMATCH);
    assert_string_equal(buf, "rank 1 sent 32 bytes where 16 were expected in "
                             "allreduce(count=8, int32, sum)");
}

static void describe(void **state)
{
    (void)state;
    char buf[128];
    hoop__wire_hdr_t h = {.kind = HOOP__K_BROADCAST, .dtype = HOOP_FLOAT32, .root = 0, .count = 10};
    assert_string_equal(hoop__wire_describe(&h, buf, sizeof(buf)),
                        "broadcast(count=10, float32, root=0)");
    h = (hoop__wire_hdr_t){
        .kind = HOOP__K_ALLREDUCE, .dtype = HOOP_INT8, .op = HOOP_SUM, .root = -1, .count = 20};
    assert_string_equal(hoop__wire_describe(&h, buf, sizeof(buf)),
                        "allreduce(count=20, int8, sum)");
    h.kind = HOOP__K_BARRIER;
    assert_string_equal(hoop__wire_describe(&h, buf, sizeof(buf)), "barrier()");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(rejects_bad_fields),
        cmocka_unit_test(decode_never_overreads),
        cmocka_unit_test(match_names_every_field),
        cmocka_unit_test(mismatch_names_the_algorithm),
        cmocka_unit_test(check_recv),
        cmocka_unit_test(describe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
