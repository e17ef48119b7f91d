/* The launchers of the GPU reduction kernels (kernels.cu), for the module's C code (module.c).
 * Each queues its kernel on stream (a cudaStream_t) and returns a cudaError_t: cudaSuccess, or
 * why the launch failed; sms, the device's multiprocessor count, sizes the grid. Pointers are
 * device memory aligned to their element. */
#ifndef HOOP_CUDA_KERNELS_H
#define HOOP_CUDA_KERNELS_H

#include <stddef.h>

#include "hoop.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = a[i] op b[i] for i < count (HOOP_AVG as HOOP_SUM); out may be a or b. */
int hoop_cuda_launch_reduce(void *out, const void *a, const void *b, size_t count, hoop_dtype_t dt,
                            hoop_op_t op, int sms, void *stream);
/* buf[i] /= divisor for i < count. */
int hoop_cuda_launch_avg(void *buf, size_t count, hoop_dtype_t dt, int divisor, int sms,
                         void *stream);

#ifdef __cplusplus
}
#endif

#endif
