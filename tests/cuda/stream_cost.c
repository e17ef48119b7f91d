/* What a stream-ordered all-reduce costs, per call, against the same call without a stream, run as
 * every rank under hooprun with a CUDA module (docs/performance.md, "Stream-ordered calls"):
 *
 *   stream_cost MODULE [CALLS]
 *
 * For each size (4 KiB to 16 MiB of float32), CALLS all-reduces of device buffers posted back to
 * back ordered on one stream, then the stream waited for, against CALLS without a stream; the
 * median of 5 such batches, in microseconds per call. A first call of the largest size without a
 * stream makes what the communicator keeps (staging buffers, the IPC area) beforehand. On the test
 * double the device is host memory, so the figures say what the host side costs, not what a GPU's
 * copies do. Exit 0 with the table on rank 0's stdout; 1 when a call fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devbuf.h"
#include "hoop.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: stream_cost MODULE [CALLS]\n");
        return 2;
    }
    int calls = argc > 2 ? atoi(argv[2]) : 20;
    char err[512];
    if (devbuf_open(argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "stream_cost: %s: %s\n", argv[1], err);
        return devbuf_no_device(err) ? 77 : 1;
    }
    hoop_comm_t *c;
    if (hoop_init_from_env(&c) != HOOP_OK) return 1;
    int rank = hoop_comm_rank(c);
    static const size_t sizes[] = {4096, 262144, 4194304, 16777216};
    size_t most = sizes[sizeof sizes / sizeof sizes[0] - 1];
    float *d = devbuf_alloc(most);
    void *stream = devbuf_stream();
    if (hoop_allreduce(c, d, d, most / 4, HOOP_FLOAT32, HOOP_SUM) != HOOP_OK) {
        fprintf(stderr, "stream_cost: %s\n", hoop_comm_last_error(c));
        return 1;
    }
    if (rank == 0) printf("# bytes   no stream (us/call)   on a stream (us/call)\n");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k] / 4;
        double med[2];
        for (int ordered = 0; ordered < 2; ordered++) {
            double t[5];
            hoop_comm_set_stream(c, ordered ? stream : NULL);
            for (int b = 0; b < 5; b++) {
                hoop_barrier(c);
                double t0 = now();
                for (int i = 0; i < calls; i++)
                    if (hoop_allreduce(c, d, d, n, HOOP_FLOAT32, HOOP_SUM) != HOOP_OK) {
                        fprintf(stderr, "stream_cost: %s\n", hoop_comm_last_error(c));
                        return 1;
                    }
                if (ordered) devbuf_sync(stream);
                t[b] = (now() - t0) / calls * 1e6;
            }
            hoop_comm_set_stream(c, NULL);
            qsort(t, 5, sizeof t[0], cmp);
            med[ordered] = t[2];
        }
        if (rank == 0) printf("%9zu   %19.1f   %21.1f\n", sizes[k], med[0], med[1]);
    }
    hoop_comm_destroy(c);
    devbuf_free(d);
    return 0;
}
