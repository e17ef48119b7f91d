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

/* Status datagrams (core/explain.c): what is encoded decodes to itself; every other length,
 * a foreign magic or version, a set reserved byte, an unknown type or an out-of-range field is
 * refused; a request carries no answer's fields, an answer without a call no call's. */
static void status_round_trip_and_refusals(void **state)
{
    (void)state;
    hoop__status_msg_t a = {.type = HOOP__STATUS_ANS,
                            .flags = HOOP__STATUS_HAS_CALL,
                            .state = 3,
                            .kind = HOOP__K_ALLREDUCE,
                            .dtype = HOOP_FLOAT32,
                            .rank = 5,
                            .pid = 4242,
                            .age_ms = 2100,
                            .comm_id = 0x1122334455667788ull,
                            .nonce = 99,
                            .seq = 4710,
                            .count = 6250000,
                            .engine = 1,
                            .algo = 3,
                            .small = 1},
                       d;
    uint8_t b[HOOP__STATUS_SIZE + 8] = {0};
    hoop__status_encode(&a, b);
    assert_int_equal(hoop__status_decode(b, HOOP__STATUS_SIZE, &d), HOOP_OK);
    assert_memory_equal(&a, &d, sizeof(a));
    /* Lengths other than the one. */
    for (size_t len = 0; len < sizeof(b); len++)
        if (len != HOOP__STATUS_SIZE)
            assert_int_equal(hoop__status_decode(b, len, &d), HOOP_ERR_MISMATCH);
    assert_int_equal(hoop__status_decode(NULL, HOOP__STATUS_SIZE, &d), HOOP_ERR_MISMATCH);
    /* Magic, version, type, reserved, and each range. */
    const struct {
        int off;
        uint8_t v;
    } bad[] = {{0, 0},
               {4, 9},
               {6, 0},
               {6, 3},
               {7, 0x80},
               {8, 5},
               {9, 64},
               {10, HOOP__K_COUNT},
               {11, HOOP_DTYPE_COUNT},
               {15, 0x80},
               {19, 0x80},
               {56, 8},
               {57, 32},
               {58, 2},
               {59, 1},
               {63, 1}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t c[HOOP__STATUS_SIZE];
        memcpy(c, b, sizeof(c));
        c[bad[i].off] = bad[i].v;
        assert_int_equal(hoop__status_decode(c, sizeof(c), &d), HOOP_ERR_MISMATCH);
    }
    /* A request with an answer's field; an answer without a call but with one of its fields. */
    hoop__status_msg_t q = {.type = HOOP__STATUS_REQ, .rank = 1, .comm_id = 7, .nonce = 8};
    hoop__status_encode(&q, b);
    assert_int_equal(hoop__status_decode(b, HOOP__STATUS_SIZE, &d), HOOP_OK);
    assert_int_equal(d.type, HOOP__STATUS_REQ);
    q.seq = 1;
    hoop__status_encode(&q, b);
    assert_int_equal(hoop__status_decode(b, HOOP__STATUS_SIZE, &d), HOOP_ERR_MISMATCH);
    q.seq = 0;
    q.algo = 1;
    hoop__status_encode(&q, b);
    assert_int_equal(hoop__status_decode(b, HOOP__STATUS_SIZE, &d), HOOP_ERR_MISMATCH);
    /* A tool asks as rank 0xffffffff; no answer comes from that rank. */
    q.algo = 0;
    q.rank = HOOP__STATUS_TOOL;
    hoop__status_encode(&q, b);
    assert_int_equal(hoop__status_decode(b, HOOP__STATUS_SIZE, &d), HOOP_OK);
    assert_int_equal(d.rank, HOOP__STATUS_TOOL);
    hoop__status_msg_t t = a;
    t.rank = HOOP__STATUS_TOOL;
    hoop__status_encode(&t, b);
    assert_int_equal(hoop__status_decode(b, HOOP__STATUS_SIZE, &d), HOOP_ERR_MISMATCH);
    q.rank = 1;
    a.flags = 0;
    hoop__status_encode(&a, b);
    assert_int_equal(hoop__status_decode(b, HOOP__STATUS_SIZE, &d), HOOP_ERR_MISMATCH);
    /* A wire header is not a status datagram, nor the other way round. */
    hoop__wire_hdr_t h = {.kind = HOOP__K_ALLREDUCE, .root = -1};
    uint8_t w[HOOP__WIRE_HDR_SIZE];
    hoop__wire_encode(&h, w);
    assert_int_equal(hoop__status_decode(w, sizeof(w), &d), HOOP_ERR_MISMATCH);
    hoop__status_encode(&q, b);
    assert_int_equal(hoop__wire_decode(b, 1 << 20, &h), HOOP_ERR_MISMATCH);
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
        cmocka_unit_test(status_round_trip_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
