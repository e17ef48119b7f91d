/* hoop-perf's reports: the header and the rows of the table on stdout (nccl-tests' layout), the
 * closing summary, and every row again in the --csv and --json files. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hoop.h"
#include "../bench_util.h"
#include "hoop-perf.h"

/* ---- the table ---- */

typedef struct rank_info {
    int32_t pid;
    int32_t local_rank;
    char host[56];
} rank_info_t;

int print_header(bench_t *b)
{
    rank_info_t me, *all = calloc((size_t)b->size, sizeof *all);
    if (!all) {
        fprintf(stderr, "hoop-perf: rank %d: out of memory\n", b->rank);
        return 0;
    }
    memset(&me, 0, sizeof me);
    me.pid = (int32_t)getpid();
    const char *lr = getenv("LOCAL_RANK");
    me.local_rank = lr ? atoi(lr) : -1;
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "unknown");
    if (!checked(b, "allgather of the rank list",
                 hoop_allgather(b->comm, &me, all, sizeof me, HOOP_UINT8))) {
        free(all);
        return 0;
    }
    b->one_host = 1;
    for (int r = 1; r < b->size; r++)
        if (strncmp(all[r].host, all[0].host, sizeof all[r].host - 1) != 0) b->one_host = 0;
    /* Every rank took the same view of the hosts: they measure together or not at all. */
    if (b->bound && b->one_host && b->copy_rate <= 0 && !measure_copy_rate(b)) {
        if (b->rank == 0)
            fprintf(stderr, "hoop-perf: --bound: the copy rate could not be measured\n");
        free(all);
        return 0;
    }
    if (b->rank == 0) {
        char step[48];
        if (b->factor > 1)
            snprintf(step, sizeof step, "%zu(factor)", b->factor);
        else
            snprintf(step, sizeof step, "%zu(bytes)", b->step);
        static const char *const avg[] = {"rank 0", "mean", "min", "max"};
        printf("# hoop-perf %s: nRanks %d minBytes %zu maxBytes %zu step: %s warmup iters: %d "
               "iters: %d agg iters: %d validation: %d blocking: %d time: %s over ranks\n",
               b->coll->name, b->size, b->minb, b->maxb, step, b->warmup, b->iters, b->agg,
               b->check, b->blocking, avg[b->average]);
        static const char *const modes[] = {
            "all calls posted, then waited for", "a barrier after each iteration (timed)",
            "each iteration waited for, no barrier", "a barrier after each iteration (not timed)"};
        printf("# -z %d: %s\n", b->blocking, modes[b->blocking]);
        if (b->per_iter)
            printf("# -I: i_* per call over the timed iterations%s, each the slowest rank's%s\n",
                   b->per_iter_skip ? " after the first -K" : "",
                   b->blocking == 0 ? " (-z 0: from the end of the iteration before)" : "");
        /* With a list each sweep says its own algorithm ("# --algo NAME") before its rows. */
        printf("# hoop %s transport: %s algorithm: %s%s\n", hoop_version(), b->transport, b->algo,
               strchr(b->algo, ',') ? " (one sweep each)" : "");
        if (b->dev)
            printf("# buffers: CUDA device %d (%s)\n", b->cuda_dev, device_name(b));
        else
            print_buffers(b, stdout);
        print_bound_header(b, stdout);
        printf("#\n# Using ranks\n");
        for (int r = 0; r < b->size; r++) {
            all[r].host[sizeof all[r].host - 1] = '\0';
            printf("#  Rank %2d Pid %6d on %10s local rank %2d\n", r, (int)all[r].pid, all[r].host,
                   (int)all[r].local_rank);
        }
        printf("#\n");
        printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place  "
               "        %s\n",
               "", "", "", "", "", b->bound ? "   memory traffic bound" : "");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size", "count",
               "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
               "busbw", "#wrong");
        if (b->bound) printf("  %12s  %5s  %5s", "traffic", "oop", "ip");
        for (int ip = 0; b->per_iter && ip < 2; ip++)
            printf("  %7s  %7s  %7s  %6s", ip ? "ip_min" : "i_min", ip ? "ip_max" : "i_max",
                   ip ? "ip_p99" : "i_p99", ip ? "ip_cv" : "i_cv");
        if (b->timestamps) printf("  %20s", "timestamp");
        printf("\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
               "");
        if (b->bound) printf("  %12s  %5s  %5s", "(B, oop)", "", "");
        for (int ip = 0; b->per_iter && ip < 2; ip++)
            printf("  %7s  %7s  %7s  %6s", "(us)", "(us)", "(us)", "(%)");
        if (b->timestamps) printf("  %20s", "(UTC)");
        printf("\n");
        fflush(stdout);
    }
    free(all);
    return 1;
}

void print_row(const bench_t *b, const row_t *row)
{
    char root[16];
    snprintf(root, sizeof root, "%d", row->root);
    printf("%12zu  %12zu  %8s  %6s  %6s", row->size, row->count,
           row->dt >= 0 ? hoop_dtype_name((hoop_dtype_t)row->dt) : "none",
           row->op >= 0 ? hoop_op_name((hoop_op_t)row->op) : "none", root);
    for (int ip = 0; ip < 2; ip++) {
        const variant_t *v = &row->v[ip];
        char ts[32] = "N/A", ab[16] = "N/A", bb[16] = "N/A", ws[32];
        if (v->ran) bench_time_str(v->us, ts, sizeof ts);
        if (v->has_bw) {
            snprintf(ab, sizeof ab, "%6.2f", v->algbw);
            snprintf(bb, sizeof bb, "%6.2f", v->busbw);
        }
        if (v->checked)
            snprintf(ws, sizeof ws, "%5" PRIu64, v->wrong);
        else
            snprintf(ws, sizeof ws, "%5s", "N/A");
        printf("  %7s  %6s  %6s  %5s", ts, ab, bb, ws);
    }
    if (b->bound) {
        const variant_t *o = &row->v[0], *i = &row->v[1];
        char tr[24] = "N/A", f0[16] = "N/A", f1[16] = "N/A";
        if (o->has_bound) snprintf(tr, sizeof tr, "%12.0f", o->traffic);
        if (o->has_bound) snprintf(f0, sizeof f0, "%5.2f", o->bound);
        if (i->has_bound) snprintf(f1, sizeof f1, "%5.2f", i->bound);
        printf("  %12s  %5s  %5s", tr, f0, f1);
    }
    for (int ip = 0; b->per_iter && ip < 2; ip++) {
        const variant_t *v = &row->v[ip];
        char mn[32] = "N/A", mx[32] = "N/A", p99[32] = "N/A", cv[16] = "N/A";
        if (v->has_iter) {
            bench_time_str(v->i_min, mn, sizeof mn);
            bench_time_str(v->i_max, mx, sizeof mx);
            bench_time_str(v->i_p99, p99, sizeof p99);
            snprintf(cv, sizeof cv, "%6.1f", v->i_cv);
        }
        printf("  %7s  %7s  %7s  %6s", mn, mx, p99, cv);
    }
    if (b->timestamps) printf("  %20s", row->stamp);
    printf("\n");
    fflush(stdout);
}

int keep_row(bench_t *b, const row_t *row)
{
    if (b->nrows == b->rows_cap) {
        size_t cap = b->rows_cap ? 2 * b->rows_cap : 64;
        row_t *r = realloc(b->rows, cap * sizeof *r);
        if (!r) {
            fprintf(stderr, "hoop-perf: out of memory for the --json/--csv rows\n");
            return 0;
        }
        b->rows = r;
        b->rows_cap = cap;
    }
    b->rows[b->nrows] = *row;
    b->rows[b->nrows++].algo = row->cma ? "cma" : b->algo;
    return 1;
}

void print_summary(const bench_t *b)
{
    printf("# Out of bounds values : %" PRIu64 " %s\n", b->wrong_total,
           b->wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n", b->bw_count ? b->bw_sum / b->bw_count : 0.0);
    printf("#\n");
    fflush(stdout);
}

/* ---- --json and --csv ---- */

/* The fields of a row: nccl-tests' 17, then groups that their flags add. */
enum { F_BASE = 17, F_BOUND = 7, F_ITER = 14, F_STAMP = 1 };
#define NFIELDS (F_BASE + F_BOUND + F_ITER + F_STAMP)
static const char *const FIELD_NAMES[NFIELDS] = {
    "collective", "algo", "transport", "ranks", "size_bytes", "count", "type", "redop", "root",
    "oop_time_us", "oop_algbw", "oop_busbw", "oop_wrong", "ip_time_us", "ip_algbw", "ip_busbw",
    "ip_wrong",
    /* --bound or --rotate: the buffers, and traffic and bound per variant */
    "buffers", "oop_traffic_bytes", "oop_bound", "ip_traffic_bytes", "ip_bound",
    "oop_faults_per_call", "ip_faults_per_call",
    /* -I: per variant, over the iterations after -K's, each the slowest rank's, per call */
    "oop_i_min_us", "oop_i_max_us", "oop_i_avg_us", "oop_i_p50_us", "oop_i_p95_us", "oop_i_p99_us",
    "oop_i_cv_pct", "ip_i_min_us", "ip_i_max_us", "ip_i_avg_us", "ip_i_p50_us", "ip_i_p95_us",
    "ip_i_p99_us", "ip_i_cv_pct",
    /* -S */
    "timestamp"};

/* Whether field i is written for this run. */
static int has_field(const bench_t *b, int i)
{
    if (i < F_BASE) return 1;
    if (i < F_BASE + F_BOUND) return b->bound || b->rotate;
    if (i < F_BASE + F_BOUND + F_ITER) return b->per_iter;
    return b->timestamps;
}

/* A string (str set), a number (num), or nothing (both empty: CSV "", JSON null). */
typedef struct field {
    const char *str;
    char num[40];
} field_t;

static void row_fields(const bench_t *b, const row_t *row, field_t f[NFIELDS])
{
    memset(f, 0, NFIELDS * sizeof *f);
    f[0].str = b->coll->name;
    f[1].str = row->algo;
    f[2].str = b->transport;
    snprintf(f[3].num, sizeof f[3].num, "%d", b->size);
    snprintf(f[4].num, sizeof f[4].num, "%zu", row->size);
    snprintf(f[5].num, sizeof f[5].num, "%zu", row->count);
    f[6].str = row->dt >= 0 ? hoop_dtype_name((hoop_dtype_t)row->dt) : "none";
    f[7].str = row->op >= 0 ? hoop_op_name((hoop_op_t)row->op) : "none";
    snprintf(f[8].num, sizeof f[8].num, "%d", row->root);
    for (int ip = 0; ip < 2; ip++) {
        const variant_t *v = &row->v[ip];
        field_t *g = &f[9 + 4 * ip];
        if (v->ran) snprintf(g[0].num, sizeof g[0].num, "%.3f", v->us);
        if (v->has_bw) {
            snprintf(g[1].num, sizeof g[1].num, "%.6f", v->algbw);
            snprintf(g[2].num, sizeof g[2].num, "%.6f", v->busbw);
        }
        if (v->checked) snprintf(g[3].num, sizeof g[3].num, "%" PRIu64, v->wrong);
        if (v->has_bound) {
            snprintf(f[18 + 2 * ip].num, sizeof f[0].num, "%.0f", v->traffic);
            snprintf(f[19 + 2 * ip].num, sizeof f[0].num, "%.4f", v->bound);
        }
        if (v->has_faults) snprintf(f[22 + ip].num, sizeof f[0].num, "%.1f", v->faults);
        if (v->has_iter) {
            const double x[7] = {v->i_min, v->i_max, v->i_avg, v->i_p50,
                                 v->i_p95, v->i_p99, v->i_cv};
            for (int j = 0; j < 7; j++)
                snprintf(f[F_BASE + F_BOUND + 7 * ip + j].num, sizeof f[0].num, "%.3f", x[j]);
        }
    }
    f[17].str = b->rotate ? "rotated" : "hot";
    if (row->stamp[0]) f[NFIELDS - 1].str = row->stamp;
}

static void csv_str(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\r\n") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

int write_csv(const bench_t *b)
{
    FILE *f = b->csv;
    for (int i = 0, n = 0; i < NFIELDS; i++)
        if (has_field(b, i)) fprintf(f, "%s%s", n++ ? "," : "", FIELD_NAMES[i]);
    fputc('\n', f);
    for (size_t r = 0; r < b->nrows; r++) {
        field_t fs[NFIELDS];
        row_fields(b, &b->rows[r], fs);
        for (int i = 0, n = 0; i < NFIELDS; i++) {
            if (!has_field(b, i)) continue;
            if (n++) fputc(',', f);
            if (fs[i].str)
                csv_str(f, fs[i].str);
            else
                fputs(fs[i].num, f);
        }
        fputc('\n', f);
    }
    return fflush(f) == 0 && !ferror(f);
}

int write_json(const bench_t *b, int ok)
{
    FILE *f = b->json;
    fprintf(f, "{\n  \"tool\": \"hoop-perf\",\n  \"version\": ");
    json_str(f, hoop_version());
    fprintf(f, ",\n  \"collective\": ");
    json_str(f, b->coll->name);
    fprintf(f, ",\n  \"algo\": ");
    json_str(f, b->algo);
    fprintf(f, ",\n  \"transport\": ");
    json_str(f, b->transport);
    fprintf(f,
            ",\n  \"ranks\": %d,\n  \"min_bytes\": %zu,\n  \"max_bytes\": %zu,\n  \"%s\": %zu,\n"
            "  \"iters\": %d,\n  \"agg_iters\": %d,\n  \"warmup_iters\": %d,\n  \"check\": %d,\n  "
            "\"blocking\": %d,\n"
            "  \"average\": %d,\n  \"out_of_bounds\": %" PRIu64 ",\n  \"avg_busbw\": %.6f,\n"
            "  \"ok\": %s,\n",
            b->size, b->minb, b->maxb, b->factor > 1 ? "step_factor" : "step_bytes",
            b->factor > 1 ? b->factor : b->step, b->iters, b->agg, b->warmup, b->check, b->blocking,
            b->average, b->wrong_total, b->bw_count ? b->bw_sum / b->bw_count : 0.0,
            ok ? "true" : "false");
    fprintf(f, "  \"per_iter_timing\": %d,\n  \"per_iter_skip\": %d,\n", b->per_iter,
            b->per_iter_skip);
    if (b->memory) write_memory_json(b, f);
    /* Whether the timed calls found their buffers in the cache, and the bound's copy rate. */
    fprintf(f, "  \"buffers\": \"%s\",\n  \"rotate_bytes\": %zu,\n  \"llc_bytes\": %zu,\n",
            b->dev      ? "device"
            : b->rotate ? "rotated"
                        : "hot",
            b->rotate, llc_bytes());
    if (b->bound && b->one_host && b->copy_rate > 0)
        fprintf(f, "  \"copy_rate_gbs\": %.4f,\n  \"copy_rate_measured\": %s,\n",
                b->copy_rate / 1e9, b->copy_bytes ? "true" : "false");
    else
        fprintf(f, "  \"copy_rate_gbs\": null,\n  \"copy_rate_measured\": false,\n");
    fprintf(f, "  \"rows\": [");
    for (size_t r = 0; r < b->nrows; r++) {
        field_t fs[NFIELDS];
        row_fields(b, &b->rows[r], fs);
        fprintf(f, "%s\n    {", r ? "," : "");
        for (int i = 0, n = 0; i < NFIELDS; i++) {
            if (!has_field(b, i)) continue;
            fprintf(f, "%s\"%s\": ", n++ ? ", " : "", FIELD_NAMES[i]);
            if (fs[i].str)
                json_str(f, fs[i].str);
            else
                fputs(fs[i].num[0] ? fs[i].num : "null", f);
        }
        fputc('}', f);
    }
    fprintf(f, "\n  ]\n}\n");
    return fflush(f) == 0 && !ferror(f);
}
