/*
 * hoop-perf: bandwidth and correctness of hoop's collectives, printed in the layout of nccl-tests
 * (same columns, same size and bus-bandwidth conventions) so that the numbers read the same way.
 *
 *   hooprun -n 4 hoop-perf [COLLECTIVE] [-b min] [-e max] [-f factor | -i step] [-n iters] ...
 *
 * `hoop-perf -h` explains every option and column. Each collective is one row of COLLS (colls.c):
 * how its counts relate to the size column, its bus factor, how to run it, what every rank sends
 * and what every rank must receive. Inputs are chosen so that every expected value is exact in
 * every dtype whatever order the library reduces in, and the expected values are computed in
 * check.c, element by element, without the library. hoop-perf.h says which file holds what.
 *
 * --model fits the alpha-beta-gamma cost model (latency, seconds per byte moved, seconds per byte
 * reduced) and sets the predicted all-reduce times of four algorithms beside the measured one.
 * --explain runs one traced all-reduce and prints every rank's schedule and traffic.
 * --traffic prints the memory-traffic model of every algorithm on one host; --bound sets each row
 * against it and the measured copy rate; --rotate makes the buffers cache-cold.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"
#include "../bench_util.h"
#include "hoop-perf.h"
#include "traffic.h"

static FILE *open_output(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "hoop-perf: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

int main(int argc, char **argv)
{
    bench_t b;
    opts_t o;
    memset(&b, 0, sizeof b);
    memset(&o, 0, sizeof o);
    b.coll = &COLLS[0];
    b.minb = 8;
    b.maxb = 64u << 20;
    b.factor = 2;
    b.iters = 20;
    b.warmup = 5;
    b.check = 1;
    b.agg = 1;
    b.average = 1; /* the mean over ranks, as nccl-tests */
    b.dtypes = 1u << HOOP_FLOAT32;
    b.ops = 1u << HOOP_SUM;

    int rc = parse_args(argc, argv, &b, &o);
    if (rc == -2) {
        printf("hoop-perf %s (libhoop %s)\n", HOOP_VERSION_STRING, hoop_version());
        return 0;
    }
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc) return rc;
    if (o.traffic) {
        print_traffic(stdout, 0);
        return 0;
    }
    /* The one-step all-reduce's limit, for the traffic model (the library's default) */
    const char *sb = getenv("HOOP_SMALL_BYTES");
    b.small_bytes = 16 * 1024;
    if (sb && sb[0] && bench_parse_size(sb, &b.small_bytes)) b.small_bytes = 16 * 1024;
    if (o.model || o.explain) {
        b.dtypes = 1u << HOOP_FLOAT32;
        b.ops = 1u << HOOP_SUM;
        if (o.explain) b.maxb = b.minb;
    }
    const char *algo = getenv("HOOP_ALGO"), *tp = getenv("HOOP_TRANSPORT");
    b.algo = o.algos != NULL ? o.algos : algo && algo[0] ? algo : "auto";
    b.transport = tp && tp[0] ? tp : "auto";

    if (!memory_start(&b)) return 1;
    hoop_result_t e = hoop_init_from_env(&b.comm);
    if (e != HOOP_OK) {
        fprintf(stderr,
                "hoop-perf: hoop_init failed: %s (see the message above; HOOP_ALGO=%s "
                "HOOP_TRANSPORT=%s)\n",
                hoop_error_string(e), b.algo, b.transport);
        memory_free(&b);
        return 1;
    }
    memory_after_init(&b);
    b.rank = hoop_comm_rank(b.comm);
    b.size = hoop_comm_size(b.comm);

    int status = 0;
    if (b.root >= b.size) {
        if (b.rank == 0)
            fprintf(stderr, "hoop-perf: -r %d: the root must be below the %d ranks\n", b.root,
                    b.size);
        status = 2;
    }
    if (b.coll == find_coll("sendrecv") && b.size < 2) {
        if (b.rank == 0) fprintf(stderr, "hoop-perf: sendrecv needs 2 ranks or more\n");
        status = 2;
    }
    if (!status && b.use_cuda && !device_open(&b)) status = 1;
    if (!status && !alloc_buffers(&b)) status = 1;
    if (!status && !b.dev) {
        unsigned char *const bufs[3] = {b.sbuf, b.rbuf, b.ebuf};
        const size_t sizes[3] = {rotate_pool(&b, b.scap), rotate_pool(&b, b.rcap), b.ecap};
        memory_after_buffers(&b, bufs, sizes, 3);
    }
    if (!status && b.rank == 0 && b.json_path && !(b.json = open_output(b.json_path))) status = 1;
    if (!status && b.rank == 0 && b.csv_path && !(b.csv = open_output(b.csv_path))) status = 1;
    status = agree(&b, status);

    int ok = status == 0;
    char *algo_list = NULL;
    if (ok && o.explain) {
        ok = run_explain(&b);
    } else if (ok && o.model) {
        b.model = 1;
        ok = measure_model(&b) && checked(&b, "barrier", hoop_barrier(b.comm));
        if (ok && b.rank == 0) print_model_header(&b);
        ok = ok && run_all(&b);
    } else if (ok) {
        ok = print_header(&b);
        if (o.algos != NULL && strchr(o.algos, ',') != NULL) {
            /* Rows point at their algorithm's name: the list lives until the end. */
            algo_list = strdup(o.algos);
            ok = ok && algo_list != NULL;
            for (char *save = NULL, *a = ok ? strtok_r(algo_list, ",", &save) : NULL;
                 ok && a != NULL; a = strtok_r(NULL, ",", &save)) {
                ok = checked(&b, "hoop_comm_set_algo", hoop_comm_set_algo(b.comm, a));
                b.algo = a;
                if (ok && b.rank == 0) printf("# --algo %s\n", a);
                ok = ok && run_all(&b);
            }
        } else {
            ok = ok && run_all(&b);
        }
        if (ok && b.rank == 0) print_summary(&b);
    }
    if (ok && !memory_report(&b)) ok = 0;
    if (b.csv && !write_csv(&b)) ok = 0;
    if (b.json && !write_json(&b, ok && b.wrong_total == 0)) ok = 0;
    if (b.csv && fclose(b.csv) != 0) ok = 0;
    if (b.json && fclose(b.json) != 0) ok = 0;
    if (!ok && status == 0) hoop_comm_abort(b.comm);
    /* Symmetric buffers are freed together (a collective call); an aborted communicator unmaps
     * them as it is destroyed. */
    if (b.sym && ok && b.sbuf) ok = checked(&b, "hoop_mem_free", hoop_mem_free(b.comm, b.sbuf));
    if (b.sym && ok && b.rbuf) ok = checked(&b, "hoop_mem_free", hoop_mem_free(b.comm, b.rbuf));
    hoop_comm_destroy(b.comm);
    if (b.dev) {
        device_close(&b);
    } else if (!b.sym) {
        free(b.sbuf);
        free(b.rbuf);
    }
    free(b.hsbuf);
    free(b.hrbuf);
    free(b.ebuf);
    free(b.reqs);
    free(b.rows);
    free(algo_list);
    free(b.iter_end);
    free(b.iter_t);
    memory_free(&b);
    if (status) return status;
    return ok && b.wrong_total == 0 ? 0 : 1;
}
