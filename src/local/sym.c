/*
 * Symmetric memory (hoop_mem_alloc, hoop_mem_free): buffers that every rank of a one-host
 * communicator maps, so that a collective whose buffers all lie there can read the peers' inputs
 * and write the peers' outputs where they are (shm_coll.c, the zero-copy all-reduce).
 *
 * One allocation is one memfd of p slices of the same size, made by rank 0 and mapped whole by
 * every rank: rank r's buffer is slice r, and the peers' buffers follow at fixed distances in the
 * same mapping. Allocations are numbered in the order they are made; allocating and freeing are
 * collective (every rank, the same order), so an allocation's number is the same on every rank,
 * and a rank names a buffer to its peers by number and offset, never by address (every rank maps
 * at its own).
 *
 * Both calls compare what every rank passed before anything is made or unmapped: sizes that
 * differ, or a pointer that is not the start of a live allocation on some rank, fail the call on
 * every rank with the same sentence and leave the communicator usable. Like the shared area, the
 * memfd has no name and is closed once every rank has mapped it: nothing is left in /dev/shm.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "local/local.h"

#define PAGE 4096
#define ADDR_LEN 48

typedef struct sym_seg {
    struct sym_seg *next;
    uint8_t *base; /* an allocation's mapping: slice r at base + r * stride; NULL registered */
    size_t len;    /* p * stride; registered: each rank's mapping's length */
    size_t stride; /* the slice: bytes rounded up to a page */
    size_t bytes;  /* what was asked for */
    uint32_t id;   /* the same on every rank */
    uint8_t **at;  /* rank q's buffer here; registered: p mappings of p files */
} sym_seg_t;

static void seg_unmap(sym_seg_t *g, int p)
{
    if (g->base != NULL) {
        munmap(g->base, g->len);
    } else {
        for (int q = 0; g->at != NULL && q < p; q++)
            if (g->at[q] != NULL) munmap(g->at[q], g->len);
    }
    free(g->at);
    free(g);
}

struct hoop__sym {
    sym_seg_t *segs;
    uint32_t next_id;
};

/* What each rank says at an allocation's first exchange. */
typedef struct alloc_rec {
    uint64_t bytes;
    uint32_t ok; /* its arguments were good (and, on rank 0, the memfd made) */
    uint32_t pad;
    char addr[ADDR_LEN]; /* rank 0: where the others open the memfd */
} alloc_rec_t;

/* Under exec: a nonblocking call still running may be making hoop_comm.local too. */
static struct hoop__sym *sym_of(hoop_comm_t *c)
{
    pthread_mutex_lock(&c->exec);
    struct hoop__local *l = hoop__local_of(c);
    if (l != NULL && l->sym == NULL) l->sym = calloc(1, sizeof(*l->sym));
    struct hoop__sym *s = l != NULL ? l->sym : NULL;
    pthread_mutex_unlock(&c->exec);
    return s;
}

/* One host: the peers' memory is only mappable there (every rank knows the layout alike). */
static int on_one_host(hoop_comm_t *c, const char *fn)
{
    if (c->nhosts == 1) return 1;
    hoop__comm_error(c, HOOP_ERR_UNSUPPORTED,
                     "%s: the ranks span %d hosts; symmetric memory needs every rank on one host",
                     fn, c->nhosts);
    return 0;
}

hoop_result_t hoop__sym_alloc(hoop_comm_t *c, size_t bytes, void **ptr, hoop__xchg_fn exchange)
{
    const char *fn = "hoop_mem_alloc";
    hoop_result_t rc;
    if (ptr != NULL) *ptr = NULL;
    int p = c->size, me = c->rank;
    if (!on_one_host(c, fn)) return HOOP_ERR_UNSUPPORTED;
    struct hoop__sym *s = sym_of(c);
    alloc_rec_t mine = {.bytes = bytes};
    size_t stride = (bytes + PAGE - 1) / PAGE * PAGE;
    int good = ptr != NULL && bytes > 0 && s != NULL && stride >= bytes &&
               stride <= ((size_t)1 << 46) / (size_t)p;
    int fd = -1;
    if (good && me == 0) {
        fd = memfd_create("hoop-sym", MFD_CLOEXEC);
        if (fd >= 0 && ftruncate(fd, (off_t)(stride * (size_t)p)) != 0) {
            close(fd);
            fd = -1;
        }
        if (fd >= 0) snprintf(mine.addr, sizeof(mine.addr), "%d:%d", (int)getpid(), fd);
        good = fd >= 0;
    }
    mine.ok = (uint32_t)good;
    alloc_rec_t *all = calloc((size_t)p, sizeof(*all));
    if (all == NULL) {
        if (fd >= 0) close(fd);
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "%s: no memory", fn);
        return HOOP_ERR_NO_MEMORY;
    }
    rc = exchange(c, &mine, all, sizeof(mine), fn);
    if (rc != HOOP_OK) goto out;
    /* The same verdict on every rank, from the same records. */
    for (int q = 0; q < p && rc == HOOP_OK; q++) {
        if (all[q].bytes != all[0].bytes)
            rc = hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                  "%s: the ranks disagree on the size: rank 0 asked for %" PRIu64
                                  " bytes, rank %d for %" PRIu64 " (every rank allocates the same)",
                                  fn, all[0].bytes, q, all[q].bytes);
        else if (!all[q].ok && q == 0 && all[q].bytes > 0 && ptr != NULL)
            rc = hoop__comm_error(c, HOOP_ERR_SYSTEM,
                                  "%s: rank 0 could not make a memory file of %" PRIu64
                                  " bytes for %d ranks",
                                  fn, all[0].bytes, p);
        else if (!all[q].ok)
            rc = hoop__comm_error(
                c, HOOP_ERR_INVALID_ARGUMENT, "%s: rank %d passed %s (%" PRIu64 " bytes)", fn, q,
                all[q].bytes == 0 ? "a size of 0" : "no place for the pointer", all[q].bytes);
    }
    if (rc != HOOP_OK) goto out;
    /* Every rank maps rank 0's memfd through /proc (allowed to a process that may read rank 0's
     * memory, as the shared area is), then says whether it could. */
    sym_seg_t *seg = calloc(1, sizeof(*seg));
    uint8_t *m = MAP_FAILED;
    if (seg != NULL && (seg->at = calloc((size_t)p, sizeof(*seg->at))) == NULL) {
        free(seg);
        seg = NULL;
    }
    if (seg != NULL) {
        int pid = 0, rfd = -1;
        all[0].addr[ADDR_LEN - 1] = '\0';
        int f = -1;
        if (me == 0) {
            f = dup(fd);
        } else if (sscanf(all[0].addr, "%d:%d", &pid, &rfd) == 2) {
            char path[64];
            snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, rfd);
            f = open(path, O_RDWR | O_CLOEXEC);
        }
        struct stat st;
        if (f >= 0 && fstat(f, &st) == 0 && (size_t)st.st_size == stride * (size_t)p)
            m = mmap(NULL, stride * (size_t)p, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (f >= 0) close(f);
    }
    uint32_t mapped = m != MAP_FAILED, *maps = calloc((size_t)p, sizeof(*maps));
    if (maps == NULL) {
        mapped = 0;
        maps = &mapped; /* a one-element stand-in; the exchange below is not run */
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "%s: no memory", fn);
        rc = HOOP_ERR_NO_MEMORY;
    } else {
        rc = exchange(c, &mapped, maps, sizeof(mapped), fn);
    }
    int everyone = rc == HOOP_OK;
    for (int q = 0; q < p && everyone; q++) everyone = maps[q] != 0;
    if (everyone) {
        seg->base = m;
        seg->len = stride * (size_t)p;
        seg->stride = stride;
        seg->bytes = bytes;
        for (int q = 0; q < p; q++) seg->at[q] = m + (size_t)q * stride;
        pthread_mutex_lock(&c->exec);
        seg->id = s->next_id++;
        seg->next = s->segs;
        s->segs = seg;
        pthread_mutex_unlock(&c->exec);
        *ptr = m + (size_t)me * stride;
    } else {
        if (m != MAP_FAILED) munmap(m, stride * (size_t)p);
        if (seg != NULL) free(seg->at);
        free(seg);
        if (rc == HOOP_OK) {
            int q = 0;
            while (q < p && maps[q] != 0) q++;
            rc = hoop__comm_error(c, HOOP_ERR_SYSTEM,
                                  "%s: rank %d could not map the memory of %zu bytes for %d ranks",
                                  fn, q, bytes, p);
        }
    }
    if (maps != &mapped) free(maps);
out:
    if (fd >= 0) close(fd);
    free(all);
    return rc;
}

/* What each rank says at a registration's first exchange. */
typedef struct reg_rec {
    uint64_t bytes, offset;
    uint32_t why; /* 0: its arguments are good; else what is wrong (reg_why) */
    uint32_t pad;
    char addr[ADDR_LEN]; /* where the peers open its file: "pid:fd" */
} reg_rec_t;

static const char *const reg_why[] = {
    "",
    "no place for the pointer",
    "a size of 0",
    "an offset that is not a multiple of 4096",
    "a descriptor that is not open",
    "a descriptor that is not a regular file (a memfd, a file in /dev/shm)",
    "a range past the end of its file",
};

/* A range of a file that every rank maps: each rank's own (fd, offset), the same bytes. */
hoop_result_t hoop__sym_register(hoop_comm_t *c, int fd, size_t offset, size_t bytes, void **ptr,
                                 hoop__xchg_fn exchange)
{
    const char *fn = "hoop_mem_register_fd";
    if (ptr != NULL) *ptr = NULL;
    int p = c->size, me = c->rank;
    if (!on_one_host(c, fn)) return HOOP_ERR_UNSUPPORTED;
    struct hoop__sym *s = sym_of(c);
    reg_rec_t mine = {.bytes = bytes, .offset = offset};
    struct stat st;
    if (ptr == NULL)
        mine.why = 1;
    else if (bytes == 0)
        mine.why = 2;
    else if (offset % PAGE != 0)
        mine.why = 3;
    else if (fd < 0 || fstat(fd, &st) != 0)
        mine.why = 4;
    else if (!S_ISREG(st.st_mode))
        mine.why = 5;
    else if (st.st_size < 0 || offset > (size_t)st.st_size || bytes > (size_t)st.st_size - offset)
        mine.why = 6; /* a mapping past the end would raise SIGBUS at its first touch */
    snprintf(mine.addr, sizeof(mine.addr), "%d:%d", (int)getpid(), fd);
    reg_rec_t *all = calloc((size_t)p, sizeof(*all));
    sym_seg_t *seg = calloc(1, sizeof(*seg));
    uint8_t **at = calloc((size_t)p, sizeof(*at));
    uint32_t *maps = calloc((size_t)p, sizeof(*maps));
    if (all == NULL || seg == NULL || at == NULL || maps == NULL || s == NULL) {
        free(all);
        free(seg);
        free(at);
        free(maps);
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "%s: no memory", fn);
        return HOOP_ERR_NO_MEMORY;
    }
    hoop_result_t rc = exchange(c, &mine, all, sizeof(mine), fn);
    /* The same verdict on every rank, from the same records. */
    for (int q = 0; q < p && rc == HOOP_OK; q++) {
        if (all[q].why != 0)
            rc = hoop__comm_error(
                c, HOOP_ERR_INVALID_ARGUMENT,
                "%s: rank %d passed %s (offset %" PRIu64 ", %" PRIu64 " bytes)", fn, q,
                all[q].why < sizeof(reg_why) / sizeof(reg_why[0]) ? reg_why[all[q].why]
                                                                  : "a bad argument",
                all[q].offset, all[q].bytes);
        else if (all[q].bytes != all[0].bytes)
            rc = hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                  "%s: the ranks disagree on the size: rank 0 registers %" PRIu64
                                  " bytes, rank %d %" PRIu64 " (every rank registers the same)",
                                  fn, all[0].bytes, q, all[q].bytes);
    }
    size_t len = (bytes + PAGE - 1) / PAGE * PAGE;
    uint32_t mapped = rc == HOOP_OK;
    /* Every rank maps every rank's range: its own through fd, the peers' through /proc (as an
     * allocation maps rank 0's memfd), each checked against its file's size first. */
    for (int q = 0; q < p && mapped; q++) {
        int f = -1, pid = 0, qfd = -1;
        all[q].addr[ADDR_LEN - 1] = '\0';
        if (q == me) {
            f = dup(fd);
        } else if (sscanf(all[q].addr, "%d:%d", &pid, &qfd) == 2) {
            char path[64];
            snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, qfd);
            f = open(path, O_RDWR | O_CLOEXEC);
        }
        void *m = MAP_FAILED;
        if (f >= 0 && fstat(f, &st) == 0 && st.st_size >= 0 &&
            all[q].offset <= (uint64_t)st.st_size && bytes <= (uint64_t)st.st_size - all[q].offset)
            m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, f, (off_t)all[q].offset);
        if (f >= 0) close(f);
        if (m == MAP_FAILED)
            mapped = 0;
        else
            at[q] = m;
    }
    if (rc == HOOP_OK) rc = exchange(c, &mapped, maps, sizeof(mapped), fn);
    int q = 0;
    while (rc == HOOP_OK && q < p && maps[q] != 0) q++;
    if (rc == HOOP_OK && q < p)
        rc = hoop__comm_error(c, HOOP_ERR_SYSTEM,
                              "%s: rank %d could not map every rank's file (%zu bytes each; "
                              "ranks on one host must run as the same user)",
                              fn, q, bytes);
    seg->at = at;
    seg->len = len;
    seg->stride = len;
    seg->bytes = bytes;
    if (rc == HOOP_OK) {
        pthread_mutex_lock(&c->exec);
        seg->id = s->next_id++;
        seg->next = s->segs;
        s->segs = seg;
        pthread_mutex_unlock(&c->exec);
        *ptr = at[me];
    } else {
        seg_unmap(seg, p);
    }
    free(all);
    free(maps);
    return rc;
}

/* The allocation whose slice of this rank starts at ptr; prev: the link that names it. */
static sym_seg_t *seg_at(struct hoop__sym *s, int me, const void *ptr, sym_seg_t ***prev)
{
    sym_seg_t **l = s != NULL ? &s->segs : NULL;
    for (; l != NULL && *l != NULL; l = &(*l)->next)
        if ((*l)->at[me] == ptr) {
            if (prev != NULL) *prev = l;
            return *l;
        }
    return NULL;
}

hoop_result_t hoop__sym_free(hoop_comm_t *c, void *ptr, hoop__xchg_fn exchange)
{
    const char *fn = "hoop_mem_free";
    hoop_result_t rc;
    int p = c->size, me = c->rank;
    struct hoop__sym *s = c->local != NULL ? c->local->sym : NULL;
    sym_seg_t **prev = NULL, *seg = seg_at(s, me, ptr, &prev);
    /* Each rank's allocation number (all ones: not the start of one of its live allocations). */
    uint32_t mine = seg != NULL ? seg->id : UINT32_MAX;
    uint32_t *all = calloc((size_t)p, sizeof(*all));
    if (all == NULL) {
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "%s: no memory", fn);
        return HOOP_ERR_NO_MEMORY;
    }
    rc = exchange(c, &mine, all, sizeof(mine), fn);
    for (int q = 0; q < p && rc == HOOP_OK; q++) {
        if (all[q] == UINT32_MAX)
            rc = hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                  "%s: rank %d's pointer is not a live buffer of hoop_mem_alloc "
                                  "on this communicator (never allocated there, or freed already)",
                                  fn, q);
        else if (all[q] != all[0])
            rc = hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                  "%s: the ranks free different buffers: rank 0 its allocation "
                                  "#%u, rank %d its #%u (every rank frees the same, in the same "
                                  "order)",
                                  fn, all[0], q, all[q]);
    }
    free(all);
    if (rc != HOOP_OK) return rc;
    pthread_mutex_lock(&c->exec);
    *prev = seg->next;
    pthread_mutex_unlock(&c->exec);
    seg_unmap(seg, p);
    return HOOP_OK;
}

uint64_t hoop__sym_mapped(const hoop_comm_t *c)
{
    const struct hoop__sym *s = c->local != NULL ? c->local->sym : NULL;
    uint64_t n = 0;
    for (const sym_seg_t *g = s != NULL ? s->segs : NULL; g != NULL; g = g->next)
        n += g->base != NULL ? g->len : g->len * (size_t)c->size;
    return n;
}

int hoop__sym_live(const hoop_comm_t *c)
{
    return c->local != NULL && c->local->sym != NULL && c->local->sym->segs != NULL;
}

int hoop__sym_find(const hoop_comm_t *c, const void *ptr, size_t bytes, uint32_t *id, uint64_t *off)
{
    const struct hoop__sym *s = c->local != NULL ? c->local->sym : NULL;
    const uint8_t *x = ptr;
    for (const sym_seg_t *g = s != NULL ? s->segs : NULL; g != NULL; g = g->next) {
        const uint8_t *mine = g->at[c->rank];
        if (x >= mine && x < mine + g->bytes && bytes <= g->bytes - (size_t)(x - mine)) {
            *id = g->id;
            *off = (uint64_t)(x - mine);
            return 1;
        }
    }
    return 0;
}

uint8_t *hoop__sym_peer(const hoop_comm_t *c, uint32_t id, uint64_t off, size_t bytes, int q)
{
    const struct hoop__sym *s = c->local != NULL ? c->local->sym : NULL;
    for (const sym_seg_t *g = s != NULL ? s->segs : NULL; g != NULL; g = g->next)
        if (g->id == id)
            return off <= g->bytes && bytes <= g->bytes - off && q >= 0 && q < c->size
                       ? g->at[q] + off
                       : NULL;
    return NULL;
}

void hoop__sym_close(hoop_comm_t *c)
{
    struct hoop__sym *s = c->local != NULL ? c->local->sym : NULL;
    if (s == NULL) return;
    while (s->segs != NULL) {
        sym_seg_t *g = s->segs;
        s->segs = g->next;
        seg_unmap(g, c->size);
    }
    free(s);
    c->local->sym = NULL;
}
