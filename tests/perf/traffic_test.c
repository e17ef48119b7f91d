/*
 * hoop-perf's memory-traffic model (bench/hoop-perf/traffic.c) against two independent counts at
 * p = 2, 3 and 4: the multiples of S worked out by hand from the schedules in src/local/shm_coll.c
 * and src/collectives/, and a count made here rank by rank and block by block (every copy 2x its
 * bytes, every fold p contributions read and one result written, every point-to-point message 4x:
 * into the ring and out).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "traffic.h"

#define SMALL (16 * 1024)

static int failures;

static void expect(const char *coll, const char *algo, int p, size_t size, int inplace, double want,
                   const char *how)
{
    double got = traffic_bytes(coll, algo, p, size, SMALL, inplace);
    if (fabs(got - want) > 0.5) {
        printf("FAIL %s %s p=%d size=%zu %s (%s): model %.0f, expected %.0f\n", coll, algo, p, size,
               inplace ? "in place" : "out of place", how, got, want);
        failures++;
    }
}

/* Rank by rank: the area's reduction rounds over p blocks of S/p (S divisible by p). */
static double count_area_reduce(int p, double S, int copy_own, int out_ranks, int copy_out)
{
    double t = 0, blk = S / p;
    for (int r = 0; r < p; r++) {
        for (int b = 0; b < p; b++)
            if (b != r || copy_own) t += 2 * blk; /* copy in */
        t += p * blk + blk;                       /* fold its own block: p read, 1 written */
        if (r < out_ranks) t += copy_out ? 2 * S : 0;
    }
    return t;
}

int main(void)
{
    /* By hand, as multiples of S: all-reduce (5p-1), reduce (3p+1), broadcast 2p, all-gather
     * 2(p+1), reduce-scatter (3p-1) and in place (3p+1), alltoall (4p-2) and in place (6p-2),
     * sendrecv 4p, ring 11(p-1), small all-reduce p(p+3). */
    static const struct {
        int p;
        double ar, red, bc, ag, rs, rs_ip, a2a, a2a_ip, sr, ring, small;
    } hand[] = {
        {2, 9, 7, 4, 6, 5, 7, 6, 10, 8, 11, 10},
        {3, 14, 10, 6, 8, 8, 10, 10, 16, 12, 22, 18},
        {4, 19, 13, 8, 10, 11, 13, 14, 22, 16, 33, 28},
    };
    const size_t S = 12u << 20; /* divisible by 2, 3 and 4, above the small all-reduce's limit */
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++) {
        int p = hand[i].p;
        double s = (double)S;
        expect("allreduce", "auto", p, S, 0, hand[i].ar * s, "hand");
        expect("allreduce", "auto", p, S, 1, hand[i].ar * s, "hand");
        expect("allreduce", "shm", p, S, 0, hand[i].ar * s, "hand");
        expect("allreduce", "auto", p, 4096, 0, hand[i].small * 4096, "hand");
        expect("allreduce", "ring", p, S, 0, hand[i].ring * s, "hand");
        expect("reduce", "auto", p, S, 0, hand[i].red * s, "hand");
        expect("broadcast", "auto", p, S, 0, hand[i].bc * s, "hand");
        expect("allgather", "auto", p, S, 1, hand[i].ag * s, "hand");
        expect("reducescatter", "auto", p, S, 0, hand[i].rs * s, "hand");
        expect("reducescatter", "auto", p, S, 1, hand[i].rs_ip * s, "hand");
        expect("alltoall", "auto", p, S, 0, hand[i].a2a * s, "hand");
        expect("alltoall", "ring", p, S, 1, hand[i].a2a_ip * s, "hand");
        expect("sendrecv", "auto", p, S, 0, hand[i].sr * s, "hand");

        /* Counted rank by rank. */
        double blk = s / p, t;
        expect("allreduce", "auto", p, S, 0, count_area_reduce(p, s, 0, p, 1), "counted");
        expect("reduce", "auto", p, S, 0, count_area_reduce(p, s, 0, 1, 1), "counted");
        expect("reducescatter", "auto", p, S, 0, count_area_reduce(p, s, 0, 0, 0), "counted");
        expect("reducescatter", "auto", p, S, 1, count_area_reduce(p, s, 1, 0, 0), "counted");
        t = 2 * s + (p - 1) * 2 * s; /* the root copies in, the others out */
        expect("broadcast", "auto", p, S, 0, t, "counted");
        t = 0;
        for (int r = 0; r < p; r++) t += 2 * blk + p * 2 * blk; /* own block in, every block out */
        expect("allgather", "auto", p, S, 0, t, "counted");
        t = 0;
        for (int r = 0; r < p; r++) t += 2 * blk + (p - 1) * 4 * blk; /* own block, p-1 messages */
        expect("alltoall", "auto", p, S, 0, t, "counted");
        expect("alltoall", "auto", p, S, 1, t + p * 2 * s, "counted"); /* + the input to scratch */
        t = 0;
        for (int r = 0; r < p; r++)
            for (int k = 0; k < p - 1; k++) /* receive, fold into the output, send; then pass on */
                t += (4 * blk + 3 * blk) + 4 * blk;
        expect("allreduce", "ring", p, S, 0, t, "counted");
        t = 0;
        for (int r = 0; r < p; r++) t += 2 * 4096.0 + p * 4096.0 + 4096.0;
        expect("allreduce", "auto", p, 4096, 0, t, "counted");
    }
    /* Zero copy on symmetric memory, counted block by block: each owner reads its block of all p
     * inputs and writes it into all p outputs; at or under the small limit, the one step. */
    for (int p = 2; p <= 4; p++) {
        double t = 0, blk = (double)S / p;
        for (int r = 0; r < p; r++) t += p * blk + p * blk;
        expect("allreduce", "sym", p, S, 0, t, "counted");
        expect("allreduce", "sym", p, S, 1, 2.0 * p * (double)S, "hand");
        expect("allreduce", "sym", p, 4096, 0, p * (p + 3) * 4096.0, "hand");
        /* The others, counted rank by rank: reduce-scatter reads its block of every input (S/p
         * each) and writes its S/p; all-gather reads its S/p once per rank and writes it into
         * every output; broadcast's p-1 others each copy S. */
        double rs = 0, ag = 0, bc = 0;
        for (int r = 0; r < p; r++) {
            rs += p * blk + blk;
            ag += p * blk + p * blk;
            bc += r == 0 ? 0 : 2.0 * (double)S;
        }
        expect("reducescatter", "sym", p, S, 0, rs, "counted");
        expect("reducescatter", "sym", p, S, 1, rs, "counted");
        expect("allgather", "sym", p, S, 0, ag, "counted");
        expect("broadcast", "sym", p, S, 0, bc, "counted");
        /* At or under HOOP_SMALL_BYTES a rank, and the 2-rank all-gather of 32-256 KiB a rank
         * (point to point), the area's model. */
        expect("reducescatter", "sym", p, (size_t)p * SMALL, 0, (3.0 * p - 1) * p * SMALL, "area");
        expect("broadcast", "sym", p, SMALL, 0, 2.0 * p * SMALL, "area");
    }
    expect("allgather", "sym", 2, 2 * 64 * 1024, 0, 6.0 * 2 * 64 * 1024, "area");
    /* Single copy (HOOP_CMA), counted rank by rank: each owner reads its block of all p inputs
     * (its own where it lies, the peers' into a chunk in cache) and writes it into its output
     * once, then copies the p-1 other blocks from their owners. */
    for (int p = 2; p <= 5; p++) {
        double t = 0, blk = (double)S / p;
        for (int r = 0; r < p; r++) t += p * blk + blk + (p - 1) * 2 * blk;
        expect("allreduce", "cma", p, S, 0, t, "counted");
        expect("allreduce", "cma", p, S, 1, (3.0 * p - 1) * (double)S, "hand");
        double rs = 0, ag = 0;
        for (int r = 0; r < p; r++) {
            rs += p * blk + blk;               /* its block of every input; its output */
            ag += (p - 1) * 2 * blk + 2 * blk; /* the peers' blocks, and its own */
        }
        expect("reducescatter", "cma", p, S, 0, rs, "counted");
        expect("allgather", "cma", p, S, 0, ag, "counted");
        expect("allgather", "cma", p, S, 1, ag - 2.0 * (double)S, "counted");
    }
    /* No model: no bytes, and no model for one rank. */
    expect("allreduce", "rd", 4, S, 0, 0, "none");
    expect("gather", "auto", 4, S, 0, 0, "none");
    expect("barrier", "auto", 4, 0, 0, 0, "none");
    expect("allreduce", "auto", 1, S, 0, 0, "none");
    /* Another algorithm forced: the area does not run, so its collectives have no model. */
    expect("broadcast", "ring", 3, S, 0, 0, "none");
    if (traffic_model("allreduce", "auto", 2, SMALL, SMALL, 0) == NULL ||
        strcmp(traffic_model("allreduce", "auto", 2, SMALL, SMALL, 0), "allreduce/area-small") ||
        strcmp(traffic_model("allreduce", "auto", 2, SMALL + 1, SMALL, 0), "allreduce/area")) {
        printf("FAIL: the small all-reduce's limit is not HOOP_SMALL_BYTES, inclusive\n");
        failures++;
    }
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures != 0;
}
