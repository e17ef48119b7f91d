/*
 * hoop-perf --device cuda: the send and receive buffers in device memory. hoop-perf does not link
 * CUDA: it loads the CUDA module libhoop loads (src/cuda/module.h; HOOP_TEST_CUDA_MODULE names
 * another, as for libhoop, else libhoop-cuda.so beside libhoop) and allocates, fills and reads
 * back through its table, as an application would with cudaMalloc and cudaMemcpy. Inputs are
 * written into host twins of the buffers and copied over; for #wrong the receive buffer comes
 * back into its twin, so the checks are the host's, unchanged.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"
#include "cuda/module.h"
#include "hoop-perf.h"

struct perf_dev {
    const hoop_cuda_module_t *mod;
    hoop_cuda_ctx_t *ctx;
};

int parse_device(const char *s, bench_t *b)
{
    b->use_cuda = strcmp(s, "host") != 0;
    b->cuda_dev = 0;
    if (!strcmp(s, "host") || !strcmp(s, "cuda")) return 0;
    char *end;
    if (strncmp(s, "cuda:", 5) != 0) return 1;
    long d = strtol(s + 5, &end, 10);
    if (end == s + 5 || *end != '\0' || d < 0 || d > 1 << 16) return 1;
    b->cuda_dev = (int)d;
    return 0;
}

/* The module's path as libhoop finds it (src/runtime/mem_cuda.c), so that both get one copy. */
static void module_path(char *out, size_t n)
{
    const char *m = getenv("HOOP_TEST_CUDA_MODULE");
    if (m != NULL && m[0] != '\0') {
        snprintf(out, n, "%s", m);
        return;
    }
    Dl_info di;
    if (dladdr((void *)hoop_version, &di) != 0 && di.dli_fname != NULL &&
        strchr(di.dli_fname, '/') != NULL) {
        int dir = (int)(strrchr(di.dli_fname, '/') - di.dli_fname + 1);
        snprintf(out, n, "%.*slibhoop-cuda.so", dir, di.dli_fname);
        return;
    }
    snprintf(out, n, "libhoop-cuda.so");
}

int device_open(bench_t *b)
{
    char path[4096], err[512] = "";
    module_path(path, sizeof path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (h == NULL) {
        fprintf(stderr, "hoop-perf: rank %d: --device cuda: cannot load %s: %s\n", b->rank, path,
                dlerror());
        return 0;
    }
    hoop_cuda_entry_fn entry = (hoop_cuda_entry_fn)dlsym(h, HOOP__CUDA_ENTRY);
    const hoop_cuda_module_t *mod = entry != NULL ? entry() : NULL;
    if (mod == NULL || mod->abi != HOOP__CUDA_ABI || mod->size < sizeof *mod) {
        fprintf(stderr, "hoop-perf: rank %d: --device cuda: %s is not a CUDA module of this hoop\n",
                b->rank, path);
        return 0;
    }
    hoop_cuda_ctx_t *ctx = mod->open(b->cuda_dev, err, sizeof err);
    if (ctx == NULL) {
        fprintf(stderr, "hoop-perf: rank %d: --device cuda:%d: %s\n", b->rank, b->cuda_dev, err);
        return 0;
    }
    b->dev = malloc(sizeof *b->dev);
    if (b->dev == NULL) {
        mod->close(ctx);
        fprintf(stderr, "hoop-perf: rank %d: out of memory\n", b->rank);
        return 0;
    }
    b->dev->mod = mod;
    b->dev->ctx = ctx;
    return 1;
}

const char *device_name(const bench_t *b) { return b->dev ? b->dev->mod->name : "host"; }

void *device_alloc(bench_t *b, size_t bytes)
{
    void *p = b->dev->mod->alloc(b->dev->ctx, bytes ? bytes : 1);
    if (p == NULL)
        fprintf(stderr, "hoop-perf: rank %d: device memory of %zu bytes: %s\n", b->rank, bytes,
                b->dev->mod->error(b->dev->ctx));
    return p;
}

int device_copy(const bench_t *b, void *dst, const void *src, size_t bytes)
{
    /* on the legacy default stream (NULL); complete when it returns */
    if (bytes == 0 || b->dev->mod->copy(b->dev->ctx, dst, src, bytes, NULL) == 0) return 1;
    fprintf(stderr, "hoop-perf: rank %d: device copy of %zu bytes: %s\n", b->rank, bytes,
            b->dev->mod->error(b->dev->ctx));
    return 0;
}

void device_close(bench_t *b)
{
    if (b->dev == NULL) return;
    if (b->sbuf) b->dev->mod->free(b->dev->ctx, b->sbuf);
    if (b->rbuf) b->dev->mod->free(b->dev->ctx, b->rbuf);
    b->dev->mod->close(b->dev->ctx);
    free(b->dev);
    b->dev = NULL;
    b->sbuf = b->rbuf = NULL;
}
