/*
 * --traffic and --bound: the bytes each algorithm hoop-perf runs on one host moves through
 * memory, and what fraction of the machine's copy rate a row reaches for that traffic.
 *
 * What is counted: every byte a CPU reads or writes on the data path, summed over the ranks. A
 * copy of n bytes is 2n (n read, n written). Folding the p contributions of a block into its
 * result reads each contribution once and writes the result once: the area sizes a round so that
 * the partial result stays in cache between the folds. Not counted: the lines a write fetches
 * before it overwrites them (streaming stores avoid them anyway), control lines, step numbers and
 * frame headers. S is the row's size column; p the ranks.
 *
 * This file holds the model only (no library calls), so that a unit test can check it alone;
 * bound.c measures the copy rate and rotates the buffers.
 */
#include <stdio.h>
#include <string.h>

#include "traffic.h"

/* The models, by the name traffic_model() returns. k: the multiple of S, as a function of p. */
typedef struct model {
    const char *name, *formula, *why;
} model_t;

static const model_t MODELS[] = {
    {"allreduce/area", "(5p-1)S",
     "shared area in rounds: every rank copies the p-1 blocks it does not own in (2(p-1)S), each "
     "owner folds its block's p contributions into a result slot, its own block read where it "
     "lies ((p+1)S), and every rank copies all p results out (2pS)"},
    {"allreduce/area-small", "p(p+3)S",
     "one step (size up to HOOP_SMALL_BYTES): every rank copies its input in (2S) and folds all p "
     "contributions itself ((p+1)S)"},
    {"allreduce/cma", "(3p-1)S",
     "single copy (HOOP_CMA): each owner reads its block of every input once, its peers' with "
     "process_vm_readv into a chunk that stays in cache as the area's partial result does (pS "
     "read in all), folds it straight into its output (S written), then every rank copies the "
     "p-1 blocks it does not own from their owners' outputs (2(p-1)S)"},
    {"reducescatter/cma", "(p+1)S",
     "single copy (HOOP_CMA=on): each rank reads its block of the p inputs once (its peers' with "
     "process_vm_readv into a chunk in cache) and writes it into its output"},
    {"allgather/cma", "2pS",
     "single copy (HOOP_CMA=on): each rank copies the p-1 peers' inputs into its output with "
     "process_vm_readv, and its own (2S a rank)"},
    {"allgather/cma-inplace", "2(p-1)S", "in place: the own block is where it goes already"},
    {"allreduce/ring", "11(p-1)S",
     "ring over the shm transport, 2(p-1) steps of S/p per rank: a message costs 4x its bytes "
     "(the sender's copy into the peer's ring, the receiver's copy out); reduce-scatter steps "
     "also fold the received segment with the input into the output (3x)"},
    {"allreduce/sym", "2pS",
     "zero copy on symmetric memory (hoop-perf --sym): each owner folds its block straight from "
     "the p inputs where they lie (pS read in all) and writes the result into the p outputs (pS "
     "written), folded in registers and stored into every output in one pass"},
    {"reducescatter/sym", "(p+1)S",
     "zero copy on symmetric memory: each rank folds its block straight from the p inputs (S/p "
     "each, S read per rank) into its output (S/p written per rank)"},
    {"allgather/sym", "2pS",
     "zero copy on symmetric memory: each rank copies its S/p into its block of every rank's "
     "output, reading its input once per rank (S read and S written per rank)"},
    {"broadcast/sym", "2(p-1)S",
     "zero copy on symmetric memory: each of the p-1 others copies the root's buffer into its own"},
    {"broadcast/area", "2pS",
     "the root copies its buffer into the area (2S) and the p-1 others copy it out (2(p-1)S)"},
    {"reduce/area", "(3p+1)S",
     "as all-reduce's rounds, but only the root copies the results out: 2(p-1)S + (p+1)S + 2S"},
    {"allgather/area", "2(p+1)S",
     "every rank copies its S/p in (2S in all) and every rank copies all p blocks out (2pS)"},
    {"reducescatter/area", "(3p-1)S",
     "out of place: every rank copies the p-1 blocks of its input it does not own in (2(p-1)S), "
     "each owner folds its block straight into its output ((p+1)S); nothing is copied out"},
    {"reducescatter/area-inplace", "(3p+1)S",
     "in place (output inside the input): the own block is copied in too, since folding into the "
     "output would overwrite it before it is read: 2pS + (p+1)S"},
    {"alltoall/pairwise", "(4p-2)S",
     "pairwise exchange over the shm transport: every rank copies its own block (2S/p) and sends "
     "p-1 blocks of S/p, 4x their bytes each (into the ring and out)"},
    {"alltoall/pairwise-inplace", "(6p-2)S",
     "in place, every rank first copies its whole input to scratch (2S each), then as out of "
     "place"},
    {"sendrecv/shm", "4pS",
     "every rank sends S to the next through the shm transport's ring: the sender's copy in and "
     "the "
     "receiver's copy out, 4S per rank"},
};

const char *traffic_model(const char *coll, const char *algo, int p, size_t size, size_t small,
                          int inplace)
{
    /* "sym": auto or shm on symmetric buffers (hoop-perf --sym) */
    int sym = !strcmp(algo, "sym");
    int area = sym || !strcmp(algo, "auto") || !strcmp(algo, "shm");
    if (p < 2) return NULL;
    if (!strcmp(coll, "allreduce")) {
        if (area && size <= small) return "allreduce/area-small";
        if (!strcmp(algo, "cma")) return "allreduce/cma";
        if (area) return sym ? "allreduce/sym" : "allreduce/area";
        return !strcmp(algo, "ring") ? "allreduce/ring" : NULL;
    }
    if (!strcmp(coll, "alltoall"))
        return inplace ? "alltoall/pairwise-inplace" : "alltoall/pairwise";
    if (!strcmp(coll, "sendrecv")) return inplace ? NULL : "sendrecv/shm";
    if (!strcmp(algo, "cma") && !strcmp(coll, "reducescatter")) return "reducescatter/cma";
    if (!strcmp(algo, "cma") && !strcmp(coll, "allgather"))
        return inplace ? "allgather/cma-inplace" : "allgather/cma";
    if (!area) return NULL;
    /* Zero copy above HOOP_SMALL_BYTES a rank (S/p for all-gather and reduce-scatter), but for
     * the 2-rank all-gather of 32-256 KiB a rank, which the planner sends point to point. */
    size_t per = !strcmp(coll, "broadcast") ? size : size / (size_t)p;
    int ag_p2p = p == 2 && per >= ((size_t)32 << 10) && per <= ((size_t)256 << 10);
    if (sym && per > small) {
        if (!strcmp(coll, "broadcast")) return "broadcast/sym";
        if (!strcmp(coll, "reducescatter")) return "reducescatter/sym";
        if (!strcmp(coll, "allgather") && !ag_p2p) return "allgather/sym";
    }
    if (!strcmp(coll, "broadcast")) return "broadcast/area";
    if (!strcmp(coll, "reduce")) return "reduce/area";
    if (!strcmp(coll, "allgather")) return "allgather/area";
    if (!strcmp(coll, "reducescatter"))
        return inplace ? "reducescatter/area-inplace" : "reducescatter/area";
    return NULL;
}

double traffic_factor(const char *model, int p)
{
    double q = p;
    static const char *const names[] = {"reducescatter/cma",     "allgather/cma",
                                        "allgather/cma-inplace", "allreduce/cma",
                                        "allreduce/area",        "allreduce/area-small",
                                        "allreduce/ring",        "allreduce/sym",
                                        "reducescatter/sym",     "allgather/sym",
                                        "broadcast/sym",         "broadcast/area",
                                        "reduce/area",           "allgather/area",
                                        "reducescatter/area",    "reducescatter/area-inplace",
                                        "alltoall/pairwise",     "alltoall/pairwise-inplace",
                                        "sendrecv/shm"};
    const double k[] = {q + 1,       2 * q,        2 * (q - 1), 3 * q - 1,   5 * q - 1,
                        q * (q + 3), 11 * (q - 1), 2 * q,       q + 1,       2 * q,
                        2 * (q - 1), 2 * q,        3 * q + 1,   2 * (q + 1), 3 * q - 1,
                        3 * q + 1,   4 * q - 2,    6 * q - 2,   4 * q};
    if (model == NULL) return 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(model, names[i])) return k[i];
    return 0;
}

double traffic_bytes(const char *coll, const char *algo, int p, size_t size, size_t small,
                     int inplace)
{
    return traffic_factor(traffic_model(coll, algo, p, size, small, inplace), p) * (double)size;
}

void print_traffic(FILE *f, int p)
{
    fprintf(f, "# memory traffic per call on one host: bytes read + bytes written by the CPUs of "
               "all ranks,\n# S = the size column, p = ranks");
    if (p >= 2) fprintf(f, " (%d here)", p);
    fprintf(f, "; a copy of n bytes counts 2n\n");
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++) {
        const model_t *m = &MODELS[i];
        fprintf(f, "%-27s %-9s", m->name, m->formula);
        if (p >= 2) fprintf(f, " = %5.0f S", traffic_factor(m->name, p));
        fprintf(f, "\n    %s\n", m->why);
    }
    fprintf(f, "# no model (columns empty): gather, scatter, barrier, and all-reduce with --algo "
               "rd, rabenseifner, ps, ps-sharded or hier\n");
}
