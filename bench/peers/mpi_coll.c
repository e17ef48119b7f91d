/*
 * mpi-coll: Open MPI's collectives measured the way hoop-perf measures hoop's, so that the two
 * tables (and their --csv files) read the same and compare row by row.
 *
 *   mpirun -np 2 --mca pml ob1 --mca btl self,vader mpi-coll allreduce -b 64K -e 256M -f 4
 *
 * float32, sum. Sizes, counts and bus factors follow nccl-tests (and hoop-perf): size is the largest
 * buffer of the call, busbw = algbw x 2(p-1)/p (allreduce), (p-1)/p (allgather), 1 (broadcast,
 * reduce). Calls are out of place; MPI_Bcast works in place, so the root's input is copied to its
 * receive buffer first, untimed, as hoop-perf does for hoop_broadcast. The time of a row is the
 * slowest rank's average over -n calls. Each row then runs once more over a receive buffer filled
 * with a sentinel and counts the elements that differ from values computed here (#wrong).
 */
#include <getopt.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench_util.h"

enum { ALLREDUCE, BROADCAST, ALLGATHER, REDUCE, NCOLLS };
static const char *const COLL_NAMES[NCOLLS] = {"allreduce", "broadcast", "allgather", "reduce"};

typedef struct opts {
    int coll;
    size_t minb, maxb, factor;
    int iters, warmup, check, blocking, root, warm_each;
    const char *csv_path, *transport;
} opts_t;

typedef struct row {
    size_t size, count;
    double us, algbw, busbw;
    uint64_t wrong;
    int checked;
} row_t;

typedef struct ctx {
    const opts_t *o;
    int rank, size;
    float *sbuf, *rbuf, *ebuf;
} ctx_t;

/* Small integers in [-8, 8]: any sum over up to 2^20 ranks is exact in float32, whatever the order
 * the library adds in. */
static float input(int rank, size_t i)
{
    uint64_t h = (uint64_t)i * 2654435761u + (uint64_t)rank * 40503u + 12345u;
    return (float)((int)((h >> 7) % 17u) - 8);
}

static double bus_factor(int coll, int n)
{
    switch (coll) {
    case ALLREDUCE: return 2.0 * (n - 1) / n;
    case ALLGATHER: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

static size_t coll_count(int coll, size_t bytes, int n)
{
    return coll == ALLGATHER ? bytes / sizeof(float) / (size_t)n : bytes / sizeof(float);
}

static size_t recv_count(int coll, size_t count, int n)
{
    return coll == ALLGATHER ? count * (size_t)n : count;
}

static int is_receiver(const ctx_t *c) { return c->o->coll != REDUCE || c->rank == c->o->root; }

/* MPI_Bcast is in place: the root starts from its input in the receive buffer. */
static void prep(const ctx_t *c, size_t count)
{
    if (c->o->coll == BROADCAST && c->rank == c->o->root && count > 0)
        memcpy(c->rbuf, c->sbuf, count * sizeof(float));
}

static void run_once(const ctx_t *c, size_t count)
{
    int n = (int)count; /* sizes are checked against INT_MAX elements before the sweep */
    switch (c->o->coll) {
    case ALLREDUCE: MPI_Allreduce(c->sbuf, c->rbuf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case BROADCAST: MPI_Bcast(c->rbuf, n, MPI_FLOAT, c->o->root, MPI_COMM_WORLD); break;
    case ALLGATHER:
        MPI_Allgather(c->sbuf, n, MPI_FLOAT, c->rbuf, n, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    default: MPI_Reduce(c->sbuf, c->rbuf, n, MPI_FLOAT, MPI_SUM, c->o->root, MPI_COMM_WORLD); break;
    }
}

/* -z 0: the library's blocking call back to back; -z 1: each call followed by a barrier (timed),
 * as hoop-perf -z 1. */
static void run_batch(const ctx_t *c, size_t count, int iters)
{
    for (int i = 0; i < iters; i++) {
        run_once(c, count);
        if (c->o->blocking) MPI_Barrier(MPI_COMM_WORLD);
    }
}

static void fill_input(const ctx_t *c, size_t count)
{
    for (size_t i = 0; i < count; i++) c->sbuf[i] = input(c->rank, i);
}

static void fill_expected(const ctx_t *c, size_t count)
{
    size_t nr = recv_count(c->o->coll, count, c->size);
    for (size_t j = 0; j < nr; j++) {
        double v = 0;
        switch (c->o->coll) {
        case ALLREDUCE:
        case REDUCE:
            for (int q = 0; q < c->size; q++) v += input(q, j);
            break;
        case BROADCAST: v = input(c->o->root, j); break;
        default: v = input((int)(j / count), j % count); break;
        }
        c->ebuf[j] = (float)v;
    }
}

static void run_row(const ctx_t *c, size_t bytes, row_t *row)
{
    const opts_t *o = c->o;
    size_t count = coll_count(o->coll, bytes, c->size), nr = recv_count(o->coll, count, c->size);
    memset(row, 0, sizeof *row);
    row->count = count;
    row->size = nr * sizeof(float);

    fill_input(c, count);
    prep(c, count);
    if (o->warm_each && o->warmup > 0) run_batch(c, count, o->warmup);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    run_batch(c, count, o->iters);
    double us = (MPI_Wtime() - t0) / o->iters * 1e6;
    MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    row->us = us;
    row->algbw = us > 0 ? (double)row->size / 1e9 / (us * 1e-6) : 0.0;
    row->busbw = row->algbw * bus_factor(o->coll, c->size);
    if (!o->check) return;

    /* One more call on fresh inputs over a sentinel; bytes 0xA5 make a float no input equals. */
    memset(c->rbuf, 0xA5, nr * sizeof(float));
    fill_input(c, count);
    prep(c, count);
    run_once(c, count);
    uint64_t wrong = 0;
    if (is_receiver(c)) {
        fill_expected(c, count);
        for (size_t j = 0; j < nr; j++)
            if (memcmp(&c->rbuf[j], &c->ebuf[j], sizeof(float)) != 0) wrong++;
    }
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    row->wrong = wrong;
    row->checked = 1;
}

static void print_header(const ctx_t *c)
{
    const opts_t *o = c->o;
    int len = 0;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = '\0';
    printf("# mpi-coll %s: nRanks %d minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d "
           "iters: %d validation: %d blocking: %d\n",
           COLL_NAMES[o->coll], c->size, o->minb, o->maxb, o->factor, o->warmup, o->iters, o->check,
           o->blocking);
    printf("# %s transport: %s, float32 sum, out of place, time = slowest rank's average\n", lib,
           o->transport);
    printf("#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place  "
           "        \n",
           "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "");
    fflush(stdout);
}

static const char *redop(int coll) { return coll == ALLREDUCE || coll == REDUCE ? "sum" : "none"; }

static int root_of(const opts_t *o)
{
    return o->coll == BROADCAST || o->coll == REDUCE ? o->root : -1;
}

static void print_row(const opts_t *o, const row_t *r)
{
    char ts[32], ws[32];
    bench_time_str(r->us, ts, sizeof ts);
    if (r->checked)
        snprintf(ws, sizeof ws, "%5" PRIu64, r->wrong);
    else
        snprintf(ws, sizeof ws, "%5s", "N/A");
    printf("%12zu  %12zu  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %5s  %7s  %6s  %6s  %5s\n", r->size,
           r->count, "float32", redop(o->coll), root_of(o), ts, r->algbw, r->busbw, ws, "N/A",
           "N/A", "N/A", "N/A");
    fflush(stdout);
}

/* hoop-perf's --csv columns; the in-place ones stay empty. */
static void csv_row(FILE *f, const ctx_t *c, const row_t *r)
{
    const opts_t *o = c->o;
    fprintf(f, "%s,openmpi,%s,%d,%zu,%zu,float32,%s,%d,%.3f,%.6f,%.6f,", COLL_NAMES[o->coll],
            o->transport, c->size, r->size, r->count, redop(o->coll), root_of(o), r->us, r->algbw,
            r->busbw);
    if (r->checked) fprintf(f, "%" PRIu64, r->wrong);
    fprintf(f, ",,,,\n");
}

static void usage(FILE *f)
{
    fputs("usage: mpi-coll [allreduce|broadcast|allgather|reduce] [options]   (under mpirun)\n"
          "  -b BYTES   smallest size (default 8; K, M, G suffixes)\n"
          "  -e BYTES   largest size (default 64M)\n"
          "  -f F       multiply the size by F from row to row (default 2)\n"
          "  -n N       timed calls per row (default 20)\n"
          "  -w N       warm-up calls at the largest and the smallest size (default 5)\n"
          "  --warm-each       also make the warm-up calls before every timed row\n"
          "  -c 0|1     count wrong elements (default 1)\n"
          "  -z 0|1     0: blocking calls back to back (default); 1: each followed by a barrier\n"
          "  -r R       root of broadcast and reduce (default 0)\n"
          "  --csv FILE        rank 0 writes the rows there, in hoop-perf's --csv columns\n"
          "  --transport NAME  the transport column (default: from OMPI_MCA_btl)\n"
          "columns as hoop-perf's (float32, sum, out of place; in-place columns N/A)\n"
          "exit status: 0 all right, 1 wrong elements or a failed call, 2 bad usage\n",
          f);
}

static const char *btl_transport(void)
{
    const char *btl = getenv("OMPI_MCA_btl");
    if (btl && strstr(btl, "vader")) return "vader";
    if (btl && strstr(btl, "tcp")) return "tcp";
    return "default";
}

/* 0 to run, -1 for -h, 2 after a message (rank 0 prints it). */
static int parse_args(int argc, char **argv, opts_t *o, int rank)
{
    static const struct option longs[] = {{"csv", required_argument, NULL, 'C'},
                                          {"transport", required_argument, NULL, 'T'},
                                          {"warm-each", no_argument, NULL, 'W'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int c, v = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":b:e:f:n:w:c:z:r:h", longs, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'b': bad = bench_parse_size(optarg, &o->minb); break;
        case 'e': bad = bench_parse_size(optarg, &o->maxb); break;
        case 'f':
            bad = bench_parse_int(optarg, 2, 1 << 20, &v);
            o->factor = (size_t)v;
            break;
        case 'n': bad = bench_parse_int(optarg, 1, 1 << 24, &o->iters); break;
        case 'w': bad = bench_parse_int(optarg, 0, 1 << 24, &o->warmup); break;
        case 'W': o->warm_each = 1; break;
        case 'c': bad = bench_parse_int(optarg, 0, 1, &o->check); break;
        case 'z': bad = bench_parse_int(optarg, 0, 1, &o->blocking); break;
        case 'r': bad = bench_parse_int(optarg, 0, 1 << 30, &o->root); break;
        case 'C': o->csv_path = optarg; break;
        case 'T': o->transport = optarg; break;
        case 'h': return -1;
        default:
            if (rank == 0)
                fprintf(stderr, "mpi-coll: bad option '%s' (see -h)\n", argv[optind - 1]);
            return 2;
        }
        if (bad) {
            if (rank == 0) fprintf(stderr, "mpi-coll: bad value '%s' (see -h)\n", optarg);
            return 2;
        }
    }
    if (optind < argc) {
        o->coll = -1;
        for (int i = 0; i < NCOLLS; i++)
            if (!strcmp(argv[optind], COLL_NAMES[i])) o->coll = i;
        if (o->coll < 0 || optind + 1 < argc) {
            if (rank == 0) fprintf(stderr, "mpi-coll: unknown collective '%s'\n", argv[optind]);
            return 2;
        }
    }
    if (o->minb > o->maxb) {
        if (rank == 0)
            fprintf(stderr, "mpi-coll: -b %zu is larger than -e %zu\n", o->minb, o->maxb);
        return 2;
    }
    if (o->maxb / sizeof(float) > (size_t)INT32_MAX) {
        if (rank == 0) fprintf(stderr, "mpi-coll: -e %zu: MPI counts are ints\n", o->maxb);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    opts_t o = {.coll = ALLREDUCE,
                .minb = 8,
                .maxb = 64u << 20,
                .factor = 2,
                .iters = 20,
                .warmup = 5,
                .check = 1,
                .transport = btl_transport()};
    ctx_t c = {.o = &o};
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c.size);

    int rc = parse_args(argc, argv, &o, c.rank);
    if (rc == 0 && o.root >= c.size) {
        if (c.rank == 0) fprintf(stderr, "mpi-coll: -r %d: only %d ranks\n", o.root, c.size);
        rc = 2;
    }
    if (rc != 0) {
        if (rc < 0 && c.rank == 0) usage(stdout);
        MPI_Finalize();
        return rc < 0 ? 0 : rc;
    }

    /* Buffers for the largest row; every rank learns whether any failed. */
    size_t maxcount = coll_count(o.coll, o.maxb, c.size),
           maxrecv = recv_count(o.coll, maxcount, c.size);
    c.sbuf = malloc((maxcount ? maxcount : 1) * sizeof(float));
    c.rbuf = malloc((maxrecv ? maxrecv : 1) * sizeof(float));
    c.ebuf = malloc((maxrecv ? maxrecv : 1) * sizeof(float));
    FILE *csv = NULL;
    int bad = !c.sbuf || !c.rbuf || !c.ebuf;
    if (bad) fprintf(stderr, "mpi-coll: rank %d: out of memory\n", c.rank);
    if (!bad && c.rank == 0 && o.csv_path && !(csv = fopen(o.csv_path, "w"))) {
        perror(o.csv_path);
        bad = 1;
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (bad) {
        free(c.sbuf);
        free(c.rbuf);
        free(c.ebuf);
        if (csv) fclose(csv);
        MPI_Finalize();
        return 1;
    }
    if (c.rank == 0) print_header(&c);
    if (csv)
        fprintf(csv, "collective,algo,transport,ranks,size_bytes,count,type,redop,root,oop_time_us,"
                     "oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong\n");

    /* Warm up at the largest and the smallest size, as nccl-tests and hoop-perf do. */
    size_t ends[2] = {o.maxb, o.minb};
    for (int i = 0; i < 2 && o.warmup > 0; i++) {
        size_t count = coll_count(o.coll, ends[i], c.size);
        fill_input(&c, count);
        prep(&c, count);
        run_batch(&c, count, o.warmup);
    }
    uint64_t wrong_total = 0;
    double bw_sum = 0;
    int rows = 0;
    for (size_t bytes = o.minb;;) {
        row_t r;
        run_row(&c, bytes, &r);
        wrong_total += r.wrong;
        bw_sum += r.busbw;
        rows++;
        if (c.rank == 0) print_row(&o, &r);
        if (csv) csv_row(csv, &c, &r);
        if (bytes > o.maxb / o.factor) break;
        bytes = bytes ? bytes * o.factor : 1;
    }
    int ok = 1;
    if (c.rank == 0) {
        printf("# Out of bounds values : %" PRIu64 " %s\n", wrong_total,
               wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n#\n", rows ? bw_sum / rows : 0.0);
    }
    if (csv && fclose(csv) != 0) {
        perror(o.csv_path);
        ok = 0;
    }
    free(c.sbuf);
    free(c.rbuf);
    free(c.ebuf);
    MPI_Finalize();
    return ok && wrong_total == 0 ? 0 : 1;
}
