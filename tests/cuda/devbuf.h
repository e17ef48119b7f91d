/* Device buffers for tests: allocated, filled and read back through a CUDA module's table (the
 * test double, or libhoop-cuda.so on a GPU), as an application would with cudaMalloc and
 * cudaMemcpy. The module is the one libhoop loads too (the same path, so the same copy). */
#ifndef HOOP_TESTS_DEVBUF_H
#define HOOP_TESTS_DEVBUF_H

#include <stddef.h>

#include "cuda/module.h"

/* Loads the module at path and opens device 0, or HOOP_TEST_DEVICE's: a number, or "local" for
 * the rank's local index (LOCAL_RANK, as hooprun sets it). 0, or -1 with a sentence in err. */
int devbuf_open(const char *path, char *err, size_t errlen);
/* The device devbuf_open opened. */
int devbuf_device(void);
/* Whether devbuf_open's sentence says there is no device (or no driver) at all: a test then
 * exits 77, skipped, rather than failing. */
int devbuf_no_device(const char *err);
/* The loaded module's table and context (after devbuf_open), for tests that call it directly. */
const hoop_cuda_module_t *devbuf_module(void);
hoop_cuda_ctx_t *devbuf_ctx(void);
/* Device memory of bytes (at least 1); exits the test when there is none. */
void *devbuf_alloc(size_t bytes);
void devbuf_free(void *p);
/* A copy either way (host to device, device to host); exits the test on failure. */
void devbuf_copy(void *dst, const void *src, size_t n);
/* Pinned host memory (the module's host_alloc), for copies meant to be asynchronous: one from or
 * to pageable memory completes before it returns. Exits the test when there is none. */
void *devbuf_host_alloc(size_t bytes);
void devbuf_host_free(void *p);

/* A stream of the module (--stream tests), asynchronous copies on it and waiting for it; each
 * exits the test on failure. */
void *devbuf_stream(void);
void devbuf_copy_async(void *dst, const void *src, size_t n, void *stream);
void devbuf_sync(void *stream);

#endif
