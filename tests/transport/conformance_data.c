/* Transport conformance: the cases that move data, and that refuse what cannot move. */
#include "conformance.h"

/* Both directions at once, odd lengths around every boundary (header size, page, striping and
 * single-copy thresholds); all posted together, then again one pair at a time, largest first. */
static const size_t exch_lens[] = {0,        1,     63,     64,     65,          4095,
                                   4096 + 7, 65536, 262143, 262144, 1 * MIB + 13};
#define NEXCH ((int)(sizeof(exch_lens) / sizeof(exch_lens[0])))

int case_exchange(ctx_t *c)
{
    int me = c->rank, peer = 1 - me;
    hoop__xfer_t xs[NEXCH], xr[NEXCH];
    hoop__xfer_t *all[2 * NEXCH];
    uint8_t *sb[NEXCH], *rb[NEXCH];
    for (int round = 0; round < 2; round++) {
        uint64_t base = round == 0 ? (1ull << 40) : (1ull << 41);
        for (int i = 0; i < NEXCH; i++) {
            size_t len = exch_lens[i];
            uint64_t seq = base + (uint64_t)i;
            /* A zero-length transfer may come without a buffer at all. */
            sb[i] = len == 0 && i == 0 ? NULL : malloc(len + 1);
            rb[i] = len == 0 && i == 0 ? NULL : rbuf_new(len);
            REQUIRE(c, (sb[i] != NULL && rb[i] != NULL) || i == 0, "out of memory");
            if (sb[i] != NULL) fill(sb[i], len, seed_of(c, me, peer, seq));
            hoop__wire_hdr_t hs = mkhdr(c, me, seq, (uint64_t)i, len);
            hoop__wire_hdr_t hr = mkhdr(c, peer, seq, (uint64_t)i, len);
            xinit(&xs[i], HOOP__XFER_SEND, peer, &hs, sb[i], len);
            xinit(&xr[i], HOOP__XFER_RECV, peer, &hr, rb[i], len);
        }
        if (round == 0) {
            /* Rank 0 posts its receives first, rank 1 its sends. */
            for (int i = 0; i < NEXCH; i++) c->ops->post(c->tp, me == 0 ? &xr[i] : &xs[i]);
            for (int i = 0; i < NEXCH; i++) c->ops->post(c->tp, me == 0 ? &xs[i] : &xr[i]);
            for (int i = 0; i < NEXCH; i++) {
                all[2 * i] = &xs[i];
                all[2 * i + 1] = &xr[i];
            }
            TRY(drive(c, all, 2 * NEXCH, 20, "exchange, all posted at once"));
        } else {
            for (int i = NEXCH - 1; i >= 0; i--) {
                c->ops->post(c->tp, &xs[i]);
                c->ops->post(c->tp, &xr[i]);
                hoop__xfer_t *two[2] = {&xs[i], &xr[i]};
                TRY(drive(c, two, 2, 10, "exchange, one pair at a time"));
            }
        }
        for (int i = 0; i < NEXCH; i++) {
            char what[96];
            snprintf(what, sizeof(what), "exchange round %d, %zu bytes", round, exch_lens[i]);
            REQUIRE(c, xs[i].status == HOOP_OK, "%s: send failed: %s", what,
                    hoop_error_string(xs[i].status));
            hoop__wire_hdr_t sent = mkhdr(c, peer, base + (uint64_t)i, (uint64_t)i, exch_lens[i]);
            TRY(check_recv(c, &xr[i], &sent, seed_of(c, peer, me, base + (uint64_t)i), what));
            free(sb[i]);
            free(rb[i]);
        }
    }
    return 0;
}

/* 64 MiB + 3 from rank 0 to rank 1 and back. */
int case_huge(ctx_t *c)
{
    const size_t len = 64 * (size_t)MIB + 3;
    int me = c->rank, peer = 1 - me;
    hoop__xfer_t x;
    if (me == 0) {
        uint8_t *out = malloc(len), *back = rbuf_new(len);
        REQUIRE(c, out != NULL && back != NULL, "out of memory");
        fill(out, len, seed_of(c, 0, 1, 1));
        hoop__wire_hdr_t h = mkhdr(c, 0, 1, 7, len);
        xinit(&x, HOOP__XFER_SEND, peer, &h, out, len);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 30, "huge send"));
        REQUIRE(c, x.status == HOOP_OK, "huge send: %s", hoop_error_string(x.status));
        free(out);
        h = mkhdr(c, 1, 2, 8, len);
        xinit(&x, HOOP__XFER_RECV, peer, &h, back, len);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 30, "huge receive of the echo"));
        /* The echo carries rank 0's own pattern, recomputed here rather than compared with a copy. */
        TRY(check_recv(c, &x, &h, seed_of(c, 0, 1, 1), "huge echo"));
        free(back);
    } else {
        uint8_t *in = rbuf_new(len);
        REQUIRE(c, in != NULL, "out of memory");
        hoop__wire_hdr_t h = mkhdr(c, 0, 1, 7, len);
        xinit(&x, HOOP__XFER_RECV, peer, &h, in, len);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 30, "huge receive"));
        TRY(check_recv(c, &x, &h, seed_of(c, 0, 1, 1), "huge"));
        h = mkhdr(c, 1, 2, 8, len);
        xinit(&x, HOOP__XFER_SEND, peer, &h, in, len);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 30, "huge echo send"));
        REQUIRE(c, x.status == HOOP_OK, "huge echo send: %s", hoop_error_string(x.status));
        free(in);
    }
    return 0;
}

/* 20,000 messages of 0..300 bytes each way, both directions flowing at once, with up to WS sends
 * and WR receives outstanding: each must match in order and complete in posting order. */
#define NSMALL 20000
#define SMALL_MAX 300
#define WS 48
#define WR 29

typedef struct slot {
    hoop__xfer_t x;
    long k;
    uint8_t buf[SMALL_MAX + GUARD];
} slot_t;

static size_t small_len(const ctx_t *c, int src, long k)
{
    return (size_t)(mix(seed_of(c, src, 1 - src, 0) ^ (uint64_t)k) % (SMALL_MAX + 1));
}

int case_many(ctx_t *c)
{
    int me = c->rank, peer = 1 - me;
    slot_t *ss = calloc(WS, sizeof(slot_t)), *rs = calloc(WR, sizeof(slot_t));
    REQUIRE(c, ss != NULL && rs != NULL, "out of memory");
    long s_post = 0, s_done = 0, r_post = 0, r_done = 0;
    double end = now_s() + lim(c, 60);
    while (s_done < NSMALL || r_done < NSMALL) {
        while (s_post < NSMALL && s_post - s_done < WS) {
            slot_t *s = &ss[s_post % WS];
            size_t len = small_len(c, me, s_post);
            uint64_t seq = 1000 + (uint64_t)s_post;
            fill(s->buf, len, seed_of(c, me, peer, seq));
            hoop__wire_hdr_t h = mkhdr(c, me, seq, HOOP__K_SEND - 1, len);
            xinit(&s->x, HOOP__XFER_SEND, peer, &h, s->buf, len);
            s->k = s_post++;
            c->ops->post(c->tp, &s->x);
        }
        while (r_post < NSMALL && r_post - r_done < WR) {
            slot_t *s = &rs[r_post % WR];
            size_t len = small_len(c, peer, r_post);
            memset(s->buf, GUARD_BYTE, sizeof(s->buf));
            hoop__wire_hdr_t h = mkhdr(c, peer, 1000 + (uint64_t)r_post, HOOP__K_SEND - 1, len);
            xinit(&s->x, HOOP__XFER_RECV, peer, &h, s->buf, len);
            s->k = r_post++;
            c->ops->post(c->tp, &s->x);
        }
        c->ops->progress(c->tp, 10);
        while (s_done < s_post && ss[s_done % WS].x.done) {
            slot_t *s = &ss[s_done % WS];
            REQUIRE(c, s->x.status == HOOP_OK, "small send #%ld: %s", s->k,
                    hoop_error_string(s->x.status));
            s_done++;
        }
        for (long k = s_done + 1; k < s_post; k++)
            REQUIRE(c, !ss[k % WS].x.done, "small send #%ld completed before #%ld", k, s_done);
        while (r_done < r_post && rs[r_done % WR].x.done) {
            slot_t *s = &rs[r_done % WR];
            char what[64];
            snprintf(what, sizeof(what), "small message #%ld", s->k);
            hoop__wire_hdr_t sent = mkhdr(c, peer, 1000 + (uint64_t)s->k, HOOP__K_SEND - 1,
                                          small_len(c, peer, s->k));
            TRY(check_recv(c, &s->x, &sent, seed_of(c, peer, me, sent.seq), what));
            REQUIRE(c, guard_ok(s->buf, s->x.len), "%s: written past its end", what);
            r_done++;
        }
        for (long k = r_done + 1; k < r_post; k++)
            REQUIRE(c, !rs[k % WR].x.done, "small receive #%ld completed before #%ld", k, r_done);
        REQUIRE(c, now_s() < end,
                "many small: only %ld sends and %ld receives of %d done in %.0f s", s_done, r_done,
                NSMALL, lim(c, 60));
    }
    free(ss);
    free(rs);
    return 0;
}

/* Three ranks. Phase 1: rank 0 has a large send to and a receive from rank 1 outstanding, which
 * rank 1 will not serve until rank 2 says so, and rank 2 says so only after its own exchange with
 * rank 0 is through: one peer's stalled traffic must not hold up another's. Phase 2: every pair
 * exchanges in both directions at once. */
static const size_t three_a[] = {0, 77, 300000, 2 * MIB + 1};  /* 0 -> 2 */
static const size_t three_b[] = {5, 65536, 4 * MIB + 3, 1};    /* 2 -> 0 */
static const size_t three_all[] = {0, 13, 65537, 3 * MIB + 7}; /* every pair, phase 2 */
#define N3 4

static int post_set(ctx_t *c, hoop__xfer_t *x, uint8_t **bufs, int dir, int peer,
                    const size_t *lens, int n, uint64_t seq0)
{
    int me = c->rank;
    for (int i = 0; i < n; i++) {
        uint64_t seq = seq0 + (uint64_t)i;
        int src = dir == HOOP__XFER_SEND ? me : peer;
        bufs[i] = dir == HOOP__XFER_SEND ? malloc(lens[i] + 1) : rbuf_new(lens[i]);
        REQUIRE(c, bufs[i] != NULL, "out of memory");
        if (dir == HOOP__XFER_SEND) fill(bufs[i], lens[i], seed_of(c, me, peer, seq));
        hoop__wire_hdr_t h = mkhdr(c, src, seq, (uint64_t)(i + 3), lens[i]);
        xinit(&x[i], dir, peer, &h, bufs[i], lens[i]);
        c->ops->post(c->tp, &x[i]);
    }
    return 0;
}

static int check_set(ctx_t *c, hoop__xfer_t *x, uint8_t **bufs, int dir, int peer,
                     const size_t *lens, int n, uint64_t seq0, const char *what)
{
    for (int i = 0; i < n; i++) {
        uint64_t seq = seq0 + (uint64_t)i;
        char w[96];
        snprintf(w, sizeof(w), "%s, %zu bytes %s rank %d", what, lens[i],
                 dir == HOOP__XFER_SEND ? "to" : "from", peer);
        if (dir == HOOP__XFER_SEND) {
            REQUIRE(c, x[i].done && x[i].status == HOOP_OK, "%s: %s", w,
                    x[i].done ? hoop_error_string(x[i].status) : "not done");
        } else {
            hoop__wire_hdr_t sent = mkhdr(c, peer, seq, (uint64_t)(i + 3), lens[i]);
            TRY(check_recv(c, &x[i], &sent, seed_of(c, peer, c->rank, seq), w));
        }
        free(bufs[i]);
    }
    return 0;
}

int case_three(ctx_t *c)
{
    int me = c->rank;
    const size_t big01 = 12 * (size_t)MIB + 1, big10 = 1 * MIB + 5;
    hoop__xfer_t xa[N3], xb[N3], s01, r10, go;
    uint8_t *ba[N3], *bb[N3], *b01 = NULL, *b10 = NULL, gobuf[16 + GUARD];
    if (me == 0) {
        b01 = malloc(big01);
        b10 = rbuf_new(big10);
        REQUIRE(c, b01 != NULL && b10 != NULL, "out of memory");
        fill(b01, big01, seed_of(c, 0, 1, 1));
        hoop__wire_hdr_t h = mkhdr(c, 0, 1, 1, big01);
        xinit(&s01, HOOP__XFER_SEND, 1, &h, b01, big01);
        h = mkhdr(c, 1, 2, 2, big10);
        xinit(&r10, HOOP__XFER_RECV, 1, &h, b10, big10);
        c->ops->post(c->tp, &s01);
        c->ops->post(c->tp, &r10);
        TRY(post_set(c, xa, ba, HOOP__XFER_SEND, 2, three_a, N3, 10));
        TRY(post_set(c, xb, bb, HOOP__XFER_RECV, 2, three_b, N3, 20));
        hoop__xfer_t *with2[2 * N3];
        for (int i = 0; i < N3; i++) {
            with2[i] = &xa[i];
            with2[N3 + i] = &xb[i];
        }
        TRY(drive(c, with2, 2 * N3, 20, "exchange with rank 2 while rank 1 holds back"));
        REQUIRE(c, !r10.done, "the receive from rank 1 completed before rank 1 sent anything");
        TRY(check_set(c, xa, ba, HOOP__XFER_SEND, 2, three_a, N3, 10, "phase 1"));
        TRY(check_set(c, xb, bb, HOOP__XFER_RECV, 2, three_b, N3, 20, "phase 1"));
        hoop__xfer_t *with1[2] = {&s01, &r10};
        TRY(drive(c, with1, 2, 30, "the held-back exchange with rank 1"));
        REQUIRE(c, s01.status == HOOP_OK, "send to rank 1: %s", hoop_error_string(s01.status));
        h = mkhdr(c, 1, 2, 2, big10);
        TRY(check_recv(c, &r10, &h, seed_of(c, 1, 0, 2), "phase 1, from rank 1"));
        free(b01);
        free(b10);
    } else if (me == 2) {
        TRY(post_set(c, xb, bb, HOOP__XFER_SEND, 0, three_b, N3, 20));
        TRY(post_set(c, xa, ba, HOOP__XFER_RECV, 0, three_a, N3, 10));
        hoop__xfer_t *with0[2 * N3];
        for (int i = 0; i < N3; i++) {
            with0[i] = &xa[i];
            with0[N3 + i] = &xb[i];
        }
        TRY(drive(c, with0, 2 * N3, 20, "exchange with rank 0"));
        TRY(check_set(c, xb, bb, HOOP__XFER_SEND, 0, three_b, N3, 20, "phase 1"));
        TRY(check_set(c, xa, ba, HOOP__XFER_RECV, 0, three_a, N3, 10, "phase 1"));
        fill(gobuf, 16, seed_of(c, 2, 1, 30));
        hoop__wire_hdr_t h = mkhdr(c, 2, 30, 4, 16);
        xinit(&go, HOOP__XFER_SEND, 1, &h, gobuf, 16);
        c->ops->post(c->tp, &go);
        TRY(drive1(c, &go, 10, "the go-ahead to rank 1"));
        REQUIRE(c, go.status == HOOP_OK, "go-ahead: %s", hoop_error_string(go.status));
    } else {
        memset(gobuf, GUARD_BYTE, sizeof(gobuf));
        hoop__wire_hdr_t h = mkhdr(c, 2, 30, 4, 16);
        xinit(&go, HOOP__XFER_RECV, 2, &h, gobuf, 16);
        c->ops->post(c->tp, &go);
        TRY(drive1(c, &go, 30, "the go-ahead from rank 2"));
        TRY(check_recv(c, &go, &h, seed_of(c, 2, 1, 30), "go-ahead"));
        b01 = rbuf_new(big01);
        b10 = malloc(big10);
        REQUIRE(c, b01 != NULL && b10 != NULL, "out of memory");
        fill(b10, big10, seed_of(c, 1, 0, 2));
        h = mkhdr(c, 0, 1, 1, big01);
        xinit(&s01, HOOP__XFER_RECV, 0, &h, b01, big01);
        hoop__wire_hdr_t h2 = mkhdr(c, 1, 2, 2, big10);
        xinit(&r10, HOOP__XFER_SEND, 0, &h2, b10, big10);
        c->ops->post(c->tp, &s01);
        c->ops->post(c->tp, &r10);
        hoop__xfer_t *with0[2] = {&s01, &r10};
        TRY(drive(c, with0, 2, 30, "the held-back exchange with rank 0"));
        TRY(check_recv(c, &s01, &h, seed_of(c, 0, 1, 1), "phase 1, from rank 0"));
        REQUIRE(c, r10.status == HOOP_OK, "send to rank 0: %s", hoop_error_string(r10.status));
        free(b01);
        free(b10);
    }

    /* Phase 2: all pairs at once; the posting order differs from rank to rank. */
    hoop__xfer_t xs[MAX_RANKS][N3], xr[MAX_RANKS][N3];
    uint8_t *bs[MAX_RANKS][N3], *br[MAX_RANKS][N3];
    hoop__xfer_t *all[2 * MAX_RANKS * N3];
    int n = 0;
    for (int d = 1; d < c->size; d++) {
        int q = (me + (me == 1 ? c->size - d : d)) % c->size;
        if (me == 2) {
            TRY(post_set(c, xr[q], br[q], HOOP__XFER_RECV, q, three_all, N3, 100));
            TRY(post_set(c, xs[q], bs[q], HOOP__XFER_SEND, q, three_all, N3, 100));
        } else {
            TRY(post_set(c, xs[q], bs[q], HOOP__XFER_SEND, q, three_all, N3, 100));
            TRY(post_set(c, xr[q], br[q], HOOP__XFER_RECV, q, three_all, N3, 100));
        }
        for (int i = 0; i < N3; i++) {
            all[n++] = &xs[q][i];
            all[n++] = &xr[q][i];
        }
    }
    TRY(drive(c, all, n, 30, "all pairs at once"));
    for (int q = 0; q < c->size; q++) {
        if (q == me) continue;
        TRY(check_set(c, xs[q], bs[q], HOOP__XFER_SEND, q, three_all, N3, 100, "all pairs"));
        TRY(check_set(c, xr[q], br[q], HOOP__XFER_RECV, q, three_all, N3, 100, "all pairs"));
    }
    return 0;
}

/* Rank 1 expects another call than rank 0 makes: its receive fails with HOOP_ERR_MISMATCH, got
 * holds what arrived, and the report names both calls. Rank 0 then learns that rank 1 is gone. */
const char *const mm_name[MM_N] = {"seq", "kind", "count", "length"};

int case_mismatch(ctx_t *c)
{
    hoop__wire_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.kind = HOOP__K_BROADCAST;
    h.dtype = HOOP_FLOAT32;
    h.root = 0;
    h.src = 0;
    h.comm_id = c->comm_id;
    h.seq = 7;
    h.count = 10;
    size_t len = 40;
    if (c->rank == 0) {
        uint8_t out[40], in[8 + GUARD];
        fill(out, len, seed_of(c, 0, 1, 7));
        hoop__xfer_t x, y;
        xinit(&x, HOOP__XFER_SEND, 1, &h, out, len);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 10, "the send that rank 1 does not expect"));
        REQUIRE(c, x.status == HOOP_OK, "send: %s", hoop_error_string(x.status));
        hoop__wire_hdr_t hy = mkhdr(c, 1, 8, 1, 8);
        memset(in, GUARD_BYTE, sizeof(in));
        xinit(&y, HOOP__XFER_RECV, 1, &hy, in, 8);
        c->ops->post(c->tp, &y);
        TRY(drive1(c, &y, 5, "a receive from rank 1 after it failed on a mismatch"));
        /* A disagreement stays one on the rank that is told of it. */
        REQUIRE(c, is_fail_code(y.status) || y.status == HOOP_ERR_MISMATCH,
                "receive from the failed rank 1: %s, expected %s, %s or %s",
                hoop_error_string(y.status), hoop_error_string(HOOP_ERR_MISMATCH),
                hoop_error_string(HOOP_ERR_PEER_LOST), hoop_error_string(HOOP_ERR_ABORTED));
        REQUIRE(c, c->rep.n > 0 && c->rep.peer == 1 && strstr(c->rep.msg, "rank 1") != NULL,
                "report should name rank 1: %d report(s), peer %d, \"%s\"", c->rep.n, c->rep.peer,
                c->rep.msg);
        return 0;
    }
    hoop__wire_hdr_t e = h;
    size_t elen = len;
    const char *theirs = "rank 0 called broadcast(count=10, float32, root=0) as call #7";
    const char *mine = NULL;
    switch (c->variant) {
    case MM_SEQ:
        e.seq = 8;
        mine = "rank 1 called broadcast(count=10, float32, root=0) as call #8";
        break;
    case MM_KIND:
        e.kind = HOOP__K_ALLGATHER;
        e.root = -1;
        mine = "rank 1 called allgather(count=10, float32) as call #7";
        break;
    case MM_COUNT:
        e.count = 12;
        mine = "rank 1 called broadcast(count=12, float32, root=0) as call #7";
        break;
    default:
        elen = 44;
        theirs = "rank 0 sent 40 bytes where 44 were expected in broadcast(count=10, float32, "
                 "root=0)";
        break;
    }
    uint8_t *in = rbuf_new(elen);
    REQUIRE(c, in != NULL, "out of memory");
    hoop__xfer_t x;
    xinit(&x, HOOP__XFER_RECV, 0, &e, in, elen);
    c->ops->post(c->tp, &x);
    TRY(drive1(c, &x, 10, "the mismatched receive"));
    REQUIRE(c, x.status == HOOP_ERR_MISMATCH, "mismatched %s: status %s, expected %s",
            mm_name[c->variant], hoop_error_string(x.status), hoop_error_string(HOOP_ERR_MISMATCH));
    REQUIRE(c,
            x.got.kind == h.kind && x.got.seq == h.seq && x.got.count == h.count &&
                x.got.payload_len == len && x.got.comm_id == h.comm_id,
            "got should hold the header that arrived: kind %d seq %" PRIu64 " count %" PRIu64
            " len %" PRIu64,
            x.got.kind, x.got.seq, x.got.count, x.got.payload_len);
    REQUIRE(c, guard_ok(in, elen), "bytes written past the end of the receive buffer");
    REQUIRE(c, c->rep.n > 0, "report() was not called");
    REQUIRE(c, c->rep.code == HOOP_ERR_MISMATCH && c->rep.peer == 0,
            "report: %s for peer %d, expected %s for peer 0", hoop_error_string(c->rep.code),
            c->rep.peer, hoop_error_string(HOOP_ERR_MISMATCH));
    REQUIRE(c, strstr(c->rep.msg, theirs) != NULL && (mine == NULL || strstr(c->rep.msg, mine)),
            "report \"%s\" should contain \"%s\"%s%s", c->rep.msg, theirs, mine ? " and " : "",
            mine ? mine : "");
    /* The pair is out of step now: a later receive from rank 0 must fail, not wait. */
    hoop__wire_hdr_t hz = mkhdr(c, 0, 9, 2, 8);
    uint8_t z[8 + GUARD];
    hoop__xfer_t y;
    xinit(&y, HOOP__XFER_RECV, 0, &hz, z, 8);
    c->ops->post(c->tp, &y);
    TRY(drive1(c, &y, 2, "a receive after the mismatch"));
    REQUIRE(c, y.status != HOOP_OK, "a receive after the mismatch succeeded");
    free(in);
    return 0;
}

/* One 16-byte exchange with the other rank, numbered seq: the instance still works. With
 * registered set, both buffers are registered first (reg()) and the transfers carry the handles. */
static int exchange_ok(ctx_t *c, uint64_t seq, const char *what, int registered)
{
    const hoop__transport_ops_t *ops = c->ops;
    int me = c->rank, peer = 1 - me;
    uint8_t in[16 + GUARD], out[16];
    void *rin = NULL, *rout = NULL;
    if (registered)
        REQUIRE(c,
                ops->reg(c->tp, in, sizeof(in), HOOP__MEM_HOST, &rin) == HOOP_OK &&
                    ops->reg(c->tp, out, sizeof(out), HOOP__MEM_HOST, &rout) == HOOP_OK,
                "reg: %s", c->rep.msg);
    memset(in, GUARD_BYTE, sizeof(in));
    fill(out, 16, seed_of(c, me, peer, seq));
    hoop__xfer_t r, s;
    hoop__wire_hdr_t hr = mkhdr(c, peer, seq, seq, 16), hs = mkhdr(c, me, seq, seq, 16);
    xinit(&r, HOOP__XFER_RECV, peer, &hr, in, 16);
    xinit(&s, HOOP__XFER_SEND, peer, &hs, out, 16);
    r.mem.reg = rin;
    s.mem.reg = rout;
    ops->post(c->tp, &s);
    ops->post(c->tp, &r);
    hoop__xfer_t *both[2] = {&r, &s};
    char w[96];
    snprintf(w, sizeof(w), "an exchange %s", what);
    TRY(drive(c, both, 2, 10, w));
    REQUIRE(c, s.status == HOOP_OK, "send %s: %s", what, hoop_error_string(s.status));
    TRY(check_recv(c, &r, &hr, seed_of(c, peer, me, seq), what));
    if (registered) {
        ops->dereg(c->tp, rin);
        ops->dereg(c->tp, rout);
    }
    return 0;
}

/* Transfers to no valid peer (-1, size, itself) complete with an error instead of waiting. */
int case_badpeer(ctx_t *c)
{
    int me = c->rank;
    const int bad[3] = {-1, c->size, me};
    static const char *const name[3] = {"-1", "size", "itself"};
    for (int i = 0; i < 3; i++) {
        for (int dir = HOOP__XFER_SEND; dir <= HOOP__XFER_RECV; dir++) {
            uint8_t b[16];
            memset(b, 0, sizeof(b));
            hoop__xfer_t x;
            hoop__wire_hdr_t h = mkhdr(c, me, 1, 1, 16);
            xinit(&x, dir, bad[i], &h, b, 16);
            c->ops->post(c->tp, &x);
            char what[80];
            snprintf(what, sizeof(what), "a %s to peer %s",
                     dir == HOOP__XFER_SEND ? "send" : "receive", name[i]);
            TRY(drive1(c, &x, 1, what));
            REQUIRE(c, x.status != HOOP_OK, "%s succeeded", what);
        }
    }
    return exchange_ok(c, 2, "after the bad posts", 0);
}

/* A memory type no transport of the registry takes (one outside the enumeration where every
 * type is taken by some transport). */
static int untaken_type(void)
{
    for (int t = 0; t < HOOP__MEM_COUNT; t++) {
        int taken = 0;
        for (int i = 0; i < hoop__tp_registry_n; i++)
            taken |= (hoop__tp_registry[i].ops->caps & HOOP__TP_MEM(t)) != 0;
        if (!taken) return t;
    }
    return HOOP__MEM_COUNT;
}

/* Memory the transport cannot take: a send or receive of it completes at once with an error and a
 * sentence naming the type and the peer, and the instance goes on working. A memory type that is
 * none fails as an invalid argument. Where the transport registers memory, transfers of
 * registered buffers go through. */
int case_memory(ctx_t *c)
{
    const hoop__transport_ops_t *ops = c->ops;
    REQUIRE(c, ops->caps & HOOP__TP_MEM(HOOP__MEM_HOST), "%s does not take host memory", ops->name);
    REQUIRE(c, (ops->reg == NULL) == (ops->dereg == NULL), "reg() and dereg() come together");
    REQUIRE(c, !(ops->caps & HOOP__TP_WANTS_REG) || ops->reg != NULL,
            "the caps ask for registration but there is no reg()");
    int me = c->rank, peer = 1 - me;
    const int types[2] = {untaken_type(), HOOP__MEM_COUNT + 3};
    for (int i = 0; i < 2; i++) {
        int known = types[i] < HOOP__MEM_COUNT;
        hoop_result_t want = known ? HOOP_ERR_UNSUPPORTED : HOOP_ERR_INVALID_ARGUMENT;
        char text[64], peer_s[24];
        if (known)
            snprintf(text, sizeof(text), "cannot move %s memory", hoop__mem_type_name(types[i]));
        else
            snprintf(text, sizeof(text), "memory type %d, which does not exist", types[i]);
        snprintf(peer_s, sizeof(peer_s), "rank %d", peer);
        for (int dir = HOOP__XFER_SEND; dir <= HOOP__XFER_RECV; dir++) {
            uint8_t b[16] = {0};
            hoop__xfer_t x;
            hoop__wire_hdr_t h = mkhdr(c, dir == HOOP__XFER_SEND ? me : peer, 1, 1, 16);
            xinit(&x, dir, peer, &h, b, 16);
            x.mem.type = (hoop__mem_type_t)types[i];
            memset(&c->rep, 0, sizeof(c->rep));
            ops->post(c->tp, &x);
            REQUIRE(c, x.done && x.status == want,
                    "a %s of memory type %d: %s, expected %s at once",
                    dir == HOOP__XFER_SEND ? "send" : "receive", types[i],
                    x.done ? hoop_error_string(x.status) : "not done", hoop_error_string(want));
            REQUIRE(c,
                    c->rep.n > 0 && c->rep.code == want && strstr(c->rep.msg, text) != NULL &&
                        strstr(c->rep.msg, peer_s) != NULL,
                    "report: %d call(s), %s, \"%s\" (expected %s, \"%s\" and \"%s\")", c->rep.n,
                    hoop_error_string(c->rep.code), c->rep.msg, hoop_error_string(want), text,
                    peer_s);
        }
    }
    TRY(exchange_ok(c, 2, "after the refused posts", 0));
    if (ops->reg != NULL) TRY(exchange_ok(c, 3, "of registered buffers", 1));
    return 0;
}

/* A buffer freed and another allocated at the same address between two transfers: the second
 * must carry the new buffer's bytes, both ways, registered where the transport registers memory
 * (reg() on each buffer, dereg() before the free), so that whatever a transport keeps about a
 * range (a registration, a cache entry) cannot serve the old memory. Sizes served by mmap, which
 * glibc gives back at free, and by the heap. */
int case_realloc(ctx_t *c)
{
    static const size_t lens[] = {1 * MIB + 5, 200 * 1024, 3000};
    int me = c->rank, peer = 1 - me, same = 0;
    for (int k = 0; k < (int)(sizeof(lens) / sizeof(lens[0])); k++) {
        size_t len = lens[k];
        void *prev = NULL;
        for (int round = 0; round < 3; round++) {
            uint64_t seq = (1ull << 44) + (uint64_t)(k * 8 + round);
            uint8_t *b = me == 0 ? malloc(len) : rbuf_new(len);
            REQUIRE(c, b != NULL, "out of memory");
            int again = round > 0 && (void *)b == prev;
            same += again;
            prev = b;
            void *reg = NULL;
            if (c->ops->reg != NULL)
                REQUIRE(c,
                        c->ops->reg(c->tp, b, len + (me == 0 ? 0 : GUARD), HOOP__MEM_HOST, &reg) ==
                            HOOP_OK,
                        "reg of %zu bytes: %s", len, c->rep.msg);
            hoop__xfer_t x;
            hoop__wire_hdr_t h = mkhdr(c, 0, seq, (uint64_t)round, len);
            if (me == 0) fill(b, len, seed_of(c, 0, 1, seq));
            xinit(&x, me == 0 ? HOOP__XFER_SEND : HOOP__XFER_RECV, peer, &h, b, len);
            x.mem.reg = reg;
            c->ops->post(c->tp, &x);
            TRY(drive1(c, &x, 10, "a transfer from a reallocated buffer"));
            char what[96];
            snprintf(what, sizeof(what), "%zu bytes, round %d (same address as before: %s)", len,
                     round, again ? "yes" : "no");
            if (me == 0)
                REQUIRE(c, x.status == HOOP_OK, "%s: send: %s", what, hoop_error_string(x.status));
            else
                TRY(check_recv(c, &x, &h, seed_of(c, 0, 1, seq), what));
            if (reg != NULL) c->ops->dereg(c->tp, reg);
            free(b);
        }
    }
    if (c->o->verbose) notef(c, "%d of 6 reallocations came back at the freed address", same);
    return 0;
}

/* probe(): rank 0 looks at what rank 1 sent before posting receives for it. Nothing shows before
 * rank 1 sends; then each message's header shows whole, again and again (nothing is consumed),
 * and not while a receive for rank 1 is queued; the receive posted after probing gets the whole
 * message. A transport without probe skips the case. */
int case_probe(ctx_t *c)
{
    static const size_t lens[] = {100, 3 * MIB + 7, 0};
    enum { N = 3 };
    if (c->ops->probe == NULL) {
        notef(c, "the transport has no probe: nothing to check");
        return 0;
    }
    hoop__xfer_t x[N];
    uint8_t *b[N];
    hoop__wire_hdr_t h[N];
    for (int i = 0; i < N; i++) {
        b[i] = rbuf_new(lens[i]);
        REQUIRE(c, b[i] != NULL, "out of memory");
        h[i] = mkhdr(c, 1, 300 + (uint64_t)i, (uint64_t)i, lens[i]);
    }
    if (c->rank == 1) {
        TRY(board_wait(c, B_POSTED, 1, lim(c, 20)));
        hoop__xfer_t *all[N];
        for (int i = 0; i < N; i++) {
            fill(b[i], lens[i], seed_of(c, 1, 0, 300 + (uint64_t)i));
            xinit(&x[i], HOOP__XFER_SEND, 0, &h[i], b[i], lens[i]);
            c->ops->post(c->tp, &x[i]);
            all[i] = &x[i];
        }
        TRY(drive(c, all, N, lim(c, 30), "sends rank 0 probes"));
        for (int i = 0; i < N; i++)
            REQUIRE(c, x[i].status == HOOP_OK, "send %d: %s", i, hoop_error_string(x[i].status));
    } else {
        hoop__wire_hdr_t got;
        REQUIRE(c, !c->ops->probe(c->tp, 0, &got), "probe of this rank itself found a message");
        REQUIRE(c, !c->ops->probe(c->tp, -1, &got) && !c->ops->probe(c->tp, 2, &got),
                "probe of a rank outside the communicator found a message");
        for (int k = 0; k < 20; k++) {
            c->ops->progress(c->tp, 1);
            REQUIRE(c, !c->ops->probe(c->tp, 1, &got), "probe found a message nobody sent");
        }
        atomic_store(&c->board->v[B_POSTED], 1);
        for (int i = 0; i < N; i++) {
            int64_t end = now_ns() + (int64_t)(lim(c, 20) * 1e9);
            int seen = 0;
            while (!(seen = c->ops->probe(c->tp, 1, &got)) && now_ns() < end)
                c->ops->progress(c->tp, 1);
            REQUIRE(c, seen, "message %d (%zu bytes) never showed to probe", i, lens[i]);
            for (int again = 0; again < 2; again++) {
                REQUIRE(c,
                        got.kind == h[i].kind && got.seq == h[i].seq && got.count == h[i].count &&
                            got.dtype == h[i].dtype && got.op == h[i].op && got.root == h[i].root &&
                            got.src == 1 && got.comm_id == c->comm_id && got.payload_len == lens[i],
                        "probe of message %d: kind %d seq %" PRIu64 " count %" PRIu64
                        " src %u payload %" PRIu64 ", sent kind %d seq %" PRIu64 " count %" PRIu64
                        " payload %zu",
                        i, got.kind, got.seq, got.count, got.src, got.payload_len, h[i].kind,
                        h[i].seq, h[i].count, lens[i]);
                c->ops->progress(c->tp, 0);
                memset(&got, 0, sizeof got);
                REQUIRE(c, c->ops->probe(c->tp, 1, &got), "message %d gone after a probe", i);
            }
            xinit(&x[i], HOOP__XFER_RECV, 1, &h[i], b[i], lens[i]);
            c->ops->post(c->tp, &x[i]);
            REQUIRE(c, x[i].done || !c->ops->probe(c->tp, 1, &got),
                    "probe looked past the receive queued for message %d", i);
            TRY(drive1(c, &x[i], lim(c, 30), "receive after probing"));
            char what[64];
            snprintf(what, sizeof what, "message %d received after probing", i);
            TRY(check_recv(c, &x[i], &h[i], seed_of(c, 1, 0, 300 + (uint64_t)i), what));
        }
    }
    for (int i = 0; i < N; i++) free(b[i]);
    return 0;
}
