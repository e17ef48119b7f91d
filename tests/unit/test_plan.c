/* The planner's decisions (src/collectives/plan.c): a table of what every rank knows of a call and
 * its communicator, and the plan each must give; then the plans an agreement step's verdicts lead
 * to, and the sentences that say them. The table's expectations are the choices docs/design.md
 * and plan.c's comment describe, case by case (the thresholds' both sides, every HOOP_ALGO that
 * changes something, one host, several hosts of as many ranks, hosts of different sizes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "collectives/plan.h"

enum { P2P = HOOP__ENGINE_P2P, SHM = HOOP__ENGINE_SHM, IPC = HOOP__ENGINE_IPC };
enum {
    AUTO = HOOP__ALGO_AUTO,
    RING = HOOP__ALGO_RING,
    RD = HOOP__ALGO_RD,
    PS = HOOP__ALGO_PS,
    A_SHM = HOOP__ALGO_SHM,
    A_P2P = HOOP__ALGO_P2P,
    A_IPC = HOOP__ALGO_IPC,
    HIER = HOOP__ALGO_HIER,
    RABEN = HOOP__ALGO_RABEN
};
#define K(x) HOOP__K_##x
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

typedef struct row {
    const char *what;
    hoop__kind_t kind;
    size_t bytes;
    int ranks, hosts, per_host, one_host, forced;
    /* expected */
    int engine, algo, wire, small, agree, ipc_stages;
} row_t;

/* HOOP_SMALL_BYTES is 16 KiB in every row; 64 x that is where auto tries the IPC stages. */
static const row_t rows[] = {
    /* one host, the shared area */
    {"small all-reduce, one host", K(ALLREDUCE), 8, 4, 1, 4, 1, AUTO, SHM, RD, A_SHM, 1, 0, 0},
    {"at HOOP_SMALL_BYTES", K(ALLREDUCE), 16 * KiB, 4, 1, 4, 1, AUTO, SHM, RD, A_SHM, 1, 0, 0},
    {"just above", K(ALLREDUCE), 16 * KiB + 1, 4, 1, 4, 1, AUTO, SHM, RING, A_SHM, 0, 0, 0},
    {"broadcast, one host", K(BROADCAST), 2 * MiB, 2, 1, 2, 1, AUTO, SHM, AUTO, A_SHM, 0, 0, 0},
    {"barrier, one host", K(BARRIER), 0, 3, 1, 3, 1, AUTO, SHM, AUTO, A_SHM, 1, 0, 0},
    {"gather: no area schedule", K(GATHER), 64, 3, 1, 3, 1, AUTO, P2P, AUTO, AUTO, 1, 0, 0},
    {"alltoall: no area schedule", K(ALLTOALL), 64, 3, 1, 3, 1, AUTO, P2P, AUTO, AUTO, 1, 0, 0},
    {"a split's exchange", K(SPLIT), 16, 3, 1, 3, 1, AUTO, P2P, AUTO, AUTO, 1, 0, 0},
    /* the measured exception: 2 ranks, 32..256 KiB a rank */
    {"2-rank all-gather, 32 KiB", K(ALLGATHER), 32 * KiB, 2, 1, 2, 1, AUTO, P2P, AUTO, A_SHM, 0, 1,
     0},
    {"2-rank all-gather, 256 KiB", K(ALLGATHER), 256 * KiB, 2, 1, 2, 1, AUTO, P2P, AUTO, A_SHM, 0,
     1, 0},
    {"2-rank all-gather, below", K(ALLGATHER), 32 * KiB - 1, 2, 1, 2, 1, AUTO, SHM, AUTO, A_SHM, 0,
     0, 0},
    {"2-rank all-gather, above", K(ALLGATHER), 256 * KiB + 1, 2, 1, 2, 1, AUTO, SHM, AUTO, A_SHM, 0,
     0, 0},
    {"3-rank all-gather", K(ALLGATHER), 64 * KiB, 3, 1, 3, 1, AUTO, SHM, AUTO, A_SHM, 0, 0, 0},
    {"HOOP_ALGO=shm keeps the area", K(ALLGATHER), 64 * KiB, 2, 1, 2, 1, A_SHM, SHM, AUTO, A_SHM, 0,
     0, 0},
    /* point to point: HOOP_TRANSPORT=tcp on one host, or HOOP_ALGO=p2p */
    {"small all-reduce, tcp", K(ALLREDUCE), 8, 4, 1, 4, 0, AUTO, P2P, RD, RD, 1, 0, 0},
    {"large all-reduce, tcp", K(ALLREDUCE), 2 * MiB, 4, 1, 4, 0, AUTO, P2P, RING, RING, 0, 0, 0},
    {"HOOP_ALGO=p2p, one host", K(ALLREDUCE), 2 * MiB, 4, 1, 4, 1, A_P2P, P2P, RING, RING, 0, 0, 0},
    {"HOOP_ALGO=ring, one host", K(ALLREDUCE), 8, 4, 1, 4, 1, RING, P2P, RING, RING, 1, 0, 0},
    {"HOOP_ALGO=ps", K(ALLREDUCE), 8, 3, 1, 3, 0, PS, P2P, PS, PS, 1, 0, 0},
    {"HOOP_ALGO=rabenseifner", K(ALLREDUCE), 2 * MiB, 4, 2, 2, 0, RABEN, P2P, RABEN, RABEN, 0, 0,
     0},
    {"HOOP_ALGO=ring leaves all-gather", K(ALLGATHER), 8, 4, 1, 4, 1, RING, P2P, AUTO, AUTO, 1, 0,
     0},
    {"broadcast small, tcp", K(BROADCAST), 16 * KiB, 4, 1, 4, 0, AUTO, P2P, AUTO, AUTO, 1, 0, 0},
    {"broadcast large, tcp", K(BROADCAST), 16 * KiB + 1, 4, 1, 4, 0, AUTO, P2P, AUTO, AUTO, 0, 0,
     0},
    /* reduce's tree: 256 x HOOP_SMALL_BYTES on up to 4 ranks, HOOP_SMALL_BYTES above */
    {"reduce 4 MiB on 4 ranks", K(REDUCE), 4 * MiB, 4, 1, 4, 0, AUTO, P2P, AUTO, AUTO, 1, 0, 0},
    {"reduce 4 MiB + 256 on 4", K(REDUCE), 4 * MiB + 256, 4, 1, 4, 0, AUTO, P2P, AUTO, AUTO, 0, 0,
     0},
    {"reduce 32 KiB on 5 ranks", K(REDUCE), 32 * KiB, 5, 1, 5, 0, AUTO, P2P, AUTO, AUTO, 0, 0, 0},
    /* several hosts of as many ranks: hierarchical */
    {"all-reduce 2x2, large", K(ALLREDUCE), 2 * MiB, 4, 2, 2, 0, AUTO, P2P, HIER, HIER, 0, 0, 1},
    {"all-reduce 2x2, under 1 MiB", K(ALLREDUCE), 512 * KiB, 4, 2, 2, 0, AUTO, P2P, HIER, HIER, 0,
     0, 0},
    {"all-reduce 2x2, small", K(ALLREDUCE), 8, 4, 2, 2, 0, AUTO, P2P, RD, RD, 1, 0, 0},
    {"all-gather 2x2, every size", K(ALLGATHER), 8, 4, 2, 2, 0, AUTO, P2P, HIER, HIER, 1, 0, 0},
    {"all-gather 2x2, 256 KiB x 4", K(ALLGATHER), 256 * KiB, 4, 2, 2, 0, AUTO, P2P, HIER, HIER, 0,
     0, 1},
    {"reduce-scatter 3x2", K(REDUCE_SCATTER), 8, 6, 3, 2, 0, AUTO, P2P, HIER, HIER, 1, 0, 0},
    {"reduce 2x2 inside the tree", K(REDUCE), 4 * MiB, 4, 2, 2, 0, AUTO, P2P, AUTO, AUTO, 1, 0, 0},
    {"reduce 2x2 past the tree", K(REDUCE), 8 * MiB, 4, 2, 2, 0, AUTO, P2P, HIER, HIER, 0, 0, 1},
    {"reduce 3x2, 1 MiB", K(REDUCE), 1 * MiB, 6, 3, 2, 0, AUTO, P2P, HIER, HIER, 0, 0, 1},
    {"broadcast 2x2: the flat chain", K(BROADCAST), 8 * MiB, 4, 2, 2, 0, AUTO, P2P, AUTO, AUTO, 0,
     0, 0},
    {"HOOP_ALGO=hier broadcast 2x2", K(BROADCAST), 8, 4, 2, 2, 0, HIER, P2P, HIER, HIER, 1, 0, 1},
    {"HOOP_ALGO=hier, one host", K(ALLREDUCE), 2 * MiB, 4, 1, 4, 0, HIER, P2P, RING, RING, 0, 0, 0},
    {"hosts of different sizes", K(ALLREDUCE), 2 * MiB, 5, 2, 0, 0, AUTO, P2P, RING, RING, 0, 0, 0},
    {"one rank a host", K(ALLGATHER), 8, 2, 2, 1, 0, AUTO, P2P, AUTO, AUTO, 1, 0, 0},
    {"HOOP_ALGO=shm on 2x2", K(ALLREDUCE), 2 * MiB, 4, 2, 2, 0, A_SHM, SHM, HIER, A_SHM, 0, 0, 1},
    /* CUDA IPC forced */
    {"HOOP_ALGO=ipc, one host", K(ALLREDUCE), 8, 4, 1, 4, 1, A_IPC, IPC, RD, A_IPC, 1, 0, 0},
    {"HOOP_ALGO=ipc reduce", K(REDUCE), 8 * MiB, 2, 1, 2, 1, A_IPC, IPC, AUTO, A_IPC, 0, 0, 0},
    {"HOOP_ALGO=ipc, a kind it lacks", K(GATHER), 8, 4, 1, 4, 1, A_IPC, P2P, AUTO, AUTO, 1, 0, 0},
    {"HOOP_ALGO=ipc on 2x2 is hier", K(ALLREDUCE), 8, 4, 2, 2, 0, A_IPC, P2P, HIER, HIER, 1, 0, 1},
    {"HOOP_ALGO=ipc broadcast 2x2", K(BROADCAST), 8, 4, 2, 2, 0, A_IPC, P2P, HIER, HIER, 1, 0, 1},
};

static hoop__plan_in_t in_of(const row_t *r)
{
    return (hoop__plan_in_t){.kind = r->kind,
                             .bytes = r->bytes,
                             .ranks = r->ranks,
                             .hosts = r->hosts,
                             .per_host = r->per_host,
                             .one_host = r->one_host,
                             .forced = r->forced,
                             .small_bytes = 16 * KiB};
}

static const row_t *row(const char *what)
{
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (strcmp(rows[i].what, what) == 0) return &rows[i];
    fail_msg("no row '%s'", what);
    return NULL;
}

static void decisions(void **state)
{
    (void)state;
    int bad = 0;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const row_t *r = &rows[i];
        hoop__plan_in_t in = in_of(r);
        hoop__algo_t wire = (hoop__algo_t)-1;
        hoop__plan_t p = hoop__plan_make(&in, &wire);
        int ok = p.engine == r->engine && p.algo == r->algo && (int)wire == r->wire &&
                 p.small == r->small && p.agree == r->agree && p.ipc_stages == r->ipc_stages &&
                 p.forced == r->forced;
        if (!ok) {
            printf("row %zu '%s': engine %d algo %d wire %d small %d agree %d ipc_stages %d "
                   "forced %d; want %d %d %d %d %d %d %d\n",
                   i, r->what, p.engine, p.algo, (int)wire, p.small, p.agree, p.ipc_stages,
                   p.forced, r->engine, r->algo, r->wire, r->small, r->agree, r->ipc_stages,
                   r->forced);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* Every rank gets the same plan again from the same verdict. */
static void verdicts(void **state)
{
    (void)state;
    hoop__algo_t wire;
    hoop__plan_in_t area = in_of(row("just above")); /* a large all-reduce in the area */
    hoop__plan_t p = hoop__plan_make(&area, &wire);
    assert_int_equal(p.engine, SHM);
    hoop__plan_t q = hoop__plan_again(p, HOOP__VERDICT_RAN);
    assert_memory_equal(&q, &p, sizeof p);
    q = hoop__plan_again(p, HOOP__VERDICT_DEVICE);
    assert_int_equal(q.engine, IPC);
    assert_int_equal(q.why, HOOP__WHY_VERDICT + HOOP__VERDICT_DEVICE);
    assert_int_equal(q.algo, RING); /* still what runs if IPC gives way */
    for (int v = HOOP__VERDICT_MIXED; v <= HOOP__VERDICT_NO_IPC; v++) {
        q = hoop__plan_again(p, (hoop__verdict_t)v);
        assert_int_equal(q.engine, P2P);
        assert_int_equal(q.algo, RING);
        assert_int_equal(q.why, HOOP__WHY_VERDICT + v);
    }
    /* CUDA IPC forced, every rank with host buffers: as under auto. */
    hoop__plan_in_t ipc = in_of(row("HOOP_ALGO=ipc, one host"));
    p = hoop__plan_make(&ipc, &wire);
    assert_int_equal(p.engine, IPC);
    q = hoop__plan_again(p, HOOP__VERDICT_HOST);
    assert_int_equal(q.engine, P2P);
    assert_int_equal(q.algo, RD);
    /* The measured exception: host buffers confirm it, device buffers go to CUDA IPC. */
    hoop__plan_in_t ag = in_of(row("2-rank all-gather, 32 KiB"));
    p = hoop__plan_make(&ag, &wire);
    assert_int_equal(p.agree, 1);
    q = hoop__plan_again(p, HOOP__VERDICT_HOST);
    assert_int_equal(q.engine, P2P);
    assert_int_equal(q.agree, 0);
    assert_int_equal(q.why, HOOP__WHY_MEASURED);
    q = hoop__plan_again(p, HOOP__VERDICT_DEVICE);
    assert_int_equal(q.engine, IPC);
    q = hoop__plan_again(p, HOOP__VERDICT_NO_AREA);
    assert_int_equal(q.engine, P2P);
    assert_int_equal(q.why, HOOP__WHY_VERDICT + HOOP__VERDICT_NO_AREA);
}

/* Symmetric memory on the communicator: zero copy is planned for the area's all-reduce,
 * reduce-scatter, all-gather and broadcast above HOOP_SMALL_BYTES only, and nothing else
 * changes. */
static void symmetric(void **state)
{
    (void)state;
    hoop__algo_t wire;
    hoop__plan_in_t in = in_of(row("just above"));
    hoop__plan_t without = hoop__plan_make(&in, &wire);
    assert_int_equal(without.sym, 0);
    in.sym = 1;
    hoop__plan_t p = hoop__plan_make(&in, &wire);
    assert_int_equal(p.engine, SHM);
    assert_int_equal(p.sym, 1);
    p.sym = 0;
    assert_memory_equal(&p, &without, sizeof p); /* the rest as without */
    /* At or under HOOP_SMALL_BYTES: the one step, not zero copy. */
    hoop__plan_in_t small = in;
    small.bytes = small.small_bytes;
    assert_int_equal(hoop__plan_make(&small, &wire).sym, 0);
    /* The other kinds the area copies with; not reduce, nor the measured 2-rank all-gather
     * that runs point to point; nor the area not chosen (HOOP_ALGO=ring). */
    hoop__plan_in_t k = in;
    for (int kind = 0; kind < HOOP__K_COUNT; kind++) {
        k.kind = (hoop__kind_t)kind;
        int want = kind == K(ALLREDUCE) || kind == K(REDUCE_SCATTER) || kind == K(ALLGATHER) ||
                   kind == K(BROADCAST);
        assert_int_equal(hoop__plan_make(&k, &wire).sym, want);
    }
    k.kind = K(ALLGATHER);
    k.ranks = 2;
    k.bytes = 64 * KiB;
    assert_int_equal(hoop__plan_make(&k, &wire).engine, P2P);
    assert_int_equal(hoop__plan_make(&k, &wire).sym, 0);
    hoop__plan_in_t ring = in;
    ring.forced = RING;
    p = hoop__plan_make(&ring, &wire);
    assert_int_equal(p.engine, P2P);
    assert_int_equal(p.sym, 0);
    /* A verdict that rules the area out gives the same plan as without symmetric memory. */
    p = hoop__plan_make(&in, &wire);
    hoop__plan_t q = hoop__plan_again(p, HOOP__VERDICT_MIXED);
    assert_int_equal(q.engine, P2P);
    assert_int_equal(q.algo, RING);
}

/* Single copy (HOOP_CMA): all-reduce, reduce-scatter and all-gather in the area above
 * HOOP_SMALL_BYTES under on; never under auto (the rounds measured faster) or off; nothing else of
 * the plan changes. */
static void single_copy(void **state)
{
    (void)state;
    hoop__algo_t wire;
    hoop__plan_in_t in = in_of(row("just above"));
    hoop__plan_t off = hoop__plan_make(&in, &wire);
    assert_int_equal(off.cma, 0);
    in.cma = 2;
    hoop__plan_t p = hoop__plan_make(&in, &wire);
    assert_int_equal(p.cma, 1);
    p.cma = 0;
    assert_memory_equal(&p, &off, sizeof p);
    in.bytes = in.small_bytes;
    assert_int_equal(hoop__plan_make(&in, &wire).cma, 0);
    /* Which kinds, under auto and on; only where the area is planned. */
    hoop__plan_in_t k = in;
    k.bytes = 64 * MiB;
    for (int cma = 0; cma <= 2; cma++)
        for (int kind = 0; kind < HOOP__K_COUNT; kind++) {
            k.kind = (hoop__kind_t)kind;
            k.cma = cma;
            int want = cma == 2 &&
                       (kind == K(ALLREDUCE) || kind == K(REDUCE_SCATTER) || kind == K(ALLGATHER));
            assert_int_equal(hoop__plan_make(&k, &wire).cma, want);
        }
    k.kind = K(ALLREDUCE);
    k.cma = 2;
    k.forced = RING;
    assert_int_equal(hoop__plan_make(&k, &wire).cma, 0);
    k.forced = AUTO;
    k.one_host = 0;
    k.hosts = 2;
    k.per_host = 2;
    assert_int_equal(hoop__plan_make(&k, &wire).cma, 0);
}

/* The sentence INFO and hoop-perf --explain print: the engine, the schedule and the reason. */
static void sentences(void **state)
{
    (void)state;
    hoop_comm_t *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->size = 4;
    c->nhosts = 1;
    c->local_size = 4;
    c->shm_auto = 1;
    c->agreed.small_bytes = 16 * KiB;
    hoop__call_t call = {
        .comm = c, .kind = HOOP__K_ALLREDUCE, .count = 512 * 1024, .dtype = HOOP_FLOAT32};
    char buf[320];
    hoop__plan(&call);
    assert_int_equal(call.algo, A_SHM);
    hoop__plan_describe(&call, 1, buf, sizeof buf);
    assert_string_equal(buf, "shm area (every rank on one host; 2 MiB > HOOP_SMALL_BYTES (16 "
                             "KiB): in rounds)");
    hoop__plan_describe(&call, 0, buf, sizeof buf);
    assert_non_null(strstr(buf, "the call > HOOP_SMALL_BYTES"));
    call.plan.sym = 1;
    hoop__plan_describe(&call, 1, buf, sizeof buf);
    assert_string_equal(buf, "shm area (every rank on one host; 2 MiB > HOOP_SMALL_BYTES (16 "
                             "KiB): zero copy where every rank's buffers are symmetric, else in "
                             "rounds)");
    call.plan.sym = 0;
    call.plan.cma = 1;
    hoop__plan_describe(&call, 1, buf, sizeof buf);
    assert_string_equal(buf, "shm area (every rank on one host; 2 MiB > HOOP_SMALL_BYTES (16 "
                             "KiB): single copy (process_vm_readv) where the kernel allows it, "
                             "else in rounds)");
    assert_string_equal(hoop__plan_schedule(&call), "cma");
    call.plan.cma = 0;
    assert_string_equal(hoop__plan_schedule(&call), "shm");
    call.plan = hoop__plan_again(call.plan, HOOP__VERDICT_MIXED);
    hoop__plan_describe(&call, 1, buf, sizeof buf);
    assert_string_equal(buf, "p2p ring (not every rank's buffers are host memory, nor all device "
                             "memory that CUDA IPC may take)");
    c->shm_auto = 0;
    c->algo = HOOP__ALGO_PS;
    call.count = 2;
    hoop__plan(&call);
    hoop__plan_describe(&call, 1, buf, sizeof buf);
    assert_string_equal(buf, "p2p ps (HOOP_ALGO=ps)");
    c->algo = HOOP__ALGO_AUTO;
    c->nhosts = 2;
    c->local_size = 2;
    call.kind = HOOP__K_REDUCE;
    call.count = 4 * MiB / 4;
    hoop__plan(&call);
    hoop__plan_describe(&call, 1, buf, sizeof buf);
    assert_string_equal(buf, "p2p binomial tree (4 MiB <= 256 x HOOP_SMALL_BYTES (16 KiB) on 4 "
                             "ranks)");
    call.count *= 2;
    hoop__plan(&call);
    hoop__plan_describe(&call, 1, buf, sizeof buf);
    assert_string_equal(buf, "p2p hier (2 hosts of 2 ranks; the stages inside a host may go over "
                             "CUDA IPC)");
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decisions),   cmocka_unit_test(verdicts),  cmocka_unit_test(symmetric),
        cmocka_unit_test(single_copy), cmocka_unit_test(sentences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
