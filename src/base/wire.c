#include "base/wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/tables.h"

/* Explicit little-endian packing: the layout never depends on the compiler or the host. */
static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Offsets: magic 0, version 4, kind 6, dtype 7, op 8, flags 9, algo 10, reserved 11, root 12,
 * src 16, comm_id 20, seq 28, count 36, payload_len 44, sched 52, reserved 56..63 (zero). */
void hoop__wire_encode(const hoop__wire_hdr_t *h, uint8_t out[HOOP__WIRE_HDR_SIZE])
{
    memset(out, 0, HOOP__WIRE_HDR_SIZE);
    put32(out + 0, HOOP__WIRE_MAGIC);
    put16(out + 4, HOOP__WIRE_VERSION);
    out[6] = h->kind;
    out[7] = h->dtype;
    out[8] = h->op;
    out[9] = h->flags;
    out[10] = h->algo;
    put32(out + 12, (uint32_t)h->root);
    put32(out + 16, h->src);
    put64(out + 20, h->comm_id);
    put64(out + 28, h->seq);
    put64(out + 36, h->count);
    put64(out + 44, h->payload_len);
    put32(out + 52, h->sched);
}

hoop_result_t hoop__wire_decode(const uint8_t in[HOOP__WIRE_HDR_SIZE], uint64_t max_payload,
                                hoop__wire_hdr_t *h)
{
    memset(h, 0, sizeof(*h));
    if (get32(in) != HOOP__WIRE_MAGIC || get16(in + 4) != HOOP__WIRE_VERSION)
        return HOOP_ERR_MISMATCH;
    /* Reserved bytes must be zero: a later version that uses them is told apart by its version. */
    if (in[11] != 0) return HOOP_ERR_MISMATCH;
    for (int i = 56; i < HOOP__WIRE_HDR_SIZE; i++)
        if (in[i] != 0) return HOOP_ERR_MISMATCH;
    h->kind = in[6];
    h->dtype = in[7];
    h->op = in[8];
    h->flags = in[9];
    h->algo = in[10];
    h->root = (int32_t)get32(in + 12);
    h->src = get32(in + 16);
    h->comm_id = get64(in + 20);
    h->seq = get64(in + 28);
    h->count = get64(in + 36);
    h->payload_len = get64(in + 44);
    h->sched = get32(in + 52);
    if (h->kind == HOOP__K_NONE || h->kind >= HOOP__K_COUNT || h->dtype >= HOOP_DTYPE_COUNT ||
        h->op >= HOOP_OP_COUNT || h->algo >= HOOP__WIRE_ALGO_COUNT || h->root < -1 ||
        h->payload_len > max_payload) {
        memset(h, 0, sizeof(*h));
        return HOOP_ERR_MISMATCH;
    }
    return HOOP_OK;
}

hoop_result_t hoop__wire_match(const hoop__wire_hdr_t *e, const hoop__wire_hdr_t *g)
{
    if (e->kind != g->kind || e->comm_id != g->comm_id || e->seq != g->seq ||
        e->count != g->count || e->dtype != g->dtype || e->payload_len != g->payload_len)
        return HOOP_ERR_MISMATCH;
    /* The op and root only mean something where the call has them. */
    if (e->root != g->root || e->op != g->op) return HOOP_ERR_MISMATCH;
    /* Two ranks running different schedules can exchange headers and lengths that coincide (a
     * recursive doubling against a parameter server at 8 elements): the schedule must match too. */
    if (e->algo != g->algo || e->sched != g->sched) return HOOP_ERR_MISMATCH;
    return HOOP_OK;
}

const char *hoop__wire_algo_name(int algo)
{
    static const char *const names[HOOP__WIRE_ALGO_COUNT] = {
        "auto", "ring", "rd", "ps", "ps-sharded", "ipc", "shm", "p2p", "hier", "rabenseifner"};
    return algo >= 0 && algo < HOOP__WIRE_ALGO_COUNT ? names[algo] : "unknown";
}

int hoop__wire_algo_parse(const char *s)
{
    for (int i = 0; s != NULL && i < HOOP__WIRE_ALGO_COUNT; i++)
        if (strcasecmp(s, hoop__wire_algo_name(i)) == 0) return i;
    return -1;
}

const char *hoop__kind_name(int kind)
{
    static const char *const names[] = {
        "none",           "allreduce", "broadcast", "reduce", "allgather", "gather", "scatter",
        "reduce_scatter", "alltoall",  "barrier",   "send",   "split",     "abort"};
    _Static_assert(sizeof(names) / sizeof(names[0]) == HOOP__K_COUNT, "a kind without a name");
    if (kind < 0 || kind >= HOOP__K_COUNT) return "unknown";
    return names[kind];
}

const char *hoop__wire_describe(const hoop__wire_hdr_t *h, char *buf, size_t n)
{
    int has_op = h->kind == HOOP__K_ALLREDUCE || h->kind == HOOP__K_REDUCE ||
                 h->kind == HOOP__K_REDUCE_SCATTER;
    int has_root = h->kind == HOOP__K_BROADCAST || h->kind == HOOP__K_REDUCE ||
                   h->kind == HOOP__K_GATHER || h->kind == HOOP__K_SCATTER;
    if (h->kind == HOOP__K_BARRIER) {
        snprintf(buf, n, "barrier()");
    } else {
        char op[32] = "", root[32] = "";
        if (has_op) snprintf(op, sizeof(op), ", %s", hoop__op_name((hoop_op_t)h->op));
        if (has_root) snprintf(root, sizeof(root), ", root=%d", (int)h->root);
        snprintf(buf, n, "%s(count=%" PRIu64 ", %s%s%s)", hoop__kind_name(h->kind), h->count,
                 hoop__dtype_name((hoop_dtype_t)h->dtype), op, root);
    }
    return buf;
}

const char *hoop__wire_mismatch_msg(const hoop__wire_hdr_t *e, const hoop__wire_hdr_t *g, int peer,
                                    int me, char *buf, size_t n)
{
    char mine[128], theirs[128];
    hoop__wire_describe(e, mine, sizeof(mine));
    /* Both ends of a point-to-point message carry kind send; the one checking is a receive. */
    if (e->kind == HOOP__K_SEND) memcpy(mine, "recv", 4);
    if (g->kind == HOOP__K_NONE) {
        snprintf(buf, n, "rank %d sent a malformed message during %s (call #%" PRIu64 ")", peer,
                 mine, e->seq);
    } else if (g->comm_id != e->comm_id) {
        snprintf(buf, n, "rank %d sent a message of another communicator during %s", peer, mine);
    } else if (g->kind == e->kind && g->seq == e->seq && g->count == e->count &&
               g->dtype == e->dtype && g->op == e->op && g->root == e->root && g->algo != e->algo) {
        snprintf(buf, n,
                 "rank %d ran %s as call #%" PRIu64 " with the %s algorithm where rank %d "
                 "ran it with %s (hoop_comm_set_algo or HOOP_ALGO must be the same on every rank)",
                 peer, mine, e->seq, hoop__wire_algo_name(g->algo), me,
                 hoop__wire_algo_name(e->algo));
    } else if (g->kind == e->kind && g->seq == e->seq && g->count == e->count &&
               g->dtype == e->dtype && g->op == e->op && g->root == e->root &&
               g->sched != e->sched) {
        snprintf(buf, n,
                 "rank %d ran %s as call #%" PRIu64 " with other schedule settings than "
                 "rank %d (digest %08x against %08x)",
                 peer, mine, e->seq, me, (unsigned)g->sched, (unsigned)e->sched);
    } else if (g->kind == e->kind && g->seq == e->seq && g->count == e->count &&
               g->dtype == e->dtype && g->op == e->op && g->root == e->root) {
        snprintf(buf, n, "rank %d sent %" PRIu64 " bytes where %" PRIu64 " were expected in %s",
                 peer, g->payload_len, e->payload_len, mine);
    } else {
        hoop__wire_describe(g, theirs, sizeof(theirs));
        snprintf(buf, n,
                 "rank %d called %s as call #%" PRIu64 " where rank %d called %s as call #%" PRIu64,
                 peer, theirs, g->seq, me, mine, e->seq);
    }
    return buf;
}

hoop_result_t hoop__wire_check_recv(const hoop__wire_hdr_t *posted, uint64_t len,
                                    const hoop__wire_hdr_t *got, int valid, int peer, int me,
                                    char *msg, size_t n)
{
    hoop__wire_hdr_t want = *posted;
    want.payload_len = len;
    if (valid && hoop__wire_match(&want, got) == HOOP_OK) return HOOP_OK;
    hoop__wire_mismatch_msg(&want, got, peer, me, msg, n);
    return HOOP_ERR_MISMATCH;
}

/* ---- status datagrams ----
 * Offsets: magic 0, version 4, type 6, flags 7, state 8, code 9, kind 10, dtype 11, rank 12,
 * pid 16, age_ms 20, comm_id 24, nonce 32, seq 40, count 48, reserved 56..63 (zero). */
void hoop__status_encode(const hoop__status_msg_t *m, uint8_t out[HOOP__STATUS_SIZE])
{
    memset(out, 0, HOOP__STATUS_SIZE);
    put32(out + 0, HOOP__STATUS_MAGIC);
    put16(out + 4, HOOP__STATUS_VERSION);
    out[6] = m->type;
    out[7] = m->flags;
    out[8] = m->state;
    out[9] = m->code;
    out[10] = m->kind;
    out[11] = m->dtype;
    put32(out + 12, m->rank);
    put32(out + 16, m->pid);
    put32(out + 20, m->age_ms);
    put64(out + 24, m->comm_id);
    put64(out + 32, m->nonce);
    put64(out + 40, m->seq);
    put64(out + 48, m->count);
    out[56] = m->engine;
    out[57] = m->algo;
    out[58] = m->small;
}

hoop_result_t hoop__status_decode(const uint8_t *in, size_t len, hoop__status_msg_t *m)
{
    memset(m, 0, sizeof(*m));
    if (in == NULL || len != HOOP__STATUS_SIZE || get32(in) != HOOP__STATUS_MAGIC ||
        get16(in + 4) != HOOP__STATUS_VERSION)
        return HOOP_ERR_MISMATCH;
    for (int i = 59; i < HOOP__STATUS_SIZE; i++)
        if (in[i] != 0) return HOOP_ERR_MISMATCH;
    hoop__status_msg_t d = {
        .type = in[6],
        .flags = in[7],
        .state = in[8],
        .code = in[9],
        .kind = in[10],
        .dtype = in[11],
        .rank = get32(in + 12),
        .pid = get32(in + 16),
        .age_ms = get32(in + 20),
        .comm_id = get64(in + 24),
        .nonce = get64(in + 32),
        .seq = get64(in + 40),
        .count = get64(in + 48),
        .engine = in[56],
        .algo = in[57],
        .small = in[58],
    };
    /* A tool outside the communicator asks as rank HOOP__STATUS_TOOL; no answer comes from it. */
    if ((d.rank > INT32_MAX && !(d.type == HOOP__STATUS_REQ && d.rank == HOOP__STATUS_TOOL)) ||
        d.pid > INT32_MAX)
        return HOOP_ERR_MISMATCH;
    if (d.type == HOOP__STATUS_REQ) {
        /* A request asks; it says nothing of a call. */
        if (d.flags || d.state || d.code || d.kind || d.dtype || d.age_ms || d.seq || d.count ||
            d.engine || d.algo || d.small)
            return HOOP_ERR_MISMATCH;
    } else if (d.type == HOOP__STATUS_ANS) {
        if ((d.flags & ~HOOP__STATUS_FLAGS) != 0 || d.kind >= HOOP__K_COUNT ||
            d.dtype >= HOOP_DTYPE_COUNT || d.state > 4 || d.code >= 64 || d.engine >= 8 ||
            d.algo >= 32 || d.small > 1)
            return HOOP_ERR_MISMATCH;
        /* Without a call, no call's fields. */
        if (!(d.flags & HOOP__STATUS_HAS_CALL) &&
            (d.state || d.code || d.kind || d.dtype || d.seq || d.count || d.age_ms || d.engine ||
             d.algo || d.small))
            return HOOP_ERR_MISMATCH;
        if ((d.flags & HOOP__STATUS_HAS_CALL) && (d.state == 0 || d.kind == HOOP__K_NONE))
            return HOOP_ERR_MISMATCH;
    } else {
        return HOOP_ERR_MISMATCH;
    }
    *m = d;
    return HOOP_OK;
}
