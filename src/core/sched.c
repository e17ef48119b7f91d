/*
 * The scheduler ("the engine"). Every call is a request. Collectives run one at a time, in posting
 * order: a blocking call on an idle communicator runs on the caller's thread (no hand-off);
 * otherwise it is queued for the communicator's progress thread, started by the first nonblocking
 * call. While a thread waits in hoop_wait, it runs the queued calls itself and the progress thread
 * leaves them.
 * Point-to-point requests are posted to the transport when their turn comes and then overlap with
 * what follows; they complete when the transport finishes them.
 *
 * A small nonblocking collective is left to a waiter for DEFER_S to 2 DEFER_S: a thread that waits
 * for it soon (post then wait, the common pattern) runs it itself, with no wake-up of the progress
 * thread and no switch between threads on a core they share, which were most of a small call's
 * cost (docs/performance.md). So that such a post need not wake the thread either, the thread, while
 * calls come, sleeps no longer than DEFER_S at a time; it takes a deferred call once it has found
 * it at the head of the queue for DEFER_S with no waiter running a call meanwhile (a waiter going
 * through many calls, one hoop_wait after another, keeps them). The thread keeps the time; posting
 * and waiting only count, as reading the clock is a measurable part of a small call.
 *
 * Locks: `mu` guards the queue and completion flags; `exec` is held by whoever drives the transport.
 * Nobody takes exec while holding mu. A thread takes the engine (busy, then exec) with
 * engine_enter and gives it back with engine_leave, whatever it runs; until the first call is
 * queued (which starts the progress thread), a blocking collective takes exec alone (submit).
 */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/coll.h"
#include "runtime/comm.h"
#include "core/explain.h"
#include "core/record.h"
#include "core/sched.h"

static void req_release(hoop_comm_t *c, hoop_request_t *r);

/* Under mu. A stream-ordered call lets its stream go on, whatever its result; a detached one
 * (a blocking call on a stream, which returned once queued) has nobody to wait for it. */
static void finish(hoop_comm_t *c, hoop_request_t *r, hoop_result_t st)
{
    /* A collective that ran was recorded as it ended; a point-to-point request, or a call that
     * never ran, ends here. */
    hoop__rec_end(c, &r->call, st);
    hoop__mem_order_end(&r->call);
    r->status = st;
    atomic_store(&r->done, 1);
    if (r->detached) {
        req_release(c, r);
        c->n_detached--;
    }
    pthread_cond_broadcast(&c->cv);
}

static void complete(hoop_comm_t *c, hoop_request_t *r, hoop_result_t st)
{
    pthread_mutex_lock(&c->mu);
    finish(c, r, st);
    pthread_mutex_unlock(&c->mu);
}

/* Under exec: completes point-to-point requests whose transfer has finished (also the runtime's
 * hook, hoop_comm.reap, while a collective drives the transport). */
static void held_run(hoop_comm_t *c);

void hoop__sched_reap(hoop_comm_t *c)
{
    if (c->held != NULL) held_run(c);
    /* Staged transfers of device buffers move on: a send leaves once copied out, a receive is
     * done once copied in (stage.c). */
    if (c->stage != NULL) hoop__stage_reap(c);
    hoop_request_t **pp = &c->inflight;
    while (*pp != NULL) {
        hoop_request_t *r = *pp;
        if (!r->xfer.done) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        atomic_fetch_sub(&c->n_inflight, 1);
        c->inflight_progress = hoop__now();
        hoop_result_t st = r->xfer.status;
        if (st != HOOP_OK && !atomic_load(&c->aborted))
            hoop__comm_fail(c, st, "%s with rank %d failed: %s",
                            r->xfer.dir == HOOP__XFER_SEND ? "send" : "recv", r->call.root,
                            hoop__error_string(st));
        if (r->call.source != NULL) *r->call.source = r->call.root;
        complete(c, r, st == HOOP_OK ? HOOP_OK : (hoop_result_t)atomic_load(&c->aborted));
    }
}

/* Under exec: in-flight point-to-point requests get the deadline every other wait has, the
 * timeout without any of them completing. */
static void inflight_deadline(hoop_comm_t *c)
{
    if (c->inflight == NULL || atomic_load(&c->aborted)) return;
    double now = hoop__now();
    /* Bytes moving with a request's peer count as progress too: a long transfer that keeps
     * moving never times out. */
    if (c->tp_ops->moved != NULL)
        for (hoop_request_t *q = c->inflight; q != NULL; q = q->next) {
            uint64_t m = c->tp_ops->moved(c->tp, q->xfer.peer);
            if (m != q->xfer.seen) {
                q->xfer.seen = m;
                c->inflight_progress = now;
            }
        }
    if (now - c->inflight_progress < c->timeout_s) return;
    const hoop_request_t *r = c->inflight;
    hoop__comm_fail(c, HOOP_ERR_TIMEOUT, "%s(count=%zu, %s) with rank %d timed out after %.1f s",
                    r->xfer.dir == HOOP__XFER_SEND ? "send" : "recv", r->call.count,
                    hoop__dtype_name(r->call.dtype), r->call.root, c->timeout_s);
    c->tp_ops->abort(c->tp, HOOP_ERR_TIMEOUT, c->fatal_msg);
    hoop__sched_reap(c);
}

static int is_p2p(const hoop__call_t *call) { return call->kind == HOOP__K_SEND; }

/* How long the progress thread leaves a small collective at the head of the queue to a waiter, and
 * how long it sleeps at most while calls come (they came within ACTIVE_S). */
#define DEFER_S 1e-3
#define ACTIVE_S 0.1

/* Whether the progress thread leaves r to a waiter for DEFER_S: a collective of at most
 * HOOP_SMALL_BYTES per rank, not ordered on a stream. Larger calls start at once: for them the
 * wake-up is small, and the overlap with what the caller does meanwhile is the point. */
static int deferrable(const hoop_comm_t *c, const hoop_request_t *r)
{
    return !is_p2p(&r->call) && r->call.order == 0 &&
           r->call.count * hoop__dtype_size(r->call.dtype) <= c->agreed.small_bytes;
}

/* Under mu, when the engine comes free: wakes waiters, and the progress thread only if it has
 * something to take (a wake-up it does not need costs a scheduler trip on a busy machine). */
static void engine_free(hoop_comm_t *c)
{
    c->busy = 0;
    pthread_cond_broadcast(&c->cv);
    if (c->has_thread && c->waiters == 0 && (c->head != NULL || atomic_load(&c->n_inflight) > 0))
        pthread_cond_signal(&c->tcv);
}

/* Under exec: where the communicator is aborted, its peers learn why, through the transport and
 * the shared area, once. The one place they are told: as a failed collective returns
 * (run_collective), as exec is given back (an abort from another thread, hoop_comm_abort or a
 * peer's notice read by it, while this one held exec, which the abort could not take: a call that
 * completed all the same would otherwise leave the peers to learn only that this rank closed its
 * connections, once it is freed), and by hoop__sched_abort where exec is free. A no-op while the
 * communicator is healthy, and cheap once they have been told. As exec is given back (may_wait),
 * not yet while every failure so far came in notices of peers that had finished calls this rank
 * has not: those may still start and end here (may_start), over a transport not yet aborted. */
static void tell_abort(hoop_comm_t *c, int may_wait)
{
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    if (ab == HOOP_OK || c->tp == NULL || atomic_load(&c->abort_told)) return;
    if (may_wait && atomic_load(&c->calls_done) < atomic_load(&c->fail_from)) return;
    c->tp_ops->abort(c->tp, ab, c->fatal_msg);
    hoop__collectives_abort(c);
    atomic_store(&c->abort_told, 1);
}

/* Gives exec back, the peers told of an abort first. One that came between that look and the
 * unlock found exec taken (hoop__sched_abort), so it is looked for again after. */
static void exec_unlock(hoop_comm_t *c)
{
    tell_abort(c, 1);
    pthread_mutex_unlock(&c->exec);
    if (atomic_load(&c->aborted) && !atomic_load(&c->abort_told) &&
        pthread_mutex_trylock(&c->exec) == 0) {
        tell_abort(c, 1);
        pthread_mutex_unlock(&c->exec);
    }
}

/* Whether a collective numbered seq may start: HOOP_OK while the communicator is healthy, and
 * where every failure so far came in abort notices of peers that had finished this call (seq
 * below fail_from): they did their part, so it can end here, as it would have had it started
 * before the notices came (docs/reliability.md, "The same over the point-to-point algorithms").
 * Otherwise the abort's code. */
static hoop_result_t may_start(hoop_comm_t *c, uint64_t seq)
{
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    return ab == HOOP_OK || seq < atomic_load(&c->fail_from) ? HOOP_OK : ab;
}

/* Takes the engine: called with mu held and busy clear; returns holding exec, not mu. */
static void engine_enter(hoop_comm_t *c)
{
    c->busy = 1;
    int thread_polls = c->thread_polls;
    pthread_mutex_unlock(&c->mu);
    /* The progress thread may sleep in poll() holding exec for point-to-point requests. */
    if (thread_polls) c->tp_ops->wake(c->tp);
    pthread_mutex_lock(&c->exec);
}

/* Gives the engine back: called holding exec; returns with mu held. */
static void engine_leave(hoop_comm_t *c)
{
    exec_unlock(c);
    pthread_mutex_lock(&c->mu);
    engine_free(c);
}

/* Under exec: a point-to-point request goes to the transport; its header seq numbers the messages
 * between this pair of ranks. */
static void post_p2p(hoop_request_t *r)
{
    hoop__call_t *call = &r->call;
    hoop_comm_t *c = call->comm;
    size_t bytes = call->count * hoop__dtype_size(call->dtype);
    int peer = call->root;
    hoop__call_t wire = *call;
    wire.root = -1;
    if (r->xfer.dir == HOOP__XFER_SEND) {
        wire.seq = c->p2p_send_seq[peer]++;
        hoop__xsend(&wire, &r->xfer, peer, call->sendbuf, bytes);
    } else {
        wire.seq = c->p2p_recv_seq[peer]++;
        hoop__xrecv(&wire, &r->xfer, peer, call->recvbuf, bytes);
    }
}

/* Under exec: r joins the point-to-point requests in flight (counted in n_inflight already when
 * counted is set: it was held). */
static void go_inflight(hoop_comm_t *c, hoop_request_t *r, int counted)
{
    post_p2p(r);
    if (c->inflight == NULL) c->inflight_progress = hoop__now();
    r->next = c->inflight;
    c->inflight = r;
    if (!counted) atomic_fetch_add(&c->n_inflight, 1);
}

/* ---- receives from any source ----
 * A receive from any source is matched, when its turn comes, to the first rank (in rank order,
 * starting after the rank it last matched, so that no sender is starved) whose next message has
 * arrived and is a point-to-point send: it then becomes a receive from that rank, posted as any
 * other. Until then it is held, and so is every receive posted after it (one of them could take
 * the message it is to match); sends go on. Collectives posted after it wait too (head_ready):
 * a collective's receive would take the point-to-point message from the stream first. Matching is
 * the transport's probe: nothing is consumed until the receive is posted. */

/* Under exec: the rank whose next message a receive from any source takes now, or -1. */
static int find_source(hoop_comm_t *c)
{
    if (c->tp_ops->probe == NULL) return -1;
    for (int i = 0; i < c->size; i++) {
        int p = (c->next_source + i) % c->size;
        hoop__wire_hdr_t h;
        if (p == c->rank || !c->tp_ops->probe(c->tp, p, &h) || h.kind != HOOP__K_SEND) continue;
        c->next_source = (p + 1) % c->size;
        return p;
    }
    return -1;
}

/* Under exec: takes the head of the held list off it (it stays counted in n_inflight). */
static hoop_request_t *held_pop(hoop_comm_t *c)
{
    hoop_request_t *r = c->held;
    c->held = r->next;
    if (c->held == NULL) c->held_tail = NULL;
    atomic_fetch_sub(&c->n_held, 1);
    return r;
}

/* Under exec: takes r, the head of the held list, off it and completes it with st. */
static void held_end(hoop_comm_t *c, hoop_request_t *r, hoop_result_t st)
{
    held_pop(c);
    atomic_fetch_sub(&c->n_inflight, 1);
    if (r->call.source != NULL) *r->call.source = -1;
    complete(c, r, st);
}

/* Under exec: posts the held receives that can go, in order: those before the first receive from
 * any source still unmatched, and that one once a message for it has arrived. One that found
 * none within the timeout fails alone, before it moved a byte: the communicator stays usable. On
 * an aborted communicator they all fail. */
static void held_run(hoop_comm_t *c)
{
    while (c->held != NULL) {
        hoop_request_t *r = c->held;
        hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
        if (ab) {
            held_end(c, r, ab);
            continue;
        }
        if (r->call.any_source && r->call.root < 0) {
            int p = find_source(c);
            if (p < 0) {
                if (hoop__now() - r->held_since < c->timeout_s) return;
                hoop__comm_error(c, HOOP_ERR_TIMEOUT,
                                 "receive from any source (count=%zu, %s) on rank %d: no send "
                                 "from any rank arrived within the timeout (%.1f s); the "
                                 "communicator stays usable",
                                 r->call.count, hoop__dtype_name(r->call.dtype), c->rank,
                                 c->timeout_s);
                held_end(c, r, HOOP_ERR_TIMEOUT);
                continue;
            }
            r->call.root = p;
        }
        go_inflight(c, held_pop(c), 1);
    }
}

/* Under exec: a receive that must wait for its turn behind one from any source (or is one). */
static void hold(hoop_comm_t *c, hoop_request_t *r)
{
    r->held_since = hoop__now();
    r->next = NULL;
    if (c->held_tail != NULL)
        c->held_tail->next = r;
    else
        c->held = r;
    c->held_tail = r;
    atomic_fetch_add(&c->n_inflight, 1);
    atomic_fetch_add(&c->n_held, 1);
    held_run(c);
}

/* Whether sendbuf and recvbuf lie as one of hoop.h's in-place forms (no form for a call that
 * touches one buffer or none: nothing can overlap). */
static int in_place_form(const hoop__call_t *call)
{
    const hoop_comm_t *c = call->comm;
    size_t n = call->count * hoop__dtype_size(call->dtype);
    /* Addresses as numbers: a buffer this rank does not use may be NULL. */
    uintptr_t s = (uintptr_t)call->sendbuf, r = (uintptr_t)call->recvbuf;
    switch (call->kind) {
    case HOOP__K_ALLREDUCE:
    case HOOP__K_REDUCE:
    case HOOP__K_ALLTOALL: return s == r;
    case HOOP__K_ALLGATHER:
    case HOOP__K_GATHER: return s == r + (size_t)c->rank * n;
    case HOOP__K_SCATTER: return r == s + (size_t)call->root * n;
    case HOOP__K_REDUCE_SCATTER: return r == s || r == s + (size_t)c->rank * n;
    default: return 0;
    }
}

/* Under exec, before the algorithm runs. Where this rank's input overlaps its output other than
 * in one of hoop.h's in-place forms (by a single byte even), the algorithms, which write output
 * before they have read all the input, would compute over bytes they had already overwritten:
 * the input is copied aside and the call reads the copy. The in-place forms, which every
 * algorithm serves, go as they are. Local to this rank: where it reads its input from changes
 * nothing that moves between ranks, so ranks need not agree on it. */
static hoop_result_t separate_input(hoop__call_t *call)
{
    size_t in, out;
    hoop__call_extents(call, &in, &out);
    if (in == 0 || out == 0 || in_place_form(call)) return HOOP_OK;
    uintptr_t s = (uintptr_t)call->sendbuf, r = (uintptr_t)call->recvbuf;
    if (s >= r + out || r >= s + in) return HOOP_OK;
    void *copy = hoop__input_copy(call, in);
    if (copy == NULL) return HOOP_ERR_NO_MEMORY;
    hoop__mem_copy(call, copy, call->sendbuf, in);
    call->sendbuf = copy;
    return HOOP_OK;
}

/* Under exec. A collective that failed has left its peers in the middle of the call: the
 * communicator is aborted (here, if the algorithm did not say why: an allocation, say), and the
 * peers are told the reason now (tell_abort) rather than closed on later. */
static hoop_result_t run_collective(hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    const void *sendbuf = call->sendbuf;
    hoop_result_t st = separate_input(call);
    if (st == HOOP_OK) st = hoop__collective_run(call);
    call->sendbuf = sendbuf;
    /* Before exec goes back: an abort told the peers from here on says this call is done. */
    if (st == HOOP_OK) atomic_store(&c->calls_done, call->seq + 1);
    if (st != HOOP_OK) {
        if (!atomic_load(&c->aborted)) {
            char what[128];
            hoop__call_describe(call, what, sizeof(what));
            hoop__comm_fail(c, st, "%s (call #%llu) failed on rank %d: %s", what,
                            (unsigned long long)call->seq, c->rank, hoop__error_string(st));
        }
        tell_abort(c, 0);
    }
    hoop__rec_end(c, call, st);
    return st;
}

/* Under exec: runs a blocking point-to-point request to completion: posts it and waits. */
static hoop_result_t run(hoop_comm_t *c, hoop_request_t *r)
{
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    if (ab) return ab;
    post_p2p(r);
    hoop__call_t wire = r->call;
    wire.root = -1;
    hoop__xfer_t *x = &r->xfer;
    hoop_result_t rc = hoop__xwait(&wire, &x, 1);
    return rc;
}

/* Takes the queue's head and runs it on this thread: a collective to completion, a point-to-point
 * request only as far as posting it. Called with mu held and busy clear; returns with mu held. */
static void run_head(hoop_comm_t *c)
{
    hoop_request_t *r = c->head;
    c->head = r->next;
    if (c->head == NULL) c->tail = NULL;
    engine_enter(c);
    hoop_result_t ab = is_p2p(&r->call) ? (hoop_result_t)atomic_load(&c->aborted)
                                        : may_start(c, r->call.seq);
    int posted = 0;
    /* A stream-ordered call starts once its stream's earlier work is done. */
    if (ab == HOOP_OK && r->call.order != 0) ab = hoop__mem_order_start(&r->call);
    hoop_result_t st = ab;
    if (ab == HOOP_OK) {
        hoop__rec_start(c, &r->call);
        if (is_p2p(&r->call)) {
            if (r->call.is_recv && (r->call.any_source || c->held != NULL))
                hold(c, r);
            else
                go_inflight(c, r, 0);
            posted = 1;
            hoop__sched_reap(c); /* it may have failed at once */
        } else {
            st = run_collective(&r->call);
        }
    }
    engine_leave(c);
    if (!posted) finish(c, r, st);
}

/* Under exec: one round of progress for the in-flight point-to-point requests, or, on an aborted
 * communicator, failing them. Returns 0 once aborted. */
static int inflight_step(hoop_comm_t *c, int ms)
{
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    /* While staged copies are in flight, nothing in the transport would wake a sleep when they
     * end: look again every 20 us instead. */
    int copying = hoop__stage_busy(c);
    if (ab)
        c->tp_ops->abort(c->tp, ab, c->fatal_msg);
    else
        c->tp_ops->progress(c->tp, copying ? 0 : ms);
    hoop__sched_reap(c);
    if (!ab && copying && ms > 0) {
        struct timespec ts = {0, 20 * 1000};
        nanosleep(&ts, NULL);
    }
    if (!ab) inflight_deadline(c);
    return !ab;
}

/* Called with mu held and busy clear; returns with mu held. Progresses the in-flight
 * point-to-point requests until r completes, or for a millisecond so that newly queued calls get
 * their turn. */
static void drive_inflight(hoop_comm_t *c, hoop_request_t *r)
{
    engine_enter(c);
    double start = hoop__now(), now = start;
    for (unsigned polls = 1; !atomic_load(&r->done) && (c->inflight != NULL || c->held != NULL);
         polls++) {
        if ((polls & 31) == 0 || now - start >= c->spin_s) now = hoop__now();
        int yield = now - start < c->yield_s;
        if (now - start > 1e-3 || !inflight_step(c, now - start < c->spin_s || yield ? 0 : 1))
            break;
        if (yield) sched_yield();
    }
    engine_leave(c);
}

/* Under mu: the queue's head may run now. A stream-ordered call whose stream has not reached it
 * waits at the head, while the in-flight transfers go on (one of them may be what the stream
 * waits for, an earlier call on it). */
static int head_ready(hoop_comm_t *c)
{
    hoop_request_t *r = c->head;
    if (r == NULL) return 0;
    if (atomic_load(&c->aborted)) return 1;
    /* A collective waits for the receives from any source posted before it to be matched. */
    if (!is_p2p(&r->call) && atomic_load(&c->n_held) > 0) return 0;
    return r->call.order == 0 || hoop__mem_order_ready(&r->call);
}

/* Runs queued calls while nobody waits: a thread in hoop_wait runs them itself, which saves a
 * hand-off (a wake-up and a trip through the scheduler) per call. */
static void *progress_thread(void *arg)
{
    hoop_comm_t *c = arg;
    /* Named, so that top -H, perf and a debugger tell its CPU apart from the application's. */
    (void)pthread_setname_np(pthread_self(), "hoop-progress");
    /* What the thread saw: the count of calls queued and when it changed; the deferrable head
     * (its call number), the count of calls waiters had run, and since when both are so. */
    uint64_t queued = 0, head_seq = UINT64_MAX, waiter_ran = 0;
    double queued_at = 0, head_at = 0;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        double now = hoop__now(), wake = 0;
        if (c->n_queued != queued) {
            queued = c->n_queued;
            queued_at = now;
        }
        if (c->head != NULL && !c->busy && c->waiters == 0 && head_ready(c)) {
            if (deferrable(c, c->head)) {
                if (c->head->call.seq != head_seq || c->n_waiter_ran != waiter_ran) {
                    head_seq = c->head->call.seq;
                    waiter_ran = c->n_waiter_ran;
                    head_at = now;
                }
                if (now - head_at < DEFER_S) wake = head_at + DEFER_S; /* a waiter may come */
            }
            if (wake == 0) {
                run_head(c);
                continue;
            }
        }
        if (atomic_load(&c->n_inflight) > 0 && !c->busy && c->waiters == 0) {
            c->thread_polls = 1;
            pthread_mutex_unlock(&c->mu);
            pthread_mutex_lock(&c->exec);
            if (c->inflight != NULL || c->held != NULL) inflight_step(c, 20);
            exec_unlock(c);
            pthread_mutex_lock(&c->mu);
            c->thread_polls = 0;
            continue;
        }
        /* Work a waiter left behind is looked at within a millisecond (see hoop_wait), and so is
         * the queue while calls come (a small one is then queued without waking this thread). */
        int left = c->head != NULL || atomic_load(&c->n_inflight) > 0;
        /* A head waiting for its stream is looked at again soon: the stream may get there any
         * time, and nothing wakes this thread when it does. */
        int stream_wait = c->head != NULL && c->head->call.order != 0;
        double nap = 0.1; /* idle: nothing queued or in flight, no call for ACTIVE_S */
        if (stream_wait)
            nap = 50e-6;
        else if (left || now - queued_at < ACTIVE_S)
            nap = DEFER_S;
        if (wake > 0 && wake - now < nap) nap = wake - now;
        c->thread_looks_soon = nap <= DEFER_S;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)(nap * 1e9);
        while (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->tcv, &c->mu, &ts);
        c->thread_looks_soon = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static hoop_result_t ensure_thread(hoop_comm_t *c)
{
    if (c->has_thread) return HOOP_OK;
    if (pthread_create(&c->thread, NULL, progress_thread, c) != 0)
        return hoop__comm_error(c, HOOP_ERR_SYSTEM, "cannot start the progress thread: %s",
                                strerror(errno));
    c->has_thread = 1;
    return HOOP_OK;
}

/* ---- request slots ----
 * A request handed to a caller lives in a slot of its communicator until the communicator is
 * freed, and its handle is the slot's address plus the slot's generation modulo 64 (slots are
 * 64-byte aligned). hoop_wait releases the slot and bumps its generation, so a second wait, or a
 * test after the wait, finds a handle that no longer matches instead of freed memory, even once
 * the slot serves another request; released slots are reused first in, first out, so that a
 * stale handle meets a matching generation only after 64 reuses of its own slot. */

#define REQ_MAGIC 0x686f6f7072657131ull /* "hoopreq1" */
#define REQ_GEN_MASK ((uintptr_t)63)
#define REQ_CHUNK 16

_Static_assert(_Alignof(hoop_request_t) >= 64, "request slots must leave 6 bits of a handle free");

struct hoop__req_chunk {
    hoop_request_t slot[REQ_CHUNK];
    struct hoop__req_chunk *next;
};

static hoop_request_t *req_handle(const hoop_request_t *r)
{
    return (hoop_request_t *)((uintptr_t)r | ((uintptr_t)r->gen & REQ_GEN_MASK));
}

/* The slot a handle names, or NULL when it names none (NULL, or not one of hoop's requests). */
static hoop_request_t *req_slot(const hoop_request_t *h)
{
    hoop_request_t *r = (hoop_request_t *)((uintptr_t)h & ~REQ_GEN_MASK);
    return r != NULL && r->magic == REQ_MAGIC ? r : NULL;
}

/* Under mu: whether h still names the request its slot holds. */
static int req_current(const hoop_request_t *r, const hoop_request_t *h)
{
    return r->live && ((uintptr_t)h & REQ_GEN_MASK) == ((uintptr_t)r->gen & REQ_GEN_MASK);
}

/* Under mu: a free slot, or NULL with the error set when no memory is left for more. */
static hoop_request_t *req_alloc(hoop_comm_t *c, const hoop__call_t *call)
{
    if (c->req_free == NULL) {
        struct hoop__req_chunk *k = aligned_alloc(_Alignof(hoop_request_t), sizeof(*k));
        if (k == NULL) {
            char what[128];
            hoop__call_describe(call, what, sizeof(what));
            hoop__comm_error(c, HOOP_ERR_NO_MEMORY,
                             "out of memory: cannot allocate %zu bytes for the requests of %s; "
                             "the call was not posted (it does not count as a call)",
                             sizeof(*k), what);
            return NULL;
        }
        memset(k, 0, sizeof(*k));
        for (int i = 0; i < REQ_CHUNK; i++) {
            hoop_request_t *r = &k->slot[i];
            r->magic = REQ_MAGIC;
            r->owner = c;
            r->next = i + 1 < REQ_CHUNK ? &k->slot[i + 1] : NULL;
        }
        k->next = c->req_chunks;
        c->req_chunks = k;
        c->req_free = &k->slot[0];
        c->req_free_tail = &k->slot[REQ_CHUNK - 1];
    }
    hoop_request_t *r = c->req_free;
    c->req_free = r->next;
    if (c->req_free == NULL) c->req_free_tail = NULL;
    memset(r, 0, offsetof(hoop_request_t, magic)); /* the bookkeeping stays */
    r->live = 1;
    return r;
}

/* Under mu: the slot goes back, and every handle of its request goes stale. */
static void req_release(hoop_comm_t *c, hoop_request_t *r)
{
    r->live = 0;
    r->gen++;
    r->next = NULL;
    if (c->req_free_tail != NULL)
        c->req_free_tail->next = r;
    else
        c->req_free = r;
    c->req_free_tail = r;
}

static void fill_request(hoop_comm_t *c, hoop_request_t *r, const hoop__call_t *call, int blocking)
{
    r->call = *call;
    r->call.comm = c;
    r->blocking = blocking;
    if (call->kind == HOOP__K_SEND) r->xfer.dir = call->is_recv ? HOOP__XFER_RECV : HOOP__XFER_SEND;
}

static hoop_result_t submit(hoop_comm_t *c, const hoop__call_t *call, hoop_request_t **out)
{
    /* A blocking call ordered on a stream returns once queued, as NCCL's do. */
    int detached = out == NULL && call->order != 0;
    if (out == NULL && !detached && !c->has_thread && !is_p2p(call)) {
        /* No call has ever been queued (the first one starts the progress thread): no request,
         * no waiter and no queue exist, and only this thread, the one posting, could make
         * them. The engine is then exec alone; mu and the busy flag, which serve the threads
         * that share a queue, are three lock pairs a small call need not pay (docs/
         * performance.md, "A small call's own costs"). */
        hoop__call_t local = *call;
        local.comm = c;
        local.seq = c->seq++;
        hoop__rec_post(c, &local, 1);
        pthread_mutex_lock(&c->exec);
        hoop_result_t st = may_start(c, local.seq);
        if (st == HOOP_OK) st = run_collective(&local);
        exec_unlock(c);
        return st;
    }
    pthread_mutex_lock(&c->mu);
    /* A receive from any source, or a receive or a collective behind one still unmatched, waits
     * for its turn (above): it is queued. */
    int may_hold = (call->kind == HOOP__K_SEND && call->is_recv && call->any_source) ||
                   (atomic_load(&c->n_held) > 0 && (call->kind != HOOP__K_SEND || call->is_recv));
    int now = out == NULL && !detached && c->head == NULL && !c->busy && !may_hold;
    if (now && !is_p2p(call)) {
        /* Nothing ahead of a collective: run it on this thread. Only the call is copied, not a
         * whole request: clearing one costs more than a small call's work. */
        hoop__call_t local = *call;
        local.comm = c;
        local.seq = c->seq++;
        hoop__rec_post(c, &local, 1);
        engine_enter(c);
        hoop_result_t st = may_start(c, local.seq);
        if (st == HOOP_OK) st = run_collective(&local);
        engine_leave(c);
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    if (now) {
        /* Nothing ahead of a point-to-point call: run it on this thread, the request on the
         * stack. */
        hoop_request_t local;
        memset(&local, 0, sizeof(local));
        fill_request(c, &local, call, 1);
        hoop__rec_post(c, &local.call, 1);
        engine_enter(c);
        hoop_result_t st = run(c, &local);
        hoop__rec_end(c, &local.call, st);
        engine_leave(c);
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    /* A call that cannot be queued is refused before it takes a call number, as a call with bad
     * arguments is: the communicator stays usable. */
    hoop_result_t trc = ensure_thread(c);
    hoop_request_t *r = trc == HOOP_OK ? req_alloc(c, call) : NULL;
    if (r == NULL) {
        pthread_mutex_unlock(&c->mu);
        return trc != HOOP_OK ? trc : HOOP_ERR_NO_MEMORY;
    }
    fill_request(c, r, call, out == NULL && !detached);
    c->n_queued++;
    r->detached = detached;
    c->n_detached += detached;
    if (!is_p2p(call)) r->call.seq = c->seq++;
    hoop__rec_post(c, &r->call, 0);
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    if (c->waiters > 0)
        pthread_cond_broadcast(&c->cv);
    else if (!(deferrable(c, r) && c->thread_looks_soon))
        pthread_cond_signal(&c->tcv); /* else the thread looks in time by itself */
    int thread_polls = c->thread_polls;
    hoop_request_t *h = req_handle(r);
    pthread_mutex_unlock(&c->mu);
    if (thread_polls) c->tp_ops->wake(c->tp);
    if (out != NULL) {
        *out = h;
        return HOOP_OK;
    }
    if (detached) return HOOP_OK; /* h may be stale already: it ended and was released */
    return hoop__sched_wait(h);
}

/* ---- posting ---- */

/* One posting thread at a time (hoop.h); the second one gets an error, not a reordered call. */
static hoop_result_t post_enter(hoop_comm_t *c, const char *what)
{
    if (atomic_exchange_explicit(&c->posting, 1, memory_order_acquire) == 0) return HOOP_OK;
    /* The calls already posted may be in another order than on the other ranks: only an abort
     * keeps that from becoming wrong data. */
    hoop__comm_fail(c, HOOP_ERR_INVALID_ARGUMENT,
                    "%s on rank %d: another thread was posting on this communicator at the same "
                    "time; calls on one communicator must come from one thread at a time (or be "
                    "serialized by the caller), else ranks see them in different orders",
                    what, c->rank);
    hoop__sched_abort(c);
    return HOOP_ERR_INVALID_ARGUMENT;
}

static void post_leave(hoop_comm_t *c)
{
    atomic_store_explicit(&c->posting, 0, memory_order_release);
}

hoop_result_t hoop__sched_post(hoop_comm_t *c, const hoop__call_t *call, hoop_request_t **req,
                               const char *what)
{
    hoop_result_t rc = post_enter(c, what);
    if (rc != HOOP_OK) return rc;
    rc = submit(c, call, req);
    post_leave(c);
    if (rc != HOOP_OK) {
        hoop__explain_due(c);
        hoop__rec_dump_due(c);
    }
    return rc;
}

hoop_result_t hoop__sched_wait(hoop_request_t *h)
{
    hoop_request_t *r = req_slot(h);
    if (r == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop_comm_t *c = r->owner;
    pthread_mutex_lock(&c->mu);
    if (!req_current(r, h)) {
        pthread_mutex_unlock(&c->mu);
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "hoop_wait: the request was already waited for (hoop_wait "
                                "completes and frees a request: wait for each one once)");
    }
    c->waiters++;
    /* Another thread may wait for the same request and release it first. */
    while (req_current(r, h) && !atomic_load(&r->done)) {
        /* Calls ahead of r (or r itself) that nobody runs yet: run them here. */
        if (c->head != NULL && !c->busy && !c->stop && head_ready(c)) {
            run_head(c);
            c->n_waiter_ran++;
            continue;
        }
        /* Point-to-point transfers in flight: drive them here rather than wait for the progress
         * thread to notice, sleep and wake this thread (tens of microseconds per message). */
        if (atomic_load(&c->n_inflight) > 0 && !c->busy && !c->stop) {
            drive_inflight(c, r);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (c->head != NULL && c->head->call.order != 0 && !c->busy) { /* see progress_thread */
            ts.tv_nsec += 50 * 1000;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
        } else {
            ts.tv_sec += 1;
        }
        /* Every running operation has its own timeout, so this wait ends. */
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    /* Queued calls and transfers nobody waits for go back to the progress thread, which looks
     * again within a millisecond: not woken here, because a caller that waits on its calls one
     * by one comes back at once, and a wake-up per call would bounce every call between two
     * threads. */
    hoop_result_t st;
    if (req_current(r, h)) {
        st = r->status;
        req_release(c, r);
    } else {
        st = hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                              "hoop_wait: another thread waited for the same request first");
    }
    if (st != HOOP_OK && (hoop__rec_dump_wanted(c) || hoop__explain_wanted(c))) {
        /* Still a waiter, so that the communicator outlives the dump and the explanation; mu is
         * let go meanwhile. */
        pthread_mutex_unlock(&c->mu);
        hoop__explain_due(c);
        hoop__rec_dump_due(c);
        pthread_mutex_lock(&c->mu);
    }
    c->waiters--;
    /* hoop_comm_destroy waits for the last waiter to leave before it frees the communicator. */
    if (c->stop) pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return st;
}

hoop_result_t hoop__sched_test(hoop_request_t *h, int *done)
{
    hoop_request_t *r = req_slot(h);
    if (r == NULL || done == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop_comm_t *c = r->owner;
    pthread_mutex_lock(&c->mu);
    int current = req_current(r, h);
    hoop_result_t st = HOOP_OK;
    *done = current && atomic_load(&r->done);
    if (*done) st = r->status;
    pthread_mutex_unlock(&c->mu);
    if (!current)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "hoop_test: the request was already waited for (hoop_wait "
                                "completes and frees a request)");
    if (st != HOOP_OK) {
        hoop__explain_due(c);
        hoop__rec_dump_due(c);
    }
    return st;
}

/* ---- abort, stop ---- */

void hoop__sched_abort(hoop_comm_t *c)
{
    /* Whoever holds the engine tells the peers as it gives it back (exec_unlock); if nobody does,
     * tell them here. */
    if (pthread_mutex_trylock(&c->exec) == 0) {
        tell_abort(c, 0);
        pthread_mutex_unlock(&c->exec);
    }
    if (c->tp != NULL) c->tp_ops->wake(c->tp);
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    pthread_cond_broadcast(&c->tcv);
    pthread_mutex_unlock(&c->mu);
}

void hoop__sched_drain(hoop_comm_t *c)
{
    pthread_mutex_lock(&c->mu);
    double deadline = hoop__now() + c->timeout_s;
    while (c->n_detached > 0 && !atomic_load(&c->aborted) && hoop__now() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
}

int hoop__sched_pending(hoop_comm_t *c)
{
    pthread_mutex_lock(&c->mu);
    int pending = c->busy + atomic_load(&c->n_inflight);
    for (const hoop_request_t *r = c->head; r != NULL; r = r->next) pending++;
    pthread_mutex_unlock(&c->mu);
    return pending;
}

void hoop__sched_stop(hoop_comm_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_cond_broadcast(&c->tcv);
    pthread_mutex_unlock(&c->mu);
    if (c->tp != NULL) c->tp_ops->wake(c->tp);
    if (c->has_thread) pthread_join(c->thread, NULL);
    c->has_thread = 0;
    /* A waiter may still be running a call or driving the transfers (the communicator is aborted
     * when calls were pending, so it ends soon); nobody starts another once stop is set. */
    pthread_mutex_lock(&c->mu);
    while (c->busy) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    /* Before the connections close: an abort nobody told the peers yet reaches them first. */
    pthread_mutex_lock(&c->exec);
    tell_abort(c, 0);
    pthread_mutex_unlock(&c->exec);
    /* Requests nobody ran: fail them so their owners' waits end. */
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    if (ab == HOOP_OK) ab = HOOP_ERR_ABORTED;
    for (hoop_request_t *r = c->head, *n; r != NULL; r = n) {
        n = r->next;
        complete(c, r, ab);
    }
    c->head = c->tail = NULL;
    for (hoop_request_t *r = c->inflight, *n; r != NULL; r = n) {
        n = r->next;
        complete(c, r, ab);
    }
    c->inflight = NULL;
    for (hoop_request_t *r = c->held, *n; r != NULL; r = n) {
        n = r->next;
        if (r->call.source != NULL) *r->call.source = -1;
        complete(c, r, ab);
    }
    c->held = c->held_tail = NULL;
    /* Threads still in hoop_wait (their requests are all complete now) leave before the slots
     * and the communicator go. */
    pthread_mutex_lock(&c->mu);
    while (c->waiters > 0) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    /* Called once, as the communicator is freed: the slots go with it. */
    for (struct hoop__req_chunk *k = c->req_chunks, *n; k != NULL; k = n) {
        n = k->next;
        free(k);
    }
    c->req_chunks = NULL;
    c->req_free = c->req_free_tail = NULL;
}
