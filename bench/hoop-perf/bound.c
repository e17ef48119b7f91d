/*
 * --bound and --rotate: the machine's copy rate measured once at the start, each row's traffic
 * (traffic.c) set against it, and the buffers rotated over more memory than the last-level cache
 * so that a timed call finds its inputs in memory rather than in the cache.
 *
 * The copy rate is measured as the collectives run: every rank of the host copies a buffer larger
 * than the last-level cache at the same time, and the rate is the bytes copied by all of them over
 * the slowest one's time. A copied byte is read once and written once, so the memory traffic the
 * machine sustains is twice that rate; a row's bound is the time its traffic takes at that rate,
 * and its fraction that time over the measured one (1: as fast as the copies allow).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hoop.h"
#include "../bench_util.h"
#include "hoop-perf.h"
#include "traffic.h"

#define COPY_MIN (64u << 20) /* the copy rate's buffer: at least this, and 4x the cache */
#define COPY_MAX (256u << 20)
#define COPY_TRIALS 8 /* the best: a loaded machine has quiet moments, as the timed rows do */
#define ROTATE_ALIGN 4096

size_t llc_bytes(void)
{
    long v = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    v = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    if (v > 0) return (size_t)v;
    /* Where the C library does not know (it reads cpuid, which a VM may hide), sysfs may. */
    for (int idx = 3; idx >= 2; idx--) {
        char path[96], buf[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int got = fgets(buf, sizeof buf, f) != NULL;
        fclose(f);
        size_t s;
        buf[strcspn(buf, "\n")] = '\0';
        if (got && !bench_parse_size(buf, &s) && s > 0) return s;
    }
    return 0;
}

int measure_copy_rate(bench_t *b)
{
    size_t llc = llc_bytes(), n = 4 * llc;
    if (n < COPY_MIN) n = COPY_MIN;
    if (n > COPY_MAX) n = COPY_MAX;
    unsigned char *src = malloc(n), *dst = malloc(n);
    int32_t ok = src && dst;
    if (!ok) fprintf(stderr, "hoop-perf: rank %d: no memory to measure the copy rate\n", b->rank);
    if (!checked(b, "allreduce before the copy rate",
                 hoop_allreduce(b->comm, &ok, &ok, 1, HOOP_INT32, HOOP_MIN)) ||
        !ok) {
        free(src);
        free(dst);
        return 0;
    }
    memset(src, 1, n); /* every page touched, so that no fault is timed */
    memset(dst, 2, n);
    double best = 0;
    for (int t = 0; t < COPY_TRIALS; t++) {
        if (!checked(b, "barrier", hoop_barrier(b->comm))) break;
        double t0 = now_s();
        memcpy((t & 1) ? src : dst, (t & 1) ? dst : src, n);
        double v[2] = {now_s() - t0, (double)n};
        if (!checked(b, "allreduce of the copy times",
                     hoop_allreduce(b->comm, v, v, 1, HOOP_FLOAT64, HOOP_MAX)) ||
            !checked(b, "allreduce of the bytes copied",
                     hoop_allreduce(b->comm, v + 1, v + 1, 1, HOOP_FLOAT64, HOOP_SUM)))
            break;
        if (v[0] > 0 && v[1] / v[0] > best) best = v[1] / v[0];
    }
    free(src);
    free(dst);
    b->copy_rate = best;
    b->copy_bytes = n;
    return best > 0;
}

void set_bound(const bench_t *b, row_t *row, int inplace)
{
    variant_t *v = &row->v[inplace];
    if (!b->bound || !b->one_host || b->copy_rate <= 0 || !v->ran) return;
    const char *algo = row->algo ? row->algo : b->algo;
    /* Symmetric buffers: the area's algorithms run zero-copy where they can (traffic.c). */
    if (b->sym && (!strcmp(algo, "auto") || !strcmp(algo, "shm"))) algo = "sym";
    /* The single copy where the row's all-reduce ran it (run.c) */
    if (row->cma) algo = "cma";
    v->traffic = traffic_bytes(b->coll->name, algo, b->size, row->size, b->small_bytes, inplace);
    if (v->traffic <= 0 || v->us <= 0) return;
    v->has_bound = 1;
    v->bound = v->traffic / (2.0 * b->copy_rate) / (v->us * 1e-6);
}

/* Every size is rounded up to this, so that consecutive sets start on their own pages. */
static size_t round_set(size_t v) { return (v + ROTATE_ALIGN - 1) / ROTATE_ALIGN * ROTATE_ALIGN; }

size_t rotate_pool(const bench_t *b, size_t cap)
{
    if (!b->rotate) return cap;
    /* rotated() uses at most rotate bytes over both sides, and two sets of the largest row */
    return b->rotate > 2 * round_set(cap) ? b->rotate : 2 * round_set(cap);
}

/* The sizes of a set's two sides, and how many sets the pools hold (0 without rotation). */
static size_t set_layout(const bench_t *b, const coll_t *co, const call_t *k, size_t *ss,
                         size_t *rs)
{
    if (!b->rotate || co->counts == CK_NONE) return 0;
    size_t ns = kind_send(co->counts, k->count, k->size) * k->es,
           nr = kind_recv(co->counts, k->count, k->size) * k->es;
    if (ns == 0 && nr == 0) return 0;
    /* In place, both sides live in the receive buffer, over the larger of the two. */
    *ss = round_set(ns);
    *rs = round_set(ns > nr ? ns : nr);
    size_t sets = b->rotate / (*ss + *rs);
    return sets < 2 ? 2 : sets; /* the pools hold two sets of the largest row at least */
}

size_t rotate_sets(const bench_t *b, const coll_t *co, const call_t *k)
{
    size_t ss, rs;
    return set_layout(b, co, k, &ss, &rs);
}

call_t rotated(const bench_t *b, const coll_t *co, const call_t *k, int i)
{
    call_t r = *k;
    size_t ss = 0, rs = 0, sets = set_layout(b, co, k, &ss, &rs);
    if (sets == 0) return r;
    size_t j = (size_t)i % sets;
    uintptr_t p = (uintptr_t)k->s, s0 = (uintptr_t)b->sbuf;
    int s_in_sbuf = p >= s0 && p < s0 + b->scap + 1;
    r.s = (unsigned char *)k->s + j * (s_in_sbuf ? ss : rs);
    r.r = (unsigned char *)k->r + j * rs;
    return r;
}

void print_buffers(const bench_t *b, FILE *f)
{
    size_t llc = llc_bytes();
    if (b->sym)
        fprintf(f, "# buffers: symmetric memory (hoop_mem_alloc: every rank maps every rank's)\n");
    if (!b->rotate) {
        fprintf(f,
                "# buffers: cache-hot (the same buffers every iteration; last-level cache %zu "
                "bytes)\n",
                llc);
        return;
    }
    fprintf(f,
            "# buffers: rotated over %zu bytes per rank, send and receive together (%s; "
            "last-level cache %zu bytes): each timed call uses the next set\n",
            b->rotate,
            llc > 0 && b->rotate > 2 * llc ? "cache-cold"
                                           : "NOT more than twice the "
                                             "cache: not cold",
            llc);
}

void print_bound_header(const bench_t *b, FILE *f)
{
    if (!b->bound) return;
    if (!b->one_host) {
        fprintf(f, "# --bound: the ranks span hosts; the traffic model is for one host (columns "
                   "empty)\n");
        return;
    }
    if (b->copy_bytes)
        fprintf(f,
                "# copy rate: %.2f GB/s, all %d ranks copying %zu bytes each at once (best of "
                "%d); traffic at 2x that\n",
                b->copy_rate / 1e9, b->size, b->copy_bytes, COPY_TRIALS);
    else
        fprintf(f, "# copy rate: %.2f GB/s (--copy-rate); traffic at 2x that\n",
                b->copy_rate / 1e9);
    fprintf(f, "# traffic: bytes read + written per call, all ranks (hoop-perf --traffic); "
               "bound: traffic / (2 x copy rate) / time\n");
}
