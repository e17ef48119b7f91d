/* The collectives the multi-process tests run (tests/mp/coll_test.c, tests/fault/fault.c,
 * tests/soak/soak.c), by one number and the name their options and messages use. */
#ifndef HOOP_TEST_COLLS_H
#define HOOP_TEST_COLLS_H

enum test_coll {
    C_ALLREDUCE,
    C_BROADCAST,
    C_REDUCE,
    C_ALLGATHER,
    C_GATHER,
    C_SCATTER,
    C_REDUCE_SCATTER,
    C_ALLTOALL,
    C_BARRIER,
    C_SENDRECV,
    C_COUNT
};

static const char *const test_coll_name[C_COUNT] __attribute__((unused)) = {
    [C_ALLREDUCE] = "allreduce",
    [C_BROADCAST] = "broadcast",
    [C_REDUCE] = "reduce",
    [C_ALLGATHER] = "allgather",
    [C_GATHER] = "gather",
    [C_SCATTER] = "scatter",
    [C_REDUCE_SCATTER] = "reduce_scatter",
    [C_ALLTOALL] = "alltoall",
    [C_BARRIER] = "barrier",
    [C_SENDRECV] = "sendrecv",
};

#endif
