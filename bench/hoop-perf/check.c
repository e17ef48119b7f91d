/*
 * Result checking: the input every rank sends and the values every rank must receive, computed
 * here element by element with common/refcheck, never by the library. Inputs are chosen so that
 * every expected value is exact in every dtype whatever order the library reduces in.
 */
#include "hoop.h"
#include "../../common/refcheck.h"
#include "hoop-perf.h"

/* Any integer value in the dtype (wrapping) or a double that the float dtype holds exactly. */
static uint64_t encode(hoop_dtype_t dt, size_t es, int64_t v)
{
    return rc_is_float(dt) ? rc_fenc(dt, (double)v) : (uint64_t)v & rc_width_mask(es);
}

/*
 * Input element i of `rank`: small integers for SUM/AVG (|sum| <= 256, exact even in bfloat16),
 * powers of two for PROD on floats (|product| = 2^k, k <= n), anything for MIN/MAX.
 */
static uint64_t input(hoop_dtype_t dt, size_t es, hoop_op_t op, int n, int rank, size_t i)
{
    uint64_t h = (uint64_t)i * 2654435761u + (uint64_t)rank * 40503u + 12345u;
    switch (op) {
    case HOOP_SUM:
    case HOOP_AVG: {
        int64_t m = 256 / n;
        return encode(dt, es, (int64_t)(h % (uint64_t)(2 * m + 1)) - m);
    }
    case HOOP_PROD: {
        static const double fvals[4] = {1.0, 2.0, -1.0, 0.5};
        static const int64_t ivals[4] = {1, 2, -1, 3};
        size_t pick = (size_t)((h >> 3) % 4);
        return rc_is_float(dt) ? rc_fenc(dt, fvals[pick]) : encode(dt, es, ivals[pick]);
    }
    default: return encode(dt, es, (int64_t)((h >> 5) % 2001) - 1000);
    }
}

/* The naive reference: reduce every rank's input element, wrapping integers explicitly. */
static uint64_t reduce_ref(hoop_dtype_t dt, size_t es, hoop_op_t op, int n, size_t i)
{
    rc_acc_t a = {0};
    for (int q = 0; q < n; q++) rc_acc_add(&a, dt, es, op, input(dt, es, op, n, q, i));
    return rc_acc_result(&a, dt, es, op, n);
}

/* A value of `who` (a rank, or a (source, destination) pair for all-to-all) at index i. */
static uint64_t value_of(const call_t *k, int who, size_t i)
{
    return input(k->dt, k->es, HOOP_MAX, k->size, who, i);
}

uint64_t reduce_in(const call_t *k, int rank, size_t i)
{
    return input(k->dt, k->es, k->op, k->size, rank, i);
}

uint64_t reduced_expect(const call_t *k, int rank, size_t i)
{
    (void)rank;
    return reduce_ref(k->dt, k->es, k->op, k->size, i);
}

uint64_t rs_expect(const call_t *k, int rank, size_t i)
{
    return reduce_ref(k->dt, k->es, k->op, k->size, (size_t)rank * k->count + i);
}

uint64_t own_value(const call_t *k, int rank, size_t i) { return value_of(k, rank, i); }

uint64_t root_value(const call_t *k, int rank, size_t i)
{
    (void)rank;
    return value_of(k, k->root, i);
}

/* Block b of a ranks * count buffer holds rank b's values. */
uint64_t blocks_value(const call_t *k, int rank, size_t j)
{
    (void)rank;
    return value_of(k, (int)(j / k->count), j % k->count);
}

uint64_t alltoall_in(const call_t *k, int rank, size_t j)
{
    return value_of(k, rank * k->size + (int)(j / k->count), j % k->count);
}

uint64_t alltoall_expect(const call_t *k, int rank, size_t j)
{
    return value_of(k, (int)(j / k->count) * k->size + rank, j % k->count);
}

uint64_t prev_value(const call_t *k, int rank, size_t i)
{
    return value_of(k, (rank - 1 + k->size) % k->size, i);
}
