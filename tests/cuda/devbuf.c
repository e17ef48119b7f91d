/* Device buffers for tests through a CUDA module's table (devbuf.h). */
#include "devbuf.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const hoop_cuda_module_t *mod;
static hoop_cuda_ctx_t *ctx;
static int device;

int devbuf_open(const char *path, char *err, size_t errlen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (h == NULL) {
        snprintf(err, errlen, "%s", dlerror());
        return -1;
    }
    hoop_cuda_entry_fn entry = (hoop_cuda_entry_fn)dlsym(h, HOOP__CUDA_ENTRY);
    mod = entry != NULL ? entry() : NULL;
    if (mod == NULL || mod->abi != HOOP__CUDA_ABI) {
        snprintf(err, errlen, "%s is not a CUDA module of this build", path);
        return -1;
    }
    const char *d = getenv("HOOP_TEST_DEVICE");
    if (d != NULL && !strcmp(d, "local")) d = getenv("LOCAL_RANK");
    device = d != NULL ? atoi(d) : 0;
    ctx = mod->open(device, err, errlen);
    return ctx != NULL ? 0 : -1;
}

int devbuf_device(void) { return device; }

int devbuf_no_device(const char *err)
{
    return strstr(err, "no CUDA device") != NULL || strstr(err, "cudaErrorNoDevice") != NULL;
}

const hoop_cuda_module_t *devbuf_module(void) { return mod; }
hoop_cuda_ctx_t *devbuf_ctx(void) { return ctx; }

void *devbuf_alloc(size_t bytes)
{
    void *p = mod->alloc(ctx, bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "device allocation of %zu bytes: %s\n", bytes, mod->error(ctx));
        exit(1);
    }
    return p;
}

void devbuf_free(void *p)
{
    if (p != NULL) mod->free(ctx, p);
}

void devbuf_copy(void *dst, const void *src, size_t n)
{
    if (mod->copy(ctx, dst, src, n, NULL) != 0) {
        fprintf(stderr, "device copy of %zu bytes: %s\n", n, mod->error(ctx));
        exit(1);
    }
}

void *devbuf_host_alloc(size_t bytes)
{
    void *p = mod->host_alloc(ctx, bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "pinned allocation of %zu bytes: %s\n", bytes, mod->error(ctx));
        exit(1);
    }
    return p;
}

void devbuf_host_free(void *p)
{
    if (p != NULL) mod->host_free(ctx, p);
}

void *devbuf_stream(void)
{
    void *s = mod->stream_create(ctx);
    if (s == NULL) {
        fprintf(stderr, "stream_create: %s\n", mod->error(ctx));
        exit(1);
    }
    return s;
}

void devbuf_copy_async(void *dst, const void *src, size_t n, void *stream)
{
    if (mod->copy_async(ctx, dst, src, n, stream) != 0) {
        fprintf(stderr, "async copy of %zu bytes: %s\n", n, mod->error(ctx));
        exit(1);
    }
}

void devbuf_sync(void *stream)
{
    if (mod->stream_sync(ctx, stream) != 0) {
        fprintf(stderr, "stream_sync: %s\n", mod->error(ctx));
        exit(1);
    }
}
