/* Memory types: what a kind of memory (host, later CUDA devices) provides so that algorithms can
 * copy, reduce and stage data in it without knowing which one they hold. One ops table per type;
 * a new memory type is one new file with its table and one entry in hoop__mem_ops(). Algorithms
 * reach these through the call-level helpers of runtime.h. */
#ifndef HOOP_RUNTIME_MEM_H
#define HOOP_RUNTIME_MEM_H

#include <stddef.h>

#include "base/memtype.h"
#include "hoop.h"

typedef struct hoop__mem_ops {
    const char *name;
    /* dst and src do not overlap. */
    void (*copy)(void *dst, const void *src, size_t n);
    /* dst and src may overlap. */
    void (*move)(void *dst, const void *src, size_t n);
    /* out[i] = a[i] op b[i], with the guarantees of hoop__reduce (reduce/reduce.h): out may alias
     * a or b exactly, and the result depends only on the order of (a, b). */
    void (*reduce)(void *out, const void *a, const void *b, size_t count, hoop_dtype_t dt,
                   hoop_op_t op);
    /* buf[i] /= divisor: the last step of HOOP_AVG. */
    void (*avg_finish)(void *buf, size_t count, hoop_dtype_t dt, int divisor);
    /* Scratch space in this memory; NULL when none is left. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
} hoop__mem_ops_t;

extern const hoop__mem_ops_t hoop__mem_host;

/* The table of a memory type, NULL for one that has no implementation in this build. */
const hoop__mem_ops_t *hoop__mem_ops(hoop__mem_type_t type);

/* The memory type of the buffer at p. Host only for now: a build with CUDA asks the driver here. */
static inline hoop__mem_type_t hoop__mem_detect(const void *p)
{
    (void)p;
    return HOOP__MEM_HOST;
}

#endif
