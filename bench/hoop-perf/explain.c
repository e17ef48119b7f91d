/* --explain: runs one traced all-reduce and prints the library's plan for it (who runs it and
 * why, from its "plan:" trace lines), every rank's schedule, by step, and its traffic. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"
#include "../../common/refcheck.h"
#include "hoop-perf.h"

#define TRACE_BYTES (64 * 1024) /* trace text kept per rank */

typedef struct trace_buf {
    char *text; /* lines, each ending in '\n'; always NUL-terminated */
    size_t len;
    uint64_t dropped;
} trace_buf_t;

/* Runs on whichever thread runs the collective; the buffer is read only after the call returns,
 * which orders these writes before the reads. */
static void trace_append(void *ctx, const char *line)
{
    trace_buf_t *t = ctx;
    size_t n = strcspn(line, "\n");
    if (t->len + n + 2 > TRACE_BYTES) {
        t->dropped++;
        return;
    }
    memcpy(t->text + t->len, line, n);
    t->len += n;
    t->text[t->len++] = '\n';
    t->text[t->len] = '\0';
}

typedef struct trace_line {
    int step, rank;
    size_t seq;
    const char *text;
    int len;
} trace_line_t;

static int by_step_then_rank(const void *pa, const void *pb)
{
    const trace_line_t *a = pa, *b = pb;
    if (a->step != b->step) return a->step < b->step ? -1 : 1;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* "<collective>#<call> <algo> step <k>: ..." gives k; -1 for a line without a step. */
static int line_step(const char *s, size_t len)
{
    const char *colon = memchr(s, ':', len), *p = s;
    if (!colon) return -1;
    for (;;) {
        const char *q = memchr(p, ' ', (size_t)(colon - p));
        if (!q) return -1;
        p = q + 1;
        if (colon - p > 5 && !strncmp(p, "step ", 5)) {
            char *end;
            long k = strtol(p + 5, &end, 10);
            return end == colon && k >= 0 && k < 1000000 ? (int)k : -1;
        }
    }
}

static void print_schedule(const bench_t *b, const char *all, const uint64_t *stats)
{
    size_t cap = 0, n = 0;
    for (int r = 0; r < b->size; r++)
        for (const char *p = all + (size_t)r * TRACE_BYTES; *p; p++) cap += *p == '\n';
    cap += (size_t)b->size; /* a last line without its newline */
    trace_line_t *lines = calloc(cap ? cap : 1, sizeof *lines);
    if (!lines) {
        fprintf(stderr, "hoop-perf: out of memory for the schedule\n");
        return;
    }
    for (int r = 0; r < b->size; r++) {
        int step = -1; /* a line without a step stays after the line before it */
        for (const char *p = all + (size_t)r * TRACE_BYTES; *p;) {
            const char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            int k = line_step(p, len);
            if (k >= 0) step = k;
            lines[n] = (trace_line_t){step, r, n, p, (int)len};
            n++;
            p += e ? len + 1 : len;
        }
    }
    qsort(lines, n, sizeof *lines, by_step_then_rank);
    printf("# schedule, by step then rank:\n");
    for (size_t i = 0; i < n; i++)
        printf("[rank %d] %.*s\n", lines[i].rank, lines[i].len, lines[i].text);
    for (int r = 0; r < b->size; r++)
        if (stats[r * 6 + 4])
            printf("# rank %d: %" PRIu64 " more lines left out (%d bytes of trace per rank)\n", r,
                   stats[r * 6 + 4], TRACE_BYTES);
    if (n == 0) printf("# (no schedule lines: the library traced nothing)\n");
    free(lines);
}

/* The plan as rank 0's trace says it: its "plan: " lines, the last one final (a one-host engine
 * that gives way is planned again). */
static void print_plan(const char *trace)
{
    int n = 0;
    for (const char *p = trace; (p = strstr(p, ": plan: ")) != NULL; n++) {
        p += 8;
        size_t len = strcspn(p, "\n");
        printf("# plan%s: %.*s\n", n > 0 ? ", then" : "", (int)len, p);
        p += len;
    }
    if (n == 0) printf("# plan: (no plan line: the library traced none)\n");
    printf("#\n");
}

static void print_traffic(const bench_t *b, size_t bytes, const uint64_t *stats)
{
    printf("#\n# traffic of this all-reduce: payload bytes per rank; x: multiple of the %zu-byte "
           "buffer\n",
           bytes);
    printf("# %5s  %12s  %6s  %12s  %6s  %9s  %9s\n", "rank", "sent", "x", "received", "x",
           "msgs sent", "msgs recv");
    uint64_t tot[4] = {0, 0, 0, 0};
    for (int r = 0; r < b->size; r++) {
        const uint64_t *s = &stats[r * 6];
        double xs = bytes ? (double)s[0] / (double)bytes : 0.0,
               xr = bytes ? (double)s[1] / (double)bytes : 0.0;
        printf("  %5d  %12" PRIu64 "  %5.2fx  %12" PRIu64 "  %5.2fx  %9" PRIu64 "  %9" PRIu64 "\n",
               r, s[0], xs, s[1], xr, s[2], s[3]);
        for (int i = 0; i < 4; i++) tot[i] += s[i];
    }
    printf("  %5s  %12" PRIu64 "  %6s  %12" PRIu64 "  %6s  %9" PRIu64 "  %9" PRIu64 "\n", "all",
           tot[0], "", tot[1], "", tot[2], tot[3]);
}

int run_explain(bench_t *b)
{
    const coll_t *co = b->coll;
    call_t k = make_call(b, HOOP_FLOAT32, HOOP_SUM, 0, b->minb / sizeof(float));
    size_t bytes = k.count * k.es;
    trace_buf_t tb = {calloc(1, TRACE_BYTES), 0, 0};
    char *all = b->rank == 0 ? calloc((size_t)b->size, TRACE_BYTES) : NULL;
    uint64_t mine[6] = {0}, *stats = calloc((size_t)b->size * 6, sizeof *stats);
    int ok = tb.text && stats && (all || b->rank != 0);
    if (!ok) fprintf(stderr, "hoop-perf: rank %d: out of memory\n", b->rank);
    hoop_stats_t s0, s1;
    if (ok) {
        place(b, co, &k, 0);
        fill_input(co, &k);
        memset(k.r, SENTINEL_BYTE, bytes);
        ok = checked(b, "barrier", hoop_barrier(b->comm)) &&
             checked(b, "hoop_comm_stats", hoop_comm_stats(b->comm, &s0)) &&
             checked(b, "hoop_comm_set_trace", hoop_comm_set_trace(b->comm, trace_append, &tb));
    }
    if (ok) {
        ok = checked(b, co->name, co->run(&k, NULL, NULL));
        ok = checked(b, "hoop_comm_set_trace", hoop_comm_set_trace(b->comm, NULL, NULL)) && ok;
        ok = ok && checked(b, "hoop_comm_stats", hoop_comm_stats(b->comm, &s1));
    }
    if (ok) {
        uint64_t wrong = 0;
        for (size_t i = 0; i < k.count; i++)
            if (rc_ld(k.r, i, k.es) != co->expect(&k, b->rank, i)) wrong++;
        uint64_t v[6] = {s1.bytes_sent - s0.bytes_sent,
                         s1.bytes_received - s0.bytes_received,
                         s1.messages_sent - s0.messages_sent,
                         s1.messages_received - s0.messages_received,
                         tb.dropped,
                         wrong};
        memcpy(mine, v, sizeof mine);
        ok = checked(b, "gather of the traces",
                     hoop_gather(b->comm, tb.text, all, TRACE_BYTES, HOOP_UINT8, 0)) &&
             checked(b, "gather of the traffic",
                     hoop_gather(b->comm, mine, stats, 6, HOOP_UINT64, 0));
    }
    if (ok) {
        uint64_t wrong = mine[5];
        ok = checked(b, "allreduce of the check",
                     hoop_allreduce(b->comm, &wrong, &wrong, 1, HOOP_UINT64, HOOP_SUM));
        b->wrong_total = wrong;
    }
    if (ok && b->rank == 0) {
        printf("# hoop-perf explain: one all-reduce of %zu bytes (%zu float32, sum) on %d ranks, "
               "algorithm %s\n#\n",
               bytes, k.count, b->size, b->algo);
        for (int r = 0; r < b->size; r++) all[(size_t)(r + 1) * TRACE_BYTES - 1] = '\0';
        print_plan(all);
        print_schedule(b, all, stats);
        print_traffic(b, bytes, stats);
        printf("#\n# Out of bounds values : %" PRIu64 " %s\n", b->wrong_total,
               b->wrong_total ? "FAILED" : "OK");
        fflush(stdout);
    }
    free(tb.text);
    free(all);
    free(stats);
    return ok;
}
