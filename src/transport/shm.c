/* Shared-memory transport: the data path, waiting, abort and close. shm.h says how it works. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "transport/transport.h"

#include "transport/shm.h"

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

/* Publishing a counter that peer pe may sleep on (Dekker: publish, then look whether it sleeps;
 * it announces, then looks at the counters). A seq_cst store would drain this core's store buffer
 * on every message, the largest cost of a small one; where both ends are registered for global
 * membarrier the sleeper pays instead, once per sleep: its membarrier() makes every registered
 * core's earlier stores visible before it looks. */
static void publish(const peer_t *pe, _Atomic uint64_t *counter, uint64_t v)
{
    if (pe->cheap)
        atomic_store_explicit(counter, v, memory_order_release);
    else
        atomic_store(counter, v);
}

void hoop__shm_force_wake(const peer_t *pe)
{
    seg_hdr_t *sh = pe->sh;
    if (sh == NULL) return; /* not mapped: it has nothing of this rank's to wait for */
    atomic_fetch_add(&sh->doorbell, 1);
    /* It sleeps in another transport's poll(): ring its bell (full pipe: it is ringing already).
     * This is the transport's only write to a pipe; bell_fd is open read-write, so it cannot
     * raise SIGPIPE even when the peer is gone (see map_peer). */
    if (atomic_load(&sh->bell) && pe->bell_fd >= 0) {
        if (write(pe->bell_fd, "", 1) < 0) {
        }
        return;
    }
    futex(&sh->doorbell, FUTEX_WAKE, INT_MAX, NULL);
}

/* After publishing: wake peer pe if it announced that it sleeps. */
static void notify(const peer_t *pe)
{
    if (atomic_load(&pe->sh->sleeping)) hoop__shm_force_wake(pe);
}

/* The ring between two ranks of one communicator implies the sender and the communicator, so a
 * frame carries the rest of the wire header in 40 bytes: with its stamp and up to 16 bytes of
 * payload it fits one cache line, which the reader then fetches once. */
static void shdr_encode(const hoop__wire_hdr_t *h, uint8_t *b)
{
    b[0] = h->kind;
    b[1] = h->dtype;
    b[2] = h->op;
    b[3] = h->flags;
    memcpy(b + 4, &h->root, 4);
    memcpy(b + 8, &h->seq, 8);
    memcpy(b + 16, &h->count, 8);
    memcpy(b + 24, &h->payload_len, 8);
    b[32] = h->algo;
    memset(b + 33, 0, 3);
    memcpy(b + 36, &h->sched, 4);
}

static void shdr_decode(const uint8_t *b, hoop__wire_hdr_t *h)
{
    memset(h, 0, sizeof(*h));
    h->kind = b[0];
    h->dtype = b[1];
    h->op = b[2];
    h->flags = b[3];
    memcpy(&h->root, b + 4, 4);
    memcpy(&h->seq, b + 8, 8);
    memcpy(&h->count, b + 16, 8);
    memcpy(&h->payload_len, b + 24, 8);
    h->algo = b[32];
    memcpy(&h->sched, b + 36, 4);
}

static op_t *op_new(hoop__tp_t *tp)
{
    op_t *o = tp->free_ops;
    if (o != NULL) {
        tp->free_ops = o->next;
        return o;
    }
    return malloc(sizeof(op_t));
}

static void op_free(hoop__tp_t *tp, op_t *o)
{
    o->next = tp->free_ops;
    tp->free_ops = o;
}

static void q_push(queue_t *q, op_t *o)
{
    o->next = NULL;
    if (q->tail)
        q->tail->next = o;
    else
        q->head = o;
    q->tail = o;
}

static op_t *q_pop(queue_t *q)
{
    op_t *o = q->head;
    q->head = o->next;
    if (q->head == NULL) q->tail = NULL;
    return o;
}

static void finish(hoop__xfer_t *x, hoop_result_t st)
{
    if (x->done) return;
    if (x->status == HOOP_OK) x->status = st;
    x->done = 1;
}

static void fail_q(hoop__tp_t *tp, queue_t *q, hoop_result_t code)
{
    while (q->head != NULL) {
        op_t *o = q_pop(q);
        finish(o->x, code);
        op_free(tp, o);
    }
}

/* A peer whose abort was reported as a notice already is not reported again. */
static void peer_fail(hoop__tp_t *tp, int j, hoop_result_t code, const char *msg)
{
    peer_t *pe = &tp->peers[j];
    if (pe->lost) return;
    pe->lost = 1;
    fail_q(tp, &pe->sq, code);
    fail_q(tp, &pe->aq, code);
    fail_q(tp, &pe->rq, code);
    if (!pe->ab_heard) tp->p.report(tp->p.report_ctx, code, j, msg);
}

/* ---- data path ---- */

static void ring_write(uint8_t *ring, size_t rb, uint64_t pos, const uint8_t *src, size_t n)
{
    size_t at = (size_t)(pos & (rb - 1)), first = rb - at < n ? rb - at : n;
    memcpy(ring + at, src, first);
    if (first < n) memcpy(ring, src + first, n - first);
}

static void ring_read(const uint8_t *ring, size_t rb, uint64_t pos, uint8_t *dst, size_t n)
{
    size_t at = (size_t)(pos & (rb - 1)), first = rb - at < n ? rb - at : n;
    memcpy(dst, ring + at, first);
    if (first < n) memcpy(dst + first, ring, n - first);
}

static int check_aborted(hoop__tp_t *tp, int j);

static void shm_post(hoop__tp_t *tp, hoop__xfer_t *x)
{
    x->done = 0;
    x->status = HOOP_OK;
    peer_t *pe = x->peer >= 0 && x->peer < tp->p.size ? &tp->peers[x->peer] : NULL;
    if (tp->failed || pe == NULL || !pe->local || pe->lost) {
        finish(x, tp->failed ? tp->failed : HOOP_ERR_PEER_LOST);
        return;
    }
    if (hoop__tp_refuse_mem("shm", SHM_CAPS, &tp->p, x)) return;
    if (pe->sh == NULL) {
        char msg[400];
        hoop_result_t rc = hoop__shm_map_lazy(tp, x->peer, msg, sizeof(msg));
        if (rc != HOOP_OK) {
            finish(x, rc);
            peer_fail(tp, x->peer, rc, msg);
            return;
        }
    }
    if (pe->sh == tp->tomb && x->dir == HOOP__XFER_SEND) {
        /* Gone before this rank first sent to it: nobody will read this. */
        char msg[96];
        snprintf(msg, sizeof(msg), "lost rank %d (it closed its connections or exited)", x->peer);
        finish(x, HOOP_ERR_PEER_LOST);
        peer_fail(tp, x->peer, HOOP_ERR_PEER_LOST, msg);
        return;
    }
    op_t *o = op_new(tp);
    if (o == NULL) {
        finish(x, HOOP_ERR_NO_MEMORY);
        return;
    }
    o->x = x;
    o->pos = 0;
    o->cma_pos = 0;
    o->hlen = SHDR_SIZE;
    o->cma = 0;
    if (x->dir == HOOP__XFER_SEND) {
        x->hdr.payload_len = x->len;
        x->hdr.flags = 0;
        if (x->len >= tp->p.cfg->shm_cma_bytes && tp->p.cfg->shm_cma_bytes > 0 &&
            atomic_load_explicit(&pe->out->cma_ok, memory_order_acquire) == 1) {
            o->cma = 1;
            o->hlen += DESC_SIZE;
            x->hdr.flags = F_CMA;
            uint64_t a = (uint64_t)(uintptr_t)x->buf, l = x->len;
            memcpy(o->hdr + SHDR_SIZE, &a, 8);
            memcpy(o->hdr + SHDR_SIZE + 8, &l, 8);
        }
        shdr_encode(&x->hdr, o->hdr);
        q_push(&pe->sq, o);
    } else {
        q_push(&pe->rq, o);
    }
    /* After its abort, only what the peer wrote before can still come. */
    if (pe->ab_heard) check_aborted(tp, x->peer);
}

/* The stamp word at a frame's start: what a frame written whole carries there, once complete. */
static uint64_t stamp_of(uint64_t pos, uint64_t key) { return (pos + 1) ^ key; }

static _Atomic uint64_t *stamp_at(uint8_t *ring, size_t rb, uint64_t pos)
{
    return (_Atomic uint64_t *)(void *)(ring + (size_t)(pos & (rb - 1)));
}

/* Writes what fits of the queued sends to peer j. Returns 1 if anything moved. */
static int send_some(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    size_t rb = tp->ring_bytes;
    int moved = 0;
    while (pe->sq.head != NULL) {
        op_t *o = pe->sq.head;
        size_t total = STAMP + o->hlen + (o->cma ? 0 : o->x->len), framed = round_up(total, LINE);
        while (o->pos < framed) {
            size_t space = rb - (size_t)(pe->out_head - pe->out_tail_seen);
            if (space < framed - o->pos || space < PIECE / 4) {
                pe->out_tail_seen = atomic_load_explicit(&pe->out->tail, memory_order_acquire);
                space = rb - (size_t)(pe->out_head - pe->out_tail_seen);
            }
            if (space == 0) break;
            size_t n;
            if (o->pos == 0 && framed <= space && total - STAMP - o->hlen <= PIECE) {
                /* Whole, published by its stamp: the reader polls this one line rather than
                 * waiting for head's line and then the data's. */
                ring_write(pe->out_data, rb, pe->out_head + STAMP, o->hdr, o->hlen);
                if (total > STAMP + o->hlen)
                    ring_write(pe->out_data, rb, pe->out_head + STAMP + o->hlen, o->x->buf,
                               total - STAMP - o->hlen);
                atomic_store_explicit(stamp_at(pe->out_data, rb, pe->out_head),
                                      stamp_of(pe->out_head, pe->sh->nonce), memory_order_release);
                n = framed;
            } else if (o->pos == 0) {
                /* Stamp and header go in whole, so the reader never sees half of a header. */
                n = STAMP + o->hlen;
                if (n > space) break;
                atomic_store_explicit(stamp_at(pe->out_data, rb, pe->out_head), 0,
                                      memory_order_relaxed);
                ring_write(pe->out_data, rb, pe->out_head + STAMP, o->hdr, o->hlen);
            } else if (o->pos < total) {
                size_t done = o->pos - STAMP - o->hlen;
                n = o->x->len - done;
                if (n > space) n = space;
                if (n > PIECE) n = PIECE;
                ring_write(pe->out_data, rb, pe->out_head, (const uint8_t *)o->x->buf + done, n);
            } else {
                n = framed - o->pos; /* padding: the next frame starts on a line of its own */
                if (n > space) break;
            }
            pe->out_head += n;
            pe->moved += n;
            o->pos += n;
            publish(pe, &pe->out->head, pe->out_head);
            notify(pe);
            moved = 1;
        }
        if (o->pos < framed) break;
        q_pop(&pe->sq);
        if (o->cma) {
            o->ticket = ++pe->cma_tickets;
            q_push(&pe->aq, o);
        } else {
            finish(o->x, HOOP_OK);
            op_free(tp, o);
        }
    }
    if (pe->aq.head != NULL) {
        uint64_t done = atomic_load_explicit(&pe->out->cma_done, memory_order_acquire);
        while (pe->aq.head != NULL && pe->aq.head->ticket <= done) {
            op_t *o = q_pop(&pe->aq);
            finish(o->x, HOOP_OK);
            op_free(tp, o);
            moved = 1;
        }
    }
    return moved;
}

/* Bytes from peer j readable now. A frame taken by its stamp may put in_tail ahead of the head
 * published so far. */
static size_t in_avail(peer_t *pe)
{
    uint64_t h = atomic_load_explicit(&pe->in->head, memory_order_acquire);
    if ((int64_t)(h - pe->in_head_seen) > 0) pe->in_head_seen = h;
    return (int64_t)(pe->in_head_seen - pe->in_tail) > 0 ? (size_t)(pe->in_head_seen - pe->in_tail)
                                                         : 0;
}

/* Consumed bytes are published to the writer every PIECE and when recv_some() returns. */
static void consumed(peer_t *pe, size_t n)
{
    pe->in_tail += n;
    pe->moved += n;
    if (pe->in_tail - pe->in_tail_pub >= PIECE) {
        pe->in_tail_pub = pe->in_tail;
        publish(pe, &pe->in->tail, pe->in_tail);
        notify(pe);
    }
}

static void publish_tail(peer_t *pe)
{
    if (pe->in_tail != pe->in_tail_pub) {
        pe->in_tail_pub = pe->in_tail;
        publish(pe, &pe->in->tail, pe->in_tail);
        notify(pe);
    }
}

/* Peer j aborted (its flag is up): reports it once, as the peer's notice with the calls it had
 * finished. */
static void hear_abort(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    if (pe->ab_heard) return;
    char why[REASON_LEN];
    memcpy(why, pe->sh->reason, sizeof(why));
    why[sizeof(why) - 1] = '\0';
    snprintf(pe->ab_msg, sizeof(pe->ab_msg), "rank %d aborted: %s", j, why);
    /* A disagreement stays one on every rank; any other cause is an abort here. */
    uint32_t code = atomic_load_explicit(&pe->sh->aborted, memory_order_relaxed);
    if (code == HOOP_ERR_TIMEOUT && tp->p.peer_timed_out != NULL)
        atomic_store(tp->p.peer_timed_out, 1);
    pe->ab_code = code == HOOP_ERR_MISMATCH ? HOOP_ERR_MISMATCH : HOOP_ERR_ABORTED;
    pe->ab_heard = 1;
    hoop__tp_report_notice(&tp->p, pe->ab_code, j, pe->ab_msg, pe->sh->abort_done);
}

/* Peer j aborted: fail it now, with its own reason. Returns 1 if so. For a single copy, whose
 * source buffer an aborted writer may have handed back. */
static int fail_if_aborted(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    if (!atomic_load_explicit(&pe->sh->aborted, memory_order_acquire)) return 0;
    hear_abort(tp, j);
    peer_fail(tp, j, pe->ab_code, pe->ab_msg);
    return 1;
}

static int recv_some(hoop__tp_t *tp, int j);

/* Peer j aborted: reported at once, but it fails only what it cannot complete any more. Its flag
 * went up after everything it wrote, and it writes nothing after: the frames in its ring go to
 * the receives posted for them (now, or later: one posted afterwards still finds its frame), and
 * the single copies it finished reading complete the sends. A send still queued, or a receive
 * whose frame is not there once the ring is read, never will: then the peer fails. Returns 1 if
 * it failed the peer or reported it now. */
static int check_aborted(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    if (pe->lost || !atomic_load_explicit(&pe->sh->aborted, memory_order_acquire)) return 0;
    int news = !pe->ab_heard;
    hear_abort(tp, j);
    if (pe->rq.head != NULL) recv_some(tp, j);
    if (!pe->lost && pe->aq.head != NULL) send_some(tp, j);
    if (pe->lost) return 1;
    if (pe->sq.head == NULL && pe->aq.head == NULL && pe->rq.head == NULL) return news;
    peer_fail(tp, j, pe->ab_code, pe->ab_msg);
    return 1;
}

/* The first step of reading a frame: how many bytes of peer's ring this rank may read now
 * (*avail), and whether the frame at the tail was written whole (*whole: its stamp shows). 0
 * where a new frame's stamp and header are not there yet. */
static int frame_visible(const hoop__tp_t *tp, peer_t *pe, const op_t *o, size_t *avail, int *whole)
{
    *avail = (int64_t)(pe->in_head_seen - pe->in_tail) > 0
                 ? (size_t)(pe->in_head_seen - pe->in_tail)
                 : 0;
    *whole = 0;
    if (o->pos == 0 && *avail < STAMP + SHDR_SIZE) {
        /* A frame written whole shows by its stamp, in the line the reader is about to read
         * anyway: look there before head's line. */
        if (atomic_load_explicit(stamp_at(pe->in_data, tp->ring_bytes, pe->in_tail),
                                 memory_order_acquire) == stamp_of(pe->in_tail, tp->nonce))
            *whole = 1;
        else if ((*avail = in_avail(pe)) < STAMP + SHDR_SIZE)
            return 0;
    } else if (*avail == 0 || (o->pos < STAMP + o->hlen && *avail < STAMP + o->hlen - o->pos)) {
        *avail = in_avail(pe);
    }
    return 1;
}

/* A frame's stamp and header, checked against the receive posted before a byte of payload goes
 * anywhere. -1 where they do not match (peer j failed). */
static int frame_header(hoop__tp_t *tp, int j, op_t *o, int whole, size_t *avail)
{
    peer_t *pe = &tp->peers[j];
    hoop__xfer_t *x = o->x;
    ring_read(pe->in_data, tp->ring_bytes, pe->in_tail + STAMP, o->hdr, SHDR_SIZE);
    shdr_decode(o->hdr, &x->got);
    x->got.src = (uint32_t)j;
    x->got.comm_id = tp->p.comm_id;
    char msg[400];
    if (hoop__wire_check_recv(&x->hdr, x->len, &x->got, (x->got.flags & ~F_CMA) == 0, j, tp->p.rank,
                              msg, sizeof(msg)) != HOOP_OK) {
        peer_fail(tp, j, HOOP_ERR_MISMATCH, msg);
        return -1;
    }
    if (x->got.flags & F_CMA) {
        o->cma = 1;
        o->hlen += DESC_SIZE;
    }
    if (whole) {
        uint64_t end = pe->in_tail + round_up(STAMP + o->hlen + (o->cma ? 0 : x->len), LINE);
        if ((int64_t)(end - pe->in_head_seen) > 0) pe->in_head_seen = end;
        *avail = (size_t)(pe->in_head_seen - pe->in_tail);
    }
    consumed(pe, STAMP + SHDR_SIZE);
    *avail -= STAMP + SHDR_SIZE;
    o->pos = STAMP + SHDR_SIZE;
    return 0;
}

/* A single-copy frame's payload: its descriptor from the ring, then the bytes read straight out
 * of the sender's buffer. 1 when it is all here, 0 to wait for the descriptor, -1 where peer j
 * failed. */
static int frame_single_copy(hoop__tp_t *tp, int j, op_t *o, size_t *avail, int *moved)
{
    peer_t *pe = &tp->peers[j];
    hoop__xfer_t *x = o->x;
    if (o->pos < STAMP + o->hlen) {
        if (*avail < DESC_SIZE && (*avail = in_avail(pe)) < DESC_SIZE) return 0;
        ring_read(pe->in_data, tp->ring_bytes, pe->in_tail, o->hdr + SHDR_SIZE, DESC_SIZE);
        consumed(pe, DESC_SIZE);
        *avail -= DESC_SIZE;
        o->pos = STAMP + o->hlen;
        uint64_t l;
        memcpy(&l, o->hdr + SHDR_SIZE + 8, 8);
        if (l != x->len) {
            peer_fail(tp, j, HOOP_ERR_MISMATCH,
                      "shm: a single-copy descriptor does not "
                      "match its header");
            return -1;
        }
    }
    uint64_t a;
    memcpy(&a, o->hdr + SHDR_SIZE, 8);
    if (fail_if_aborted(tp, j)) return -1;
    /* A closed sender dropped this send and may have freed its buffer. */
    if (atomic_load(&pe->sh->closed)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "lost rank %d (it closed its connections)", j);
        peer_fail(tp, j, HOOP_ERR_PEER_LOST, msg);
        return -1;
    }
    while (o->cma_pos < x->len) {
        size_t n = x->len - o->cma_pos < CMA_PIECE ? x->len - o->cma_pos : CMA_PIECE;
        struct iovec l = {.iov_base = (uint8_t *)x->buf + o->cma_pos, .iov_len = n};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(a + o->cma_pos), .iov_len = n};
        ssize_t got = process_vm_readv(pe->pid, &l, 1, &r, 1, 0);
        /* A writer that aborted may have returned and let go of the buffer. */
        if (got <= 0 && fail_if_aborted(tp, j)) return -1;
        if (got <= 0) {
            int e = got < 0 ? errno : EIO;
            char msg[200];
            snprintf(msg, sizeof(msg), "shm: single-copy read from rank %d failed: %s", j,
                     strerror(e));
            peer_fail(tp, j, e == ESRCH ? HOOP_ERR_PEER_LOST : HOOP_ERR_SYSTEM, msg);
            return -1;
        }
        o->cma_pos += (size_t)got;
        pe->moved += (uint64_t)got;
        *moved = 1;
    }
    /* An aborting writer raises its flag before its call returns and the buffer is the
     * caller's again: a copy that may have raced with that is not to be trusted. */
    if (fail_if_aborted(tp, j)) return -1;
    if (o->cma_pos == x->len) {
        o->cma_pos = x->len + 1; /* counted once, even if the padding waits */
        atomic_fetch_add(&pe->in->cma_done, 1);
        notify(pe);
    }
    return 1;
}

/* A frame's payload through the ring, as much as has come. 1 when it is all here. */
static int frame_payload(hoop__tp_t *tp, peer_t *pe, op_t *o, size_t *avail, int *moved)
{
    hoop__xfer_t *x = o->x;
    size_t total = STAMP + o->hlen + x->len;
    while (o->pos < total) {
        if (*avail == 0 && (*avail = in_avail(pe)) == 0) break;
        size_t done = o->pos - STAMP - o->hlen, n = x->len - done;
        if (n > *avail) n = *avail;
        if (n > PIECE) n = PIECE;
        ring_read(pe->in_data, tp->ring_bytes, pe->in_tail, (uint8_t *)x->buf + done, n);
        consumed(pe, n);
        *avail -= n;
        o->pos += n;
        *moved = 1;
    }
    return o->pos == total;
}

/* The padding that ends a frame at a line: 1 once it is passed. */
static int frame_padding(peer_t *pe, op_t *o, size_t *avail)
{
    size_t framed = round_up(STAMP + o->hlen + (o->cma ? 0 : o->x->len), LINE);
    if (o->pos < framed) {
        size_t pad = framed - o->pos;
        if (*avail < pad && (*avail = in_avail(pe)) < pad) return 0;
        consumed(pe, pad);
        o->pos = framed;
    }
    return 1;
}

/* recv_some() without publishing the tail. Frames: an 8-byte stamp, the header (and a single copy's
 * descriptor), the payload, padding to 8 bytes. */
static int recv_frames(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    int moved = 0;
    while (pe->rq.head != NULL) {
        op_t *o = pe->rq.head;
        size_t avail;
        int whole;
        if (!frame_visible(tp, pe, o, &avail, &whole)) break;
        if (o->pos == 0) {
            if (frame_header(tp, j, o, whole, &avail) != 0) return 1;
            moved = 1;
        }
        int in = o->cma ? frame_single_copy(tp, j, o, &avail, &moved)
                        : frame_payload(tp, pe, o, &avail, &moved);
        if (in < 0) return 1;
        if (in == 0 || !frame_padding(pe, o, &avail)) break;
        q_pop(&pe->rq);
        finish(o->x, HOOP_OK);
        op_free(tp, o);
    }
    return moved;
}

/* Reads what has arrived from peer j into its posted receives. Returns 1 if anything moved. */
static int recv_some(hoop__tp_t *tp, int j)
{
    int moved = recv_frames(tp, j);
    if (!tp->peers[j].lost) publish_tail(&tp->peers[j]);
    return moved;
}

/* Transfers with this peer are queued. */
static int pending(const peer_t *pe) { return pe->sq.head || pe->aq.head || pe->rq.head; }

/* After a move_all() that moved nothing: could anything move for peer j now (1), or did it abort
 * (2)? Read-only, for spinning and for the re-check before sleeping. */
static int ready(const hoop__tp_t *tp, const peer_t *pe)
{
    if (atomic_load(&pe->sh->aborted) != 0) return pe->ab_heard && !pending(pe) ? 0 : 2;
    if (atomic_load(&pe->sh->closed) && pending(pe)) return 2;
    if (pe->rq.head != NULL && (atomic_load(stamp_at(pe->in_data, tp->ring_bytes, pe->in_tail)) ==
                                    stamp_of(pe->in_tail, tp->nonce) ||
                                (int64_t)(atomic_load(&pe->in->head) - pe->in_tail) > 0))
        return 1;
    if (pe->sq.head != NULL && atomic_load(&pe->out->tail) != pe->out_tail_seen) return 1;
    if (pe->aq.head != NULL && atomic_load(&pe->out->cma_done) >= pe->aq.head->ticket) return 1;
    return 0;
}

/* Peer j closed or exited. First take in what it wrote before it went, and count the single
 * copies it finished reading (those sends are complete, not lost); whatever is still pending
 * after that is lost. With died set (it exited without closing its instance: killed, or gone
 * without destroying its communicator) the peer fails even if nothing here waits on it yet: the
 * communicator cannot complete another call, and a rank whose own transfers with it are done
 * learns it now rather than when a peer of its own next needs the dead one. Returns 1 if it
 * failed the peer. */
static int lose(hoop__tp_t *tp, int j, const char *why, int died)
{
    peer_t *pe = &tp->peers[j];
    recv_some(tp, j);
    if (!pe->lost && pe->aq.head != NULL) send_some(tp, j);
    if (pe->lost || (!pending(pe) && !died)) return 0;
    char msg[160];
    snprintf(msg, sizeof(msg), "lost rank %d (%s)", j, why);
    peer_fail(tp, j, HOOP_ERR_PEER_LOST, msg);
    return 1;
}

/* Aborted or vanished peers. A peer whose process exited without closing its instance died, and
 * fails the communicator at once; one that closed first may just have finished first, and fails
 * only the transfers that still need it. Without a pidfd (kernels before 5.3, valgrind) only
 * peers we have transfers with are looked at. Returns 1 if any peer failed. */
static int check_peers(hoop__tp_t *tp)
{
    int n = 0, failed = 0, size = tp->p.size;
    char exited[64];
    /* Processes through a bounded sweep: those we have transfers with at every look, and
     * SWEEP_PEERS others in turn, so that a dead one is still found within size / SWEEP_PEERS
     * looks. Every pidfd at every look was p² polls a millisecond over the host's ranks. */
    int from = tp->sweep, to = from + SWEEP_PEERS;
    tp->sweep = to % size;
    for (int j = 0; j < size; j++) {
        peer_t *pe = &tp->peers[j];
        if (!pe->local || pe->lost || pe->sh == NULL) continue;
        /* An aborted peer's close and exit are no news: its reason is what it failed with. */
        if (atomic_load_explicit(&pe->sh->aborted, memory_order_acquire) != 0) {
            failed |= check_aborted(tp, j);
        } else if (atomic_load_explicit(&pe->sh->closed, memory_order_acquire)) {
            if (pending(pe)) failed |= lose(tp, j, "it closed its connections", 0);
        } else if (pe->pidfd >= 0) {
            int turn = (j >= from && j < to) || j + size < to;
            if (!turn && !pending(pe) && !pe->exited) continue;
            tp->pfds[n].fd = pe->pidfd;
            tp->pfds[n].events = POLLIN;
            tp->pfds[n].revents = 0;
            n++;
        } else if (pending(pe) && hoop__process_gone(pe->pid)) {
            snprintf(exited, sizeof(exited), "its process %d exited", (int)pe->pid);
            failed |= lose(tp, j, exited, 0);
        }
    }
    if (n == 0 || poll(tp->pfds, (nfds_t)n, 0) <= 0) return failed;
    for (int i = 0, j = 0; i < n; i++) {
        if (!(tp->pfds[i].revents & POLLIN)) continue;
        for (; j < tp->p.size; j++)
            if (tp->peers[j].pidfd == tp->pfds[i].fd) break;
        if (j == tp->p.size) break;
        snprintf(exited, sizeof(exited), "its process %d exited", (int)tp->peers[j].pid);
        /* It may have closed just before it exited: then only what it still owed us is lost. */
        int closed = atomic_load_explicit(&tp->peers[j].sh->closed, memory_order_acquire) != 0;
        failed |= lose(tp, j, closed ? "it closed its connections" : exited, !closed);
    }
    return failed;
}

static int move_all(hoop__tp_t *tp)
{
    int moved = 0;
    for (int j = 0; j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        if (!pe->local || pe->lost) continue;
        if (pe->rq.head != NULL) moved |= recv_some(tp, j);
        if (pe->sq.head != NULL || pe->aq.head != NULL) moved |= send_some(tp, j);
    }
    return moved;
}

static int any_ready(const hoop__tp_t *tp)
{
    int r = 0;
    for (int j = 0; j < tp->p.size && r < 2; j++) {
        const peer_t *pe = &tp->peers[j];
        if (pe->local && !pe->lost && pe->sh != NULL) {
            int k = ready(tp, pe);
            r = k > r ? k : r;
        }
    }
    return r;
}

/* The sleep shm_arm() announced is over: take the announcement back and empty the bell. Returns
 * 1 if a peer's process exited meanwhile (its one-shot pidfd event is taken here). */
static int disarm(hoop__tp_t *tp)
{
    tp->armed = 0;
    atomic_store(&tp->sh->bell, 0);
    atomic_store(&tp->sh->sleeping, 0);
    char buf[256];
    while (read(tp->bell[0], buf, sizeof(buf)) > 0) {
    }
    int exited = 0;
    struct epoll_event ev[16];
    for (int n = 16; tp->epfd >= 0 && n == 16;) {
        n = epoll_wait(tp->epfd, ev, 16, 0);
        for (int i = 0; i < n; i++)
            if (ev[i].data.u32 != UINT32_MAX) {
                /* check_peers polls it at its next look, whatever its sweep's turn. */
                tp->peers[ev[i].data.u32].exited = 1;
                exited = 1;
            }
    }
    return exited;
}

static int shm_wait_fd(hoop__tp_t *tp) { return tp->epfd >= 0 ? tp->epfd : tp->bell[0]; }

/* As the sleep at the end of shm_progress(), but the caller sleeps, in poll() on the bell: a
 * writer that sees the announcement writes a byte to the pipe besides waking the futex. */
static int shm_arm(hoop__tp_t *tp)
{
    if (tp->failed || tp->nlocal == 0 || tp->bell[0] < 0) return 1;
    if (move_all(tp) || check_peers(tp)) return 1;
    atomic_store(&tp->sh->bell, 1);
    atomic_store(&tp->sh->sleeping, 1);
    if (tp->sh->membarrier) syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
    tp->armed = 1;
    return atomic_exchange(&tp->woken, 0) || any_ready(tp);
}

static void shm_progress(hoop__tp_t *tp, int timeout_ms)
{
    if (tp->armed && disarm(tp) && !tp->failed && check_peers(tp)) return;
    if (tp->failed || tp->nlocal == 0) {
        if (timeout_ms > 0) poll(NULL, 0, timeout_ms < 10 ? timeout_ms : 10);
        return;
    }
    if (move_all(tp)) return;
    if (timeout_ms == 0) {
        /* Spinning callers still learn of a dead peer within about a millisecond (the clock is
         * read every 64th call: it costs as much as a poll). */
        if ((++tp->idle_polls & 63) == 0) {
            double now = hoop__now();
            if (now >= tp->next_check) {
                tp->next_check = now + 1e-3;
                check_peers(tp);
            }
        }
        return;
    }
    double now = hoop__now();
    double spin_end = now + tp->spin_s;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            int r = any_ready(tp);
            if (r) {
                if (r == 2) check_peers(tp);
                move_all(tp);
                return;
            }
            cpu_relax();
        }
        if (hoop__now() >= spin_end || atomic_load(&tp->woken)) break;
        if (tp->oversub) sched_yield();
    }
    if (check_peers(tp)) return;
    uint32_t seen = atomic_load(&tp->sh->doorbell);
    atomic_store(&tp->sh->sleeping, 1);
    if (tp->sh->membarrier) syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
    /* A wake() before this point is seen here; a later one moves the doorbell past seen. */
    if (!atomic_exchange(&tp->woken, 0) && !any_ready(tp)) {
        struct timespec ts = {.tv_sec = timeout_ms / 1000,
                              .tv_nsec = (timeout_ms % 1000) * 1000000L};
        futex(&tp->sh->doorbell, FUTEX_WAIT, seen, &ts);
    }
    atomic_store(&tp->sh->sleeping, 0);
    move_all(tp);
    check_peers(tp);
}

/* The next frame from peer, as recv_frames() would start reading it. */
static int shm_probe(hoop__tp_t *tp, int peer, hoop__wire_hdr_t *hdr)
{
    if (tp->failed || peer < 0 || peer >= tp->p.size) return 0;
    peer_t *pe = &tp->peers[peer];
    if (!pe->local || pe->lost || pe->rq.head != NULL) return 0;
    if (atomic_load_explicit(stamp_at(pe->in_data, tp->ring_bytes, pe->in_tail),
                             memory_order_acquire) != stamp_of(pe->in_tail, tp->nonce) &&
        in_avail(pe) < STAMP + SHDR_SIZE)
        return 0;
    uint8_t b[SHDR_SIZE];
    ring_read(pe->in_data, tp->ring_bytes, pe->in_tail + STAMP, b, SHDR_SIZE);
    shdr_decode(b, hdr);
    hdr->flags &= (uint8_t)~F_CMA; /* how the payload travels is the ring's business */
    hdr->src = (uint32_t)peer;
    hdr->comm_id = tp->p.comm_id;
    return 1;
}

static uint64_t shm_moved(hoop__tp_t *tp, int peer)
{
    return peer >= 0 && peer < tp->p.size ? tp->peers[peer].moved : 0;
}

static void shm_memory(const hoop__tp_t *tp, hoop__tp_mem_t *m)
{
    m->shared += tp->seg_len;
    m->heap += sizeof(*tp) + (size_t)tp->p.size * (sizeof(peer_t) + sizeof(struct pollfd));
    for (int j = 0; j < tp->p.size; j++) {
        m->shared += tp->peers[j].map != NULL ? tp->peers[j].map_len : 0;
        m->conns += tp->peers[j].map != NULL;
    }
}

static void shm_wake(hoop__tp_t *tp)
{
    atomic_store(&tp->woken, 1);
    if (tp->sh != NULL) {
        atomic_fetch_add(&tp->sh->doorbell, 1);
        futex(&tp->sh->doorbell, FUTEX_WAKE, INT_MAX, NULL);
        /* Armed, it sleeps in another poll(), which watches the bell (shm_arm saw woken first
         * if this came before it announced). */
        if (atomic_load(&tp->sh->bell) && write(tp->bell[1], "", 1) < 0) { /* full: ringing */
        }
    }
}

static void shm_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason)
{
    if (tp->failed) return;
    tp->failed = code;
    if (tp->sh != NULL && !atomic_load(&tp->sh->aborted)) {
        snprintf(tp->sh->reason, sizeof(tp->sh->reason), "%s",
                 reason != NULL && reason[0] ? reason : hoop__error_string(code));
        tp->sh->abort_done = hoop__tp_calls_done(&tp->p);
        atomic_store(&tp->sh->aborted, (uint32_t)hoop__tp_notice_code(&tp->p, code));
    }
    for (int j = 0; j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        if (!pe->local) continue;
        fail_q(tp, &pe->sq, code);
        fail_q(tp, &pe->aq, code);
        fail_q(tp, &pe->rq, code);
        pe->lost = 1;
        hoop__shm_force_wake(pe);
    }
}

static void shm_close(hoop__tp_t *tp)
{
    if (tp == NULL) return;
    /* Peers waiting on this rank learn it now rather than when the process exits. */
    if (tp->sh != NULL) {
        atomic_store(&tp->sh->closed, 1);
        for (int j = 0; j < tp->p.size; j++)
            if (tp->peers[j].local) hoop__shm_force_wake(&tp->peers[j]);
    }
    for (int j = 0; j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        queue_t *qs[3] = {&pe->sq, &pe->aq, &pe->rq};
        for (int k = 0; k < 3; k++)
            while (qs[k]->head != NULL) free(q_pop(qs[k]));
        if (pe->map != NULL) munmap(pe->map, pe->map_len);
        if (pe->pidfd >= 0) close(pe->pidfd);
        if (pe->bell_fd >= 0) close(pe->bell_fd);
    }
    for (int k = 0; k < 2; k++)
        if (tp->bell[k] >= 0) close(tp->bell[k]);
    if (tp->epfd >= 0) close(tp->epfd);
    while (tp->free_ops != NULL) {
        op_t *o = tp->free_ops;
        tp->free_ops = o->next;
        free(o);
    }
    if (tp->seg != NULL) munmap(tp->seg, tp->seg_len);
    if (tp->memfd >= 0) close(tp->memfd);
    free(tp->peers);
    free(tp->pfds);
    free(tp->kids);
    free(tp->tomb);
    free(tp);
}

const hoop__transport_ops_t hoop__shm_transport = {
    .name = "shm",
    .caps = SHM_CAPS,
    .listen = hoop__shm_listen,
    .connect = hoop__shm_connect,
    .post = shm_post,
    .progress = shm_progress,
    .wake = shm_wake,
    .abort = shm_abort,
    .close = shm_close,
    .wait_fd = shm_wait_fd,
    .arm = shm_arm,
    .moved = shm_moved,
    .settle = hoop__shm_settle,
    .probe = shm_probe,
    .memory = shm_memory,
};
