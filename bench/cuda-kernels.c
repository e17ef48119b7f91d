/*
 * cuda-kernels: the bandwidth of hoop's GPU reduction kernels beside a device-to-device
 * cudaMemcpy of the same size, timed in the same run on the same device.
 *
 *   cuda-kernels [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-d DTYPE|all] [-o OP|all]
 *
 * Bytes are counted as each operation moves them: out = a op b reads two buffers and writes one
 * (3 x size), the average's division buf /= p reads and writes one (2 x size), the copy reads
 * one and writes one (2 x size). "ratio" is the kernel's bandwidth over the copy's. Every row is
 * also checked: the first and last MiB of the output against hoop_reduce_local() on the host,
 * bit for bit. A GPU-only tool: it links the CUDA runtime and the kernels directly, and exits 77
 * saying "no CUDA device" where there is none.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "hoop.h"
#include "cuda/kernels.h"
#include "bench_util.h"

#define CHECK_BYTES ((size_t)1 << 20) /* checked at each end of every output */
#define AVG_DIVISOR 3

typedef struct args {
    size_t minb, maxb, factor;
    int iters, warmup;
    unsigned dtypes, ops; /* bit masks; bit HOOP_OP_COUNT: the average's division */
} args_t;

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "cuda-kernels: %s: %s (%s)\n", what, cudaGetErrorString(e),
            cudaGetErrorName(e));
    return 0;
}

/* Seconds per call of `iters` back-to-back launches, timed with events on the default stream.
 * which: -1 the copy, HOOP_OP_COUNT the division, else the reduction with that op. */
static int time_op(int which, void *out, const void *a, const void *b, size_t bytes,
                   hoop_dtype_t dt, int sms, int iters, cudaEvent_t ev[2], double *s)
{
    size_t count = bytes / hoop_dtype_size(dt);
    for (int i = 0; i < iters; i++) {
        if (i == 0 && !cuda_ok(cudaEventRecord(ev[0], 0), "cudaEventRecord")) return 0;
        cudaError_t e;
        if (which < 0)
            e = cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToDevice, 0);
        else if (which == HOOP_OP_COUNT)
            e = (cudaError_t)hoop_cuda_launch_avg(out, count, dt, AVG_DIVISOR, sms, NULL);
        else
            e = (cudaError_t)hoop_cuda_launch_reduce(out, a, b, count, dt, (hoop_op_t)which, sms,
                                                     NULL);
        if (!cuda_ok(e, which < 0 ? "cudaMemcpyAsync" : "kernel launch")) return 0;
    }
    float ms = 0;
    if (!cuda_ok(cudaEventRecord(ev[1], 0), "cudaEventRecord") ||
        !cuda_ok(cudaEventSynchronize(ev[1]), "cudaEventSynchronize") ||
        !cuda_ok(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime"))
        return 0;
    *s = ms * 1e-3 / iters;
    return 1;
}

/* Wrong elements among `bytes` of the device output from off: what the host's kernels make of
 * the same inputs. -1 when the check itself failed. (The division is checked bit for bit by the
 * cuda-kernels-gpu test; here it is timed only.) */
static long check_range(int which, const unsigned char *dout, const unsigned char *ha,
                        const unsigned char *hb, size_t off, size_t bytes, hoop_dtype_t dt,
                        unsigned char *got, unsigned char *want)
{
    size_t es = hoop_dtype_size(dt), count = bytes / es;
    if (!cuda_ok(cudaMemcpy(got, dout + off, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy"))
        return -1;
    if (hoop_reduce_local(want, ha + off, hb + off, count, dt, (hoop_op_t)which) != HOOP_OK)
        return -1;
    long wrong = 0;
    for (size_t i = 0; i < count; i++)
        if (memcmp(got + i * es, want + i * es, es) != 0) wrong++;
    return wrong;
}

static void usage(FILE *f)
{
    fputs("usage: cuda-kernels [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
          "                    [-d DTYPE|all] [-o OP|all]\n"
          "The GPU reduction kernels' bandwidth beside a device-to-device cudaMemcpy of the same\n"
          "size, in the same run. Defaults: -b 1M -e 256M -f 16 -n 20 -w 3 -d all -o all.\n"
          "OP: sum prod min max avg (avg is the average's division buf /= p; the average's\n"
          "reduction is the sum's). Bytes moved: 3 x size for a reduction (two reads, one\n"
          "write), 2 x size for the division and the copy. ratio = kernel GB/s / copy GB/s.\n"
          "#wrong: elements of the first and last MiB differing from hoop_reduce_local.\n"
          "Exit: 0 all right, 1 a failure or a wrong element, 2 bad usage, 77 no CUDA device.\n",
          f);
}

static int parse(int argc, char **argv, args_t *a)
{
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0, iv = 0;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            exit(0);
        } else if (v == NULL) {
            fprintf(stderr, "cuda-kernels: %s needs a value (see cuda-kernels -h)\n", o);
            return 2;
        } else if (!strcmp(o, "-b")) {
            bad = bench_parse_size(v, &a->minb);
        } else if (!strcmp(o, "-e")) {
            bad = bench_parse_size(v, &a->maxb);
        } else if (!strcmp(o, "-f")) {
            bad = bench_parse_int(v, 2, 1 << 20, &iv);
            a->factor = (size_t)iv;
        } else if (!strcmp(o, "-n")) {
            bad = bench_parse_int(v, 1, 1 << 20, &a->iters);
        } else if (!strcmp(o, "-w")) {
            bad = bench_parse_int(v, 0, 1 << 20, &a->warmup);
        } else if (!strcmp(o, "-d")) {
            a->dtypes = 0;
            for (int d = 0; d < HOOP_DTYPE_COUNT; d++)
                if (!strcmp(v, "all") || !strcmp(v, hoop_dtype_name((hoop_dtype_t)d)))
                    a->dtypes |= 1u << d;
            bad = a->dtypes == 0;
        } else if (!strcmp(o, "-o")) {
            a->ops = 0;
            for (int k = 0; k < HOOP_OP_COUNT; k++)
                if (!strcmp(v, "all") || !strcmp(v, hoop_op_name((hoop_op_t)k)))
                    a->ops |= 1u << (k == HOOP_AVG ? HOOP_OP_COUNT : k);
            bad = a->ops == 0;
        } else {
            fprintf(stderr, "cuda-kernels: unknown option '%s' (see cuda-kernels -h)\n", o);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "cuda-kernels: bad value for %s: '%s'\n", o, v);
            return 2;
        }
    }
    if (a->minb == 0 || a->minb > a->maxb) {
        fprintf(stderr, "cuda-kernels: need 0 < -b <= -e\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    args_t a = {1u << 20, 256u << 20, 16, 20, 3, (1u << HOOP_DTYPE_COUNT) - 1, 0};
    for (int k = 0; k <= HOOP_OP_COUNT; k++)
        if (k != HOOP_AVG) a.ops |= 1u << k;
    int rc = parse(argc, argv, &a);
    if (rc) return rc;

    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("no CUDA device: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 77;
    }
    struct cudaDeviceProp prop;
    int sms = 0;
    if (!cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties") ||
        !cuda_ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0),
                 "cudaDeviceGetAttribute"))
        return 1;
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    printf("# device 0: %s, %d SMs, %.1f GiB, sm_%d%d; CUDA runtime %d.%d, driver %d.%d\n",
           prop.name, sms, (double)prop.totalGlobalMem / (1 << 30), prop.major, prop.minor,
           rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10);
    printf("# bytes moved: reduction 3 x size, division and copy 2 x size; GB = 1e9 bytes\n");

    /* One set of buffers at the largest size; every dtype reads the same random bytes. */
    size_t cap = a.maxb;
    unsigned char *da = NULL, *db = NULL, *dout = NULL, *ha = malloc(cap), *hb = malloc(cap);
    unsigned char *got = malloc(CHECK_BYTES), *want = malloc(CHECK_BYTES);
    cudaEvent_t ev[2] = {NULL, NULL};
    int ok = ha && hb && got && want;
    if (!ok) fprintf(stderr, "cuda-kernels: out of host memory for %zu bytes\n", cap);
    ok = ok && cuda_ok(cudaMalloc((void **)&da, cap), "cudaMalloc") &&
         cuda_ok(cudaMalloc((void **)&db, cap), "cudaMalloc") &&
         cuda_ok(cudaMalloc((void **)&dout, cap), "cudaMalloc") &&
         cuda_ok(cudaEventCreate(&ev[0]), "cudaEventCreate") &&
         cuda_ok(cudaEventCreate(&ev[1]), "cudaEventCreate");
    if (ok) {
        uint64_t x = 0x9e3779b97f4a7c15u;
        for (size_t i = 0; i < cap; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            ha[i] = (unsigned char)x;
            hb[i] = (unsigned char)(x >> 32);
        }
        ok = cuda_ok(cudaMemcpy(da, ha, cap, cudaMemcpyHostToDevice), "cudaMemcpy") &&
             cuda_ok(cudaMemcpy(db, hb, cap, cudaMemcpyHostToDevice), "cudaMemcpy");
    }

    long wrong_total = 0;
    double ratio[2] = {0, 0}; /* the largest sum's ratio, float32 and bfloat16, for the target */
    int have_target[2] = {0, 0};
    if (ok)
        printf("%10s  %-8s %-4s %9s %9s %9s %9s %6s %7s\n", "size", "type", "op", "us", "GB/s",
               "copy us", "copy GB/s", "ratio", "#wrong");
    for (int d = 0; ok && d < HOOP_DTYPE_COUNT; d++) {
        if (!(a.dtypes & (1u << d))) continue;
        hoop_dtype_t dt = (hoop_dtype_t)d;
        size_t es = hoop_dtype_size(dt);
        for (int k = 0; ok && k <= HOOP_OP_COUNT; k++) {
            if (!(a.ops & (1u << k))) continue;
            for (size_t bytes = a.minb; ok && bytes <= a.maxb;) {
                size_t n = bytes / es * es;
                double ts = 0, tc = 0, tmp;
                if (n == 0) break;
                /* The division works in place: start it from a's bytes each row. */
                if (k == HOOP_OP_COUNT)
                    ok = cuda_ok(cudaMemcpy(dout, da, n, cudaMemcpyDeviceToDevice), "cudaMemcpy");
                ok = ok &&
                     (a.warmup == 0 ||
                      time_op(-1, dout, db, NULL, n, dt, sms, a.warmup, ev, &tmp)) &&
                     time_op(-1, dout, db, NULL, n, dt, sms, a.iters, ev, &tc);
                if (ok && k == HOOP_OP_COUNT)
                    ok = cuda_ok(cudaMemcpy(dout, da, n, cudaMemcpyDeviceToDevice), "cudaMemcpy");
                ok = ok &&
                     (a.warmup == 0 || time_op(k, dout, da, db, n, dt, sms, a.warmup, ev, &tmp)) &&
                     time_op(k, dout, da, db, n, dt, sms, a.iters, ev, &ts);
                if (!ok) break;
                double moved = (k == HOOP_OP_COUNT ? 2.0 : 3.0) * (double)n;
                double gbs = moved / ts / 1e9, cgbs = 2.0 * (double)n / tc / 1e9;
                long w = 0;
                if (k != HOOP_OP_COUNT) {
                    size_t c = n < CHECK_BYTES ? n : CHECK_BYTES;
                    long w0 = check_range(k, dout, ha, hb, 0, c, dt, got, want);
                    long w1 = check_range(k, dout, ha, hb, n - c, c, dt, got, want);
                    if (w0 < 0 || w1 < 0) {
                        ok = 0;
                        break;
                    }
                    w = w0 + w1;
                }
                wrong_total += w;
                char wstr[24];
                if (k == HOOP_OP_COUNT)
                    snprintf(wstr, sizeof wstr, "N/A");
                else
                    snprintf(wstr, sizeof wstr, "%ld", w);
                printf("%10zu  %-8s %-4s %9.1f %9.1f %9.1f %9.1f %6.3f %7s\n", n,
                       hoop_dtype_name(dt), k == HOOP_OP_COUNT ? "avg" : hoop_op_name((hoop_op_t)k),
                       ts * 1e6, gbs, tc * 1e6, cgbs, gbs / cgbs, wstr);
                fflush(stdout);
                int t = dt == HOOP_FLOAT32 ? 0 : dt == HOOP_BFLOAT16 ? 1 : -1;
                if (t >= 0 && k == HOOP_SUM && n == a.maxb) {
                    ratio[t] = gbs / cgbs;
                    have_target[t] = 1;
                }
                if (bytes > a.maxb / a.factor) break;
                bytes *= a.factor;
            }
        }
    }
    for (int t = 0; ok && t < 2; t++)
        if (have_target[t])
            printf("# target: sum %s at %zu bytes, ratio %.3f (target 0.90): %s\n",
                   t ? "bfloat16" : "float32", a.maxb, ratio[t],
                   ratio[t] >= 0.90 ? "met" : "NOT met");
    cudaFree(da);
    cudaFree(db);
    cudaFree(dout);
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    free(ha);
    free(hb);
    free(got);
    free(want);
    if (!ok) return 1;
    if (wrong_total) printf("# %ld wrong elements\n", wrong_total);
    return wrong_total ? 1 : 0;
}
