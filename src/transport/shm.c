/*
 * Shared-memory transport, for peers on the same host.
 *
 * Every rank owns one segment (a memfd: it has no name, so nothing is left behind whatever way
 * the processes end) holding its inbound rings, one per peer. A peer maps it by opening
 * /proc/<pid>/fd/<fd>, which the kernel allows only to processes that may already read the
 * owner's memory, so no socket and no extra handshake is needed; the rendezvous store (which is
 * authenticated) carries the pid, fd and a random nonce that the mapped header must repeat.
 *
 *   segment of rank j:  header | ring control[i] for each peer i | ring data[i] for each peer i
 *   ring i -> j:        producer i writes bytes and moves head; consumer j reads and moves tail;
 *                       head and tail are monotonic byte counters on their own cache lines
 *
 * A message is a frame: a stamp word, a 40-byte header (the wire header less what the ring implies)
 * and the payload, padded to a cache line. Large payloads stream through the ring in pieces, so
 * the reader copies out while the writer is still copying in. A frame the writer puts in whole
 * (payload up to 64 KiB, room in the ring) gets its stamp last, a value only that frame's position
 * can have: the reader polls the stamp in the line it will read anyway, so a small message costs
 * one cache-line transfer instead of three (head's line, then the data's). A payload of at least
 * HOOP_SHM_CMA_BYTES (off by default) goes by single copy instead: the frame carries a descriptor
 * (address, length) and the reader pulls the bytes straight from the writer's buffer with
 * process_vm_readv, then counts the message done in the ring control, which completes the send.
 * Where the kernel refuses (no ptrace permission, no CMA), the reader says so at connect time and
 * the writer keeps to the ring.
 *
 * Waiting: a rank that finds nothing to do spins for a while (yielding its core between looks
 * when ranks outnumber cores), then sleeps on the futex word in its own header after announcing
 * it; whoever moves a head, a tail or a single-copy count checks that announcement and wakes it
 * (see publish() for the fences). Peer death is seen through a pidfd, and an aborting rank
 * writes its reason into its header for the others to read.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "transport/transport.h"

#define SEG_MAGIC 0x4d48535f504f4f48ull /* "HOOP_SHM" */
#define LINE 64
#define F_CMA 0x01     /* wire header flag: a descriptor follows, the payload stays with the sender */
#define DESC_SIZE 16
#define PIECE (64 * 1024) /* bytes copied between publications of head or tail */
#define STAMP 8           /* a frame's first word: see send_some() */
#define SHDR_SIZE 40      /* the wire header without what a ring implies (sender, communicator) */
#define CMA_PIECE (1024 * 1024)
#define REASON_LEN 448
#define CONNECT_FAREWELL 1.0 /* seconds a failed connect() waits for its peers to read why */
#define RING_WARN_BYTES (1024.0 * 1024 * 1024) /* rings on a host above this: said at WARN */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

typedef struct ring_ctl {
    _Alignas(LINE) _Atomic uint64_t head;  /* written by the producer */
    _Alignas(LINE) _Atomic uint64_t tail;  /* written by the consumer */
    _Alignas(LINE) _Atomic uint64_t cma_done; /* single-copy messages the consumer has read */
    _Atomic uint32_t cma_ok;               /* 0 not known yet, 1 the consumer can read the producer, 2 not */
} ring_ctl_t;

typedef struct seg_hdr {
    uint64_t magic, comm_id, nonce, ring_bytes;
    int32_t rank, size;
    uint64_t probe_addr; /* a word in the owner's memory holding nonce: the single-copy probe */
    _Alignas(LINE) _Atomic uint32_t doorbell; /* futex word */
    _Atomic uint32_t sleeping;                /* the owner is about to sleep on doorbell */
    uint32_t membarrier; /* the owner is registered for, and sleeps behind, a global membarrier */
    _Atomic uint32_t bell;  /* the owner sleeps in poll() on its bell pipe (see shm_arm) */
    int32_t bell_wfd;       /* the owner's fd of its bell pipe's write end, -1 if none */
    _Alignas(LINE) _Atomic uint32_t aborted;
    _Atomic uint32_t closed;                  /* the owner closed its instance */
    _Atomic uint32_t mapped_by;               /* peers that have mapped this segment */
    _Atomic uint32_t ready;                   /* the owner's settle(): all its transports connected */
    char reason[REASON_LEN];
} seg_hdr_t;

typedef struct op {
    hoop__xfer_t *x;
    size_t pos;   /* bytes of header (+ descriptor) and payload moved through the ring */
    size_t hlen;  /* SHDR_SIZE, plus DESC_SIZE for a single copy */
    size_t cma_pos;
    uint64_t ticket;
    int cma;
    uint8_t hdr[SHDR_SIZE + DESC_SIZE];
    struct op *next;
} op_t;

typedef struct queue {
    op_t *head, *tail;
} queue_t;

typedef struct peer {
    int local, lost;
    pid_t pid;
    int pidfd;
    uint8_t *map;        /* the peer's segment */
    size_t map_len;
    seg_hdr_t *sh;
    ring_ctl_t *out;     /* in the peer's segment: our ring to it */
    uint8_t *out_data;
    uint64_t out_head, out_tail_seen;
    ring_ctl_t *in;      /* in our segment: its ring to us */
    uint8_t *in_data;
    uint64_t in_tail, in_head_seen, in_tail_pub;
    queue_t sq, aq, rq;  /* sends being written, single copies awaiting the reader, receives */
    uint64_t cma_tickets;
    int cheap;           /* publish() without a fence: see there */
    int bell_fd;         /* the peer's bell pipe, opened for reading and writing (see map_peer), or -1 */
    uint64_t moved;      /* bytes written to and taken from its rings, read by single copy */
} peer_t;

struct hoop__tp {
    hoop__tp_params_t p;
    int memfd;
    uint8_t *seg;
    size_t seg_len, ring_bytes, data_off;
    seg_hdr_t *sh;
    ring_ctl_t *ctl;
    uint64_t nonce;
    _Alignas(8) uint64_t probe;  /* read by peers through process_vm_readv */
    peer_t *peers;
    op_t *free_ops;
    hoop_result_t failed;
    int nlocal;
    double spin_s;        /* how long progress() spins before it sleeps */
    int oversub;          /* more local ranks than cores: yield while spinning */
    double next_check;    /* next liveness check while spinning */
    unsigned idle_polls;  /* progress(0) calls that found nothing */
    struct pollfd *pfds;
    _Atomic int woken;    /* wake() came since progress() last looked: do not sleep */
    int bell[2];          /* pipe that peers write a byte to while this rank is armed */
    int epfd;             /* epoll set of the bell and every peer's pidfd: shm_wait_fd() */
    int armed;            /* shm_arm() announced a sleep that progress() has not ended yet */
};

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

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
    if (pe->cheap) atomic_store_explicit(counter, v, memory_order_release);
    else atomic_store(counter, v);
}

static void force_wake(const peer_t *pe)
{
    seg_hdr_t *sh = pe->sh;
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
    if (atomic_load(&pe->sh->sleeping)) force_wake(pe);
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
    if (q->tail) q->tail->next = o;
    else q->head = o;
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

static void peer_fail(hoop__tp_t *tp, int j, hoop_result_t code, const char *msg)
{
    peer_t *pe = &tp->peers[j];
    if (pe->lost) return;
    pe->lost = 1;
    fail_q(tp, &pe->sq, code);
    fail_q(tp, &pe->aq, code);
    fail_q(tp, &pe->rq, code);
    tp->p.report(tp->p.report_ctx, code, j, msg);
}

/* ---- set-up ---- */

static hoop_result_t shm_listen(const hoop__tp_params_t *p, hoop__tp_t **out, char *addr,
                                size_t addrlen)
{
    hoop__tp_t *tp = calloc(1, sizeof(*tp));
    if (tp == NULL) return HOOP_ERR_NO_MEMORY;
    tp->p = *p;
    tp->memfd = -1;
    tp->peers = calloc((size_t)p->size, sizeof(peer_t));
    tp->pfds = calloc((size_t)p->size, sizeof(struct pollfd));
    if (tp->peers == NULL || tp->pfds == NULL) {
        free(tp->peers);
        free(tp->pfds);
        free(tp);
        return HOOP_ERR_NO_MEMORY;
    }
    for (int j = 0; j < p->size; j++) tp->peers[j].pidfd = tp->peers[j].bell_fd = -1;
    if (pipe2(tp->bell, O_NONBLOCK | O_CLOEXEC) != 0) tp->bell[0] = tp->bell[1] = -1;
    /* A rank asleep in another transport's poll() watches this one fd: it turns readable when the
     * bell rings and when a peer's process exits (map_peer adds the pidfds), so that a death wakes
     * it as a message would. Without epoll, only the bell. */
    tp->epfd = tp->bell[0] >= 0 ? epoll_create1(EPOLL_CLOEXEC) : -1;
    struct epoll_event bev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    if (tp->epfd >= 0 && epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->bell[0], &bev) != 0) {
        close(tp->epfd);
        tp->epfd = -1;
    }
    *out = tp;

    long page = sysconf(_SC_PAGESIZE);
    tp->ring_bytes = p->cfg->shm_ring_bytes;
    size_t ctl_off = round_up(sizeof(seg_hdr_t), LINE);
    tp->data_off = round_up(ctl_off + (size_t)p->size * sizeof(ring_ctl_t), (size_t)page);
    tp->seg_len = tp->data_off + (size_t)p->size * tp->ring_bytes;
    char msg[400];
    tp->memfd = memfd_create("hoop-shm", MFD_CLOEXEC);
    if (tp->memfd < 0 || ftruncate(tp->memfd, (off_t)tp->seg_len) != 0) {
        char why[256];
        snprintf(msg, sizeof(msg), "shm: cannot create a %zu-byte segment: %s", tp->seg_len,
                 hoop__fd_error(errno, why, sizeof(why)));
        p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, msg);
        return HOOP_ERR_SYSTEM;
    }
    void *m = mmap(NULL, tp->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, tp->memfd, 0);
    if (m == MAP_FAILED) {
        snprintf(msg, sizeof(msg), "shm: cannot map the segment: %s", strerror(errno));
        p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, msg);
        return HOOP_ERR_SYSTEM;
    }
    tp->seg = m;
    tp->sh = m;
    tp->ctl = (ring_ctl_t *)(tp->seg + ctl_off);
    if (getrandom(&tp->nonce, sizeof(tp->nonce), 0) != sizeof(tp->nonce))
        tp->nonce = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)tp;
    tp->probe = tp->nonce;
    tp->sh->magic = SEG_MAGIC;
    tp->sh->comm_id = p->comm_id;
    tp->sh->nonce = tp->nonce;
    long mb = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    tp->sh->membarrier = mb > 0 && (mb & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
                         syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
    tp->sh->ring_bytes = tp->ring_bytes;
    tp->sh->bell_wfd = tp->bell[1];
    tp->sh->rank = p->rank;
    tp->sh->size = p->size;
    tp->sh->probe_addr = (uint64_t)(uintptr_t)&tp->probe;
    snprintf(addr, addrlen, "%d:%d:%016" PRIx64 ":%zu", (int)getpid(), tp->memfd, tp->nonce,
             tp->seg_len);
    return HOOP_OK;
}

static int cpus_available(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int process_gone(pid_t pid);

/* Reports a failure of connect(), and writes it where the peers look (see connect_failed). */
static void connect_report(hoop__tp_t *tp, hoop_result_t code, int peer, const char *msg)
{
    size_t n = strnlen(msg, sizeof(tp->sh->reason) - 1);
    memcpy(tp->sh->reason, msg, n);
    tp->sh->reason[n] = '\0';
    tp->p.report(tp->p.report_ctx, code, peer, msg);
}

/* connect() failed: mark the segment aborted (the reason is in it already), so that peers fail
 * with it as soon as they map it or look at it again, and keep it open to them until every local
 * peer has mapped it (or CONNECT_FAREWELL seconds): a peer that finds it gone could only say that
 * this rank vanished. */
static hoop_result_t connect_failed(hoop__tp_t *tp, hoop_result_t rc, const char *const *addrs)
{
    tp->failed = rc;
    if (atomic_load(&tp->sh->aborted) != 0) return rc;
    if (tp->sh->reason[0] == '\0') snprintf(tp->sh->reason, sizeof(tp->sh->reason), "%s", hoop_error_string(rc));
    atomic_store(&tp->sh->aborted, (uint32_t)rc);
    uint32_t want = 0;
    for (int j = 0; addrs != NULL && j < tp->p.size; j++) want += j != tp->p.rank && addrs[j] != NULL;
    for (int j = 0; j < tp->p.size; j++)
        if (tp->peers[j].local) force_wake(&tp->peers[j]);
    double end = hoop__now() + CONNECT_FAREWELL;
    while (atomic_load(&tp->sh->mapped_by) < want && hoop__now() < end) poll(NULL, 0, 1);
    return rc;
}

/* While connecting: peer j (mapped) marked its segment aborted, typically because its own
 * connect() failed. Reports it with its reason; returns the code, or HOOP_OK if it did not. */
static hoop_result_t connect_peer_aborted(hoop__tp_t *tp, int j)
{
    uint32_t code = atomic_load_explicit(&tp->peers[j].sh->aborted, memory_order_acquire);
    if (code == 0) return HOOP_OK;
    char msg[REASON_LEN + 64], why[REASON_LEN];
    memcpy(why, tp->peers[j].sh->reason, sizeof(why));
    why[sizeof(why) - 1] = '\0';
    snprintf(msg, sizeof(msg), "rank %d aborted: %s", j, why);
    hoop_result_t rc = code == HOOP_ERR_MISMATCH ? HOOP_ERR_MISMATCH : HOOP_ERR_ABORTED;
    connect_report(tp, rc, j, msg);
    return rc;
}

static hoop_result_t map_peer(hoop__tp_t *tp, int j, const char *addr)
{
    peer_t *pe = &tp->peers[j];
    char msg[400], path[64];
    int pid, fd;
    uint64_t nonce;
    size_t len;
    if (sscanf(addr, "%d:%d:%" SCNx64 ":%zu", &pid, &fd, &nonce, &len) != 4 || len != tp->seg_len) {
        snprintf(msg, sizeof(msg), "shm: rank %d published a bad address \"%s\"", j, addr);
        connect_report(tp, HOOP_ERR_INTERNAL, j, msg);
        return HOOP_ERR_INTERNAL;
    }
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
    int mfd = open(path, O_RDWR | O_CLOEXEC);
    if (mfd < 0 && errno == ENOENT && process_gone(pid)) {
        /* Another user's process gives EACCES; no such fd means the rank published its address
         * and then exited (or is a zombie already). */
        snprintf(msg, sizeof(msg), "lost rank %d while connecting (its process %d exited)", j, pid);
        connect_report(tp, HOOP_ERR_PEER_LOST, j, msg);
        return HOOP_ERR_PEER_LOST;
    }
    if (mfd < 0 && HOOP_FD_EXHAUSTED(errno)) {
        char why[256];
        snprintf(msg, sizeof(msg), "shm: cannot open rank %d's segment: %s", j,
                 hoop__fd_error(errno, why, sizeof(why)));
        connect_report(tp, HOOP_ERR_SYSTEM, j, msg);
        return HOOP_ERR_SYSTEM;
    }
    if (mfd < 0) {
        snprintf(msg, sizeof(msg), "shm: cannot open rank %d's segment (%s: %s); ranks on one "
                 "host must run as the same user, or set HOOP_TRANSPORT=tcp", j, path,
                 strerror(errno));
        connect_report(tp, HOOP_ERR_SYSTEM, j, msg);
        return HOOP_ERR_SYSTEM;
    }
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    close(mfd);
    if (m == MAP_FAILED) {
        snprintf(msg, sizeof(msg), "shm: cannot map rank %d's segment: %s", j, strerror(errno));
        connect_report(tp, HOOP_ERR_SYSTEM, j, msg);
        return HOOP_ERR_SYSTEM;
    }
    pe->map = m;
    pe->map_len = len;
    pe->sh = m;
    pe->cheap = tp->sh->membarrier && pe->sh->membarrier;
    if (pe->sh->magic != SEG_MAGIC || pe->sh->nonce != nonce || pe->sh->comm_id != tp->p.comm_id ||
        pe->sh->rank != j || pe->sh->size != tp->p.size || pe->sh->ring_bytes != tp->ring_bytes) {
        snprintf(msg, sizeof(msg), "shm: the segment at %s is not rank %d's of this communicator",
                 path, j);
        connect_report(tp, HOOP_ERR_INTERNAL, j, msg);
        return HOOP_ERR_INTERNAL;
    }
    atomic_fetch_add(&pe->sh->mapped_by, 1);
    size_t ctl_off = (size_t)((uint8_t *)tp->ctl - tp->seg);
    pe->out = (ring_ctl_t *)(pe->map + ctl_off) + tp->p.rank;
    pe->out_data = pe->map + tp->data_off + (size_t)tp->p.rank * tp->ring_bytes;
    pe->in = &tp->ctl[j];
    pe->in_data = tp->seg + tp->data_off + (size_t)j * tp->ring_bytes;
    /* Fault the two rings of this pair in now: a page fault costs tens of microseconds on a VM,
     * and a ring touched lazily makes a collective's first megabytes through it several times
     * slower. Both processes populate their own page tables; older kernels just skip it. */
    (void)madvise(pe->out_data, tp->ring_bytes, MADV_POPULATE_WRITE);
    (void)madvise(pe->in_data, tp->ring_bytes, MADV_POPULATE_WRITE);
    /* And into the cache: the kernel zeroed those pages behind the cache, so every message of a
     * ring's first lap would otherwise wait for memory (8-byte all-reduce: 0.8-1.0 us in the
     * first lap, 0.4-0.6 after). Each rank warms the rings it reads; nobody writes them yet. */
    memset(pe->in_data, 0, tp->ring_bytes);
    pe->pid = pid;
    pe->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    pe->local = 1;
    /* One-shot: an exit is reported once, to the disarm() after it; check_peers() polls the
     * pidfd itself from then on. */
    struct epoll_event pev = {.events = EPOLLIN | EPOLLONESHOT, .data.u32 = (uint32_t)j};
    if (tp->epfd >= 0 && pe->pidfd >= 0) (void)epoll_ctl(tp->epfd, EPOLL_CTL_ADD, pe->pidfd, &pev);
    if (pe->sh->bell_wfd >= 0) {
        /* A pipe, unlike an eventfd, can be opened again through /proc. Read-write, so that
         * this descriptor is a reader too: the pipe never loses its last reader while we hold
         * it, and a write to the bell of a peer that died cannot raise SIGPIPE (it fills the
         * pipe and then fails with EAGAIN, which force_wake ignores). */
        char bell[64];
        snprintf(bell, sizeof(bell), "/proc/%d/fd/%d", (int)pid, (int)pe->sh->bell_wfd);
        pe->bell_fd = open(bell, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    }

    /* Single copy: can we read the peer's own memory? Tell it through our ring control. */
    uint64_t got = 0;
    struct iovec l = {.iov_base = &got, .iov_len = sizeof(got)};
    struct iovec r = {.iov_base = (void *)(uintptr_t)pe->sh->probe_addr, .iov_len = sizeof(got)};
    int ok = 0;
    if (tp->p.cfg->shm_cma_bytes > 0) {
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        ok = n == (ssize_t)sizeof(got) && got == nonce;
        if (!ok)
            HOOP_INFO(tp->p.log, "shm: single copy from rank %d unavailable (%s): its messages "
                      "come through the ring", j, n < 0 ? strerror(errno) : "probe mismatch");
    }
    atomic_store(&pe->in->cma_ok, ok ? 1u : 2u);
    return HOOP_OK;
}

/* Bytes as "N MiB" or "N.N GiB". */
static const char *human(double b, char *buf, size_t n)
{
    if (b >= (double)(1ull << 30)) snprintf(buf, n, "%.1f GiB", b / (double)(1ull << 30));
    else snprintf(buf, n, "%.0f MiB", b / (double)(1ull << 20));
    return buf;
}

/* The memory the rings take, said before connect() faults them all in (which takes seconds per
 * GiB): each of the L ranks on this host holds L - 1 inbound rings in its segment, so L (L - 1)
 * rings in all. At WARN, by the host's lowest rank only, when that passes RING_WARN_BYTES. */
static void say_ring_memory(const hoop__tp_t *tp, const char *const *addrs, int nlocal)
{
    if (nlocal == 0) return;
    double ring = (double)tp->ring_bytes, mine = ring * nlocal, host = mine * (nlocal + 1);
    char r[32], m[32], h[32];
    int lowest = 1;
    for (int j = 0; j < tp->p.rank; j++) lowest &= addrs[j] == NULL;
    int level = host > RING_WARN_BYTES && lowest ? HOOP_LOG_WARN : HOOP_LOG_INFO;
    HOOP_LOG_AT(tp->p.log, level, "shm: %s rings (HOOP_SHM_RING_BYTES), one per peer and direction: "
                "%s in this rank's %d inbound rings, %s on this host for its %d ranks (L(L-1) "
                "rings), all written at connect", human(ring, r, sizeof(r)), human(mine, m, sizeof(m)),
                nlocal, human(host, h, sizeof(h)), nlocal + 1);
}

static hoop_result_t shm_connect(hoop__tp_t *tp, const char *const *addrs, double deadline)
{
    if (tp->failed) return tp->failed;
    int expect = 0;
    for (int j = 0; j < tp->p.size; j++) expect += j != tp->p.rank && addrs[j] != NULL;
    say_ring_memory(tp, addrs, expect);
    char list[160] = "";
    size_t o = 0;
    for (int j = 0; j < tp->p.size; j++) {
        if (j == tp->p.rank || addrs[j] == NULL) continue;
        hoop_result_t rc = map_peer(tp, j, addrs[j]);
        if (rc == HOOP_OK) tp->nlocal++;
        if (rc == HOOP_OK) rc = connect_peer_aborted(tp, j);
        if (rc != HOOP_OK) return connect_failed(tp, rc, addrs);
        if (o + 12 < sizeof(list)) o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%d", o ? "," : "", j);
    }
    /* Connected means both ways: our segment must outlive every peer's open of it, or a rank that
     * connects, finishes and closes at once leaves a slower peer nothing to map. A peer's
     * map_peer() ends by setting cma_ok in its control of our ring to it. */
    for (int j = 0; j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        if (!pe->local) continue;
        while (atomic_load_explicit(&pe->out->cma_ok, memory_order_acquire) == 0) {
            char msg[160];
            hoop_result_t arc = connect_peer_aborted(tp, j);
            if (arc != HOOP_OK) return connect_failed(tp, arc, addrs);
            struct pollfd pf = {.fd = pe->pidfd, .events = POLLIN};
            /* It may have mapped ours and gone since the load above: look once more. */
            if (pe->pidfd >= 0 && poll(&pf, 1, 1) > 0 &&
                atomic_load_explicit(&pe->out->cma_ok, memory_order_acquire) == 0) {
                snprintf(msg, sizeof(msg), "shm: rank %d exited before it mapped this rank's "
                         "segment", j);
                connect_report(tp, HOOP_ERR_PEER_LOST, j, msg);
                return connect_failed(tp, HOOP_ERR_PEER_LOST, addrs);
            }
            if (pe->pidfd < 0) poll(NULL, 0, 1);
            if (hoop__now() >= deadline) {
                snprintf(msg, sizeof(msg), "shm: timed out waiting for rank %d to map this "
                         "rank's segment", j);
                connect_report(tp, HOOP_ERR_TIMEOUT, j, msg);
                return connect_failed(tp, HOOP_ERR_TIMEOUT, addrs);
            }
        }
    }
    /* With more local ranks than cores a pure spin steals the core the producer needs, and a
     * futex sleep costs a trip through the scheduler at every step of a collective: yield the
     * core while spinning, so the peer runs at once and we are back on the next tick. */
    tp->oversub = tp->nlocal + 1 > cpus_available();
    tp->spin_s = tp->p.cfg->shm_spin_us * 1e-6;
    if (tp->nlocal > 0)
        HOOP_INFO(tp->p.log, "shm: mapped the segments of rank(s) %s (%zu KiB rings, single copy from "
                  "%zu B, spin %.0f us)", list, tp->ring_bytes >> 10, tp->p.cfg->shm_cma_bytes,
                  tp->spin_s * 1e6);
    return HOOP_OK;
}

/* Every peer has mapped this segment (connect() waited for it), so a flag in it is enough: raise
 * ours, then wait for each peer's, or its abort, exit or close. */
static hoop_result_t shm_settle(hoop__tp_t *tp, double deadline)
{
    if (tp->failed) return tp->failed;
    atomic_store(&tp->sh->ready, 1);
    char msg[160];
    for (int j = 0; j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        if (!pe->local) continue;
        while (!atomic_load_explicit(&pe->sh->ready, memory_order_acquire)) {
            hoop_result_t rc = connect_peer_aborted(tp, j);
            if (rc != HOOP_OK) return connect_failed(tp, rc, NULL);
            struct pollfd pf = {.fd = pe->pidfd, .events = POLLIN};
            int gone = atomic_load(&pe->sh->closed) ||
                       (pe->pidfd >= 0 ? poll(&pf, 1, 1) > 0 : (poll(NULL, 0, 1), process_gone(pe->pid)));
            if (gone && !atomic_load(&pe->sh->ready) && !atomic_load(&pe->sh->aborted)) {
                snprintf(msg, sizeof(msg), "lost rank %d while connecting (its process %d %s)", j,
                         (int)pe->pid, atomic_load(&pe->sh->closed) ? "closed its connections" : "exited");
                connect_report(tp, HOOP_ERR_PEER_LOST, j, msg);
                return connect_failed(tp, HOOP_ERR_PEER_LOST, NULL);
            }
            if (hoop__now() >= deadline) {
                snprintf(msg, sizeof(msg), "shm: timed out waiting for rank %d to finish connecting", j);
                connect_report(tp, HOOP_ERR_TIMEOUT, j, msg);
                return connect_failed(tp, HOOP_ERR_TIMEOUT, NULL);
            }
        }
    }
    return HOOP_OK;
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

static void shm_post(hoop__tp_t *tp, hoop__xfer_t *x)
{
    x->done = 0;
    x->status = HOOP_OK;
    x->hdr_ok = 0;
    x->parts_left = 1;
    peer_t *pe = x->peer >= 0 && x->peer < tp->p.size ? &tp->peers[x->peer] : NULL;
    if (tp->failed || pe == NULL || !pe->local || pe->lost) {
        finish(x, tp->failed ? tp->failed : HOOP_ERR_PEER_LOST);
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
    if (x->dir == HOOP_XFER_SEND) {
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
    return (int64_t)(pe->in_head_seen - pe->in_tail) > 0 ? (size_t)(pe->in_head_seen - pe->in_tail) : 0;
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

/* Peer j aborted: fail it with its own reason. Returns 1 if so. */
static int fail_if_aborted(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    if (!atomic_load_explicit(&pe->sh->aborted, memory_order_acquire)) return 0;
    char msg[REASON_LEN + 64], why[REASON_LEN];
    memcpy(why, pe->sh->reason, sizeof(why));
    why[sizeof(why) - 1] = '\0';
    snprintf(msg, sizeof(msg), "rank %d aborted: %s", j, why);
    /* A disagreement stays one on every rank; any other cause is an abort here. */
    uint32_t code = atomic_load_explicit(&pe->sh->aborted, memory_order_relaxed);
    peer_fail(tp, j, code == HOOP_ERR_MISMATCH ? HOOP_ERR_MISMATCH : HOOP_ERR_ABORTED, msg);
    return 1;
}

/* recv_some() without publishing the tail. Frames: an 8-byte stamp, the header (and a single copy's
 * descriptor), the payload, padding to 8 bytes. */
static int recv_frames(hoop__tp_t *tp, int j)
{
    peer_t *pe = &tp->peers[j];
    size_t rb = tp->ring_bytes;
    int moved = 0;
    while (pe->rq.head != NULL) {
        op_t *o = pe->rq.head;
        hoop__xfer_t *x = o->x;
        size_t avail = (int64_t)(pe->in_head_seen - pe->in_tail) > 0
                           ? (size_t)(pe->in_head_seen - pe->in_tail) : 0;
        int whole = 0;
        if (o->pos == 0 && avail < STAMP + SHDR_SIZE) {
            /* A frame written whole shows by its stamp, in the line the reader is about to read
             * anyway: look there before head's line. */
            if (atomic_load_explicit(stamp_at(pe->in_data, rb, pe->in_tail), memory_order_acquire) ==
                stamp_of(pe->in_tail, tp->nonce))
                whole = 1;
            else if ((avail = in_avail(pe)) < STAMP + SHDR_SIZE)
                break;
        } else if (avail == 0 || (o->pos < STAMP + o->hlen && avail < STAMP + o->hlen - o->pos)) {
            avail = in_avail(pe);
        }
        if (o->pos == 0) {
            ring_read(pe->in_data, rb, pe->in_tail + STAMP, o->hdr, SHDR_SIZE);
            shdr_decode(o->hdr, &x->got);
            x->got.src = (uint32_t)j;
            x->got.comm_id = tp->p.comm_id;
            hoop__wire_hdr_t want = x->hdr;
            want.payload_len = x->len;
            hoop_result_t rc = hoop__wire_match(&want, &x->got);
            if (rc != HOOP_OK || (x->got.flags & ~F_CMA) != 0) {
                char msg[400];
                hoop__wire_mismatch_msg(&want, &x->got, j, tp->p.rank, msg, sizeof(msg));
                peer_fail(tp, j, HOOP_ERR_MISMATCH, msg);
                return 1;
            }
            if (x->got.flags & F_CMA) {
                o->cma = 1;
                o->hlen += DESC_SIZE;
            }
            if (whole) {
                uint64_t end = pe->in_tail + round_up(STAMP + o->hlen + (o->cma ? 0 : x->len), LINE);
                if ((int64_t)(end - pe->in_head_seen) > 0) pe->in_head_seen = end;
                avail = (size_t)(pe->in_head_seen - pe->in_tail);
            }
            consumed(pe, STAMP + SHDR_SIZE);
            avail -= STAMP + SHDR_SIZE;
            o->pos = STAMP + SHDR_SIZE;
            moved = 1;
        }
        if (o->cma) {
            if (o->pos < STAMP + o->hlen) {
                if (avail < DESC_SIZE && (avail = in_avail(pe)) < DESC_SIZE) break;
                ring_read(pe->in_data, rb, pe->in_tail, o->hdr + SHDR_SIZE, DESC_SIZE);
                consumed(pe, DESC_SIZE);
                avail -= DESC_SIZE;
                o->pos = STAMP + o->hlen;
                uint64_t l;
                memcpy(&l, o->hdr + SHDR_SIZE + 8, 8);
                if (l != x->len) {
                    peer_fail(tp, j, HOOP_ERR_MISMATCH, "shm: a single-copy descriptor does not "
                              "match its header");
                    return 1;
                }
            }
            uint64_t a;
            memcpy(&a, o->hdr + SHDR_SIZE, 8);
            /* A closed sender dropped this send and may have freed its buffer. */
            if (atomic_load(&pe->sh->closed)) {
                char msg[96];
                snprintf(msg, sizeof(msg), "lost rank %d (it closed its connections)", j);
                peer_fail(tp, j, HOOP_ERR_PEER_LOST, msg);
                return 1;
            }
            while (o->cma_pos < x->len) {
                size_t n = x->len - o->cma_pos < CMA_PIECE ? x->len - o->cma_pos : CMA_PIECE;
                struct iovec l = {.iov_base = (uint8_t *)x->buf + o->cma_pos, .iov_len = n};
                struct iovec r = {.iov_base = (void *)(uintptr_t)(a + o->cma_pos), .iov_len = n};
                ssize_t got = process_vm_readv(pe->pid, &l, 1, &r, 1, 0);
                /* A writer that aborted may have returned and let go of the buffer. */
                if (got <= 0 && fail_if_aborted(tp, j)) return 1;
                if (got <= 0) {
                    int e = got < 0 ? errno : EIO;
                    char msg[200];
                    snprintf(msg, sizeof(msg), "shm: single-copy read from rank %d failed: %s", j,
                             strerror(e));
                    peer_fail(tp, j, e == ESRCH ? HOOP_ERR_PEER_LOST : HOOP_ERR_SYSTEM, msg);
                    return 1;
                }
                o->cma_pos += (size_t)got;
                pe->moved += (uint64_t)got;
                moved = 1;
            }
            /* An aborting writer raises its flag before its call returns and the buffer is the
             * caller's again: a copy that may have raced with that is not to be trusted. */
            if (fail_if_aborted(tp, j)) return 1;
            if (o->cma_pos == x->len) {
                o->cma_pos = x->len + 1; /* counted once, even if the padding waits */
                atomic_fetch_add(&pe->in->cma_done, 1);
                notify(pe);
            }
        } else {
            size_t total = STAMP + o->hlen + x->len;
            while (o->pos < total) {
                if (avail == 0 && (avail = in_avail(pe)) == 0) break;
                size_t done = o->pos - STAMP - o->hlen, n = x->len - done;
                if (n > avail) n = avail;
                if (n > PIECE) n = PIECE;
                ring_read(pe->in_data, rb, pe->in_tail, (uint8_t *)x->buf + done, n);
                consumed(pe, n);
                avail -= n;
                o->pos += n;
                moved = 1;
            }
            if (o->pos < total) break;
        }
        size_t framed = round_up(STAMP + o->hlen + (o->cma ? 0 : x->len), LINE);
        if (o->pos < framed) {
            size_t pad = framed - o->pos;
            if (avail < pad && (avail = in_avail(pe)) < pad) break;
            consumed(pe, pad);
            o->pos = framed;
        }
        q_pop(&pe->rq);
        finish(x, HOOP_OK);
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
    if (atomic_load(&pe->sh->aborted) != 0) return 2;
    if (atomic_load(&pe->sh->closed) && pending(pe)) return 2;
    if (pe->rq.head != NULL && (atomic_load(stamp_at(pe->in_data, tp->ring_bytes, pe->in_tail)) ==
                                    stamp_of(pe->in_tail, tp->nonce) ||
                                (int64_t)(atomic_load(&pe->in->head) - pe->in_tail) > 0))
        return 1;
    if (pe->sq.head != NULL && atomic_load(&pe->out->tail) != pe->out_tail_seen) return 1;
    if (pe->aq.head != NULL && atomic_load(&pe->out->cma_done) >= pe->aq.head->ticket) return 1;
    return 0;
}

/* Without a pidfd (kernels before 5.3, valgrind): is the process gone, or a zombie? */
static int process_gone(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the state follows the command name */
    return p != NULL && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
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
    int n = 0, failed = 0;
    char exited[64];
    for (int j = 0; j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        if (!pe->local || pe->lost) continue;
        if (fail_if_aborted(tp, j)) {
            failed = 1;
        } else if (atomic_load_explicit(&pe->sh->closed, memory_order_acquire)) {
            if (pending(pe)) failed |= lose(tp, j, "it closed its connections", 0);
        } else if (pe->pidfd >= 0) {
            tp->pfds[n].fd = pe->pidfd;
            tp->pfds[n].events = POLLIN;
            tp->pfds[n].revents = 0;
            n++;
        } else if (pending(pe) && process_gone(pe->pid)) {
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
        if (pe->local && !pe->lost) {
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
        for (int i = 0; i < n; i++) exited |= ev[i].data.u32 != UINT32_MAX;
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
        struct timespec ts = {.tv_sec = timeout_ms / 1000, .tv_nsec = (timeout_ms % 1000) * 1000000L};
        futex(&tp->sh->doorbell, FUTEX_WAIT, seen, &ts);
    }
    atomic_store(&tp->sh->sleeping, 0);
    move_all(tp);
    check_peers(tp);
}

static uint64_t shm_moved(hoop__tp_t *tp, int peer)
{
    return peer >= 0 && peer < tp->p.size ? tp->peers[peer].moved : 0;
}

static void shm_wake(hoop__tp_t *tp)
{
    atomic_store(&tp->woken, 1);
    if (tp->sh != NULL) {
        atomic_fetch_add(&tp->sh->doorbell, 1);
        futex(&tp->sh->doorbell, FUTEX_WAKE, INT_MAX, NULL);
    }
}

static void shm_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason)
{
    if (tp->failed) return;
    tp->failed = code;
    if (tp->sh != NULL && !atomic_load(&tp->sh->aborted)) {
        snprintf(tp->sh->reason, sizeof(tp->sh->reason), "%s",
                 reason != NULL && reason[0] ? reason : hoop_error_string(code));
        atomic_store(&tp->sh->aborted, (uint32_t)code);
    }
    for (int j = 0; j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        if (!pe->local) continue;
        fail_q(tp, &pe->sq, code);
        fail_q(tp, &pe->aq, code);
        fail_q(tp, &pe->rq, code);
        pe->lost = 1;
        force_wake(pe);
    }
}

static void shm_close(hoop__tp_t *tp)
{
    if (tp == NULL) return;
    /* Peers waiting on this rank learn it now rather than when the process exits. */
    if (tp->sh != NULL) {
        atomic_store(&tp->sh->closed, 1);
        for (int j = 0; j < tp->p.size; j++)
            if (tp->peers[j].local) force_wake(&tp->peers[j]);
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
    free(tp);
}

const hoop__transport_ops_t hoop__shm_transport = {
    .name = "shm",
    .listen = shm_listen,
    .connect = shm_connect,
    .post = shm_post,
    .progress = shm_progress,
    .wake = shm_wake,
    .abort = shm_abort,
    .close = shm_close,
    .wait_fd = shm_wait_fd,
    .arm = shm_arm,
    .moved = shm_moved,
    .settle = shm_settle,
};
