/*
 * hoop-perf's private header: the table of collectives, the state of a run, and what each file
 * offers the others.
 *
 *   colls.c    the collectives: how counts relate to sizes, bus factors, how each is called
 *   check.c    what every rank sends and must receive, computed without the library
 *   run.c      the sweep: buffers, timing, checking and combining every row over the ranks
 *   report.c   the table on stdout, and the --csv / --json files
 *   model.c    --model: alpha, beta and gamma measured, all-reduce times predicted
 *   traffic.c  --traffic: the bytes each algorithm moves through memory on one host (traffic.h)
 *   bound.c    --bound and --rotate: the copy rate, each row's fraction of it, rotated buffers
 *   explain.c  --explain: one traced all-reduce, every rank's schedule and traffic
 *   device.c   --device cuda: the buffers in device memory, through the CUDA module
 *   memory.c   -M: each rank's memory before and after init and the collectives
 *   options.c  the command line and the help text
 *   main.c     start-up, the chosen mode, the exit status
 */
#ifndef HOOP_PERF_H
#define HOOP_PERF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hoop.h"

#define SENTINEL_BYTE 0xA5 /* fills receive buffers before a checked call */

/* ---- colls.c ---------------------------------------------------------------------------- */

/* How the count passed to the call relates to the buffers (nccl-tests' conventions). */
typedef enum {
    CK_SAME,     /* send and receive `count` elements: allreduce, broadcast, reduce, sendrecv */
    CK_GATHER,   /* send count, receive ranks * count: allgather, gather */
    CK_SCATTER,  /* send ranks * count, receive count: scatter, reducescatter */
    CK_ALLTOALL, /* count per peer: send and receive ranks * count */
    CK_NONE      /* no data: barrier */
} count_kind_t;

enum {
    F_OP = 1,            /* takes a reduction op */
    F_ROOT = 2,          /* takes a root */
    F_ROOT_SENDS = 4,    /* only the root's send buffer holds input */
    F_ROOT_RECEIVES = 8, /* only the root's receive buffer holds a result */
    F_NO_INPLACE = 16    /* no in-place form: the in-place columns read N/A */
};

/* One call as the run, input and expect functions see it. */
typedef struct call {
    hoop_comm_t *comm;
    void *s, *r;
    size_t count, es;
    hoop_dtype_t dt;
    hoop_op_t op;
    int root, rank, size;
} call_t;

typedef struct coll {
    const char *name;
    count_kind_t counts;
    unsigned flags;
    double (*bus_factor)(int n); /* NULL: no bandwidth, time only */
    /* Blocking when reqs is NULL; otherwise posts and appends its requests at reqs[*nreqs]. */
    hoop_result_t (*run)(const call_t *k, hoop_request_t **reqs, int *nreqs);
    void (*prep)(const call_t *k); /* untimed set-up once the input is in place; may be NULL */
    /* Send element i of `rank`, and the receive element i that `rank` must end with. */
    uint64_t (*in)(const call_t *k, int rank, size_t i);
    uint64_t (*expect)(const call_t *k, int rank, size_t i);
} coll_t;

extern const coll_t COLLS[]; /* COLLS[0], allreduce, is the default */
extern const size_t NCOLLS;

/* The call's count in a row of `bytes`, the elements of its send and receive buffers, and in
 * place their element offsets in the receive buffer. */
size_t kind_count(count_kind_t ck, size_t bytes, size_t es, int n);
size_t kind_send(count_kind_t ck, size_t count, int n);
size_t kind_recv(count_kind_t ck, size_t count, int n);
size_t kind_send_offset(count_kind_t ck, size_t count, int rank);
size_t kind_recv_offset(count_kind_t ck, size_t count, int rank);
/* By name; underscores are ignored so that nccl-tests' names (all_reduce, reduce_scatter) work. */
const coll_t *find_coll(const char *name);

/* ---- check.c: the in and expect members of COLLS ---------------------------------------- */

uint64_t reduce_in(const call_t *k, int rank, size_t i);
uint64_t reduced_expect(const call_t *k, int rank, size_t i);
uint64_t rs_expect(const call_t *k, int rank, size_t i);
uint64_t own_value(const call_t *k, int rank, size_t i);
uint64_t root_value(const call_t *k, int rank, size_t i);
uint64_t blocks_value(const call_t *k, int rank, size_t j);
uint64_t alltoall_in(const call_t *k, int rank, size_t j);
uint64_t alltoall_expect(const call_t *k, int rank, size_t j);
uint64_t prev_value(const call_t *k, int rank, size_t i);

/* ---- run.c ------------------------------------------------------------------------------ */

typedef struct variant {
    int ran, has_bw, checked;
    double us, algbw, busbw;
    uint64_t wrong;
    int has_bound;         /* --bound, on one host, where the row has a traffic model */
    double traffic, bound; /* bytes through memory per call; the fraction of the copy rate's time */
    int has_faults;        /* --bound or --rotate */
    double faults;         /* page faults per timed call, the most of any rank (all its threads) */
    /* -I: over the timed iterations after -K's, each the slowest rank's, per call, in us */
    int has_iter, i_n;
    double i_min, i_max, i_avg, i_p50, i_p95, i_p99, i_cv; /* i_cv: stdev / mean, in % */
} variant_t;

typedef struct row {
    const char *algo;
    size_t size, count;
    int dt, op, root; /* -1: none */
    int cma; /* the area's all-reduce read the peers with process_vm_readv (its trace said) */
    variant_t v[2]; /* out of place, in place */
    char stamp[24]; /* -S: when the row ended, UTC */
} row_t;

typedef struct bench {
    hoop_comm_t *comm;
    int rank, size;
    const coll_t *coll;
    size_t minb, maxb, factor, step;             /* factor > 1: multiply, else add step */
    int iters, warmup, check, blocking, average; /* blocking: -z 0-3 */
    int agg;                                     /* -m: calls per iteration, posted together */
    int warm_each;        /* also warm up before every timed row, as the OSU benchmarks do */
    unsigned dtypes, ops; /* bit masks */
    int root;             /* -1: every rank in turn */
    const char *algo, *transport;
    const char *json_path, *csv_path;
    FILE *json, *csv;
    unsigned char *sbuf, *rbuf, *ebuf;
    /* --device cuda: sbuf and rbuf are device memory of CUDA device cuda_dev, hsbuf and hrbuf
     * their host twins (inputs are written there and copied over; results come back there) */
    int use_cuda, cuda_dev;
    struct perf_dev *dev;
    unsigned char *hsbuf, *hrbuf;
    size_t scap, rcap, ecap;
    hoop_request_t **reqs;
    int *iter_end;               /* -z 0: the requests posted by the end of each iteration */
    double *iter_t;              /* -I: each timed iteration's seconds per call */
    int per_iter, per_iter_skip; /* -I, -K */
    int timestamps;              /* -S */
    int memory;                  /* -M */
    struct perf_mem *mem;        /* -M: the snapshots (memory.c) */
    row_t *rows;                 /* rank 0 keeps them for --json / --csv */
    size_t nrows, rows_cap;
    double bw_sum;
    int bw_count;
    uint64_t wrong_total;
    int model;                 /* --model: out of place only, rows printed with the predictions */
    double alpha, beta, gamma; /* --model: s, s/B, s/B */
    int bound;                 /* --bound: traffic and fraction of the copy rate per row */
    int one_host;              /* every rank on this host (set by print_header) */
    double copy_rate;          /* bytes copied per second, all ranks at once (--copy-rate: given) */
    size_t copy_bytes;         /* the buffer it was measured with; 0 when given */
    size_t small_bytes;        /* HOOP_SMALL_BYTES: the one-step all-reduce's limit */
    size_t rotate;             /* --rotate: bytes the timed calls' buffers cycle over; 0: off */
    int sym;                   /* --sym: sbuf and rbuf from hoop_mem_alloc */
} bench_t;

/* Whether e is HOOP_OK; if not, says on stderr which call failed and why. */
int checked(const bench_t *b, const char *what, hoop_result_t e);
call_t make_call(const bench_t *b, hoop_dtype_t dt, hoop_op_t op, int root, size_t count);
void place(const bench_t *b, const coll_t *co, call_t *k, int inplace);
void fill_input(const coll_t *co, const call_t *k);
/* Every size of every chosen dtype, op and root; rank 0 prints a row each. Returns 0 on failure. */
int run_all(bench_t *b);
int alloc_buffers(bench_t *b);
int agree(bench_t *b, int status);

/* ---- report.c --------------------------------------------------------------------------- */

int print_header(bench_t *b);
void print_row(const bench_t *b, const row_t *row);
/* Keeps a row for --json / --csv. */
int keep_row(bench_t *b, const row_t *row);
void print_summary(const bench_t *b);
int write_csv(const bench_t *b);
int write_json(const bench_t *b, int ok);

/* ---- model.c ---------------------------------------------------------------------------- */

int measure_model(bench_t *b);
void print_model_header(const bench_t *b);
void print_model_row(const bench_t *b, const row_t *row);

/* ---- bound.c ---------------------------------------------------------------------------- */

size_t llc_bytes(void); /* the last-level cache, 0 when unknown */
/* Every rank copies at once; sets copy_rate and copy_bytes. Returns 0 after saying why. */
int measure_copy_rate(bench_t *b);
/* The traffic and bound of a combined row's variant, where --bound applies. */
void set_bound(const bench_t *b, row_t *row, int inplace);
/* Bytes to allocate for a buffer of cap bytes, with --rotate's sets. */
size_t rotate_pool(const bench_t *b, size_t cap);
/* How many sets of buffers --rotate cycles through for this call (0 without it). */
size_t rotate_sets(const bench_t *b, const coll_t *co, const call_t *k);
/* The call of timed iteration i: with --rotate, its buffers moved to set i of the rotation. */
call_t rotated(const bench_t *b, const coll_t *co, const call_t *k, int i);
void print_buffers(const bench_t *b, FILE *f);
void print_bound_header(const bench_t *b, FILE *f);

/* ---- explain.c -------------------------------------------------------------------------- */

int run_explain(bench_t *b);

/* ---- device.c --------------------------------------------------------------------------- */

/* "host", "cuda" or "cuda:N" into use_cuda and cuda_dev. Returns 0, or 1 if s is none of them. */
int parse_device(const char *s, bench_t *b);
/* Loads the CUDA module and opens b->cuda_dev. Returns 0 after saying why on stderr. */
int device_open(bench_t *b);
const char *device_name(const bench_t *b);
void *device_alloc(bench_t *b, size_t bytes); /* NULL after saying why */
/* Either way between host and device memory. Returns 0 after saying why. */
int device_copy(const bench_t *b, void *dst, const void *src, size_t bytes);
/* Frees sbuf and rbuf and closes the module's context. */
void device_close(bench_t *b);

/* ---- memory.c -------------------------------------------------------------------------- */

int memory_start(bench_t *b); /* before hoop_init; returns 0 after saying why */
void memory_after_init(bench_t *b);
void memory_after_buffers(bench_t *b, unsigned char *const *bufs, const size_t *sizes, int n);
int memory_report(bench_t *b); /* collective; rank 0 prints */
void write_memory_json(const bench_t *b, FILE *f);
void memory_free(bench_t *b);

/* ---- options.c -------------------------------------------------------------------------- */

typedef struct opts {
    int model, explain, factor_set, step_set, traffic;
    const char *algos; /* --algo as given, possibly a comma-separated list */
} opts_t;

/* Returns 0; -1 for -h, -2 for --version; 2 after printing what is wrong. */
int parse_args(int argc, char **argv, bench_t *b, opts_t *o);
void usage(FILE *f);

#endif
