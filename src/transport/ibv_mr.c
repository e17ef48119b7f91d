/* The registration cache of ibv_mr.h: why it cannot serve a stale registration is said there. */
#include "transport/ibv_mr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/log.h"

#define PFN_MASK ((1ull << 55) - 1)
#define PRESENT (1ull << 63)
#define CAP_MAX ((size_t)1 << 30) /* pinned by the cache at most, whatever the limit allows */

/* The frames of the n pages from address lo into out (0 for a page not present). 0, or -1. */
static int frames(const hoop__ibv_mrc_t *c, uintptr_t lo, size_t n, uint64_t *out)
{
    size_t want = n * sizeof(uint64_t), got = 0;
    off_t off = (off_t)(lo / c->page * sizeof(uint64_t));
    while (got < want) {
        ssize_t r = pread(c->pagemap_fd, (char *)out + got, want - got, off + (off_t)got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return -1;
        }
        got += (size_t)r;
    }
    for (size_t i = 0; i < n; i++) out[i] = out[i] & PRESENT ? out[i] & PFN_MASK : 0;
    return 0;
}

int hoop__ibv_mrc_init(hoop__ibv_mrc_t *c, const hoop__ibv_t *v, struct ibv_pd *pd,
                       const char *mode, const void *probe, const char **why, char *err,
                       size_t errlen)
{
    memset(c, 0, sizeof(*c));
    c->v = v;
    c->pd = pd;
    c->pagemap_fd = -1;
    long pg = sysconf(_SC_PAGESIZE);
    c->page = pg > 0 ? (size_t)pg : 4096;
    *why = NULL;
    if (mode != NULL && strcmp(mode, "off") == 0) {
        *why = "HOOP_IB_REG_CACHE=off";
        return 0;
    }
    if (mode != NULL && mode[0] != '\0' && strcmp(mode, "auto") != 0) {
        hoop__say(err, errlen, "HOOP_IB_REG_CACHE=%s: expected auto or off", mode);
        return -1;
    }
    c->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    uint64_t f = 0;
    if (c->pagemap_fd < 0 || frames(c, (uintptr_t)probe / c->page * c->page, 1, &f) != 0 ||
        f == 0) {
        *why = "the page frames in /proc/self/pagemap cannot be read (CAP_SYS_ADMIN is needed)";
        if (c->pagemap_fd >= 0) close(c->pagemap_fd);
        c->pagemap_fd = -1;
        return 0;
    }
    struct rlimit rl;
    c->cap = CAP_MAX;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 2 < c->cap)
        c->cap = (size_t)(rl.rlim_cur / 2);
    c->on = 1;
    return 0;
}

static void ent_drop(hoop__ibv_mrc_t *c, hoop__ibv_mrc_ent_t *e)
{
    c->v->dereg_mr(e->mr);
    c->pinned -= e->hi - e->lo;
    free(e->pfn);
    memset(e, 0, sizeof(*e));
}

/* Whether entry e still holds the pages now mapped at [lo, hi). */
static int ent_valid(hoop__ibv_mrc_t *c, const hoop__ibv_mrc_ent_t *e, uintptr_t lo, uintptr_t hi)
{
    size_t n = (hi - lo) / c->page, first = (lo - e->lo) / c->page;
    uint64_t stack[64], *now = n <= 64 ? stack : malloc(n * sizeof(uint64_t));
    if (now == NULL) return 0;
    int ok = frames(c, lo, n, now) == 0 && memcmp(now, e->pfn + first, n * sizeof(uint64_t)) == 0;
    for (size_t i = 0; ok && i < n; i++) ok = now[i] != 0; /* not present: nothing pinned there */
    if (now != stack) free(now);
    return ok;
}

/* A registration of its own for one transfer. */
static struct ibv_mr *transient(hoop__ibv_mrc_t *c, void *buf, size_t len, int access, int *ref)
{
    *ref = -1;
    c->transient++;
    return c->v->reg_mr(c->pd, buf, len, access);
}

struct ibv_mr *hoop__ibv_mrc_get(hoop__ibv_mrc_t *c, void *buf, size_t len, int access, int *ref)
{
    if (!c->on || len == 0) return transient(c, buf, len, access, ref);
    uintptr_t lo = (uintptr_t)buf / c->page * c->page;
    uintptr_t hi = ((uintptr_t)buf + len + c->page - 1) / c->page * c->page;
    c->tick++;
    for (int i = 0; i < MRC_MAX; i++) {
        hoop__ibv_mrc_ent_t *e = &c->ent[i];
        if (e->hi == 0 || lo < e->lo || hi > e->hi || (e->access & access) != access) continue;
        if (ent_valid(c, e, lo, hi)) {
            c->hits++;
            e->refs++;
            e->tick = c->tick;
            *ref = i;
            return e->mr;
        }
        c->stale++;
        if (e->refs > 0) return transient(c, buf, len, access, ref);
        ent_drop(c, e);
    }
    c->misses++;
    /* Room: drop entries this range overlaps (it supersedes them), then the least recent idle. */
    for (int i = 0; i < MRC_MAX; i++) {
        hoop__ibv_mrc_ent_t *e = &c->ent[i];
        if (e->hi != 0 && e->refs == 0 && e->lo < hi && lo < e->hi) ent_drop(c, e);
    }
    int slot = -1;
    for (;;) {
        int lru = -1;
        slot = -1;
        for (int i = 0; i < MRC_MAX; i++) {
            hoop__ibv_mrc_ent_t *e = &c->ent[i];
            if (e->hi == 0 && slot < 0) slot = i;
            if (e->hi != 0 && e->refs == 0 && (lru < 0 || e->tick < c->ent[lru].tick)) lru = i;
        }
        if (slot >= 0 && c->pinned + (hi - lo) <= c->cap) break;
        if (lru < 0) return transient(c, buf, len, access, ref);
        ent_drop(c, &c->ent[lru]);
    }
    size_t n = (hi - lo) / c->page;
    uint64_t *pfn = malloc(n * sizeof(uint64_t));
    if (pfn == NULL) return transient(c, buf, len, access, ref);
    struct ibv_mr *mr = c->v->reg_mr(c->pd, (void *)lo, hi - lo, access);
    if (mr == NULL) {
        free(pfn);
        return NULL;
    }
    /* Read once the pages are pinned: those are the frames the registration holds. Where they
     * cannot be read, the registration serves this transfer only. */
    if (frames(c, lo, n, pfn) != 0) {
        free(pfn);
        *ref = -1;
        c->transient++;
        return mr;
    }
    c->ent[slot] = (hoop__ibv_mrc_ent_t){
        .lo = lo, .hi = hi, .access = access, .mr = mr, .pfn = pfn, .refs = 1, .tick = c->tick};
    c->pinned += hi - lo;
    *ref = slot;
    return mr;
}

void hoop__ibv_mrc_put(hoop__ibv_mrc_t *c, struct ibv_mr *mr, int ref)
{
    if (mr == NULL) return;
    if (ref < 0 || ref >= MRC_MAX || c->ent[ref].mr != mr) {
        c->v->dereg_mr(mr);
        return;
    }
    if (c->ent[ref].refs > 0) c->ent[ref].refs--;
}

void hoop__ibv_mrc_fini(hoop__ibv_mrc_t *c)
{
    if (c->v == NULL) return; /* never set up */
    for (int i = 0; i < MRC_MAX; i++)
        if (c->ent[i].hi != 0) ent_drop(c, &c->ent[i]);
    if (c->pagemap_fd >= 0) close(c->pagemap_fd);
    c->pagemap_fd = -1;
    c->on = 0;
}
