/* The verbs transport's registration cache (src/transport/ibv_mr.h) on a real RDMA stack.
 *
 *   mr_test stale        one rank of a 2-rank job (hooprun, HOOP_TRANSPORT=ibverbs): each round
 *                        both ranks send each other a zero-copy message from and into buffers
 *                        at fixed addresses, changing their contents and, between rounds, what
 *                        backs them: the same pages (the cache must hit), munmap and mmap again
 *                        at the same address, MADV_DONTNEED, and free then malloc (same address
 *                        or not). Every byte received is checked against the pattern the sender
 *                        wrote, computed here independently. Exit 0 when all arrived intact.
 *   mr_test cost [DEV]   what registering costs on DEV (default: the first usable port): per
 *                        size, ibv_reg_mr + ibv_dereg_mr of a buffer, and the cache's check of a
 *                        hit (its /proc/self/pagemap read), each averaged.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "hoop.h"
#include "base/log.h"
#include "transport/ibv_dev.h"
#include "transport/ibv_mr.h"
#include "transport/ibv_sym.h"
#include "../common/testing.h"

#define MAP_BYTES (2u << 20)
#define MSG_A (1048576 + 13) /* zero copy (from 256 KiB), odd */
#define MSG_B (300007)       /* zero copy, prime */
#define OFF_B 4093           /* B starts inside a page, past A's end */

/* The byte at i of the message rank sends in round r. */
static uint8_t pat(int rank, int r, size_t i)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull ^ (uint64_t)(r * 131 + rank * 7 + 1) << 40;
    x ^= x >> 29;
    return (uint8_t)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

static int fail(const char *what, int rank, int r)
{
    fprintf(stderr, "FAIL rank %d round %d: %s\n", rank, r, what);
    return 1;
}

static void *map_at(void *want)
{
    void *p = mmap(want, MAP_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (want != NULL ? MAP_FIXED : 0), -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static int stale(void)
{
    hoop_comm_t *c;
    hoop_result_t rc = hoop_init_from_env(&c);
    if (rc != HOOP_OK) {
        fprintf(stderr, "FAIL hoop_init: %s\n", test_code_name(rc));
        return 1;
    }
    int rank = hoop_comm_rank(c), peer = 1 - rank;
    /* sendbuf and recvbuf, each a mapping of its own at an address kept for every round */
    uint8_t *s = map_at(NULL), *rv = map_at(NULL);
    uint8_t *heap = NULL;
    if (s == NULL || rv == NULL) return fail("mmap", rank, 0);
    static const char *const how[] = {"first", "reuse",  "remap",  "dontneed", "reuse",
                                      "remap", "malloc", "malloc", "reuse"};
    int bad = 0;
    for (int r = 0; r < (int)(sizeof(how) / sizeof(how[0])) && !bad; r++) {
        uint8_t *sb = s, *rb = rv;
        if (strcmp(how[r], "remap") == 0) {
            /* another mapping at the same address: the old pages are gone */
            if (munmap(s, MAP_BYTES) != 0 || munmap(rv, MAP_BYTES) != 0 || map_at(s) != s ||
                map_at(rv) != rv)
                return fail("munmap and mmap at the same address", rank, r);
        } else if (strcmp(how[r], "dontneed") == 0) {
            if (madvise(s, MAP_BYTES, MADV_DONTNEED) != 0 ||
                madvise(rv, MAP_BYTES, MADV_DONTNEED) != 0)
                return fail("madvise", rank, r);
        } else if (strcmp(how[r], "malloc") == 0) {
            /* malloc's large blocks are mappings of their own: after free, often the same */
            free(heap);
            heap = malloc(MAP_BYTES * 2);
            if (heap == NULL) return fail("malloc", rank, r);
            sb = heap;
            rb = heap + MAP_BYTES;
        }
        for (size_t i = 0; i < MSG_A; i++) sb[i] = pat(rank, r, i);
        for (size_t i = 0; i < MSG_B; i++) sb[OFF_B + MSG_A + i] = pat(rank, r + 100, i);
        memset(rb, 0xee, MSG_A + OFF_B + MSG_B);
        hoop_request_t *q[4];
        hoop_result_t e[4];
        e[0] = hoop_irecv(c, rb, MSG_A, HOOP_UINT8, peer, &q[0]);
        e[1] = hoop_irecv(c, rb + OFF_B + MSG_A, MSG_B, HOOP_UINT8, peer, &q[1]);
        e[2] = hoop_isend(c, sb, MSG_A, HOOP_UINT8, peer, &q[2]);
        e[3] = hoop_isend(c, sb + OFF_B + MSG_A, MSG_B, HOOP_UINT8, peer, &q[3]);
        for (int k = 0; k < 4; k++) {
            if (e[k] == HOOP_OK) e[k] = hoop_wait(q[k]);
            if (e[k] != HOOP_OK) {
                fprintf(stderr, "FAIL rank %d round %d (%s): %s: %s\n", rank, r, how[r],
                        test_code_name(e[k]), hoop_comm_last_error(c));
                return 1;
            }
        }
        size_t wrong = 0;
        for (size_t i = 0; i < MSG_A; i++) wrong += rb[i] != pat(peer, r, i);
        for (size_t i = 0; i < MSG_B; i++) wrong += rb[OFF_B + MSG_A + i] != pat(peer, r + 100, i);
        if (wrong != 0) {
            fprintf(stderr, "FAIL rank %d round %d (%s): %zu bytes wrong\n", rank, r, how[r],
                    wrong);
            bad = 1;
        } else {
            printf("rank %d round %d (%s): %d + %d bytes each way intact\n", rank, r, how[r], MSG_A,
                   MSG_B);
        }
    }
    free(heap);
    munmap(s, MAP_BYTES);
    munmap(rv, MAP_BYTES);
    if (hoop_comm_destroy(c) != HOOP_OK) bad = 1;
    return bad;
}

static int cost(const char *dev)
{
    hoop__ibv_t v;
    char err[400];
    if (hoop__ibv_load(&v, NULL, err, sizeof(err)) != 0) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    hoop__ibv_hca_t hca;
    hoop__ibv_port_t ports[8];
    hoop__log_t log;
    hoop__log_open(&log, HOOP__LOG_WARN, "", -1);
    int n = hoop__ibv_hca_parse(dev, &hca, err, sizeof(err)) != 0
                ? -1
                : hoop__ibv_discover(&v, &hca, -1, ports, 8, &log, err, sizeof(err));
    hoop__log_close(&log);
    if (n <= 0) {
        printf("SKIP: %s\n", err);
        hoop__ibv_unload(&v);
        return 77;
    }
    struct ibv_context *ctx = hoop__ibv_open_by_name(&v, ports[0].dev);
    struct ibv_pd *pd = ctx != NULL ? v.alloc_pd(ctx) : NULL;
    if (pd == NULL) {
        fprintf(stderr, "FAIL open %s\n", ports[0].dev);
        return 1;
    }
    size_t max = 64u << 20;
    uint8_t *buf = mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return 1;
    memset(buf, 1, max);
    hoop__ibv_mrc_t mrc;
    const char *why;
    if (hoop__ibv_mrc_init(&mrc, &v, pd, "auto", buf, &why, err, sizeof(err)) != 0) return 1;
    printf("%s: %s\n", ports[0].dev, why != NULL ? why : "registration cache on");
    printf("%10s %14s %14s %14s\n", "bytes", "reg+dereg us", "cache hit us", "us per MiB");
    int bad = 0;
    for (size_t sz = 4096; sz <= max; sz *= 4) {
        int iters = sz <= (1u << 20) ? 50 : 5;
        const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE; /* a receive's */
        struct ibv_mr *warm = v.reg_mr(pd, buf, sz, acc);
        if (warm != NULL) v.dereg_mr(warm);
        double t0 = now_s();
        for (int i = 0; i < iters; i++) {
            struct ibv_mr *mr = v.reg_mr(pd, buf, sz, acc);
            if (mr == NULL) {
                fprintf(stderr, "FAIL ibv_reg_mr of %zu bytes: %s\n", sz, strerror(errno));
                return 1;
            }
            v.dereg_mr(mr);
        }
        double reg = (now_s() - t0) / iters * 1e6, hit = -1;
        if (mrc.on) {
            int ref;
            struct ibv_mr *mr = hoop__ibv_mrc_get(&mrc, buf, sz, acc, &ref);
            if (mr == NULL) {
                fprintf(stderr, "FAIL the cache's ibv_reg_mr of %zu bytes: %s\n", sz,
                        strerror(errno));
                return 1;
            }
            hoop__ibv_mrc_put(&mrc, mr, ref);
            uint64_t hits = mrc.hits;
            t0 = now_s();
            for (int i = 0; i < iters; i++) {
                mr = hoop__ibv_mrc_get(&mrc, buf, sz, acc, &ref);
                hoop__ibv_mrc_put(&mrc, mr, ref);
            }
            hit = (now_s() - t0) / iters * 1e6;
            if (mrc.hits != hits + (uint64_t)iters) {
                fprintf(stderr, "FAIL the cache missed %zu bytes it holds\n", sz);
                bad = 1;
            }
        }
        printf("%10zu %14.1f %14.1f %14.1f\n", sz, reg, hit, reg / ((double)sz / (1 << 20)));
    }
    hoop__ibv_mrc_fini(&mrc);
    munmap(buf, max);
    v.dealloc_pd(pd);
    v.close_device(ctx);
    hoop__ibv_unload(&v);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "stale") == 0) return stale();
    if (argc >= 2 && strcmp(argv[1], "cost") == 0) return cost(argc >= 3 ? argv[2] : NULL);
    fprintf(stderr, "usage: mr_test stale | cost [DEV]\n");
    return 2;
}
