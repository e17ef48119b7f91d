/* Shared-memory transport: listening, mapping the peers' segments, connecting and settling. How it
 * works: shm.h. */
#define HOOP__LOG_SUBSYS HOOP__SUB_TRANSPORT /* of its INFO and TRACE lines (base/log.h) */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/membarrier.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/tree.h"
#include "transport/transport.h"

#include "transport/shm.h"

hoop_result_t hoop__shm_listen(const hoop__tp_params_t *p, hoop__tp_t **out, char *addr,
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
    tp->parent = -1;
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
                         syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) ==
                             0;
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

static int tree_peer(const hoop__tp_t *tp, int j);

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
    if (tp->sh->reason[0] == '\0')
        snprintf(tp->sh->reason, sizeof(tp->sh->reason), "%s", hoop__error_string(rc));
    atomic_store(&tp->sh->aborted, (uint32_t)rc);
    uint32_t want = 0;
    for (int j = 0; addrs != NULL && j < tp->p.size; j++)
        want += j != tp->p.rank && addrs[j] != NULL && (!tp->lazy || tree_peer(tp, j));
    for (int j = 0; j < tp->p.size; j++)
        if (tp->peers[j].sh != NULL) hoop__shm_force_wake(&tp->peers[j]);
    /* The peers' pidfds only watch for deaths, which a failed transport no longer needs: given
     * back now, so that where descriptors ran out the other transports can still connect and
     * tell their peers why (mux_connect), rather than leave them waiting out the timeout. */
    for (int j = 0; j < tp->p.size; j++)
        if (tp->peers[j].pidfd >= 0) {
            close(tp->peers[j].pidfd);
            tp->peers[j].pidfd = -1;
        }
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

/* Maps peer j's segment and opens what watches and wakes it. An error's sentence goes to msg
 * (n bytes); the caller reports it. HOOP_ERR_PEER_LOST where the segment is gone: its process
 * exited, or, at a lazy first transfer (the peer may have closed its instance since), no longer
 * there or no longer the one published. */
static hoop_result_t map_peer(hoop__tp_t *tp, int j, const char *addr, int lazy, char *msg,
                              size_t n)
{
    peer_t *pe = &tp->peers[j];
    char path[64];
    int pid, fd;
    uint64_t nonce;
    size_t len;
    if (sscanf(addr, "%d:%d:%" SCNx64 ":%zu", &pid, &fd, &nonce, &len) != 4 || len != tp->seg_len) {
        snprintf(msg, n, "shm: rank %d published a bad address \"%s\"", j, addr);
        return HOOP_ERR_INTERNAL;
    }
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
    int mfd = open(path, O_RDWR | O_CLOEXEC);
    if (mfd < 0 && errno == ENOENT && (lazy || hoop__process_gone(pid))) {
        /* Another user's process gives EACCES; no such fd means the rank published its address
         * and then exited (or is a zombie already). */
        snprintf(msg, n, "lost rank %d while connecting (its process %d exited)", j, pid);
        return HOOP_ERR_PEER_LOST;
    }
    if (mfd < 0 && HOOP__FD_EXHAUSTED(errno)) {
        char why[256];
        snprintf(msg, n, "shm: cannot open rank %d's segment: %s", j,
                 hoop__fd_error(errno, why, sizeof(why)));
        return HOOP_ERR_SYSTEM;
    }
    if (mfd < 0) {
        snprintf(msg, n,
                 "shm: cannot open rank %d's segment (%s: %s); ranks on one "
                 "host must run as the same user, or set HOOP_TRANSPORT=tcp",
                 j, path, strerror(errno));
        return HOOP_ERR_SYSTEM;
    }
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    close(mfd);
    if (m == MAP_FAILED) {
        snprintf(msg, n, "shm: cannot map rank %d's segment: %s", j, strerror(errno));
        return HOOP_ERR_SYSTEM;
    }
    pe->map = m;
    pe->map_len = len;
    pe->sh = m;
    pe->cheap = tp->sh->membarrier && pe->sh->membarrier;
    if (pe->sh->magic != SEG_MAGIC || pe->sh->nonce != nonce || pe->sh->comm_id != tp->p.comm_id ||
        pe->sh->rank != j || pe->sh->size != tp->p.size || pe->sh->ring_bytes != tp->ring_bytes) {
        snprintf(msg, n, "shm: the segment at %s is not rank %d's of this communicator", path, j);
        munmap(m, len);
        pe->map = NULL;
        pe->sh = NULL;
        return lazy ? HOOP_ERR_PEER_LOST : HOOP_ERR_INTERNAL;
    }
    atomic_fetch_add(&pe->sh->mapped_by, 1);
    size_t ctl_off = (size_t)((uint8_t *)tp->ctl - tp->seg);
    pe->out = (ring_ctl_t *)(pe->map + ctl_off) + tp->p.rank;
    pe->out_data = pe->map + tp->data_off + (size_t)tp->p.rank * tp->ring_bytes;
    /* Fault the two rings of this pair in now: a page fault is slow on a VM, and a ring touched
     * lazily makes a collective's first megabytes through it slower. Both processes populate
     * their own page tables; older kernels just skip it. */
    if (tp->prefault) {
        (void)madvise(pe->out_data, tp->ring_bytes, MADV_POPULATE_WRITE);
        (void)madvise(pe->in_data, tp->ring_bytes, MADV_POPULATE_WRITE);
        /* And into the cache: the kernel zeroed those pages behind the cache, so every message
         * of a ring's first lap would otherwise wait for memory (docs/performance.md, "What
         * changed the figures"). Each rank warms the rings it reads; nobody writes them yet. */
        memset(pe->in_data, 0, tp->ring_bytes);
    }
    pe->pid = pid;
    pe->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
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
            HOOP__INFO(tp->p.log,
                       "shm: single copy from rank %d unavailable (%s): its messages "
                       "come through the ring",
                       j, n < 0 ? strerror(errno) : "probe mismatch");
    }
    atomic_store(&pe->in->cma_ok, ok ? 1u : 2u);
    return HOOP_OK;
}

/* Bytes as "N MiB" or "N.N GiB". */
static const char *human(double b, char *buf, size_t n)
{
    if (b >= (double)(1ull << 30))
        snprintf(buf, n, "%.1f GiB", b / (double)(1ull << 30));
    else
        snprintf(buf, n, "%.0f MiB", b / (double)(1ull << 20));
    return buf;
}

/* The memory the rings take, said before connect() faults them in (which takes seconds per GiB)
 * or leaves each page to its first use: each of the L ranks on this host holds L - 1 inbound
 * rings in its segment, so L (L - 1) rings in all. At WARN, by the host's lowest rank only, when
 * that passes RING_WARN_BYTES and they are all faulted in at connect. */
static void say_ring_memory(const hoop__tp_t *tp, const char *const *addrs, int nlocal)
{
    if (nlocal == 0) return;
    double ring = (double)tp->ring_bytes, mine = ring * nlocal, host = mine * (nlocal + 1);
    char r[32], m[32], h[32];
    int lowest = 1;
    for (int j = 0; j < tp->p.rank; j++) lowest &= addrs[j] == NULL;
    int level = host > RING_WARN_BYTES && lowest && tp->prefault ? HOOP__LOG_WARN : HOOP__LOG_INFO;
    HOOP__LOG_AT(tp->p.log, level,
                 "shm: %s rings (HOOP_SHM_RING_BYTES), one per peer and direction: "
                 "%s in this rank's %d inbound rings, %s on this host for its %d ranks (L(L-1) "
                 "rings), %s",
                 human(ring, r, sizeof(r)), human(mine, m, sizeof(m)), nlocal,
                 human(host, h, sizeof(h)), nlocal + 1,
                 tp->prefault ? "all written at connect"
                              : "each page taken at its first use (more than 16 peers)");
}

/* base/tree.h's tree over the host's L ranks, by their order among the ranks (index 0 its
 * root). */
static hoop_result_t tree_of(hoop__tp_t *tp, const char *const *addrs)
{
    int L = 0, me = 0;
    int *order = malloc((size_t)tp->p.size * sizeof(int));
    tp->kids = malloc(HOOP__TREE_MAX_KIDS * sizeof(int));
    if (order == NULL || tp->kids == NULL) {
        free(order);
        return HOOP_ERR_NO_MEMORY;
    }
    for (int j = 0; j < tp->p.size; j++) {
        if (j != tp->p.rank && addrs[j] == NULL) continue;
        if (j == tp->p.rank) me = L;
        order[L++] = j;
    }
    tp->parent = me > 0 ? order[hoop__tree_parent(me)] : -1;
    tp->nkids = hoop__tree_kids(me, L, tp->kids);
    for (int k = 0; k < tp->nkids; k++) tp->kids[k] = order[tp->kids[k]];
    free(order);
    return HOOP_OK;
}

static int tree_peer(const hoop__tp_t *tp, int j)
{
    if (j == tp->parent) return 1;
    for (int k = 0; k < tp->nkids; k++)
        if (tp->kids[k] == j) return 1;
    return 0;
}

hoop_result_t hoop__shm_map_lazy(hoop__tp_t *tp, int j, char *msg, size_t n)
{
    peer_t *pe = &tp->peers[j];
    hoop_result_t rc = map_peer(tp, j, pe->addr, 1, msg, n);
    if (rc != HOOP_ERR_PEER_LOST) return rc;
    /* It had exited or closed its instance before this rank first needed it: what it wrote to
     * this rank is still in the ring here, and a closed peer's rules apply (shm.c,
     * check_peers). */
    if (tp->tomb == NULL && (tp->tomb = calloc(1, sizeof(*tp->tomb))) == NULL)
        return HOOP_ERR_NO_MEMORY;
    atomic_store(&tp->tomb->closed, 1);
    pe->sh = tp->tomb;
    return HOOP_OK;
}

hoop_result_t hoop__shm_connect(hoop__tp_t *tp, const char *const *addrs, double deadline)
{
    if (tp->failed) return tp->failed;
    int expect = 0;
    for (int j = 0; j < tp->p.size; j++) expect += j != tp->p.rank && addrs[j] != NULL;
    /* The same on every rank of the host: each counts the same ranks there. */
    tp->prefault = expect <= PREFAULT_MAX_PEERS;
    tp->lazy = expect > LAZY_PEERS;
    if (tp->lazy && tree_of(tp, addrs) != HOOP_OK) {
        connect_report(tp, HOOP_ERR_NO_MEMORY, -1, "shm: no memory");
        return connect_failed(tp, HOOP_ERR_NO_MEMORY, addrs);
    }
    say_ring_memory(tp, addrs, expect);
    char list[160] = "", msg[400];
    size_t o = 0;
    for (int j = 0; j < tp->p.size; j++) {
        if (j == tp->p.rank || addrs[j] == NULL) continue;
        peer_t *pe = &tp->peers[j];
        pe->local = 1;
        pe->in = &tp->ctl[j];
        pe->in_data = tp->seg + tp->data_off + (size_t)j * tp->ring_bytes;
        tp->nlocal++;
        hoop_result_t rc = HOOP_OK;
        if (strlen(addrs[j]) >= sizeof(pe->addr)) {
            snprintf(msg, sizeof(msg), "shm: rank %d published a bad address \"%.80s\"", j,
                     addrs[j]);
            rc = HOOP_ERR_INTERNAL;
        } else {
            memcpy(pe->addr, addrs[j], strlen(addrs[j]) + 1);
        }
        if (rc == HOOP_OK && (!tp->lazy || tree_peer(tp, j))) {
            rc = map_peer(tp, j, addrs[j], 0, msg, sizeof(msg));
            if (rc == HOOP_OK && o + 12 < sizeof(list))
                o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%d", o ? "," : "", j);
        }
        if (rc != HOOP_OK) connect_report(tp, rc, j, msg);
        if (rc == HOOP_OK && pe->sh != NULL) rc = connect_peer_aborted(tp, j);
        if (rc != HOOP_OK) return connect_failed(tp, rc, addrs);
    }
    /* Connected means both ways: our segment must outlive every peer's open of it, or a rank that
     * connects, finishes and closes at once leaves a slower peer nothing to map. A peer's
     * map_peer() ends by setting cma_ok in its control of our ring to it. */
    for (int j = 0; j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        if (pe->sh == NULL) continue;
        while (atomic_load_explicit(&pe->out->cma_ok, memory_order_acquire) == 0) {
            char msg[160];
            hoop_result_t arc = connect_peer_aborted(tp, j);
            if (arc != HOOP_OK) return connect_failed(tp, arc, addrs);
            struct pollfd pf = {.fd = pe->pidfd, .events = POLLIN};
            /* It may have mapped ours and gone since the load above: look once more. */
            if (pe->pidfd >= 0 && poll(&pf, 1, 1) > 0 &&
                atomic_load_explicit(&pe->out->cma_ok, memory_order_acquire) == 0) {
                snprintf(msg, sizeof(msg),
                         "shm: rank %d exited before it mapped this rank's "
                         "segment",
                         j);
                connect_report(tp, HOOP_ERR_PEER_LOST, j, msg);
                return connect_failed(tp, HOOP_ERR_PEER_LOST, addrs);
            }
            if (pe->pidfd < 0) poll(NULL, 0, 1);
            if (hoop__now() >= deadline) {
                snprintf(msg, sizeof(msg),
                         "shm: timed out waiting for rank %d to map this "
                         "rank's segment",
                         j);
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
    if (tp->nlocal > 0) {
        char cma[48] = "single copy off";
        if (tp->p.cfg->shm_cma_bytes > 0)
            snprintf(cma, sizeof(cma), "single copy from %zu B", tp->p.cfg->shm_cma_bytes);
        HOOP__INFO(tp->p.log,
                   "shm: mapped the segments of rank(s) %s (%zu KiB rings, %s, spin %.0f us)%s",
                   list, tp->ring_bytes >> 10, cma, tp->spin_s * 1e6,
                   tp->lazy ? "; the other local peers' at their first transfer (more than 16 "
                              "peers)"
                            : "");
    }
    return HOOP_OK;
}

/* Waits for peer j's flag (its ready, or with go set its go), or its abort, exit or close. */
static hoop_result_t settle_wait(hoop__tp_t *tp, int j, int go, double deadline)
{
    peer_t *pe = &tp->peers[j];
    char msg[160];
    for (;;) {
        _Atomic uint32_t *flag = go ? &pe->sh->go : &pe->sh->ready;
        if (atomic_load_explicit(flag, memory_order_acquire)) return HOOP_OK;
        hoop_result_t rc = connect_peer_aborted(tp, j);
        if (rc != HOOP_OK) return connect_failed(tp, rc, NULL);
        struct pollfd pf = {.fd = pe->pidfd, .events = POLLIN};
        int gone = atomic_load(&pe->sh->closed) ||
                   (pe->pidfd >= 0 ? poll(&pf, 1, 1) > 0
                                   : (poll(NULL, 0, 1), hoop__process_gone(pe->pid)));
        if (gone && !atomic_load(flag) && !atomic_load(&pe->sh->aborted)) {
            snprintf(msg, sizeof(msg), "lost rank %d while connecting (its process %d %s)", j,
                     (int)pe->pid,
                     atomic_load(&pe->sh->closed) ? "closed its connections" : "exited");
            connect_report(tp, HOOP_ERR_PEER_LOST, j, msg);
            return connect_failed(tp, HOOP_ERR_PEER_LOST, NULL);
        }
        if (hoop__now() >= deadline) {
            snprintf(msg, sizeof(msg), "shm: timed out waiting for rank %d to finish connecting",
                     j);
            connect_report(tp, HOOP_ERR_TIMEOUT, j, msg);
            return connect_failed(tp, HOOP_ERR_TIMEOUT, NULL);
        }
    }
}

/* Every peer has mapped this segment (connect() waited for it), so a flag in it is enough: raise
 * ours, then wait for each peer's, or its abort, exit or close. Beyond LAZY_PEERS peers, through
 * the tree: ready goes up once the children's are, go comes down from the root, and a rank that
 * fails marks its segment aborted, which fails its tree neighbours, and theirs, so that every
 * rank fails. */
hoop_result_t hoop__shm_settle(hoop__tp_t *tp, double deadline)
{
    if (tp->failed) return tp->failed;
    hoop_result_t rc = HOOP_OK;
    if (tp->lazy) {
        for (int k = 0; k < tp->nkids && rc == HOOP_OK; k++)
            rc = settle_wait(tp, tp->kids[k], 0, deadline);
        if (rc != HOOP_OK) return rc;
        atomic_store(&tp->sh->ready, 1);
        if (tp->parent >= 0 && (rc = settle_wait(tp, tp->parent, 1, deadline)) != HOOP_OK)
            return rc;
        atomic_store(&tp->sh->go, 1);
        return HOOP_OK;
    }
    atomic_store(&tp->sh->ready, 1);
    for (int j = 0; j < tp->p.size && rc == HOOP_OK; j++)
        if (tp->peers[j].local) rc = settle_wait(tp, j, 0, deadline);
    return rc;
}
