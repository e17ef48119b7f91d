/* CPU reduction kernels for every dtype and op. */
#ifndef HOOP_REDUCE_H
#define HOOP_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "hoop.h"

/* out[i] = a[i] op b[i] for i < n. out may alias a or b (exactly, not partially).
 * HOOP_AVG reduces as HOOP_SUM; the owner of the final value calls hoop__reduce_avg_finish.
 * Integers wrap around (computed unsigned). float16/bfloat16 compute in float and round to nearest
 * even. MIN/MAX propagate NaN (the NaN operand; float16/bfloat16 ones quieted). A NaN that SUM,
 * PROD or the average produce is the dtype's canonical quiet NaN (0x7fc00000, 0x7ff8000000000000,
 * 0x7e00, 0x7fc0) whatever NaN went in, as on the GPU (src/cuda/elementwise.h). The kernel is
 * deterministic in the order of (a, b): callers that need bit-identical results across ranks
 * always pass operands in the same order. */
void hoop__reduce(void *out, const void *a, const void *b, size_t n, hoop_dtype_t dt, hoop_op_t op);

/* buf[i] = buf[i] / divisor: the last step of HOOP_AVG. Integers truncate toward zero. */
void hoop__reduce_avg_finish(void *buf, size_t n, hoop_dtype_t dt, int divisor);

/* memcpy for large outputs: the destination is written with streaming (non-temporal) stores
 * where the CPU has them, which bypass the cache. Same result as memcpy; no overlap. */
void hoop__copy_stream(void *dst, const void *src, size_t n);

/* The fold of nin inputs (in[0] op in[1] op ... in[nin-1], in that order, as chained
 * hoop__reduce calls would take them; HOOP_AVG then divided by divisor) written into each of nout
 * outputs, in one pass over the n elements: every input read once, no intermediate buffer,
 * bit-identical to the chained calls. An output may be one of the inputs (the same address) but
 * must not overlap any other buffer in part. stream: streaming stores (large outputs, not read
 * soon). Returns 0, having touched nothing, where there is no one-pass kernel for dt/op on this
 * processor: the caller folds the usual way. */
int hoop__reduce_spread(void *const *out, int nout, const void *const *in, int nin, size_t n,
                        hoop_dtype_t dt, hoop_op_t op, int divisor, int stream);

float hoop__half_to_float(uint16_t h);
uint16_t hoop__float_to_half(float f);
float hoop__bf16_to_float(uint16_t h);
uint16_t hoop__float_to_bf16(float f);

#endif
