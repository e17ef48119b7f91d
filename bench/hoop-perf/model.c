/*
 * --model: fits the alpha-beta-gamma cost model (latency, seconds per byte moved, seconds per byte
 * reduced) and sets the predicted all-reduce times of four algorithms beside the measured one.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "hoop.h"
#include "../bench_util.h"
#include "hoop-perf.h"

#define MODEL_LARGE_BYTES (4u << 20) /* ping-pong and reduction size behind beta and gamma */

static const char *const MODEL_ALGOS[4] = {"ring", "rd", "tree", "ps"};

static int ceil_log2(int p)
{
    int l = 0;
    while ((1L << l) < p) l++;
    return l;
}

/* Predicted seconds of an all-reduce of n bytes on p ranks, for each of MODEL_ALGOS. */
static void predict(const bench_t *b, double n, double out[4])
{
    double a = b->alpha, be = b->beta, c = b->gamma, p = b->size, pm1 = p - 1;
    double L = ceil_log2(b->size);
    out[0] = 2 * pm1 * a + 2 * (pm1 / p) * n * be + (pm1 / p) * n * c;
    out[1] = L * (a + n * be + n * c);
    out[2] = 2 * L * (a + n * be) + L * n * c;
    out[3] = 2 * pm1 * (a + n * be) + pm1 * n * c;
}

/* Half the round trip of `bytes` between ranks 0 and 1, in seconds; other ranks return at once. */
static int ping_pong(const bench_t *b, unsigned char *buf, size_t bytes, int rounds, double *half)
{
    *half = 0;
    if (b->rank > 1) return 1;
    int peer = 1 - b->rank, warm = rounds / 10 + 1;
    double t0 = now_s();
    for (int i = -warm; i < rounds; i++) {
        if (i == 0) t0 = now_s();
        hoop_result_t e;
        if (b->rank == 0) {
            e = hoop_send(b->comm, buf, bytes, HOOP_UINT8, peer);
            if (e == HOOP_OK) e = hoop_recv(b->comm, buf, bytes, HOOP_UINT8, peer);
        } else {
            e = hoop_recv(b->comm, buf, bytes, HOOP_UINT8, peer);
            if (e == HOOP_OK) e = hoop_send(b->comm, buf, bytes, HOOP_UINT8, peer);
        }
        if (!checked(b, "ping-pong", e)) return 0;
    }
    *half = (now_s() - t0) / rounds / 2;
    return 1;
}

/* Seconds per byte of one input that hoop_reduce_local takes to sum float32 buffers. */
static int reduce_speed(const bench_t *b, double *gamma)
{
    size_t count = MODEL_LARGE_BYTES / sizeof(float);
    float *x = malloc(MODEL_LARGE_BYTES), *y = malloc(MODEL_LARGE_BYTES),
          *out = malloc(MODEL_LARGE_BYTES);
    int ok = x && y && out, reps = 10;
    if (!ok) fprintf(stderr, "hoop-perf: out of memory for the reduction timing\n");
    for (size_t i = 0; ok && i < count; i++) {
        x[i] = (float)(i % 7);
        y[i] = (float)(i % 5);
    }
    double t0 = now_s();
    for (int i = -2; ok && i < reps; i++) {
        if (i == 0) t0 = now_s();
        ok = checked(b, "hoop_reduce_local",
                     hoop_reduce_local(out, x, y, count, HOOP_FLOAT32, HOOP_SUM));
    }
    *gamma = ok ? (now_s() - t0) / reps / MODEL_LARGE_BYTES : 0.0;
    free(x);
    free(y);
    free(out);
    return ok;
}

int measure_model(bench_t *b)
{
    unsigned char *buf = calloc(1, MODEL_LARGE_BYTES);
    double small = 0, large = 0;
    int ok = buf != NULL;
    if (!ok) fprintf(stderr, "hoop-perf: rank %d: out of memory\n", b->rank);
    if (ok && b->size >= 2)
        ok = ping_pong(b, buf, 8, 200, &small) && ping_pong(b, buf, MODEL_LARGE_BYTES, 10, &large);
    free(buf);
    if (ok && b->rank == 0) ok = reduce_speed(b, &b->gamma);
    b->alpha = small;
    b->beta = large > small ? (large - small) / MODEL_LARGE_BYTES : 0.0;
    return ok;
}

void print_model_header(const bench_t *b)
{
    int p = b->size, L = ceil_log2(p);
    printf("# hoop-perf model: all-reduce of float32 sum on %d ranks\n", p);
    printf("# measured: algorithm %s (--algo or HOOP_ALGO; run once per algorithm to measure "
           "each)\n",
           b->algo);
    if (p < 2) printf("# alpha and beta need 2 ranks: taken as 0\n");
    printf("# alpha (latency)            %10.2f us      8-byte ping-pong of ranks 0 and 1, half "
           "the round trip\n",
           b->alpha * 1e6);
    printf("# beta  (per byte moved)     %10.3e s/B     %.3f GB/s: %u-byte ping-pong, minus "
           "alpha\n",
           b->beta, b->beta > 0 ? 1e-9 / b->beta : 0.0, MODEL_LARGE_BYTES);
    printf("# gamma (per byte reduced)   %10.3e s/B     %.3f GB/s: hoop_reduce_local, float32 sum "
           "of %u bytes\n",
           b->gamma, b->gamma > 0 ? 1e-9 / b->gamma : 0.0, MODEL_LARGE_BYTES);
    printf("#\n# predicted time of an all-reduce of n bytes, p = %d, L = ceil(log2 p) = %d:\n", p,
           L);
    printf("#   ring  2(p-1) a + 2((p-1)/p) n b + ((p-1)/p) n c\n");
    printf("#   rd    L (a + n b + n c)                  recursive doubling\n");
    printf("#   tree  2 L (a + n b) + L n c              binomial reduce, then binomial "
           "broadcast\n");
    printf("#   ps    2(p-1)(a + n b) + (p-1) n c        at the server, which receives p-1 "
           "buffers and sends p-1\n");
    if (p > 2 && (p & (p - 1)) != 0)
        printf("#   p = %d is not a power of two: hoop's rd first folds %d rank(s) into a partner\n"
               "#   (a + n b + n c, one of the L steps) and hands them the result at the end\n"
               "#   (a + n b more, not in the formula)\n",
               p, p - (1 << (ceil_log2(p) - 1)));
    printf("# best: the algorithm with the lowest prediction\n");
    printf("#\n# %10s  %12s  %9s  %9s  %9s  %9s  %9s  %5s  %6s\n", "size", "count", "measured",
           "ring", "rd", "tree", "ps", "best", "#wrong");
    printf("# %10s  %12s  %9s  %9s  %9s  %9s  %9s  %5s  %6s\n", "(B)", "(elements)", "(us)", "(us)",
           "(us)", "(us)", "(us)", "", "");
    fflush(stdout);
}

void print_model_row(const bench_t *b, const row_t *row)
{
    double pred[4];
    int best = 0;
    predict(b, (double)row->size, pred);
    for (int i = 1; i < 4; i++)
        if (pred[i] < pred[best]) best = i;
    char ws[32];
    if (row->v[0].checked)
        snprintf(ws, sizeof ws, "%6" PRIu64, row->v[0].wrong);
    else
        snprintf(ws, sizeof ws, "%6s", "N/A");
    printf("%12zu  %12zu  %9.2f  %9.2f  %9.2f  %9.2f  %9.2f  %5s  %s\n", row->size, row->count,
           row->v[0].us, pred[0] * 1e6, pred[1] * 1e6, pred[2] * 1e6, pred[3] * 1e6,
           MODEL_ALGOS[best], ws);
    fflush(stdout);
}
