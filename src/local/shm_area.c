/*
 * The shared area of the shared-memory collectives (shm_coll.c): one memfd per communicator, made
 * by rank 0 at the first call that wants it and mapped by every rank, and the one primitive the
 * algorithms build on, a step: publish what this rank wrote, then wait until every rank has.
 *
 *   area:    header page | controls | lines of buffer 0 | lines of buffer 1 | payloads
 *   controls: each rank's (waiters' count, pid, abort flag and reason), side by side
 *   lines of buffer b: each rank's, side by side: a line (step number, the call's descriptor,
 *            the first 24 payload bytes) and 4 lines of 56 payload bytes and a step number each
 *   payloads: rank 0's buffer 0 | its buffer 1 | rank 1's buffer 0 | ...
 *
 * A step reads every rank's line of one buffer and looks at every rank's control: side by side,
 * those are a few pages, where one page a rank made each rank's first steps fault p pages in (a
 * page fault is slow on the machines measured: docs/performance.md).
 *
 * Every rank counts its steps; all ranks of a communicator run the same steps in the same order,
 * and step s uses buffer s % 2. A rank publishes step s by writing its payload and descriptor into
 * buffer s % 2 and then the step number into the same line (release), so a reader that polls the
 * line it is about to read sees a small payload in the same cache-line transfer. A payload of up
 * to 248 bytes continues in the lines after it, each with its own step number written after its
 * bytes: the reader polls those lines with the first, so all their transfers overlap (one more
 * line fetched only after the first had said it was there was a large part of a small
 * all-reduce: docs/performance.md, "Small payloads in lines"). Larger payloads follow the lines,
 * 64-byte aligned. A rank can be at
 * most one step ahead of the slowest (it waits for everyone at every step), so buffer s % 2 is
 * not written again before every reader of step s has published step s + 1, i.e. finished with
 * it: two buffers are enough for any schedule that reads step s's data before its next step.
 *
 * Every step compares the descriptors (kind, count, dtype, op, root, call number, algorithm,
 * schedule digest) of all ranks: different calls fail with HOOP_ERR_MISMATCH on every rank that
 * sees them, with the transports' sentence, and the abort reaches the others.
 *
 * Waiting: a spin of the communicator's spin time (20 us, none where local ranks outnumber
 * cores), then sched_yield between looks until HOOP_SHM_SPIN_US (200 us) have passed, then sleeps
 * on a futex in the line it waits for, 1 ms at a time; a publisher that sees waiters announced on its slot (Dekker's
 * pattern: each side stores, fences, loads) wakes them. Every millisecond the waiter drives the
 * transport (point-to-point requests in flight, abort notices from peers), polls a pidfd of every
 * peer (a killed rank fails the communicator within about a millisecond) and keeps the
 * communicator's timeout.
 *
 * The memfd has no name, and rank 0 closes it once every rank has mapped it: nothing is left
 * behind however the processes end.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "local/shm_coll.h"
#include "base/proc.h"
#include "base/tree.h"

#define AREA_MAGIC 0x4c4c4f435f504f48ull /* "HOOP_COLL" */
#define PAGE 4096
#define ADDR_LEN 64
#define REASON 448
#define SWEEP_PEERS 16 /* peers besides the one waited for whose process a look polls */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#if defined(__x86_64__) || defined(__i386__)
#define relax() __builtin_ia32_pause()
#else
#define relax() ((void)0)
#endif

typedef struct area_hdr {
    uint64_t magic, nonce, comm_id, len, buf_bytes;
    int32_t size;
} area_hdr_t;

typedef struct slot_ctl {
    _Alignas(64) _Atomic uint32_t sleepers; /* ranks about to sleep on one of this slot's lines */
    _Alignas(64) int32_t pid;
    _Atomic uint32_t aborted; /* hoop_result_t this rank failed with inside a step, 0 if none */
    _Atomic uint32_t closed;  /* this rank freed its communicator */
    char reason[REASON];
} slot_ctl_t;

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* A rank's line and payload lines of one buffer. */
#define LINE_SET (sizeof(hoop__shc_line_t) + HOOP__SHC_FLINES * sizeof(hoop__shc_fline_t))

static slot_ctl_t *ctl_of(const hoop__shc_t *a, int r)
{
    return (slot_ctl_t *)(void *)(a->base + PAGE) + r;
}

hoop__shc_line_t *hoop__shc_line(const hoop__shc_t *a, int r, uint64_t step)
{
    size_t i = (size_t)(step & 1) * (size_t)a->p + (size_t)r;
    return (hoop__shc_line_t *)(void *)(a->base + a->lines_off + i * LINE_SET);
}

uint8_t *hoop__shc_data(const hoop__shc_t *a, int r, uint64_t step)
{
    return a->base + a->data_off + (size_t)r * a->slot_bytes + (size_t)(step & 1) * a->buf_bytes;
}

static long futex(_Atomic uint64_t *word, int op, uint32_t val, const struct timespec *ts)
{
    /* The step's low half: the word that changes (little-endian; on big-endian the high half,
     * which changes every 2^32 steps, would only make sleeps time out). */
    return syscall(SYS_futex, (uint32_t *)(void *)word, op, val, ts, NULL, 0);
}

/* ---- setup ---- */

static void area_unmap(hoop__shc_t *a)
{
    if (a->base != NULL) munmap(a->base, a->len);
    a->base = NULL;
    for (int q = 0; a->pidfd != NULL && q < a->p; q++)
        if (a->pidfd[q] >= 0) close(a->pidfd[q]);
    free(a->pidfd);
    a->pidfd = NULL;
}

void hoop__shc_close(hoop_comm_t *c)
{
    hoop__shc_t *a = c->local != NULL ? c->local->shc : NULL;
    if (a == NULL) return;
    /* A peer still waiting for a step of this rank's learns that it will not come. */
    if (a->ready) atomic_store(&ctl_of(a, c->rank)->closed, 1);
    area_unmap(a);
    free(a);
    c->local->shc = NULL;
}

static void layout(const hoop_comm_t *c, hoop__shc_t *a)
{
    a->p = c->size;
    /* Payload per buffer: 256 KiB, or a whole small message when HOOP_SMALL_BYTES is larger. */
    size_t data = HOOP__SHC_DATA;
    if (c->agreed.small_bytes + 64 > data) data = c->agreed.small_bytes + 64;
    /* The payload's room as it was when the lines came before it in the same pages, so that
     * every schedule's chunks (and so the bits of its results) stay what they were. */
    a->buf_bytes = round_up(data + LINE_SET, PAGE);
    a->data_bytes = a->buf_bytes - LINE_SET;
    a->slot_bytes = 2 * a->buf_bytes;
    a->lines_off = PAGE + round_up((size_t)a->p * sizeof(slot_ctl_t), PAGE);
    a->data_off = a->lines_off + round_up(2 * (size_t)a->p * LINE_SET, PAGE);
    a->len = a->data_off + (size_t)a->p * a->slot_bytes;
}

uint64_t hoop__shc_mapped(const hoop_comm_t *c, uint64_t *next)
{
    const hoop__shc_t *a = c->local != NULL ? c->local->shc : NULL;
    hoop__shc_t planned = {0};
    /* What the first call that asks maps, where the planner sends calls there (plan.c: one host
     * and a transport that allows it, or HOOP_ALGO=shm; not p2p); nothing once a call found it
     * could not be made. */
    int shm = strcmp(c->agreed.algo, "shm") == 0, p2p = strcmp(c->agreed.algo, "p2p") == 0;
    int will = c->size > 1 && (shm || (c->shm_auto && !p2p));
    if (a != NULL && a->tried) will = a->base != NULL;
    if (will) layout(c, &planned);
    *next = will ? planned.len : 0;
    return a != NULL && a->base != NULL ? a->len : 0;
}

/* Rank 0's part: the memfd, its header, the address the others open. */
static int area_create(hoop_comm_t *c, hoop__shc_t *a, int *fd, char *addr)
{
    *fd = memfd_create("hoop-coll", MFD_CLOEXEC);
    if (*fd < 0 || ftruncate(*fd, (off_t)a->len) != 0) return -1;
    void *m = mmap(NULL, a->len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (m == MAP_FAILED) return -1;
    a->base = m;
    area_hdr_t *h = m;
    if (getrandom(&h->nonce, sizeof(h->nonce), 0) != sizeof(h->nonce))
        h->nonce = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)m;
    h->comm_id = c->id;
    h->len = a->len;
    h->buf_bytes = a->buf_bytes;
    h->size = a->p;
    h->magic = AREA_MAGIC;
    snprintf(addr, ADDR_LEN, "%d:%d:%016" PRIx64, (int)getpid(), *fd, h->nonce);
    return 0;
}

/* The others' part: open rank 0's memfd through /proc (allowed to processes that may read its
 * memory: the same check the shared-memory transport relies on), check it is this
 * communicator's area, map it. */
static int area_open(hoop_comm_t *c, hoop__shc_t *a, const char *addr)
{
    int pid, fd;
    uint64_t nonce;
    if (sscanf(addr, "%d:%d:%" SCNx64, &pid, &fd, &nonce) != 3) return -1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0) return -1;
    area_hdr_t h;
    int ok = pread(f, &h, sizeof(h), 0) == (ssize_t)sizeof(h) && h.magic == AREA_MAGIC &&
             h.nonce == nonce && h.comm_id == c->id && h.len == a->len &&
             h.buf_bytes == a->buf_bytes && h.size == a->p;
    void *m = ok ? mmap(NULL, a->len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0) : MAP_FAILED;
    close(f);
    if (m == MAP_FAILED) return -1;
    a->base = m;
    return 0;
}

/* The first call that wants the area: rank 0 makes it, its address goes down the ranks' binomial
 * tree (each rank maps the area, then passes the address on), whether every rank could map it
 * comes up the tree and the verdict goes down it again. Rank 0 talked to every rank in turn
 * before, and mapped every rank's segment to do it (beyond 16 peers the transport maps a peer's
 * segment at the first transfer with it); through the tree a rank talks only to the neighbours
 * it mapped at connect, and rank 0 to log2(p) of them. Messages of the call itself (its
 * header), so a rank in another call fails them as a mismatch. */
static hoop_result_t area_setup(const hoop__call_t *dcall, hoop__shc_t *a)
{
    /* The exchange's buffers are this rank's own, in host memory, whatever the call's are. */
    hoop__call_t hcall = *dcall;
    hcall.mem = HOOP__MEM_HOST;
    const hoop__call_t *call = &hcall;
    hoop_comm_t *c = call->comm;
    /* The communicator's ranks as base/tree.h's tree: on one host, the one the shm transport
     * settles through, so a rank's tree neighbours are the peers it mapped at connect. */
    int p = c->size, me = c->rank, fd = -1, kids[HOOP__TREE_MAX_KIDS];
    int nk = hoop__tree_kids(me, p, kids), parent = hoop__tree_parent(me);
    char addr[ADDR_LEN] = {0};
    a->pidfd = malloc((size_t)p * sizeof(int));
    if (a->pidfd == NULL) {
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "shared-memory collectives: no memory");
        return HOOP_ERR_NO_MEMORY;
    }
    for (int q = 0; q < p; q++) a->pidfd[q] = -1;
    layout(c, a);
    uint8_t mine = 0, verdict = 0, got = 0;
    hoop_result_t rc = HOOP_OK;
    /* Down: the address (empty where rank 0 could not make the area). */
    if (me == 0) {
        if (area_create(c, a, &fd, addr) == 0) mine = 1;
    } else {
        rc = hoop__sendrecv(call, -1, NULL, 0, parent, addr, ADDR_LEN);
        addr[ADDR_LEN - 1] = '\0';
        if (rc == HOOP_OK && addr[0] != '\0' && area_open(c, a, addr) == 0) mine = 1;
    }
    if (mine) ctl_of(a, me)->pid = (int32_t)getpid();
    /* The largest subtree first: it has the most rounds below it. */
    for (int k = nk - 1; k >= 0 && rc == HOOP_OK; k--)
        rc = hoop__sendrecv(call, kids[k], addr, ADDR_LEN, -1, NULL, 0);
    /* Up: whether this rank and every rank below it mapped the area. Rank 0 keeps its memfd
     * open until it hears: the others open it through its /proc entry. */
    verdict = mine;
    for (int k = 0; k < nk && rc == HOOP_OK; k++) {
        rc = hoop__sendrecv(call, -1, NULL, 0, kids[k], &got, 1);
        verdict &= got;
    }
    if (rc == HOOP_OK && me != 0) rc = hoop__sendrecv(call, parent, &verdict, 1, -1, NULL, 0);
    /* Down: rank 0's verdict, the same on every rank. */
    if (rc == HOOP_OK && me != 0) rc = hoop__sendrecv(call, -1, NULL, 0, parent, &verdict, 1);
    for (int k = nk - 1; k >= 0 && rc == HOOP_OK; k--)
        rc = hoop__sendrecv(call, kids[k], &verdict, 1, -1, NULL, 0);
    if (fd >= 0) close(fd);
    if (rc != HOOP_OK || !verdict) {
        area_unmap(a);
        if (rc == HOOP_OK)
            HOOP__INFO(&c->log, "shared-memory collectives unavailable (a rank could not map the "
                                "area): point-to-point algorithms instead");
        return rc;
    }
    /* The peers' pidfds are opened as the waits first look at them (peer_gone): p of them on
     * every rank at once was p² opens at the first call, most of them for peers a wait never
     * needs to poll. */
    for (int q = 0; q < p; q++) a->pidfd[q] = -2;
    a->ready = 1;
    return HOOP_OK;
}

hoop_result_t hoop__shc_get(const hoop__call_t *call, hoop__shc_t **out)
{
    hoop_comm_t *c = call->comm;
    *out = NULL;
    if (c->size < 2) return HOOP_OK;
    struct hoop__local *l = hoop__local_of(c);
    if (l != NULL && l->shc == NULL) l->shc = calloc(1, sizeof(hoop__shc_t));
    if (l == NULL || l->shc == NULL) {
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "shared-memory collectives: no memory");
        return HOOP_ERR_NO_MEMORY;
    }
    if (!l->shc->tried) {
        l->shc->tried = 1;
        hoop_result_t rc = area_setup(call, l->shc);
        if (rc != HOOP_OK) return rc;
    }
    *out = hoop__shc_ready(c);
    return HOOP_OK;
}

uint32_t hoop__shc_flags(const hoop__call_t *call)
{
    if (call->mem == HOOP__MEM_HOST) return HOOP__SHC_HOST;
    return hoop__ipc_may(call) ? HOOP__SHC_DEVICE : 0;
}

/* ---- steps ---- */

static void fill_desc(const hoop__call_t *call, hoop__shc_line_t *l, uint32_t flags)
{
    l->seq = call->seq;
    l->count = call->count;
    l->kind = (uint8_t)call->kind;
    l->dtype = (uint8_t)call->dtype;
    l->op = (uint8_t)call->op;
    l->algo = (uint8_t)call->algo;
    l->root = call->root;
    l->sched = call->comm->sched;
    l->flags = flags;
}

static void to_hdr(const hoop__call_t *call, const hoop__shc_line_t *l, int src,
                   hoop__wire_hdr_t *h)
{
    memset(h, 0, sizeof(*h));
    h->kind = l->kind;
    h->dtype = l->dtype;
    h->op = l->op;
    h->algo = l->algo;
    h->root = l->root;
    h->src = (uint32_t)src;
    h->comm_id = call->comm->id;
    h->seq = l->seq;
    h->count = l->count;
    h->sched = l->sched;
}

/* Says where the peers look that this rank failed with code and why (the communicator's
 * sentence), once, and wakes whoever sleeps on this rank's lines. */
static void say_aborted(hoop_comm_t *c, hoop__shc_t *a, hoop_result_t code)
{
    slot_ctl_t *me = ctl_of(a, c->rank);
    if (atomic_load(&me->aborted) != 0) return;
    size_t n = strnlen(c->fatal_msg, sizeof(me->reason) - 1);
    memcpy(me->reason, c->fatal_msg, n);
    me->reason[n] = '\0';
    /* An abort that a timeout caused says so (the peers still fail with HOOP_ERR_ABORTED, but
     * their flight recorders dump: core/record.c). */
    if (code == HOOP_ERR_ABORTED && atomic_load(&c->abort_dumps)) code = HOOP_ERR_TIMEOUT;
    atomic_store(&me->aborted, (uint32_t)code);
    for (uint64_t b = 0; b < 2; b++)
        futex(&hoop__shc_line(a, c->rank, b)->step, FUTEX_WAKE, INT_MAX, NULL);
}

void hoop__shc_abort(hoop_comm_t *c)
{
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    hoop__shc_t *a = hoop__shc_ready(c);
    if (ab != HOOP_OK && a != NULL) say_aborted(c, a, ab);
}

/* The communicator failed inside a step (hoop__comm_fail said why): its code. The peers are told,
 * here in the area and through the transports, once, as the failed call returns (core/sched.c,
 * tell_abort). */
static hoop_result_t step_failed(const hoop__call_t *call, hoop_result_t code)
{
    hoop_result_t ab = (hoop_result_t)atomic_load(&call->comm->aborted);
    return ab != HOOP_OK ? ab : code;
}

/* Whether rank q has published step s. Its payload lines were written before, and whatever it
 * did after (failed a later call, aborted, closed) was written after: a wait that sees the step
 * is over, and nothing that happened later fails it. */
static int published(const hoop__shc_t *a, int q, uint64_t s)
{
    return atomic_load_explicit(&hoop__shc_line(a, q, s)->step, memory_order_acquire) >= s;
}

/* Fails the communicator for rank q, which aborted (with its reason), or whose process is gone
 * or which closed the communicator (gone: 1, closed: 2) without an abort. */
static hoop_result_t peer_failed(const hoop__call_t *call, hoop__shc_t *a, int q, int how)
{
    hoop_comm_t *c = call->comm;
    slot_ctl_t *pc = ctl_of(a, q);
    /* What it wrote before it went may be its abort reason: read that first. */
    uint32_t ab = atomic_load(&pc->aborted);
    char mine[128];
    hoop__call_describe(call, mine, sizeof(mine));
    if (ab != 0) {
        if (ab == HOOP_ERR_TIMEOUT) atomic_store(&c->abort_dumps, 1);
        char why[REASON];
        memcpy(why, pc->reason, sizeof(why));
        why[sizeof(why) - 1] = '\0';
        hoop__comm_fail(c, HOOP_ERR_ABORTED, "rank %d aborted: %s", q, why);
        return step_failed(call, HOOP_ERR_ABORTED);
    }
    if (how == 1)
        hoop__comm_fail(c, HOOP_ERR_PEER_LOST,
                        "%s (call #%llu) failed with rank %d: lost rank %d (its process %d "
                        "exited)",
                        mine, (unsigned long long)call->seq, q, q, (int)pc->pid);
    else
        hoop__comm_fail(c, HOOP_ERR_PEER_LOST,
                        "%s (call #%llu) failed with rank %d: lost rank %d (it closed its "
                        "connections)",
                        mine, (unsigned long long)call->seq, q, q);
    return step_failed(call, HOOP_ERR_PEER_LOST);
}

/* Whether rank q's process has exited, through its pidfd (opened at the first look), or, where
 * there is none, by its pid for the peer waited for, every 10 ms. */
static int peer_gone(hoop__shc_t *a, int q, int waited, double now)
{
    if (a->pidfd[q] == -2) a->pidfd[q] = (int)syscall(SYS_pidfd_open, (pid_t)ctl_of(a, q)->pid, 0);
    if (a->pidfd[q] >= 0) {
        struct pollfd pf = {.fd = a->pidfd[q], .events = POLLIN};
        return poll(&pf, 1, 0) > 0;
    }
    if (!waited || now < a->next_gone_check) return 0;
    a->next_gone_check = now + 0.01;
    return hoop__process_gone((pid_t)ctl_of(a, q)->pid);
}

/* Between sleeps, waiting for peer's step s: the transport, the peers' abort flags and
 * processes, the deadline. Whatever it finds fails the wait only while peer has not published
 * the step, looked at after finding it: a rank that has published every step of a call may go on
 * to the next and fail there, or abort, and the call it finished must not fail on the ranks
 * still finishing it (every rank's part of it is done: they only read what is published). */
static hoop_result_t check_world(const hoop__call_t *call, hoop__shc_t *a, int peer, uint64_t s,
                                 double start, double now)
{
    hoop_comm_t *c = call->comm;
    /* The transport looks at its peers every 64th idle progress at most once a millisecond:
     * enough calls that it does look, for the abort notices it carries. */
    for (int i = 0; i < 64; i++) c->tp_ops->progress(c->tp, 0);
    if (c->inflight != NULL || c->held != NULL) c->reap(c);
    if (atomic_load(&c->aborted))
        return published(a, peer, s) ? HOOP_OK : step_failed(call, HOOP_ERR_ABORTED);
    /* Dead peers first, so that a rank that sees both names the dead one rather than a peer
     * that aborted because of it; then peers that aborted (a load each: all of them). Processes
     * are looked at through a bounded sweep: the peer waited for at every look, and SWEEP_PEERS
     * others in turn. Polling every peer's pidfd every millisecond on every rank was p² system
     * calls a millisecond, which at hundreds of ranks on a few cores was most of what they did.
     * A dead rank is still seen within milliseconds: each rank that reaches the step waits for
     * it and polls it (an abort follows, which everyone loads), and the sweep finds it by
     * itself within p / SWEEP_PEERS looks. */
    if (!published(a, peer, s) && peer_gone(a, peer, 1, now))
        return published(a, peer, s) ? HOOP_OK : peer_failed(call, a, peer, 1);
    for (int i = 0; i < (a->p < SWEEP_PEERS ? a->p : SWEEP_PEERS); i++) {
        int q = a->sweep;
        a->sweep = (a->sweep + 1) % a->p;
        /* A peer that has published this step may end (its last call is done): only one that
         * has not can fail this wait. */
        if (q == c->rank || q == peer || published(a, q, s) || !peer_gone(a, q, 0, now)) continue;
        if (published(a, peer, s)) return HOOP_OK;
        return peer_failed(call, a, q, 1);
    }
    for (int q = 0; q < a->p; q++) {
        if (q == c->rank || atomic_load(&ctl_of(a, q)->aborted) == 0) continue;
        if (published(a, peer, s)) return HOOP_OK;
        return peer_failed(call, a, q, 1);
    }
    /* Its abort flag, if it has one, was set before it closed: peer_failed reads it again. */
    if (atomic_load(&ctl_of(a, peer)->closed) && !published(a, peer, s))
        return peer_failed(call, a, peer, 2);
    if (now - start >= c->timeout_s && !published(a, peer, s)) {
        char mine[128];
        hoop__call_describe(call, mine, sizeof(mine));
        hoop__comm_fail(c, HOOP_ERR_TIMEOUT,
                        "%s (call #%llu) timed out after %.1f s waiting for rank(s) %d", mine,
                        (unsigned long long)call->seq, c->timeout_s, peer);
        return step_failed(call, HOOP_ERR_TIMEOUT);
    }
    return HOOP_OK;
}

static hoop__shc_fline_t *flines(const hoop__shc_line_t *l)
{
    return (hoop__shc_fline_t *)(void *)((uint8_t *)(uintptr_t)l + sizeof(*l));
}
static size_t nflines(size_t n)
{
    return n <= HOOP__SHC_HEAD ? 0 : (n - HOOP__SHC_HEAD + HOOP__SHC_FLINE - 1) / HOOP__SHC_FLINE;
}

/* Whether line l holds step s: 0 not yet; 1 yes, and its k payload lines too; 2 yes, but a
 * payload line looked older. The payload lines are loaded first, in the same look, so that their
 * transfers overlap the first line's; one loaded before the first line's new step may still have
 * been stale, and one loaded after it cannot be, since the publisher wrote them first. */
static int arrived(const hoop__shc_line_t *l, size_t k, uint64_t s)
{
    const hoop__shc_fline_t *f = flines(l);
    int lines = 1;
    for (size_t i = 0; i < k; i++)
        lines &= atomic_load_explicit(&f[i].step, memory_order_acquire) >= s;
    if (atomic_load_explicit(&l->step, memory_order_acquire) < s) return 0;
    return lines ? 1 : 2;
}

/* Whether the step is in; if so, its payload lines are in this core's cache, looked at again
 * where stale (a line still older then was not written for this step: the peer's descriptor
 * differs, which the caller tells, and hoop__shc_take refuses the line). */
static int in_now(const hoop__shc_line_t *l, size_t k, uint64_t s)
{
    int in = arrived(l, k, s);
    if (in == 2) (void)arrived(l, k, s);
    return in != 0;
}

/* Waits until peer q has published step s (and k payload lines with it). */
static hoop_result_t wait_peer(const hoop__call_t *call, hoop__shc_t *a, int q, uint64_t s,
                               size_t k)
{
    hoop__shc_line_t *l = hoop__shc_line(a, q, s);
    if (in_now(l, k, s)) return HOOP_OK;
    hoop_comm_t *c = call->comm;
    double start = hoop__now(), now = start, next = start + 1e-3;
    /* Spin for the communicator's spin time (20 us; none where local ranks outnumber cores), then
     * yield the core between looks until HOOP_SHM_SPIN_US (200 us) have passed: the rank waited
     * for may need this core, and a busy machine runs it sooner than it wakes a sleeper. Then
     * sleep. */
    double spin = c->cfg.shm_spin_us * 1e-6;
    unsigned looks = 0;
    slot_ctl_t *qc = ctl_of(a, q);
    for (;;) {
        if (in_now(l, k, s)) return HOOP_OK;
        if (now - start >= c->spin_s) {
            sched_yield();
        } else if ((++looks & 63) != 0) {
            relax();
            continue;
        }
        now = hoop__now();
        if (now >= next) {
            hoop_result_t rc = check_world(call, a, q, s, start, now);
            if (rc != HOOP_OK) return rc;
            next = now + 1e-3;
        }
        if (now - start < spin) continue;
        /* Announce, look again, sleep: the publisher stores its step, fences, then reads
         * sleepers, so one of the two sees the other. */
        atomic_fetch_add(&qc->sleepers, 1);
        uint64_t v = atomic_load(&l->step);
        if (v < s) {
            struct timespec ts = {0, 1000000};
            futex(&l->step, FUTEX_WAIT, (uint32_t)v, &ts);
        }
        atomic_fetch_sub(&qc->sleepers, 1);
    }
}

uint8_t *hoop__shc_next(const hoop__shc_t *a, int r)
{
    return hoop__shc_line(a, r, a->step + 1)->data;
}

void hoop__shc_put(const hoop__shc_t *a, int me, const void *src, size_t n)
{
    uint64_t s = a->step + 1;
    hoop__shc_line_t *l = hoop__shc_line(a, me, s);
    const uint8_t *b = src;
    size_t head = n < HOOP__SHC_HEAD ? n : HOOP__SHC_HEAD;
    if (head > 0) memcpy(l->data, b, head);
    hoop__shc_fline_t *f = flines(l);
    for (size_t off = head, i = 0; off < n; off += HOOP__SHC_FLINE, i++) {
        size_t len = n - off < HOOP__SHC_FLINE ? n - off : HOOP__SHC_FLINE;
        memcpy(f[i].data, b + off, len);
        atomic_store_explicit(&f[i].step, s, memory_order_release);
    }
}

const uint8_t *hoop__shc_take(const hoop__shc_t *a, int q, size_t n, uint8_t *tmp)
{
    const hoop__shc_line_t *l = hoop__shc_line(a, q, a->step);
    if (n <= HOOP__SHC_HEAD) return l->data;
    memcpy(tmp, l->data, HOOP__SHC_HEAD);
    const hoop__shc_fline_t *f = flines(l);
    for (size_t off = HOOP__SHC_HEAD, i = 0; off < n; off += HOOP__SHC_FLINE, i++) {
        /* Written at this step, not at an earlier one that used this buffer. */
        if (atomic_load_explicit(&f[i].step, memory_order_acquire) != a->step) return NULL;
        size_t len = n - off < HOOP__SHC_FLINE ? n - off : HOOP__SHC_FLINE;
        memcpy(tmp + off, f[i].data, len);
    }
    return tmp;
}

/* Asks for this rank's next line in exclusive state, so that writing it later does not wait for
 * the peers' copies to be dropped (they read it two steps ago and are done with it). */
static void prefetch_own(const hoop__shc_t *a, int me)
{
    const uint8_t *nx = (const uint8_t *)hoop__shc_line(a, me, a->step + 1);
#if defined(__x86_64__) || defined(__i386__)
    for (int i = 0; i < 3; i++) __asm__ volatile("prefetchw %0" ::"m"(nx[64 * i]));
#else
    for (int i = 0; i < 3; i++) __builtin_prefetch(nx + 64 * i, 1, 3);
#endif
}

hoop_result_t hoop__shc_step(const hoop__call_t *call, hoop__shc_t *a, uint32_t flags)
{
    return hoop__shc_step_lines(call, a, flags, 0, -1);
}

hoop_result_t hoop__shc_step_lines(const hoop__call_t *call, hoop__shc_t *a, uint32_t flags,
                                   size_t n, int who)
{
    hoop_comm_t *c = call->comm;
    int me = c->rank;
    size_t k = n <= HOOP__SHC_LINES_MAX ? nflines(n) : 0;
    uint64_t s = ++a->step;
    hoop__shc_line_t *l = hoop__shc_line(a, me, s);
    fill_desc(call, l, flags);
    atomic_store_explicit(&l->step, s, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ctl_of(a, me)->sleepers, memory_order_relaxed) != 0)
        futex(&l->step, FUTEX_WAKE, INT_MAX, NULL);
    hoop_result_t rc = HOOP_OK;
    uint32_t all = flags;
    for (int i = 1; i < a->p && rc == HOOP_OK; i++) {
        int q = (me + i) % a->p;
        rc = wait_peer(call, a, q, s, who < 0 || who == q ? k : 0);
        if (rc != HOOP_OK) break;
        const hoop__shc_line_t *ql = hoop__shc_line(a, q, s);
        all &= ql->flags;
        if (ql->seq != l->seq || ql->count != l->count || ql->kind != l->kind ||
            ql->dtype != l->dtype || ql->op != l->op || ql->algo != l->algo ||
            ql->root != l->root || ql->sched != l->sched) {
            hoop__wire_hdr_t e, g;
            char msg[400];
            to_hdr(call, l, me, &e);
            to_hdr(call, ql, q, &g);
            hoop__wire_mismatch_msg(&e, &g, q, me, msg, sizeof(msg));
            hoop__comm_fail(c, HOOP_ERR_MISMATCH, "%s", msg);
            return step_failed(call, HOOP_ERR_MISMATCH);
        }
    }
    if (rc != HOOP_OK) return rc;
    prefetch_own(a, me);
    a->all_flags = all;
    a->verdict = (all & HOOP__SHC_HOST)     ? HOOP__VERDICT_HOST
                 : (all & HOOP__SHC_DEVICE) ? HOOP__VERDICT_DEVICE
                                            : HOOP__VERDICT_MIXED;
    return HOOP_OK;
}

void hoop__shc_drain(const hoop__call_t *call, hoop__shc_t *a, uint64_t s)
{
    hoop_comm_t *c = call->comm;
    double start = hoop__now();
    for (int q = 0; q < a->p; q++) {
        if (q == c->rank) continue;
        slot_ctl_t *pc = ctl_of(a, q);
        /* A peer between the two steps never waits: it finishes its writes and publishes, or
         * its process ends. */
        while (!published(a, q, s) && atomic_load(&pc->aborted) == 0 && !atomic_load(&pc->closed) &&
               hoop__now() - start < c->timeout_s) {
            if (peer_gone(a, q, 1, hoop__now())) break;
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
}
