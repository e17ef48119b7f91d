/* Device buffers that cannot be served, and failing device operations, run as every rank under
 * hooprun with the CUDA test double (HOOP_TEST_CUDA_DRIVER names it; HOOP_TEST_CUDA_MODULE as
 * each case needs):
 *   errors --case host-only        no driver in the process: host calls load nothing
 *   errors --case mixed DOUBLE     host sendbuf, device recvbuf: HOOP_ERR_UNSUPPORTED, and the
 *                                  communicator goes on
 *   errors --case no-module DOUBLE the module cannot be loaded: a device buffer is refused with
 *                                  the loader's reason; host buffers still work
 *   errors --case no-driver DOUBLE the module's runtime finds no usable driver: likewise
 *   errors --case built-without DOUBLE  a libhoop built without CUDA: likewise
 *   errors --case failure DOUBLE   rank 0's device operation test_failures: both ranks' calls fail with
 *                                  its sentence and the communicator is aborted
 *   errors --case ipc-host DOUBLE  HOOP_ALGO=ipc with host buffers on rank 0: every rank's call
 *                                  test_failures with the sentence that names rank 0
 *   errors --case queued-failure DOUBLE  a nonblocking stream-ordered all-reduce whose stream's
 *                                  wait for it cannot be queued on rank 0: the call fails with
 *                                  the sentence and hands back no request (none is left queued
 *                                  that nobody would wait for); the stream goes on
 *   errors --case failure-staged DOUBLE N  likewise, rank 0's Nth device operation of a ring
 *                                  all-reduce cut into many chunks, while other staged copies
 *                                  are in flight: both ranks' calls fail with its sentence, and
 *                                  the communicator goes with nothing left behind
 * Exit 0 when every check held. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf.h"
#include "hoop.h"
#include "../common/testing.h"

static int rank;

static int cuda_lib_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    return info->dlpi_name != NULL && strstr(info->dlpi_name, "hoop-cuda") != NULL;
}

/* An all-reduce of 4 floats on host buffers, checked. */
static int host_allreduce(hoop_comm_t *c, int size)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {0};
    if (hoop_allreduce(c, a, b, 4, HOOP_FLOAT32, HOOP_SUM) != HOOP_OK) return 0;
    return b[0] == (float)size && b[3] == 4.0f * (float)size;
}

int main(int argc, char **argv)
{
    const char *which = argc >= 3 && !strcmp(argv[1], "--case") ? argv[2] : "";
    const char *dbl = argc >= 4 ? argv[3] : NULL;
    hoop_comm_t *c;
    hoop_result_t rc = hoop_init_from_env(&c);
    if (rc != HOOP_OK) {
        fprintf(stderr, "errors: hoop_init_from_env: %s\n", hoop_error_string(rc));
        return 1;
    }
    rank = test_rank = hoop_comm_rank(c);
    int size = hoop_comm_size(c);
    char err[512];
    float *dev = NULL;
    if (dbl != NULL && !strcmp(which, "no-driver")) {
        /* The driver is older than the module's runtime (HOOP_CUDA_DOUBLE_NODRIVER): the
         * application's buffer comes from its own runtime, which the double stands for. */
        void *(*app_alloc)(size_t) = (void *(*)(size_t))dlsym(
            dlopen(dbl, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE), "hoop_cuda_double_app_alloc");
        if (app_alloc == NULL) {
            fprintf(stderr, "errors: %s has no hoop_cuda_double_app_alloc\n", dbl);
            return 1;
        }
        dev = app_alloc(16 * sizeof(float));
    } else if (dbl != NULL) {
        if (devbuf_open(dbl, err, sizeof err) != 0) {
            fprintf(stderr, "errors: %s: %s\n", dbl, err);
            return 1;
        }
        dev = devbuf_alloc(16 * sizeof(float));
    }
    float host[16] = {0};

    if (!strcmp(which, "host-only")) {
        CHECK(host_allreduce(c, size), "all-reduce of host buffers");
        CHECK(dl_iterate_phdr(cuda_lib_cb, NULL) == 0,
              "a CUDA module was loaded though no driver is in the process");
    } else if (!strcmp(which, "mixed")) {
        rc = hoop_allreduce(c, host, dev, 16, HOOP_FLOAT32, HOOP_SUM);
        const char *le = hoop_comm_last_error(c);
        CHECK(rc == HOOP_ERR_UNSUPPORTED, "returned %s", hoop_error_string(rc));
        CHECK(strstr(le, "recvbuf is CUDA device memory and sendbuf host memory") != NULL,
              "last error: %s", le);
        CHECK(host_allreduce(c, size), "the communicator is still usable");
        CHECK(hoop_allreduce(c, dev, dev, 16, HOOP_FLOAT32, HOOP_SUM) == HOOP_OK,
              "in-place device all-reduce: %s", hoop_comm_last_error(c));
    } else if (!strcmp(which, "no-module") || !strcmp(which, "no-driver") ||
               !strcmp(which, "built-without")) {
        /* no-module: HOOP_TEST_CUDA_MODULE names no file. no-driver: the module's runtime cannot
         * classify (HOOP_CUDA_DOUBLE_NODRIVER). built-without: a libhoop built without CUDA,
         * no HOOP_TEST_CUDA_MODULE. Each time the driver's classification stands in, so that the
         * sentence is given and host buffers work. */
        const char *want = !strcmp(which, "no-module")   ? "the CUDA module cannot be loaded: "
                           : !strcmp(which, "no-driver") ? "no usable CUDA driver"
                                                         : "this libhoop was built without CUDA";
        rc = hoop_allreduce(c, dev, dev, 16, HOOP_FLOAT32, HOOP_SUM);
        const char *le = hoop_comm_last_error(c);
        CHECK(rc == HOOP_ERR_UNSUPPORTED, "returned %s", hoop_error_string(rc));
        CHECK(strstr(le, "hoop_allreduce: the buffer is CUDA device memory, but ") != NULL &&
                  strstr(le, want) != NULL,
              "last error: %s", le);
        /* A driver too old: the sentence says which one the module needs. */
        if (!strcmp(which, "no-driver"))
            CHECK(strstr(le, "needs a driver for CUDA 13.0 or newer") != NULL &&
                      strstr(le, "this one is for CUDA 12.2") != NULL,
                  "the sentence does not name the driver floor: %s", le);
        rc = hoop_send(c, dev, 16, HOOP_FLOAT32, (rank + 1) % size);
        CHECK(rc == HOOP_ERR_UNSUPPORTED, "send returned %s", hoop_error_string(rc));
        CHECK(host_allreduce(c, size), "host buffers still work");
    } else if (!strcmp(which, "failure")) {
        CHECK(hoop_allreduce(c, dev, dev, 16, HOOP_FLOAT32, HOOP_SUM) == HOOP_OK,
              "a device all-reduce before the failure: %s", hoop_comm_last_error(c));
        /* Rank 1's call is complete before rank 0 leaves the barrier: the failure cannot reach
         * it (rank 1's own barrier may see the abort). */
        hoop_result_t b = hoop_barrier(c);
        CHECK(rank != 0 || b == HOOP_OK, "barrier: %s", hoop_comm_last_error(c));
        if (rank == 0) {
            void (*fail_in)(long) = (void (*)(long))dlsym(dlopen(dbl, RTLD_NOW | RTLD_NOLOAD),
                                                          "hoop_cuda_double_fail_in");
            CHECK(fail_in != NULL, "the double has no hoop_cuda_double_fail_in");
            if (fail_in != NULL) fail_in(1);
        }
        rc = hoop_allreduce(c, dev, dev, 16, HOOP_FLOAT32, HOOP_SUM);
        const char *le = hoop_comm_last_error(c);
        CHECK(rc != HOOP_OK, "the call with a failed device operation returned OK");
        CHECK(rank != 0 || rc == HOOP_ERR_SYSTEM, "returned %s", hoop_error_string(rc));
        CHECK(strstr(le, "injected failure") != NULL, "last error: %s", le);
        rc = hoop_allreduce(c, host, host, 16, HOOP_FLOAT32, HOOP_SUM);
        CHECK(rc != HOOP_OK, "a call after the failure returned OK");
    } else if (!strcmp(which, "queued-failure")) {
        void *stream = devbuf_stream();
        hoop_comm_set_stream(c, stream);
        CHECK(hoop_allreduce(c, dev, dev, 16, HOOP_FLOAT32, HOOP_SUM) == HOOP_OK,
              "a stream-ordered all-reduce before the failure: %s", hoop_comm_last_error(c));
        devbuf_sync(stream);
        hoop_result_t b = hoop_barrier(c); /* as in failure */
        CHECK(rank != 0 || b == HOOP_OK, "barrier: %s", hoop_comm_last_error(c));
        if (rank == 0) {
            /* Posting queues the input's copy and an event (1, 2); the stream's wait for the
             * call's word, queued once the call is, is the third. */
            void (*fail_in)(long) = (void (*)(long))dlsym(dlopen(dbl, RTLD_NOW | RTLD_NOLOAD),
                                                          "hoop_cuda_double_fail_in");
            CHECK(fail_in != NULL, "the double has no hoop_cuda_double_fail_in");
            if (fail_in != NULL) fail_in(3);
        }
        hoop_request_t *req = NULL;
        rc = hoop_iallreduce(c, dev, dev, 16, HOOP_FLOAT32, HOOP_SUM, &req);
        const char *le = hoop_comm_last_error(c);
        if (rank == 0) {
            CHECK(rc == HOOP_ERR_SYSTEM, "returned %s", hoop_error_string(rc));
            CHECK(strstr(le, "cannot make stream") != NULL && strstr(le, "cuStreamWaitValue32"),
                  "last error: %s", le);
            CHECK(req == NULL, "the failed call handed back a request, still queued");
        } else if (rc == HOOP_OK) {
            CHECK(req != NULL && hoop_wait(req) != HOOP_OK,
                  "rank 1's call completed though rank 0 failed");
        } else {
            CHECK(req == NULL, "the failed call handed back a request, still queued");
        }
        devbuf_sync(stream); /* nothing left waiting on it */
        hoop_comm_set_stream(c, NULL);
        CHECK(hoop_allreduce(c, host, host, 16, HOOP_FLOAT32, HOOP_SUM) != HOOP_OK,
              "a call after the failure returned OK");
    } else if (!strcmp(which, "failure-staged")) {
        long nth = argc >= 5 ? atol(argv[4]) : 0;
        size_t n = (size_t)1 << 20; /* 2 segments of 32 chunks at HOOP_CHUNK_BYTES=64K */
        float *h = calloc(n, sizeof(float)), *big = devbuf_alloc(n * sizeof(float));
        devbuf_copy(big, h, n * sizeof(float));
        CHECK(hoop_allreduce(c, big, big, n, HOOP_FLOAT32, HOOP_SUM) == HOOP_OK,
              "a device all-reduce before the failure: %s", hoop_comm_last_error(c));
        hoop_result_t b = hoop_barrier(c); /* as in failure */
        CHECK(rank != 0 || b == HOOP_OK, "barrier: %s", hoop_comm_last_error(c));
        if (rank == 0) {
            void (*fail_in)(long) = (void (*)(long))dlsym(dlopen(dbl, RTLD_NOW | RTLD_NOLOAD),
                                                          "hoop_cuda_double_fail_in");
            CHECK(fail_in != NULL && nth > 0, "no hoop_cuda_double_fail_in, or no N");
            if (fail_in != NULL) fail_in(nth);
        }
        rc = hoop_allreduce(c, big, big, n, HOOP_FLOAT32, HOOP_SUM);
        const char *le = hoop_comm_last_error(c);
        CHECK(rc != HOOP_OK, "the call with a failed device operation returned OK");
        CHECK(rank != 0 || rc == HOOP_ERR_SYSTEM, "returned %s", hoop_error_string(rc));
        CHECK(strstr(le, "injected failure") != NULL, "last error: %s", le);
        devbuf_free(big);
        free(h);
    } else if (!strcmp(which, "ipc-host")) {
        /* HOOP_ALGO=ipc, rank 0 with host buffers: every rank's call test_failures with the sentence
         * naming rank 0, and nothing hangs. */
        rc = rank == 0 ? hoop_allreduce(c, host, host, 16, HOOP_FLOAT32, HOOP_SUM)
                       : hoop_allreduce(c, dev, dev, 16, HOOP_FLOAT32, HOOP_SUM);
        const char *le = hoop_comm_last_error(c);
        CHECK(rc == HOOP_ERR_UNSUPPORTED || (rank != 0 && rc == HOOP_ERR_ABORTED), "returned %s",
              hoop_error_string(rc));
        CHECK(strstr(le, "over CUDA IPC (HOOP_ALGO=ipc): rank 0 has host buffers") != NULL,
              "last error: %s", le);
    } else {
        fprintf(stderr,
                "usage: errors --case host-only|mixed|no-module|no-driver|built-without|failure|"
                "ipc-host|queued-failure|failure-staged [DOUBLE [N]]\n");
        return 2;
    }
    if (strcmp(which, "no-driver") != 0) devbuf_free(dev);
    hoop_comm_destroy(c);
    printf("rank %d: %s: %s\n", rank, which, test_failures ? "FAILED" : "ok");
    return test_failures ? 1 : 0;
}
