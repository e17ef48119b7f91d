/* hoop-perf's command line (nccl-tests' flags and a few of its own) and its help text. Each
 * option is one row of longs[], one letter of the short string and one case: nccl-tests' flags
 * that make no sense here are accepted where the sense is kept, refused with a sentence where not. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"
#include "../bench_util.h"
#include "hoop-perf.h"

static int parse_dtypes(const char *s, unsigned *mask)
{
    static const struct {
        const char *alias;
        hoop_dtype_t dt;
    } aliases[] = {{"float", HOOP_FLOAT32}, {"half", HOOP_FLOAT16}, {"double", HOOP_FLOAT64},
                   {"bf16", HOOP_BFLOAT16}, {"char", HOOP_INT8},    {"int", HOOP_INT32},
                   {"uint", HOOP_UINT32}};
    if (!strcmp(s, "all")) {
        *mask = (1u << HOOP_DTYPE_COUNT) - 1;
        return 0;
    }
    for (int d = 0; d < HOOP_DTYPE_COUNT; d++)
        if (!strcmp(s, hoop_dtype_name((hoop_dtype_t)d))) {
            *mask = 1u << d;
            return 0;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(s, aliases[i].alias)) {
            *mask = 1u << aliases[i].dt;
            return 0;
        }
    return -1;
}

static int parse_ops(const char *s, unsigned *mask)
{
    if (!strcmp(s, "all")) {
        *mask = (1u << HOOP_OP_COUNT) - 1;
        return 0;
    }
    for (int o = 0; o < HOOP_OP_COUNT; o++)
        if (!strcmp(s, hoop_op_name((hoop_op_t)o))) {
            *mask = 1u << o;
            return 0;
        }
    return -1;
}

void usage(FILE *f)
{
    fputs(
        "usage: hoop-perf [COLLECTIVE] [options]\n"
        "Every rank runs it: under hooprun, mpirun, srun or torchrun (without a launcher it runs\n"
        "as a single rank). Output and options follow nccl-tests.\n"
        "\n"
        "COLLECTIVE  allreduce (default), broadcast, reduce, allgather, gather, scatter,\n"
        "            reducescatter, alltoall, sendrecv, barrier (all_reduce etc. also accepted)\n"
        "\n"
        "  -b, --minbytes BYTES      smallest size (default 8; K, M, G suffixes)\n"
        "  -e, --maxbytes BYTES      largest size (default 64M)\n"
        "  -f, --stepfactor F        multiply the size by F from row to row (default 2)\n"
        "  -i, --stepbytes BYTES     add BYTES from row to row instead (when -f is absent or 1;\n"
        "                            default 1M then)\n"
        "  -n, --iters N             timed iterations per row (default 20)\n"
        "  -m, --agg_iters N         calls per iteration, posted together and then waited for\n"
        "                            (default 1); time is per call, as nccl-tests divides it\n"
        "  -w, --warmup_iters N      warm-up iterations at the largest and smallest size, for\n"
        "                            every type, op and root (default 5)\n"
        "  --warm-each               also run the warm-up iterations before every timed row\n"
        "  -c, --check 0|1           count wrong elements (default 1)\n"
        "  -z, --blocking 0|1|2|3    0: post every call of every iteration as a nonblocking\n"
        "                            call, then wait for them (default); 1: each iteration's\n"
        "                            calls are waited for, then all ranks meet at a barrier,\n"
        "                            which is timed; 2: as 1 without the barrier; 3: as 1 with\n"
        "                            the barrier's time left out. With -m 1, modes 1-3 make\n"
        "                            blocking calls, as MPI benchmarks time theirs\n"
        "  -I, --per_iter_timing 0|1 time every iteration: columns i_min, i_max, i_p99 (nearest\n"
        "                            rank) and i_cv (stdev / mean) per call, each iteration the\n"
        "                            slowest rank's; --json/--csv add mean, p50 and p95. Under\n"
        "                            -z 0 an iteration ends when its last call is waited for\n"
        "  -K, --per_iter_skip N     leave the first N iterations out of -I's figures\n"
        "  -S, --report_timestamps 0|1  a column with the time each row ended (UTC)\n"
        "  -M, --memory 0|1          report each rank's memory at the end (the largest over\n"
        "                            ranks): resident memory, shared memory mapped and file\n"
        "                            descriptors that init and the collectives added, and the\n"
        "                            buffers hoop-perf allocated; read from /proc; then what\n"
        "                            the communicator says it holds (hoop_comm_memory)\n"
        "  -J, --output_file FILE    as --json FILE (nccl-tests' name)\n"
        "  -a, --average 0|1|2|3     time reported: rank 0's, the mean, min or max over ranks\n"
        "                            (default 1, the mean, as nccl-tests)\n"
        "  -d, --datatype T|all      int8 uint8 int32 uint32 int64 uint64 float16 (half)\n"
        "                            bfloat16 float32 (float) float64 (double) (default float32)\n"
        "  -o, --op OP|all           sum prod min max avg (default sum)\n"
        "  -r, --root R|all          root of broadcast, reduce, gather, scatter (default 0)\n"
        "  -T, --timeout S           sets HOOP_TIMEOUT: a wait (init included) that makes no\n"
        "                            progress for S seconds fails the call with a timeout\n"
        "  -g, --ngpus 1, -t, --nthreads 1   accepted for nccl-tests command lines\n"
        "  -p, --parallel_init 0|1   accepted: each process is one rank with one communicator,\n"
        "                            so there is nothing to initialise in parallel\n"
        "  -C, --report_cputime 0|1  accepted: times are host wall-clock time either way (the\n"
        "                            buffers are host memory; no GPU events are timed)\n"
        "  -G, --cudagraph 0         only 0: hoop's calls take no CUDA stream, so there is no\n"
        "                            CUDA graph to capture them in\n"
        "  -R, --local_register 0    only 0: hoop has no buffer registration to ask for (the\n"
        "                            verbs transport registers what each transfer needs)\n"
        "  --algo NAME[,NAME...]     all-reduce algorithm (sets HOOP_ALGO): auto ring rd\n"
        "                            rabenseifner ps ps-sharded hier\n"
        "  --transport NAME          sets HOOP_TRANSPORT\n"
        "  --json FILE, --csv FILE   rank 0 also writes every row there\n"
        "  --model                   fit alpha (latency), beta (s per byte moved) and gamma (s "
        "per\n"
        "                            byte reduced), then print for every size from -b to -e the\n"
        "                            measured all-reduce (float32 sum, with --algo) beside the\n"
        "                            predictions of ring, rd, tree and ps (-d, -o ignored)\n"
        "  --explain                 trace one all-reduce of -b bytes of float32 (with --algo):\n"
        "                            the library's plan for it and why, every rank's schedule\n"
        "                            by step, then its traffic\n"
        "  --traffic                 print the memory-traffic model of every algorithm on one\n"
        "                            host (bytes read + written per call) and exit\n"
        "  --bound                   measure the copy rate at the start (every rank copying a\n"
        "                            buffer larger than the last-level cache at once) and print\n"
        "                            for every row on one host its traffic and the fraction of\n"
        "                            the bound it reaches: traffic / (2 x copy rate) / time\n"
        "  --copy-rate GB/s          the copy rate of --bound, given instead of measured (bytes\n"
        "                            copied per second by all ranks at once); implies --bound\n"
        "  --rotate BYTES            cache-cold: each timed call uses the next set of buffers\n"
        "                            within BYTES per rank (give more than the last-level cache;\n"
        "                            default: cache-hot, the same buffers every call)\n"
        "  --sym                     the buffers in symmetric memory (hoop_mem_alloc): an\n"
        "                            all-reduce above HOOP_SMALL_BYTES runs zero-copy\n"
        "                            (every rank on one host)\n"
        "  -V, --version             hoop-perf's and the library's version\n"
        "  --device host|cuda[:N]    the buffers in host memory (default) or in the memory of\n"
        "                            CUDA device N (0); #wrong checks the device result\n"
        "  -h, --help                this text\n"
        "\n",
        f);
    fputs(
        "columns\n"
        "  size    bytes of the largest buffer of the call: count x element size for allreduce,\n"
        "          broadcast, reduce and sendrecv; the total over ranks (ranks x count x element\n"
        "          size) for allgather, gather, reducescatter, scatter and alltoall, as "
        "nccl-tests\n"
        "          (so these sizes are rounded down to a multiple of ranks x element size)\n"
        "  count   the count passed to the call: per rank for allgather, gather, reducescatter,\n"
        "          scatter; per peer for alltoall; the whole buffer otherwise\n"
        "  time    microseconds per call, averaged over -n iterations, then over ranks as -a says\n"
        "  algbw   size / time, in GB/s (1e9 bytes per second)\n"
        "  busbw   algbw x bus factor, comparable across rank counts (n ranks): 2(n-1)/n "
        "allreduce;\n"
        "          (n-1)/n allgather, reducescatter, alltoall, gather, scatter; 1 broadcast,\n"
        "          reduce, sendrecv; barrier reports time only\n"
        "  #wrong  received elements that differ from independently computed values, summed over\n"
        "          ranks (reduce, gather: the root's result; N/A with -c 0). Inputs are exact in\n"
        "          every type whatever the order of reduction\n"
        "  in-place: one buffer, as nccl-tests: allgather and gather send from recvbuf +\n"
        "          rank x count; reducescatter and scatter receive at sendbuf + rank x count;\n"
        "          the others pass the same pointer twice. hoop_broadcast is in place: out of\n"
        "          place, the root's input is first copied to its receive buffer, untimed.\n"
        "          sendrecv (its send and receive would overlap) and barrier have no in-place\n"
        "          form (N/A)\n"
        "sendrecv: every rank sends to rank+1 and receives from rank-1 at once\n"
        "--csv/--json columns: collective, algo, transport, ranks, size_bytes, count, type, "
        "redop,\n"
        "  root, then time_us, algbw, busbw, wrong for oop (out of place) and ip (in place);\n"
        "  empty (CSV) or null (JSON) where the table says N/A; with --bound or --rotate also\n"
        "  buffers (hot or rotated), oop_traffic_bytes, oop_bound, ip_traffic_bytes, ip_bound,\n"
        "  oop_faults_per_call, ip_faults_per_call (page faults a timed call took, the most\n"
        "  of any rank: a cold measurement should not be one of page tables)\n"
        "exit status: 0 all right, 1 wrong elements or a failed call, 2 bad usage\n",
        f);
}

enum {
    OPT_ALGO = 256,
    OPT_TRANSPORT,
    OPT_JSON,
    OPT_CSV,
    OPT_MODEL,
    OPT_EXPLAIN,
    OPT_WARM_EACH,
    OPT_DEVICE,
    OPT_TRAFFIC,
    OPT_BOUND,
    OPT_COPY_RATE,
    OPT_ROTATE,
    OPT_SYM
};

/* A rate in GB/s above zero. Returns 0, or 1 if s is not one. */
static int parse_rate(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v > 0) || v > 1e6) return 1;
    *out = v * 1e9;
    return 0;
}

int parse_args(int argc, char **argv, bench_t *b, opts_t *o)
{
    static const struct option longs[] = {{"minbytes", required_argument, NULL, 'b'},
                                          {"maxbytes", required_argument, NULL, 'e'},
                                          {"stepfactor", required_argument, NULL, 'f'},
                                          {"stepbytes", required_argument, NULL, 'i'},
                                          {"iters", required_argument, NULL, 'n'},
                                          {"agg_iters", required_argument, NULL, 'm'},
                                          {"warmup_iters", required_argument, NULL, 'w'},
                                          {"check", required_argument, NULL, 'c'},
                                          {"blocking", required_argument, NULL, 'z'},
                                          {"per_iter_timing", required_argument, NULL, 'I'},
                                          {"per_iter_skip", required_argument, NULL, 'K'},
                                          {"report_timestamps", required_argument, NULL, 'S'},
                                          {"memory", required_argument, NULL, 'M'},
                                          {"output_file", required_argument, NULL, 'J'},
                                          {"average", required_argument, NULL, 'a'},
                                          {"datatype", required_argument, NULL, 'd'},
                                          {"op", required_argument, NULL, 'o'},
                                          {"root", required_argument, NULL, 'r'},
                                          {"ngpus", required_argument, NULL, 'g'},
                                          {"nthreads", required_argument, NULL, 't'},
                                          {"parallel_init", required_argument, NULL, 'p'},
                                          {"report_cputime", required_argument, NULL, 'C'},
                                          {"cudagraph", required_argument, NULL, 'G'},
                                          {"local_register", required_argument, NULL, 'R'},
                                          {"timeout", required_argument, NULL, 'T'},
                                          {"algo", required_argument, NULL, OPT_ALGO},
                                          {"transport", required_argument, NULL, OPT_TRANSPORT},
                                          {"json", required_argument, NULL, OPT_JSON},
                                          {"csv", required_argument, NULL, OPT_CSV},
                                          {"warm-each", no_argument, NULL, OPT_WARM_EACH},
                                          {"model", no_argument, NULL, OPT_MODEL},
                                          {"explain", no_argument, NULL, OPT_EXPLAIN},
                                          {"version", no_argument, NULL, 'V'},
                                          {"device", required_argument, NULL, OPT_DEVICE},
                                          {"traffic", no_argument, NULL, OPT_TRAFFIC},
                                          {"bound", no_argument, NULL, OPT_BOUND},
                                          {"copy-rate", required_argument, NULL, OPT_COPY_RATE},
                                          {"rotate", required_argument, NULL, OPT_ROTATE},
                                          {"sym", no_argument, NULL, OPT_SYM},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int c, v = 0, li;
    opterr = 0;
    while ((li = -1,
            c = getopt_long(argc, argv, ":b:e:f:i:n:m:w:c:z:a:d:o:r:g:t:p:C:G:R:T:I:K:S:M:J:Vh",
                            longs, &li)) != -1) {
        int bad = 0;
        switch (c) {
        case 'b': bad = bench_parse_size(optarg, &b->minb); break;
        case 'e': bad = bench_parse_size(optarg, &b->maxb); break;
        case 'f':
            bad = bench_parse_int(optarg, 1, 1 << 20, &v);
            b->factor = (size_t)v;
            o->factor_set = 1;
            break;
        case 'i':
            bad = bench_parse_size(optarg, &b->step) || b->step == 0;
            o->step_set = 1;
            break;
        case 'n': bad = bench_parse_int(optarg, 1, 1 << 24, &b->iters); break;
        case 'm': bad = bench_parse_int(optarg, 1, 1 << 16, &b->agg); break;
        case 'w': bad = bench_parse_int(optarg, 0, 1 << 24, &b->warmup); break;
        case 'c': bad = bench_parse_int(optarg, 0, 1, &b->check); break;
        case 'z': bad = bench_parse_int(optarg, 0, 3, &b->blocking); break;
        case 'I': bad = bench_parse_int(optarg, 0, 1, &b->per_iter); break;
        case 'K': bad = bench_parse_int(optarg, 0, 1 << 24, &b->per_iter_skip); break;
        case 'S': bad = bench_parse_int(optarg, 0, 1, &b->timestamps); break;
        case 'M': bad = bench_parse_int(optarg, 0, 1, &b->memory); break;
        case 'J': b->json_path = optarg; break;
        case 'a': bad = bench_parse_int(optarg, 0, 3, &b->average); break;
        case 'd': bad = parse_dtypes(optarg, &b->dtypes); break;
        case 'o': bad = parse_ops(optarg, &b->ops); break;
        case 'r':
            if (!strcmp(optarg, "all"))
                b->root = -1;
            else
                bad = bench_parse_int(optarg, 0, 1 << 30, &b->root);
            break;
        case 'g':
        case 't': bad = bench_parse_int(optarg, 1, 1, &v); break; /* one rank per process */
        case 'p':
        case 'C': bad = bench_parse_int(optarg, 0, 1, &v); break; /* see the help text */
        case 'G':
        case 'R':
            if (bench_parse_int(optarg, 0, 1 << 30, &v)) {
                bad = 1;
            } else if (v != 0) {
                fprintf(stderr, "hoop-perf: -%c %s: %s\n", c, optarg,
                        c == 'G' ? "CUDA graphs are not supported: hoop's calls take no CUDA "
                                   "stream to capture them on"
                                 : "buffer registration is not supported: hoop has no "
                                   "registration call (the verbs transport registers what each "
                                   "transfer needs)");
                return 2;
            }
            break;
        case 'T':
            bad = bench_parse_int(optarg, 1, 1 << 24, &v) || setenv("HOOP_TIMEOUT", optarg, 1) != 0;
            break;
        case 'V': return -2;
        case OPT_ALGO:
            /* A list (ring,ps) runs the sweep once per algorithm in one job. */
            o->algos = optarg;
            bad = optarg[0] == '\0' ||
                  (!strchr(optarg, ',') && setenv("HOOP_ALGO", optarg, 1) != 0);
            break;
        case OPT_TRANSPORT:
            bad = optarg[0] == '\0' || setenv("HOOP_TRANSPORT", optarg, 1) != 0;
            break;
        case OPT_JSON: b->json_path = optarg; break;
        case OPT_CSV: b->csv_path = optarg; break;
        case OPT_WARM_EACH: b->warm_each = 1; break;
        case OPT_MODEL: o->model = 1; break;
        case OPT_EXPLAIN: o->explain = 1; break;
        case OPT_DEVICE: bad = parse_device(optarg, b); break;
        case OPT_TRAFFIC: o->traffic = 1; break;
        case OPT_BOUND: b->bound = 1; break;
        case OPT_COPY_RATE:
            bad = parse_rate(optarg, &b->copy_rate);
            b->bound = 1;
            break;
        case OPT_ROTATE: bad = bench_parse_size(optarg, &b->rotate) || b->rotate == 0; break;
        case OPT_SYM: b->sym = 1; break;
        case 'h': return -1;
        case ':':
            fprintf(stderr, "hoop-perf: option %s needs a value (see hoop-perf -h)\n",
                    argv[optind - 1]);
            return 2;
        default:
            if (optopt)
                fprintf(stderr, "hoop-perf: unknown option '-%c' (see hoop-perf -h)\n", optopt);
            else
                fprintf(stderr, "hoop-perf: unknown option '%s' (see hoop-perf -h)\n",
                        argv[optind - 1]);
            return 2;
        }
        if (bad) {
            if (li >= 0)
                fprintf(stderr, "hoop-perf: bad value for --%s: '%s' (see hoop-perf -h)\n",
                        longs[li].name, optarg);
            else
                fprintf(stderr, "hoop-perf: bad value for -%c: '%s' (see hoop-perf -h)\n", c,
                        optarg);
            return 2;
        }
    }
    if (optind < argc) {
        b->coll = find_coll(argv[optind]);
        if (!b->coll || optind + 1 < argc) {
            fprintf(stderr, "hoop-perf: unknown collective '%s' (one of:", argv[optind]);
            for (size_t i = 0; i < NCOLLS; i++) fprintf(stderr, " %s", COLLS[i].name);
            fprintf(stderr, ")\n");
            return 2;
        }
    }
    if (!o->factor_set && o->step_set) b->factor = 1;
    if (b->factor <= 1 && !o->step_set) b->step = 1u << 20;
    if ((long long)b->agg * (b->iters > b->warmup ? b->iters : b->warmup) > (1 << 24)) {
        fprintf(stderr, "hoop-perf: -m %d with -n %d / -w %d: more than %d calls per row\n", b->agg,
                b->iters, b->warmup, 1 << 24);
        return 2;
    }
    if (b->per_iter_skip && (!b->per_iter || b->per_iter_skip >= b->iters)) {
        fprintf(stderr, "hoop-perf: -K %d: needs -I 1 and fewer than -n %d iterations\n",
                b->per_iter_skip, b->iters);
        return 2;
    }
    if (b->minb > b->maxb) {
        fprintf(stderr, "hoop-perf: -b %zu is larger than -e %zu\n", b->minb, b->maxb);
        return 2;
    }
    if ((o->model || o->explain) &&
        (b->coll != &COLLS[0] || o->model + o->explain > 1 || b->json_path || b->csv_path)) {
        fprintf(stderr, "hoop-perf: --model and --explain are for allreduce, one at a time, "
                        "without --json/--csv\n");
        return 2;
    }
    if ((b->bound || b->rotate) && (o->model || o->explain || b->use_cuda)) {
        fprintf(stderr, "hoop-perf: --bound and --rotate are for the sweep of host buffers (not "
                        "with --model, --explain or --device)\n");
        return 2;
    }
    if (b->sym && b->use_cuda) {
        fprintf(stderr, "hoop-perf: --sym is host memory (not with --device)\n");
        return 2;
    }
    if ((o->model || o->explain) && b->use_cuda) {
        fprintf(stderr, "hoop-perf: --model and --explain use host buffers only (no --device)\n");
        return 2;
    }
    return 0;
}
