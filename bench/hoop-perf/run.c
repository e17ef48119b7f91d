/*
 * hoop-perf's sweep: for every dtype, op, root and size, each variant (out of place, in place)
 * timed, then run once more on fresh inputs and checked, and the row combined over the ranks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "hoop.h"
#include "../bench_util.h"
#include "../../common/refcheck.h"
#include "hoop-perf.h"

static void fail_call(const bench_t *b, const char *what, hoop_result_t e)
{
    fprintf(stderr, "hoop-perf: rank %d: %s failed: %s: %s\n", b->rank, what, hoop_error_string(e),
            hoop_comm_last_error(b->comm));
    fflush(stderr);
}

int checked(const bench_t *b, const char *what, hoop_result_t e)
{
    if (e != HOOP_OK) fail_call(b, what, e);
    return e == HOOP_OK;
}

call_t make_call(const bench_t *b, hoop_dtype_t dt, hoop_op_t op, int root, size_t count)
{
    call_t k = {.comm = b->comm,
                .count = count,
                .es = hoop_dtype_size(dt),
                .dt = dt,
                .op = op,
                .root = root,
                .rank = b->rank,
                .size = b->size};
    return k;
}

/* Points the call at the buffers of one variant: in place, both live in the receive buffer. */
void place(const bench_t *b, const coll_t *co, call_t *k, int inplace)
{
    if (!inplace) {
        k->s = b->sbuf;
        k->r = b->rbuf;
        return;
    }
    k->s = b->rbuf + kind_send_offset(co->counts, k->count, k->rank) * k->es;
    k->r = b->rbuf + kind_recv_offset(co->counts, k->count, k->rank) * k->es;
}

static int rank_sends(const coll_t *co, const call_t *k)
{
    return co->in && (!(co->flags & F_ROOT_SENDS) || k->rank == k->root);
}

static int rank_receives(const coll_t *co, const call_t *k)
{
    return co->expect && (!(co->flags & F_ROOT_RECEIVES) || k->rank == k->root);
}

void fill_input(const coll_t *co, const call_t *k)
{
    if (rank_sends(co, k)) {
        size_t n = kind_send(co->counts, k->count, k->size);
        for (size_t i = 0; i < n; i++) rc_st(k->s, i, k->es, co->in(k, k->rank, i));
    }
    if (co->prep) co->prep(k);
}

/* --device: the host twin of an address in sbuf or rbuf. */
static void *twin(const bench_t *b, void *p)
{
    uintptr_t q = (uintptr_t)p, s = (uintptr_t)b->sbuf; /* two allocations: compare addresses */
    if (q >= s && q <= s + b->scap) return b->hsbuf + (q - s);
    return b->hrbuf + (q - (uintptr_t)b->rbuf);
}

/* fill_input, for device buffers too: written into the twins and copied over (the send side,
 * and the receive side that prep may have set). Returns 0 on failure. */
static int load_input(const bench_t *b, const coll_t *co, const call_t *k)
{
    if (!b->dev) {
        fill_input(co, k);
        return 1;
    }
    call_t h = *k;
    h.s = twin(b, k->s);
    h.r = twin(b, k->r);
    fill_input(co, &h);
    return (!rank_sends(co, k) ||
            device_copy(b, k->s, h.s, kind_send(co->counts, k->count, k->size) * k->es)) &&
           (!co->prep ||
            device_copy(b, k->r, h.r, kind_recv(co->counts, k->count, k->size) * k->es));
}

/* Posts the agg calls of iteration i (each call a set of --rotate's buffers of its own), appending
 * their requests; or, with one call and blocking asked for, makes it blocking. */
static int post_iteration(const bench_t *b, const coll_t *co, const call_t *k, int i, int *nreqs)
{
    for (int j = 0; j < b->agg; j++) {
        call_t kj = rotated(b, co, k, i * b->agg + j);
        if (!checked(b, co->name, co->run(&kj, b->reqs, nreqs))) return 0;
    }
    return 1;
}

static int wait_from(const bench_t *b, int from, int to, int ok)
{
    for (int r = from; r < to; r++) {
        hoop_result_t e = hoop_wait(b->reqs[r]);
        if (ok) ok = checked(b, "hoop_wait", e);
    }
    return ok;
}

/* Runs iters iterations of agg calls each, as -z says (nccl-tests' modes): 0 posts every call of
 * every iteration, then waits for them in order; 1 waits for each iteration's calls, then all ranks
 * meet at a barrier, which is timed; 2 waits for each iteration's calls, no barrier; 3 as 1, with
 * the barrier's time left out. With agg 1 and -z 1-3 the call is a blocking one, as MPI benchmarks
 * time theirs. *secs: the time taken; it (NULL, or iters entries): each iteration's time per call,
 * which under -z 0 is from the end of the iteration before (the calls overlap). Returns 0 on
 * failure. */
static int run_batch(const bench_t *b, const coll_t *co, const call_t *k, int iters, double *it,
                     double *secs)
{
    double t0 = now_s(), left_out = 0, last = t0;
    int nreqs = 0, ok = 1;
    if (b->blocking == 0) {
        for (int i = 0; i < iters && ok; i++) {
            ok = post_iteration(b, co, k, i, &nreqs);
            b->iter_end[i] = nreqs;
        }
        int from = 0;
        for (int i = 0; i < iters; i++) {
            int to = ok ? b->iter_end[i] : nreqs;
            ok = wait_from(b, from, to, ok);
            from = to;
            double t = now_s();
            if (it) it[i] = (t - last) / b->agg;
            last = t;
            if (!ok) break;
        }
        ok = wait_from(b, from, nreqs, ok); /* what a failed post left */
    } else {
        for (int i = 0; i < iters && ok; i++) {
            double start = now_s();
            if (b->agg == 1) {
                call_t ki = rotated(b, co, k, i);
                ok = checked(b, co->name, co->run(&ki, NULL, NULL));
            } else {
                nreqs = 0;
                ok = post_iteration(b, co, k, i, &nreqs);
                ok = wait_from(b, 0, nreqs, ok);
            }
            double done = now_s();
            if (ok && b->blocking != 2) ok = checked(b, "barrier", hoop_barrier(b->comm));
            double met = now_s();
            if (b->blocking == 3) left_out += met - done;
            if (it) it[i] = ((b->blocking == 1 ? met : done) - start) / b->agg;
        }
    }
    *secs = now_s() - t0 - left_out;
    return ok;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* -I: the iterations' times, each the slowest rank's, after the first -K, into v. Collective. */
static int iter_stats(bench_t *b, variant_t *v)
{
    int n = b->iters - b->per_iter_skip;
    if (!checked(b, "combining the per-iteration times",
                 hoop_allreduce(b->comm, b->iter_t, b->iter_t, (size_t)b->iters, HOOP_FLOAT64,
                                HOOP_MAX)))
        return 0;
    double *t = b->iter_t + b->per_iter_skip, sum = 0, var = 0;
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    for (int i = 0; i < n; i++) sum += t[i];
    v->i_avg = sum / n;
    for (int i = 0; i < n; i++) var += (t[i] - v->i_avg) * (t[i] - v->i_avg);
    /* Nearest rank: the smallest time that at least p% of the iterations do not exceed. */
    int p95 = (n * 95 + 99) / 100 - 1, p99 = (n * 99 + 99) / 100 - 1;
    v->i_min = t[0] * 1e6;
    v->i_max = t[n - 1] * 1e6;
    v->i_p50 = t[n / 2] * 1e6;
    v->i_p95 = t[p95 < n ? p95 : n - 1] * 1e6;
    v->i_p99 = t[p99 < n ? p99 : n - 1] * 1e6;
    v->i_cv = v->i_avg > 0 ? sqrt(var / n) / v->i_avg * 100 : 0;
    v->i_avg *= 1e6;
    v->i_n = n;
    v->has_iter = 1;
    return 1;
}

/* Page faults of every thread of this process so far (the engine's run on the progress thread). */
static long page_faults(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_minflt + u.ru_majflt : 0;
}

/* --rotate: one untimed call on every set, so that the timed calls meet cold caches, not pages
 * that no call has touched yet. Symmetric memory needs it most: a rank's first touch of a peer's
 * page through its own mapping is a page fault, which the memset of the pools at their allocation
 * (each rank its own pages) does not take for it. The pass ends on the last set, so the first
 * timed call's set is the one longest out of the cache. */
static int touch_sets(const bench_t *b, const coll_t *co, const call_t *k)
{
    size_t sets = rotate_sets(b, co, k);
    for (size_t i = 0; i < sets; i++) {
        call_t ki = rotated(b, co, k, (int)i);
        if (!checked(b, co->name, co->run(&ki, NULL, NULL))) return 0;
    }
    return 1;
}

/* Times one variant; when checking, runs it once more on fresh inputs over a receive buffer
 * filled with a sentinel and counts the elements that differ from b->ebuf. */
static int run_variant(bench_t *b, const coll_t *co, call_t *k, int inplace, variant_t *v)
{
    place(b, co, k, inplace);
    if (!load_input(b, co, k)) return 0;
    double secs;
    if (b->warm_each && b->warmup > 0 && !run_batch(b, co, k, b->warmup, NULL, &secs)) return 0;
    if (!touch_sets(b, co, k)) return 0;
    if (!checked(b, "barrier", hoop_barrier(b->comm))) return 0;
    long f0 = page_faults();
    if (!run_batch(b, co, k, b->iters, b->per_iter ? b->iter_t : NULL, &secs)) return 0;
    v->us = secs / ((double)b->iters * b->agg) * 1e6;
    v->ran = 1;
    if (b->bound || b->rotate) {
        v->faults = (double)(page_faults() - f0) / ((double)b->iters * b->agg);
        if (!checked(b, "combining the page faults",
                     hoop_allreduce(b->comm, &v->faults, &v->faults, 1, HOOP_FLOAT64, HOOP_MAX)))
            return 0;
        v->has_faults = 1;
    }
    if (b->per_iter && !iter_stats(b, v)) return 0;
    if (!b->check || !co->expect) return 1;

    size_t ns = kind_send(co->counts, k->count, k->size),
           nr = kind_recv(co->counts, k->count, k->size);
    size_t span = (ns > nr ? ns : nr) * k->es;
    memset(b->dev ? b->hrbuf : b->rbuf, SENTINEL_BYTE, span);
    if (b->dev && !device_copy(b, b->rbuf, b->hrbuf, span)) return 0;
    if (!load_input(b, co, k)) return 0;
    if (!checked(b, co->name, co->run(k, NULL, NULL))) return 0;
    v->checked = 1;
    if (!rank_receives(co, k)) return 1;
    const void *got = k->r;
    if (b->dev) { /* the device result, back in its twin */
        got = twin(b, k->r);
        if (!device_copy(b, twin(b, k->r), k->r, nr * k->es)) return 0;
    }
    for (size_t i = 0; i < nr; i++)
        if (rc_ld(got, i, k->es) != rc_ld(b->ebuf, i, k->es)) v->wrong++;
    return 1;
}

/* Combines the ranks' times as -a asks and sums their wrong elements. */
static int combine(bench_t *b, row_t *row)
{
    double t[2] = {row->v[0].us, row->v[1].us};
    uint64_t w[2] = {row->v[0].wrong, row->v[1].wrong};
    /* -a 1, 2, 3: mean, min, max over ranks; -a 0 broadcasts rank 0's instead */
    static const hoop_op_t time_ops[4] = {HOOP_SUM, HOOP_AVG, HOOP_MIN, HOOP_MAX};
    hoop_result_t e = b->average == 0
                          ? hoop_broadcast(b->comm, t, 2, HOOP_FLOAT64, 0)
                          : hoop_allreduce(b->comm, t, t, 2, HOOP_FLOAT64, time_ops[b->average]);
    if (e == HOOP_OK) e = hoop_allreduce(b->comm, w, w, 2, HOOP_UINT64, HOOP_SUM);
    if (!checked(b, "combining the ranks' results", e)) return 0;
    for (int ip = 0; ip < 2; ip++) {
        variant_t *v = &row->v[ip];
        v->us = t[ip];
        v->wrong = w[ip];
        if (!v->ran || !b->coll->bus_factor) continue;
        v->has_bw = 1;
        v->algbw = v->us > 0 ? (double)row->size / 1e9 / (v->us * 1e-6) : 0.0;
        v->busbw = v->algbw * b->coll->bus_factor(b->size);
        b->bw_sum += v->busbw;
        b->bw_count++;
    }
    b->wrong_total += w[0] + w[1];
    return 1;
}

static void saw_cma(void *ctx, const char *line)
{
    if (strstr(line, "with process_vm_readv") != NULL) *(int *)ctx = 1;
}

/* Whether the library ran a call of k single copy (HOOP_CMA; its trace says it), from one
 * more call, untimed, after the row's: the algorithm column says "cma" then, and --bound takes
 * its traffic. 0 where the call failed (then its error was said). */
static int ran_cma(const bench_t *b, const coll_t *co, const call_t *k)
{
    int seen = 0;
    if (!checked(b, "hoop_comm_set_trace", hoop_comm_set_trace(b->comm, saw_cma, &seen))) return 0;
    int ok = checked(b, co->name, co->run(k, NULL, NULL));
    ok = checked(b, "hoop_comm_set_trace", hoop_comm_set_trace(b->comm, NULL, NULL)) && ok;
    return ok && seen;
}

static int run_row(bench_t *b, size_t bytes, hoop_dtype_t dt, hoop_op_t op, int root)
{
    const coll_t *co = b->coll;
    size_t es = hoop_dtype_size(dt), count = kind_count(co->counts, bytes, es, b->size);
    size_t ns = kind_send(co->counts, count, b->size), nr = kind_recv(co->counts, count, b->size);
    call_t k = make_call(b, dt, op, root < 0 ? 0 : root, count);
    row_t row;
    memset(&row, 0, sizeof row);
    row.size = (ns > nr ? ns : nr) * es;
    row.count = count;
    row.dt = co->counts == CK_NONE ? -1 : (int)dt;
    row.op = co->flags & F_OP ? (int)op : -1;
    row.root = root;
    if (b->check && rank_receives(co, &k))
        for (size_t i = 0; i < nr; i++) rc_st(b->ebuf, i, es, co->expect(&k, b->rank, i));
    int variants = co->flags & F_NO_INPLACE || b->model ? 1 : 2;
    for (int ip = 0; ip < variants; ip++)
        if (!run_variant(b, co, &k, ip, &row.v[ip])) return 0;
    if (b->one_host && !b->dev && !b->model &&
        (!strcmp(co->name, "allreduce") || !strcmp(co->name, "reducescatter") ||
         !strcmp(co->name, "allgather")))
        row.cma = ran_cma(b, co, &k);
    if (!combine(b, &row)) return 0;
    if (b->rank != 0) return 1;
    if (b->timestamps) {
        time_t now = time(NULL);
        struct tm tm;
        if (gmtime_r(&now, &tm) == NULL ||
            strftime(row.stamp, sizeof row.stamp, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
            snprintf(row.stamp, sizeof row.stamp, "unknown");
    }
    for (int ip = 0; ip < variants; ip++) set_bound(b, &row, ip);
    if (b->model) {
        print_model_row(b, &row);
        return 1;
    }
    print_row(b, &row);
    return !(b->json || b->csv) || keep_row(b, &row);
}

/* The size after `bytes`, or 0 when the range is done. */
static int next_size(const bench_t *b, size_t *bytes)
{
    size_t v = *bytes;
    if (b->factor > 1) {
        if (v > b->maxb / b->factor) return 0;
        v = v == 0 ? 1 : v * b->factor;
    } else {
        if (v > b->maxb - b->step) return 0;
        v += b->step;
    }
    *bytes = v;
    return v <= b->maxb;
}

static int run_sizes(bench_t *b, hoop_dtype_t dt, hoop_op_t op, int root)
{
    const coll_t *co = b->coll;
    size_t es = hoop_dtype_size(dt);
    /* Warm up at the largest and the smallest size, as nccl-tests does. */
    size_t ends[2] = {b->maxb, b->minb};
    for (int i = 0; i < 2 && b->warmup > 0; i++) {
        call_t k = make_call(b, dt, op, root < 0 ? 0 : root,
                             kind_count(co->counts, ends[i], es, b->size));
        place(b, co, &k, 0);
        double secs;
        if (!run_batch(b, co, &k, b->warmup, NULL, &secs)) return 0;
    }
    if (co->counts == CK_NONE) return run_row(b, 0, dt, op, root);
    size_t bytes = b->minb;
    do {
        if (!run_row(b, bytes, dt, op, root)) return 0;
    } while (next_size(b, &bytes));
    return 1;
}

int run_all(bench_t *b)
{
    const coll_t *co = b->coll;
    for (int d = 0; d < HOOP_DTYPE_COUNT; d++) {
        if (!(b->dtypes & (1u << d))) continue;
        for (int o = 0; o < HOOP_OP_COUNT; o++) {
            if (co->flags & F_OP ? !(b->ops & (1u << o)) : o != 0) continue;
            int r0 = -1, r1 = -1;
            if (co->flags & F_ROOT) {
                r0 = b->root < 0 ? 0 : b->root;
                r1 = b->root < 0 ? b->size - 1 : b->root;
            }
            for (int r = r0; r <= r1; r++)
                if (!run_sizes(b, (hoop_dtype_t)d, (hoop_op_t)o, r)) return 0;
        }
        if (co->counts == CK_NONE) break; /* no data: one pass */
    }
    return 1;
}

/* Buffers for the largest row of every chosen dtype; in place needs the larger of the two sides. */
int alloc_buffers(bench_t *b)
{
    const coll_t *co = b->coll;
    size_t sb = 0, rb = 0, eb = 0;
    for (int d = 0; d < HOOP_DTYPE_COUNT; d++) {
        if (!(b->dtypes & (1u << d))) continue;
        size_t es = hoop_dtype_size((hoop_dtype_t)d),
               count = kind_count(co->counts, b->maxb, es, b->size);
        size_t ns = kind_send(co->counts, count, b->size) * es,
               nr = kind_recv(co->counts, count, b->size) * es;
        if (ns > sb) sb = ns;
        if (nr > eb) eb = nr;
        if (ns > rb) rb = ns;
        if (nr > rb) rb = nr;
    }
    b->scap = sb;
    b->rcap = rb;
    b->ecap = eb;
    b->ebuf = malloc(eb ? eb : 1);
    if (b->dev) {
        /* Device buffers start from the twins' zeros, as the host ones do. */
        b->hsbuf = calloc(1, sb ? sb : 1);
        b->hrbuf = calloc(1, rb ? rb : 1);
        if (!b->hsbuf || !b->hrbuf) goto oom;
        if (!(b->sbuf = device_alloc(b, sb)) || !(b->rbuf = device_alloc(b, rb)) ||
            !device_copy(b, b->sbuf, b->hsbuf, sb) || !device_copy(b, b->rbuf, b->hrbuf, rb))
            return 0;
    } else if (b->sym) {
        /* Every rank computes the same sizes from the same options, as hoop_mem_alloc asks;
         * the memory starts zeroed, as calloc's. */
        size_t sp = rotate_pool(b, sb), rp = rotate_pool(b, rb);
        void *s = NULL, *r = NULL;
        if (!checked(b, "hoop_mem_alloc", hoop_mem_alloc(b->comm, sp ? sp : 1, &s)) ||
            !checked(b, "hoop_mem_alloc", hoop_mem_alloc(b->comm, rp ? rp : 1, &r)))
            return 0;
        b->sbuf = s;
        b->rbuf = r;
        if (b->rotate) {
            memset(b->sbuf, 0x3c, sp);
            memset(b->rbuf, 0x3c, rp);
        }
    } else {
        size_t sp = rotate_pool(b, sb), rp = rotate_pool(b, rb);
        b->sbuf = calloc(1, sp ? sp : 1);
        b->rbuf = calloc(1, rp ? rp : 1);
        /* --rotate: every set's pages written now, so that no timed call takes their faults
         * (zeros would not do: the compiler may drop a memset of zeros after calloc). 0x3c in
         * every byte is a normal number in every float type, so no fold meets subnormals. */
        if (b->rotate && b->sbuf && b->rbuf) {
            memset(b->sbuf, 0x3c, sp);
            memset(b->rbuf, 0x3c, rp);
        }
    }
    /* sendrecv posts two requests per call */
    size_t most = (size_t)(b->iters > b->warmup ? b->iters : b->warmup);
    b->reqs = calloc(2 * most * (size_t)b->agg + 2, sizeof *b->reqs);
    b->iter_end = calloc(most + 1, sizeof *b->iter_end);
    b->iter_t = calloc(most + 1, sizeof *b->iter_t);
    if (b->sbuf && b->rbuf && b->ebuf && b->reqs && b->iter_end && b->iter_t) return 1;
oom:
    fprintf(stderr, "hoop-perf: rank %d: out of memory for buffers of %zu bytes\n", b->rank, rb);
    return 0;
}

/* Settles on every rank what only some may see (a bad root, no memory, a file not writable):
 * returns the worst status, 0 when all is well. */
int agree(bench_t *b, int status)
{
    int32_t s = status;
    if (!checked(b, "allreduce of the start-up status",
                 hoop_allreduce(b->comm, &s, &s, 1, HOOP_INT32, HOOP_MAX)))
        return 1;
    return (int)s;
}
