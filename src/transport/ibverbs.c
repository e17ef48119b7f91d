/* RDMA verbs transport: the data path, completions, waiting, failures and abort. ibverbs.h says
 * how it works.
 *
 * Why NCTRL slots suffice for control messages, which need no credit: a receiver takes a control
 * fragment's slot back as soon as it polls it. Between two of its polls it can learn of no new
 * credit, so it sends at most NSLOTS data fragments, and its peer answers them with at most
 * NSLOTS / CREDIT_BATCH credit messages; with one ready notice, one goodbye and one abort notice
 * per peer, and one zero-copy answer and one end (a sender starts no zero-copy message before the
 * last one's answer came, nor the next before it sent the end), fewer than NCTRL control
 * fragments ever wait in slots not yet posted again. */
#define HOOP__LOG_SUBSYS HOOP__SUB_TRANSPORT /* of its INFO and TRACE lines (base/log.h) */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "transport/transport.h"

#include "transport/ibverbs.h"

const char *hoop__ibt_where(const hoop__tp_t *tp) { return tp->where; }

void hoop__ibt_report(hoop__tp_t *tp, hoop_result_t code, int peer, const char *msg)
{
    size_t n = strlen(msg) < ABORT_MAX ? strlen(msg) : ABORT_MAX;
    if (tp->conn_err[0] == '\0') {
        memcpy(tp->conn_err, msg, n);
        tp->conn_err[n] = '\0';
    }
    tp->p.report(tp->p.report_ctx, code, peer, msg);
}

int hoop__ibt_post_slot(hoop__tp_t *tp, int j, int i)
{
    peer_t *pe = &tp->peers[j];
    struct ibv_sge sge = {.addr = (uintptr_t)(pe->rbuf + (size_t)i * SLOT_BYTES),
                          .length = SLOT_BYTES,
                          .lkey = pe->rmr->lkey};
    struct ibv_recv_wr wr = {.wr_id = WR_ID(j, W_RECV, i), .sg_list = &sge, .num_sge = 1}, *bad;
    return tp->v.post_recv(pe->qp, &wr, &bad);
}

static void peer_lost(hoop__tp_t *tp, int j, const char *why);

/* Posts send buffer i of peer j holding bytes: 0, or -1 with the peer failed. */
static int post_buf(hoop__tp_t *tp, int j, int i, size_t bytes)
{
    peer_t *pe = &tp->peers[j];
    struct ibv_sge sge = {.addr = (uintptr_t)(pe->sbuf + (size_t)i * SLOT_BYTES),
                          .length = (uint32_t)bytes,
                          .lkey = pe->smr->lkey};
    struct ibv_send_wr wr = {.wr_id = WR_ID(j, W_SEND, i),
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    int rc = tp->v.post_send(pe->qp, &wr, &bad);
    if (rc != 0) {
        pe->sfree[pe->nsfree++] = i;
        pe->sx[i] = NULL;
        char why[160];
        snprintf(why, sizeof(why), "%s: ibv_post_send: %s", hoop__ibt_where(tp), strerror(rc));
        peer_lost(tp, j, why);
        return -1;
    }
    pe->inflight++;
    pe->moved += bytes;
    return 0;
}

int hoop__ibt_send_ctrl(hoop__tp_t *tp, int j, int type, int flags, const void *body, size_t len)
{
    peer_t *pe = &tp->peers[j];
    if (!pe->up || pe->nsfree == 0 || len > SLOT_BYTES - FRAG_HDR) return -1;
    int i = pe->sfree[--pe->nsfree];
    uint8_t *b = pe->sbuf + (size_t)i * SLOT_BYTES;
    frag_put(b, type, flags, (uint32_t)pe->owed, (uint32_t)len);
    if (len > 0) memcpy(b + FRAG_HDR, body, len);
    pe->sx[i] = NULL;
    int owed = pe->owed;
    pe->owed = 0;
    if (post_buf(tp, j, i, FRAG_HDR + len) != 0) {
        pe->owed = owed;
        return -1;
    }
    return 0;
}

void hoop__ibt_zc_drop(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    hoop__ibv_mrc_put(&tp->mrc, pe->zx_mr, pe->zx_ref);
    hoop__ibv_mrc_put(&tp->mrc, pe->zr_mr, pe->zr_ref);
    pe->zx_mr = pe->zr_mr = NULL;
}

static void fail_list(hoop__xfer_t **head, hoop__xfer_t **tail, hoop_result_t code)
{
    for (hoop__xfer_t *x = *head, *n; x != NULL; x = n) {
        n = *ibt_next(x);
        if (x->status == HOOP_OK) x->status = code;
        x->done = 1;
    }
    *head = *tail = NULL;
}

/* Fails every transfer of peer j with code, those whose last fragment is in flight too. */
static void fail_peer_xfers(hoop__tp_t *tp, int j, hoop_result_t code)
{
    peer_t *pe = &tp->peers[j];
    /* Registrations of user memory go before their transfers complete: once a buffer is handed
     * back, no late RDMA WRITE of the peer's may land in it. */
    hoop__ibt_zc_drop(tp, j);
    if (pe->zx != NULL) {
        if (pe->zx->status == HOOP_OK) pe->zx->status = code;
        pe->zx->done = 1;
        pe->zx = NULL;
    }
    fail_list(&pe->sq, &pe->sq_tail, code);
    fail_list(&pe->rq, &pe->rq_tail, code);
    for (int i = 0; i < NSEND; i++) {
        hoop__xfer_t *x = pe->sx[i];
        if (x == NULL) continue;
        if (x->status == HOOP_OK) x->status = code;
        x->done = 1;
        pe->sx[i] = NULL;
    }
}

/* An abort notice to peer j: the calls this rank finished (8 bytes, little-endian), the reason. */
static void send_abort(hoop__tp_t *tp, int j, hoop_result_t code, const char *text, size_t len)
{
    uint8_t body[8 + ABORT_MAX];
    uint64_t done = hoop__tp_calls_done(&tp->p);
    if (len > ABORT_MAX) len = ABORT_MAX;
    for (int i = 0; i < 8; i++) body[i] = (uint8_t)(done >> (8 * i));
    memcpy(body + 8, text, len);
    (void)hoop__ibt_send_ctrl(tp, j, F_ABORT, (int)code, body, 8 + len);
}

/* The first failure of peer j: its transfers fail with code and msg is reported (as the peer's
 * notice where it came in one). A peer that can still hear it (it sent a mismatched message, say)
 * is told msg first. Once settled, the other peers' transfers go on, as over tcp: the
 * communicator aborts the transport when no call it runs can end; while connecting, the first
 * failure of a peer aborts it whole at once. */
static void peer_fail(hoop__tp_t *tp, int j, hoop_result_t code, const char *msg)
{
    peer_t *pe = &tp->peers[j];
    if (pe->lost) return;
    pe->lost = 1;
    if (code != HOOP_ERR_PEER_LOST && code != HOOP_ERR_ABORTED && pe->ab_code == HOOP_OK)
        send_abort(tp, j, hoop__tp_notice_code(&tp->p, code), msg, strlen(msg));
    fail_peer_xfers(tp, j, code);
    if (pe->ab_heard)
        hoop__tp_report_notice(&tp->p, code, j, msg, pe->ab_done);
    else
        tp->p.report(tp->p.report_ctx, code, j, msg);
    if (!tp->abort_sent && !tp->settled) hoop__ibt_abort(tp, code, msg);
}

static void peer_lost(hoop__tp_t *tp, int j, const char *why)
{
    char msg[320];
    snprintf(msg, sizeof(msg), "lost connection to rank %d (%s)", j, why);
    peer_fail(tp, j, HOOP_ERR_PEER_LOST, msg);
}

static void protocol_error(hoop__tp_t *tp, int j, const char *what)
{
    char msg[200];
    snprintf(msg, sizeof(msg), "rank %d sent %s over %s", j, what, hoop__ibt_where(tp));
    peer_fail(tp, j, HOOP_ERR_INTERNAL, msg);
}

static void push(hoop__xfer_t **head, hoop__xfer_t **tail, hoop__xfer_t *x)
{
    *ibt_next(x) = NULL;
    if (*tail != NULL)
        *ibt_next(*tail) = x;
    else
        *head = x;
    *tail = x;
}

static hoop__xfer_t *pop(hoop__xfer_t **head, hoop__xfer_t **tail)
{
    hoop__xfer_t *x = *head;
    *head = *ibt_next(x);
    if (*head == NULL) *tail = NULL;
    return x;
}

/* Gives the slot of the oldest arrived fragment back to the receive queue. 0, or -1 (failed). */
static int release_slot(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    int i = pe->arr[pe->arr_head];
    pe->arr_head = (pe->arr_head + 1) % NRECV;
    pe->arr_n--;
    int rc = hoop__ibt_post_slot(tp, j, i);
    if (rc != 0) {
        char why[160];
        snprintf(why, sizeof(why), "%s: ibv_post_recv: %s", hoop__ibt_where(tp), strerror(rc));
        peer_lost(tp, j, why);
        return -1;
    }
    pe->owed++;
    return 0;
}

static void match(hoop__tp_t *tp, int j);
static void abort_take(hoop__tp_t *tp, int j);

/* A zero-copy request for receive x: its buffer registered and offered to the sender (F_CTS), or,
 * where it cannot be registered, an offer of nothing, and the payload comes eagerly after all. */
static void zc_accept(hoop__tp_t *tp, int j, hoop__xfer_t *x)
{
    peer_t *pe = &tp->peers[j];
    uint8_t body[16] = {0};
    pe->zr_mr = hoop__ibv_mrc_get(&tp->mrc, x->buf, x->len,
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &pe->zr_ref);
    if (pe->zr_mr != NULL) {
        uint64_t a = (uintptr_t)x->buf;
        uint32_t k = pe->zr_mr->rkey;
        for (int i = 0; i < 8; i++) body[i] = (uint8_t)(a >> (8 * i));
        for (int i = 0; i < 4; i++) body[8 + i] = (uint8_t)(k >> (8 * i));
    } else {
        HOOP__INFO(tp->p.log, "ibverbs: %zu bytes from rank %d come by copy: ibv_reg_mr: %s",
                   x->len, j, strerror(errno));
    }
    if (hoop__ibt_send_ctrl(tp, j, F_CTS, 0, body, sizeof(body)) != 0 && !pe->lost)
        protocol_error(tp, j, "a zero-copy request with no buffer left to answer it");
}

/* F_FIN: the zero-copy message at the head of peer j's receives is in. */
static void zc_fin(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    if (pe->zr_mr == NULL || pe->rq == NULL) {
        protocol_error(tp, j, "the end of a zero-copy message it was not sending");
        return;
    }
    hoop__ibv_mrc_put(&tp->mrc, pe->zr_mr, pe->zr_ref);
    pe->zr_mr = NULL;
    hoop__xfer_t *x = pop(&pe->rq, &pe->rq_tail);
    *ibt_off(x) = x->len;
    pe->moved += x->len;
    x->done = 1;
    match(tp, j);
}

/* F_CTS: where the receiver wants zx's payload (address 0: by copy after all). */
static void zc_cts(hoop__tp_t *tp, int j, const uint8_t *body, size_t len)
{
    peer_t *pe = &tp->peers[j];
    if (pe->zx == NULL || pe->zx_state != 0 || len != 16) {
        protocol_error(tp, j, "a zero-copy answer to no request");
        return;
    }
    uint64_t a = 0;
    uint32_t k = 0;
    for (int i = 0; i < 8; i++) a |= (uint64_t)body[i] << (8 * i);
    for (int i = 0; i < 4; i++) k |= (uint32_t)body[8 + i] << (8 * i);
    if (a == 0) {
        /* Eagerly after all, ahead of everything queued: its header went already. */
        hoop__xfer_t *x = pe->zx;
        pe->zx = NULL;
        hoop__ibv_mrc_put(&tp->mrc, pe->zx_mr, pe->zx_ref);
        pe->zx_mr = NULL;
        *ibt_next(x) = pe->sq;
        pe->sq = x;
        if (pe->sq_tail == NULL) pe->sq_tail = x;
        return;
    }
    pe->zx_addr = a;
    pe->zx_rkey = k;
    pe->zx_off = 0;
    pe->zx_state = 1;
}

/* Copies arrived fragments of peer j into its posted receives, in order. */
static void match(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    while (!pe->lost && pe->rq != NULL && pe->arr_n > 0 && pe->zr_mr == NULL) {
        hoop__xfer_t *x = pe->rq;
        const uint8_t *b = pe->rbuf + (size_t)pe->arr[pe->arr_head] * SLOT_BYTES;
        size_t len = frag_u32(b + 8);
        const uint8_t *data = b + FRAG_HDR;
        if (!*ibt_hdr(x)) {
            if (!(b[1] & FL_FIRST)) {
                protocol_error(tp, j, "a fragment without a header where a message starts");
                return;
            }
            char msg[400];
            int valid = hoop__wire_decode(data, UINT64_MAX, &x->got) == HOOP_OK;
            if (hoop__wire_check_recv(&x->hdr, x->len, &x->got, valid, j, tp->p.rank, msg,
                                      sizeof(msg)) != HOOP_OK) {
                x->status = HOOP_ERR_MISMATCH;
                x->done = 1;
                pop(&pe->rq, &pe->rq_tail);
                peer_fail(tp, j, HOOP_ERR_MISMATCH, msg);
                return;
            }
            *ibt_hdr(x) = 1;
            data += HOOP__WIRE_HDR_SIZE;
            if (b[1] & FL_ZC) {
                if (len != 0) {
                    protocol_error(tp, j, "payload with a zero-copy request");
                    return;
                }
                if (release_slot(tp, j) != 0) return;
                zc_accept(tp, j, x);
                continue;
            }
        } else if (b[1]) {
            protocol_error(tp, j, "a new message in the middle of one");
            return;
        }
        if (len > x->len - *ibt_off(x)) {
            protocol_error(tp, j, "more payload than its header announced");
            return;
        }
        if (len > 0) memcpy((uint8_t *)x->buf + *ibt_off(x), data, len);
        *ibt_off(x) += len;
        if (release_slot(tp, j) != 0) return;
        if (*ibt_off(x) == x->len) {
            pop(&pe->rq, &pe->rq_tail);
            x->done = 1;
        }
    }
    if (!pe->lost && pe->ab_held && pe->arr_n == 0) abort_take(tp, j);
    if (!pe->lost && pe->rq != NULL && pe->arr_n == 0 && pe->zr_mr == NULL && pe->bye)
        peer_lost(tp, j, "it closed its communicator");
}

/* Peer j's abort notice, once every data fragment it sent before is taken. */
static void abort_take(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    pe->ab_held = 0;
    pe->ab_heard = 1;
    peer_fail(tp, j, pe->ab_code, pe->ab_msg);
}

/* An abort notice from peer j: the calls it had finished, the reason (printable characters only).
 * Held while data fragments of j wait for their receives (match() takes it after them). */
static void abort_in(hoop__tp_t *tp, int j, int code, const uint8_t *body, size_t len)
{
    peer_t *pe = &tp->peers[j];
    pe->ab_done = 0;
    if (len >= 8) {
        for (int i = 0; i < 8; i++) pe->ab_done |= (uint64_t)body[i] << (8 * i);
        body += 8;
        len -= 8;
    }
    char reason[ABORT_MAX + 1];
    if (len > ABORT_MAX) len = ABORT_MAX;
    for (size_t k = 0; k < len; k++)
        reason[k] = body[k] >= ' ' && body[k] < 0x7f ? (char)body[k] : '?';
    reason[len] = '\0';
    if (code == HOOP_ERR_TIMEOUT && tp->p.peer_timed_out != NULL)
        atomic_store(tp->p.peer_timed_out, 1);
    pe->ab_code = code == HOOP_ERR_MISMATCH ? HOOP_ERR_MISMATCH : HOOP_ERR_ABORTED;
    if (!tp->failed && pe->ready) tp->aborted_ready = 1;
    snprintf(pe->ab_msg, sizeof(pe->ab_msg), "rank %d aborted: %s", j,
             len > 0 ? reason : "(no reason given)");
    if (pe->arr_n > 0)
        pe->ab_held = 1;
    else
        abort_take(tp, j);
}

/* A fragment came into slot i of peer j. */
static void frag_in(hoop__tp_t *tp, int j, int i, uint32_t bytes)
{
    peer_t *pe = &tp->peers[j];
    const uint8_t *b = pe->rbuf + (size_t)i * SLOT_BYTES;
    pe->moved += bytes;
    if (pe->lost) return;
    uint32_t len = frag_u32(b + 8);
    if (bytes < FRAG_HDR ||
        (uint64_t)len + FRAG_HDR +
                (b[0] == F_DATA && (b[1] & FL_FIRST) ? HOOP__WIRE_HDR_SIZE : 0) !=
            bytes) {
        protocol_error(tp, j, "a malformed fragment");
        return;
    }
    pe->credits += (int)frag_u32(b + 4);
    if (pe->credits > NSLOTS) {
        protocol_error(tp, j, "more credits than it has slots");
        return;
    }
    int type = b[0];
    if (type == F_DATA) {
        pe->arr[(pe->arr_head + pe->arr_n) % NRECV] = i;
        pe->arr_n++;
        match(tp, j);
        return;
    }
    if (type == F_ABORT) {
        abort_in(tp, j, b[1], b + FRAG_HDR, len);
        return;
    }
    if (type != F_CREDIT && type != F_READY && type != F_BYE && type != F_CTS && type != F_FIN) {
        protocol_error(tp, j, "a fragment of unknown type");
        return;
    }
    int rc = hoop__ibt_post_slot(tp, j, i);
    if (rc != 0) {
        char why[160];
        snprintf(why, sizeof(why), "%s: ibv_post_recv: %s", hoop__ibt_where(tp), strerror(rc));
        peer_lost(tp, j, why);
        return;
    }
    if (type == F_READY) pe->ready = 1;
    if (type == F_CTS) zc_cts(tp, j, b + FRAG_HDR, len); /* read before the slot is reused: */
    if (type == F_FIN) zc_fin(tp, j);                    /* the CQ is polled by this thread only */
    if (type == F_BYE) {
        pe->bye = 1;
        match(tp, j);
    }
}

/* A completion with an error on peer j's queue pair. */
static void wc_error(hoop__tp_t *tp, int j, const struct ibv_wc *wc)
{
    peer_t *pe = &tp->peers[j];
    if (pe->lost || pe->gone) return;
    /* A peer whose notice is held went away after it: the notice is what it failed with. */
    if (pe->ab_held) {
        pe->gone = 1;
        return;
    }
    /* A peer that said goodbye may be gone already: only the transfers that need it fail. */
    if (pe->bye && pe->sq == NULL && pe->rq == NULL && pe->zx == NULL) {
        pe->gone = 1;
        return;
    }
    char why[200];
    int o = snprintf(why, sizeof(why), "%s: %s", hoop__ibt_where(tp),
                     tp->v.wc_status_str(wc->status));
    if (wc->vendor_err != 0 && o > 0 && (size_t)o < sizeof(why))
        snprintf(why + o, sizeof(why) - (size_t)o, " (vendor error 0x%x)", wc->vendor_err);
    peer_lost(tp, j, why);
}

/* The completion queue cannot be trusted any more: the communicator fails, the peers are told. */
static void cq_broken(hoop__tp_t *tp, const char *msg)
{
    if (tp->failed) return;
    tp->p.report(tp->p.report_ctx, HOOP_ERR_SYSTEM, -1, msg);
    hoop__ibt_abort(tp, HOOP_ERR_SYSTEM, msg);
}

int hoop__ibt_poll(hoop__tp_t *tp)
{
    struct ibv_wc wc[32];
    int any = 0;
    for (int round = 0; round < 8; round++) {
        int n = tp->v.poll_cq(tp->cq, 32, wc);
        if (n < 0) {
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "%s: ibv_poll_cq failed (the completion queue overran or broke)",
                     hoop__ibt_where(tp));
            cq_broken(tp, msg);
            return 1;
        }
        if (n == 0) break;
        any = 1;
        /* Sends first, then receives: the CQ need not hold them in the order they happened on
         * the wire, and a peer's abort notice (a receive) must not fail a send of ours that it
         * had received already, whose completion came in the same batch. */
        for (int kk = 0; kk < 2 * n; kk++) {
            const int pass = kk / n, k = kk % n;
            int j = (int)(wc[k].wr_id >> 32), what = (int)((wc[k].wr_id >> 24) & 0xff);
            int i = (int)(wc[k].wr_id & 0xffffff);
            if ((what == W_RECV) != (pass == 1)) continue;
            if (j < 0 || j >= tp->p.size) continue;
            peer_t *pe = &tp->peers[j];
            hoop__xfer_t *x = NULL;
            if (what == W_SEND) {
                pe->inflight--;
                pe->sfree[pe->nsfree++] = i;
                x = pe->sx[i];
                pe->sx[i] = NULL;
                if (x != NULL && x == pe->zx) { /* its F_FIN: every write before it is done */
                    hoop__ibv_mrc_put(&tp->mrc, pe->zx_mr, pe->zx_ref);
                    pe->zx_mr = NULL;
                    pe->zx = NULL;
                }
            } else if (what == W_WRITE) {
                pe->inflight--;
                pe->zx_wr--;
            } else if (what == W_PROBE) {
                pe->inflight--;
                pe->probing = 0;
                pe->next_probe = hoop__now() + PROBE_S;
            }
            if (wc[k].status != IBV_WC_SUCCESS) {
                wc_error(tp, j, &wc[k]);
                if (x != NULL && !x->done) {
                    x->status = tp->failed ? tp->failed : HOOP_ERR_PEER_LOST;
                    x->done = 1;
                }
                continue;
            }
            if (x != NULL) x->done = 1;
            if (what == W_RECV) frag_in(tp, j, i, wc[k].byte_len);
        }
    }
    return any;
}

/* Asks for zero copy of send x (at the head of sq): its buffer registered, a fragment with the
 * header and FL_ZC. 0, or -1 to send it by copy (the registration failed). */
static int zc_request(hoop__tp_t *tp, int j, hoop__xfer_t *x)
{
    peer_t *pe = &tp->peers[j];
    pe->zx_mr = hoop__ibv_mrc_get(&tp->mrc, x->buf, x->len, 0, &pe->zx_ref);
    if (pe->zx_mr == NULL) {
        HOOP__INFO(tp->p.log, "ibverbs: %zu bytes to rank %d go by copy: ibv_reg_mr: %s", x->len, j,
                   strerror(errno));
        return -1;
    }
    pop(&pe->sq, &pe->sq_tail);
    pe->zx = x;
    pe->zx_state = 0;
    *ibt_hdr(x) = 1;
    int i = pe->sfree[--pe->nsfree];
    uint8_t *b = pe->sbuf + (size_t)i * SLOT_BYTES;
    frag_put(b, F_DATA, FL_FIRST | FL_ZC, (uint32_t)pe->owed, 0);
    hoop__wire_encode(&x->hdr, b + FRAG_HDR);
    pe->sx[i] = NULL;
    int owed = pe->owed;
    pe->owed = 0;
    pe->credits--;
    if (post_buf(tp, j, i, FRAG_HDR + HOOP__WIRE_HDR_SIZE) != 0) pe->owed = owed;
    return 0;
}

/* Writes zx's payload into the buffer the receiver offered, ZC_CHUNK at a time, then F_FIN, which
 * RC delivers after every write. 1 if anything was posted. */
static int zc_write(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    hoop__xfer_t *x = pe->zx;
    int moved = 0;
    while (pe->zx_off < x->len && pe->zx_wr < ZC_WR) {
        size_t n = x->len - pe->zx_off < ZC_CHUNK ? x->len - pe->zx_off : ZC_CHUNK;
        struct ibv_sge sge = {
            .addr = (uintptr_t)x->buf + pe->zx_off, .length = (uint32_t)n, .lkey = pe->zx_mr->lkey};
        struct ibv_send_wr wr = {.wr_id = WR_ID(j, W_WRITE, 0),
                                 .sg_list = &sge,
                                 .num_sge = 1,
                                 .opcode = IBV_WR_RDMA_WRITE,
                                 .send_flags = IBV_SEND_SIGNALED},
                           *bad;
        wr.wr.rdma.remote_addr = pe->zx_addr + pe->zx_off;
        wr.wr.rdma.rkey = pe->zx_rkey;
        int rc = tp->v.post_send(pe->qp, &wr, &bad);
        if (rc != 0) {
            char why[160];
            snprintf(why, sizeof(why), "%s: ibv_post_send: %s", hoop__ibt_where(tp), strerror(rc));
            peer_lost(tp, j, why);
            return 1;
        }
        pe->zx_off += n;
        pe->zx_wr++;
        pe->inflight++;
        pe->moved += n;
        moved = 1;
    }
    if (pe->zx_off == x->len && pe->nsfree > 0) {
        int i = pe->sfree[--pe->nsfree];
        frag_put(pe->sbuf + (size_t)i * SLOT_BYTES, F_FIN, 0, (uint32_t)pe->owed, 0);
        pe->sx[i] = x;
        int owed = pe->owed;
        pe->owed = 0;
        pe->zx_state = 2;
        if (post_buf(tp, j, i, FRAG_HDR) != 0) pe->owed = owed;
        moved = 1;
    }
    return moved;
}

/* Sends what peer j's credits and buffers allow, in order: 1 if a fragment went. NCTRL buffers
 * stay for control messages. */
static int move_sends(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    int moved = 0;
    while (!pe->lost && pe->zx == NULL && pe->sq != NULL && pe->credits > 0 && pe->nsfree > NCTRL) {
        hoop__xfer_t *x = pe->sq;
        int first = !*ibt_hdr(x);
        if (first && x->len >= ZC_MIN && zc_request(tp, j, x) == 0) return 1;
        size_t off = *ibt_off(x), room = SLOT_BYTES - FRAG_HDR - (first ? HOOP__WIRE_HDR_SIZE : 0);
        size_t n = x->len - off < room ? x->len - off : room;
        int i = pe->sfree[--pe->nsfree];
        uint8_t *b = pe->sbuf + (size_t)i * SLOT_BYTES, *d = b + FRAG_HDR;
        frag_put(b, F_DATA, first, (uint32_t)pe->owed, (uint32_t)n);
        if (first) {
            hoop__wire_encode(&x->hdr, d);
            d += HOOP__WIRE_HDR_SIZE;
        }
        if (n > 0) memcpy(d, (const uint8_t *)x->buf + off, n);
        *ibt_hdr(x) = 1;
        *ibt_off(x) = off + n;
        int last = off + n == x->len;
        if (last) pop(&pe->sq, &pe->sq_tail);
        pe->sx[i] = last ? x : NULL;
        int owed = pe->owed;
        pe->owed = 0;
        pe->credits--;
        if (post_buf(tp, j, i, (size_t)(d - b) + n) != 0) {
            pe->owed = owed;
            if (last && !x->done) {
                x->status = x->status ? x->status : HOOP_ERR_PEER_LOST;
                x->done = 1;
            }
            return 1;
        }
        moved = 1;
    }
    return moved;
}

/* An 8-byte RDMA WRITE to peer j's probe word: answered by a live peer, retry exceeded by a dead
 * one (see ibverbs.h). */
static void probe(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    struct ibv_sge sge = {
        .addr = (uintptr_t)tp->probe_word, .length = 8, .lkey = tp->probe_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = WR_ID(j, W_PROBE, 0),
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.wr.rdma.remote_addr = pe->remote.probe_addr;
    wr.wr.rdma.rkey = pe->remote.probe_rkey;
    int rc = tp->v.post_send(pe->qp, &wr, &bad);
    if (rc != 0) {
        char why[160];
        snprintf(why, sizeof(why), "%s: ibv_post_send: %s", hoop__ibt_where(tp), strerror(rc));
        peer_lost(tp, j, why);
        return;
    }
    pe->probing = 1;
    pe->inflight++;
}

/* Polls, sends, gives credits back and probes where due: 1 if anything moved. *probe_at is the
 * earliest probe still to come (0: none). While any transfer waits, every peer with nothing in
 * flight is probed, not only those waited on: a dead peer must fail the communicator even when
 * this rank waits on another (which may itself be waiting on the dead one). */
static int step(hoop__tp_t *tp, double *probe_at)
{
    int moved = hoop__ibt_poll(tp), busy = 0;
    double now = 0;
    if (probe_at != NULL) *probe_at = 0;
    for (int j = 0; j < tp->p.size && !tp->failed; j++) {
        peer_t *pe = &tp->peers[j];
        if (!pe->up || pe->lost) continue;
        if (pe->zx != NULL && pe->zx_state == 1) moved |= zc_write(tp, j);
        if (pe->lost) continue;
        moved |= move_sends(tp, j);
        if (pe->owed >= CREDIT_BATCH && pe->nsfree > 2)
            moved |= hoop__ibt_send_ctrl(tp, j, F_CREDIT, 0, NULL, 0) == 0;
        busy |= pe->rq != NULL || pe->sq != NULL || pe->zx != NULL;
    }
    for (int j = 0; j < tp->p.size && !tp->failed; j++) {
        peer_t *pe = &tp->peers[j];
        if (!pe->up || pe->lost) continue;
        if (!busy || pe->bye || pe->probing || pe->inflight > 0) {
            if (!busy) pe->next_probe = 0;
            continue;
        }
        if (now == 0) now = hoop__now();
        if (pe->next_probe == 0) pe->next_probe = now + PROBE_S;
        if (now >= pe->next_probe)
            probe(tp, j);
        else if (probe_at != NULL && (*probe_at == 0 || pe->next_probe < *probe_at))
            *probe_at = pe->next_probe;
    }
    return moved;
}

/* The device's asynchronous events (its descriptor is non-blocking), read when a sleep finds it
 * readable: a queue pair gone to error fails its peer, a port or device gone fails them all. */
static void take_async(hoop__tp_t *tp)
{
    struct ibv_async_event ev;
    while (tp->v.get_async_event(tp->ctx, &ev) == 0) {
        enum ibv_event_type t = ev.event_type;
        struct ibv_qp *qp = ev.element.qp;
        tp->v.ack_async_event(&ev);
        char why[200];
        snprintf(why, sizeof(why), "%s: %s", tp->where, tp->v.event_type_str(t));
        if (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR) {
            for (int j = 0; j < tp->p.size; j++)
                if (tp->peers[j].qp == qp && !tp->peers[j].lost) peer_lost(tp, j, why);
        } else if (t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_DEVICE_FATAL) {
            char msg[300];
            for (int j = 0; j < tp->p.size; j++)
                if (tp->peers[j].up && !tp->peers[j].lost) {
                    snprintf(msg, sizeof(msg),
                             "lost connection to rank %d: the RDMA port is gone (%s)", j, why);
                    peer_fail(tp, j, HOOP_ERR_SYSTEM, msg);
                    break; /* the first failure aborts the rest */
                }
        } else if (t == IBV_EVENT_CQ_ERR) {
            /* An overrun: completions are lost, so no transfer can be trusted to end. */
            char msg[300];
            snprintf(msg, sizeof(msg), "%s: the completion queue overran or broke", why);
            cq_broken(tp, msg);
        } else {
            HOOP__INFO(tp->p.log, "ibverbs: %s", why);
        }
    }
}

/* Takes the channel's events (the descriptor is non-blocking) and the wake-ups. */
static void take_events(hoop__tp_t *tp)
{
    struct ibv_cq *cq;
    void *cq_ctx;
    while (tp->v.get_cq_event(tp->ch, &cq, &cq_ctx) == 0) {
        tp->v.ack_cq_events(cq, 1);
        tp->notify = 0;
    }
    uint64_t v;
    if (read(tp->wake_fd, &v, sizeof(v)) < 0) { /* nothing pending: fine */
    }
}

/* Arms the CQ so that its next completion is an event on the channel. 0, or -1 if it cannot be. */
static int arm_cq(hoop__tp_t *tp)
{
    if (tp->notify) return 0;
    if (tp->v.req_notify_cq(tp->cq, 0) != 0) return -1;
    tp->notify = 1;
    return 0;
}

void hoop__ibt_progress(hoop__tp_t *tp, int timeout_ms)
{
    if (tp->armed) {
        tp->armed = 0;
        take_events(tp);
        struct pollfd pa = {.fd = tp->ctx != NULL ? tp->ctx->async_fd : -1, .events = POLLIN};
        if (tp->ctx != NULL && poll(&pa, 1, 0) == 1) take_async(tp);
    }
    if (tp->cq == NULL) {
        if (timeout_ms > 0) {
            struct pollfd pf = {.fd = tp->wake_fd, .events = POLLIN};
            (void)poll(&pf, 1, timeout_ms);
            take_events(tp);
        }
        return;
    }
    double probe_at;
    if (step(tp, &probe_at) || timeout_ms == 0) return;
    double end = hoop__now() + SPIN_US * 1e-6;
    while (hoop__now() < end)
        if (step(tp, &probe_at)) return;
    int ms = timeout_ms;
    if (arm_cq(tp) != 0) ms = 1; /* cannot sleep on the channel: look every millisecond */
    if (step(tp, &probe_at)) return;
    if (probe_at > 0) {
        int until = (int)((probe_at - hoop__now()) * 1000) + 1;
        if (until < ms) ms = until < 0 ? 0 : until;
    }
    struct pollfd pf[3] = {{.fd = tp->ch->fd, .events = POLLIN},
                           {.fd = tp->wake_fd, .events = POLLIN},
                           {.fd = tp->ctx->async_fd, .events = POLLIN}};
    (void)poll(pf, 3, ms);
    take_events(tp);
    if (pf[2].revents & POLLIN) take_async(tp);
    step(tp, NULL);
}

static int ibt_wait_fd(hoop__tp_t *tp) { return tp->epfd; }

static int ibt_arm(hoop__tp_t *tp)
{
    if (tp->armed) take_events(tp);
    tp->armed = 0;
    if (tp->cq == NULL) {
        tp->armed = 1;
        return 0;
    }
    if (step(tp, NULL) || arm_cq(tp) != 0 || step(tp, NULL)) return 1;
    tp->armed = 1;
    return 0;
}

static void ibt_wake(hoop__tp_t *tp)
{
    uint64_t one = 1;
    if (write(tp->wake_fd, &one, sizeof(one)) < 0) { /* already pending: fine */
    }
}

static void ibt_post(hoop__tp_t *tp, hoop__xfer_t *x)
{
    if (hoop__tp_refuse_mem("ibverbs", IBV_CAPS, &tp->p, x)) return;
    int j = x->peer;
    peer_t *pe = j >= 0 && j < tp->p.size ? &tp->peers[j] : NULL;
    if (tp->failed || pe == NULL || !pe->up || pe->lost) {
        x->status = tp->failed             ? tp->failed
                    : pe != NULL && pe->up ? HOOP_ERR_PEER_LOST
                                           : HOOP_ERR_INTERNAL;
        x->done = 1;
        return;
    }
    x->done = 0;
    x->status = HOOP_OK;
    *ibt_off(x) = 0;
    *ibt_hdr(x) = 0;
    if (x->dir == HOOP__XFER_SEND) {
        x->hdr.payload_len = x->len;
        if (pe->bye && pe->gone) {
            x->status = HOOP_ERR_PEER_LOST;
            x->done = 1;
            return;
        }
        /* A peer that aborted reads nothing more: a send to it cannot complete. */
        if (pe->ab_held) {
            abort_take(tp, j);
            x->status = pe->ab_code;
            x->done = 1;
            return;
        }
        push(&pe->sq, &pe->sq_tail, x);
        move_sends(tp, j);
    } else {
        push(&pe->rq, &pe->rq_tail, x);
        match(tp, j);
    }
}

void hoop__ibt_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason)
{
    if (!tp->failed) tp->failed = code;
    const int first = !tp->abort_sent;
    tp->abort_sent = 1;
    size_t len;
    const char *text = hoop__tp_abort_text(code, reason, ABORT_MAX, &len);
    for (int j = 0; j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        if (!pe->used) continue;
        /* The queue pairs stay up until close(), so that the notice leaves. */
        if (first && !pe->lost && pe->up)
            send_abort(tp, j, hoop__tp_notice_code(&tp->p, code), text, len);
        fail_peer_xfers(tp, j, code);
        pe->lost = 1;
    }
}

static uint64_t ibt_moved(hoop__tp_t *tp, int peer)
{
    return peer >= 0 && peer < tp->p.size ? tp->peers[peer].moved : 0;
}

/* The oldest arrived fragment of peer, while no receive is posted for it, opens the next message
 * (match() takes it from there once one is). */
static int ibt_probe(hoop__tp_t *tp, int peer, hoop__wire_hdr_t *hdr)
{
    if (tp->failed || peer < 0 || peer >= tp->p.size || peer == tp->p.rank) return 0;
    const peer_t *pe = &tp->peers[peer];
    if (pe->lost || pe->rq != NULL || pe->arr_n == 0 || pe->zr_mr != NULL) return 0;
    const uint8_t *b = pe->rbuf + (size_t)pe->arr[pe->arr_head] * SLOT_BYTES;
    if (!(b[1] & FL_FIRST) || hoop__wire_decode(b + FRAG_HDR, UINT64_MAX, hdr) != HOOP_OK)
        return hoop__tp_probe_unreadable(hdr, peer, tp->p.comm_id);
    return 1;
}

const hoop__transport_ops_t hoop__ibverbs_transport = {
    .name = "ibverbs",
    .caps = IBV_CAPS,
    .listen = hoop__ibt_listen,
    .connect = hoop__ibt_connect,
    .post = ibt_post,
    .progress = hoop__ibt_progress,
    .wake = ibt_wake,
    .abort = hoop__ibt_abort,
    .close = hoop__ibt_close,
    .moved = ibt_moved,
    .settle = hoop__ibt_settle,
    .wait_fd = ibt_wait_fd,
    .arm = ibt_arm,
    .probe = ibt_probe,
};
