/*
 * nccl-side: NCCL's all-reduce timed in hoop-perf's columns, for the GPU check's side by side
 * (docs/cuda.md, "The GPU check"), run as every rank under hooprun:
 *
 *   nccl-side [--mode floor|hosts|multi] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
 *
 * It loads the machine's NCCL with dlopen (NCCL_LIB, else libnccl.so.2: nothing links it), passes
 * NCCL's unique id from rank 0 to the others through hoop (a broadcast of host memory), and times
 * float32 sums of device buffers on one stream with CUDA events, out of place and in place, each
 * result checked on the host (#wrong: elements of the first and last MiB that are not the sum).
 * Modes, which decide what NCCL may use (set before its communicator is made):
 *   floor  as NCCL likes: with 1 rank, NCCL's launch floor;
 *   hosts  every rank its own "host" (NCCL_HOSTID), over loopback sockets only (no P2P, no shared
 *          memory, no InfiniBand): two ranks on one GPU beside hoop's staging over TCP;
 *   multi  two ranks on one GPU, which NCCL refuses unless NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL 2.30
 *          and later): beside hoop's CUDA IPC path. With an older NCCL it says so and exits 0.
 * Every rank uses device LOCAL_RANK modulo the devices there are. Built with CUDA only, against
 * the nccl.h the toolkit ships. Exit: 0, 1 a failure or a wrong element, 2 bad usage, 77 no
 * CUDA device.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "bench_util.h"
#include "hoop.h"

#define CHECK_ELEMS ((size_t)1 << 18) /* checked at each end of every result: 1 MiB of float32 */

typedef ncclResult_t (*version_fn)(int *);
typedef ncclResult_t (*unique_id_fn)(ncclUniqueId *);
typedef ncclResult_t (*init_rank_fn)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*allreduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                     ncclComm_t, cudaStream_t);
typedef ncclResult_t (*destroy_fn)(ncclComm_t);
typedef const char *(*error_string_fn)(ncclResult_t);

static struct {
    version_fn version;
    unique_id_fn unique_id;
    init_rank_fn init_rank;
    allreduce_fn allreduce;
    destroy_fn destroy;
    error_string_fn error_string;
} nccl;

static int rank, size;

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "nccl-side: rank %d: %s: %s (%s)\n", rank, what, cudaGetErrorString(e),
            cudaGetErrorName(e));
    return 0;
}

static int nccl_ok(ncclResult_t r, const char *what)
{
    if (r == ncclSuccess) return 1;
    fprintf(stderr, "nccl-side: rank %d: %s: %s\n", rank, what, nccl.error_string(r));
    return 0;
}

static int load(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        fprintf(stderr, "nccl-side: cannot load NCCL from %s: %s (NCCL_LIB names it)\n", path,
                dlerror());
        return 0;
    }
    *(void **)&nccl.version = dlsym(h, "ncclGetVersion");
    *(void **)&nccl.unique_id = dlsym(h, "ncclGetUniqueId");
    *(void **)&nccl.init_rank = dlsym(h, "ncclCommInitRank");
    *(void **)&nccl.allreduce = dlsym(h, "ncclAllReduce");
    *(void **)&nccl.destroy = dlsym(h, "ncclCommDestroy");
    *(void **)&nccl.error_string = dlsym(h, "ncclGetErrorString");
    if (nccl.version && nccl.unique_id && nccl.init_rank && nccl.allreduce && nccl.destroy &&
        nccl.error_string)
        return 1;
    fprintf(stderr, "nccl-side: %s lacks one of NCCL's calls\n", path);
    return 0;
}

static float value(int r, size_t i) { return (float)((r + 1) * (int)(i % 7)); }

/* Elements of the first and last CHECK_ELEMS of the result that are not the sum. */
static long wrong(const float *d, size_t n, float *h)
{
    long bad = 0;
    size_t k = n < CHECK_ELEMS ? n : CHECK_ELEMS;
    for (int end = 0; end < 2; end++) {
        size_t at = end ? n - k : 0;
        if (!cuda_ok(cudaMemcpy(h, d + at, k * sizeof(float), cudaMemcpyDeviceToHost), "copy back"))
            return -1;
        for (size_t i = 0; i < k; i++) {
            float e = 0;
            for (int r = 0; r < size; r++) e += value(r, at + i);
            bad += h[i] != e;
        }
    }
    return bad;
}

static int fill(float *d, size_t n, float *h, size_t hn)
{
    for (size_t at = 0; at < n; at += hn) {
        size_t k = n - at < hn ? n - at : hn;
        for (size_t i = 0; i < k; i++) h[i] = value(rank, at + i);
        if (!cuda_ok(cudaMemcpy(d + at, h, k * sizeof(float), cudaMemcpyHostToDevice), "fill"))
            return 0;
    }
    return 1;
}

/* us per call of iters all-reduces (after warmup), then the #wrong of one more on fresh input
 * (in place, each call sums the last one's result). */
static int timed(ncclComm_t comm, cudaStream_t s, cudaEvent_t ev[2], float *send, float *recv,
                 size_t n, int iters, int warmup, float *h, size_t hn, double *us, long *bad)
{
    if (!fill(send, n, h, hn)) return 0;
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup && !cuda_ok(cudaEventRecord(ev[0], s), "cudaEventRecord")) return 0;
        if (!nccl_ok(nccl.allreduce(send, recv, n, ncclFloat32, ncclSum, comm, s), "ncclAllReduce"))
            return 0;
    }
    float ms = 0;
    if (!cuda_ok(cudaEventRecord(ev[1], s), "cudaEventRecord") ||
        !cuda_ok(cudaEventSynchronize(ev[1]), "cudaEventSynchronize") ||
        !cuda_ok(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime"))
        return 0;
    *us = ms * 1e3 / iters;
    if (!fill(send, n, h, hn)) return 0;
    if (!nccl_ok(nccl.allreduce(send, recv, n, ncclFloat32, ncclSum, comm, s), "ncclAllReduce") ||
        !cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize"))
        return 0;
    *bad = wrong(recv, n, h);
    return *bad >= 0;
}

int main(int argc, char **argv)
{
    size_t minb = 1 << 20, maxb = (size_t)256 << 20, factor = 4;
    int iters = 20, warmup = 5, f = 4;
    const char *mode = "floor";
    for (int i = 1; i < argc; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = v == NULL;
        if (bad) {
        } else if (!strcmp(o, "--mode")) {
            bad = strcmp(v, "floor") && strcmp(v, "hosts") && strcmp(v, "multi");
            mode = v;
        } else if (!strcmp(o, "-b")) {
            bad = bench_parse_size(v, &minb);
        } else if (!strcmp(o, "-e")) {
            bad = bench_parse_size(v, &maxb);
        } else if (!strcmp(o, "-f")) {
            bad = bench_parse_int(v, 2, 1 << 20, &f);
            factor = (size_t)f;
        } else if (!strcmp(o, "-n")) {
            bad = bench_parse_int(v, 1, 1 << 20, &iters);
        } else if (!strcmp(o, "-w")) {
            bad = bench_parse_int(v, 0, 1 << 20, &warmup);
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "usage: nccl-side [--mode floor|hosts|multi] [-b MIN] [-e MAX] "
                            "[-f FACTOR] [-n ITERS] [-w WARMUP]\n");
            return 2;
        }
    }
    if (minb < 4 || minb > maxb) {
        fprintf(stderr, "nccl-side: need 4 <= -b <= -e\n");
        return 2;
    }
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("no CUDA device: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 77;
    }
    const char *lib = getenv("NCCL_LIB");
    if (!load(lib != NULL && lib[0] != '\0' ? lib : "libnccl.so.2")) return 1;
    int ver = 0;
    nccl.version(&ver);
    int major = ver / 10000, minor = ver % 10000 / 100, patch = ver % 100;
    hoop_comm_t *c;
    if (hoop_init_from_env(&c) != HOOP_OK) {
        fprintf(stderr, "nccl-side: hoop_init_from_env failed\n");
        return 1;
    }
    rank = hoop_comm_rank(c);
    size = hoop_comm_size(c);
    if (strcmp(mode, "floor") != 0 && size < 2) {
        fprintf(stderr, "nccl-side: --mode %s needs 2 ranks or more\n", mode);
        return 2;
    }
    if (!strcmp(mode, "multi") && (major < 2 || (major == 2 && minor < 30))) {
        if (rank == 0)
            printf("# NCCL %d.%d.%d: two ranks on one GPU need NCCL 2.30 or later "
                   "(NCCL_MULTI_RANK_GPU_ENABLE); not run\n",
                   major, minor, patch);
        hoop_comm_destroy(c);
        return 0;
    }
    char host[32];
    snprintf(host, sizeof host, "nccl-side-host-%d", rank);
    if (!strcmp(mode, "hosts")) {
        setenv("NCCL_HOSTID", host, 1);
        setenv("NCCL_P2P_DISABLE", "1", 1);
        setenv("NCCL_SHM_DISABLE", "1", 1);
        setenv("NCCL_IB_DISABLE", "1", 1);
        setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    } else if (!strcmp(mode, "multi")) {
        setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1);
    }
    const char *lr = getenv("LOCAL_RANK");
    int dev = (lr != NULL ? atoi(lr) : rank) % ndev;
    if (!cuda_ok(cudaSetDevice(dev), "cudaSetDevice")) return 1;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0 && !nccl_ok(nccl.unique_id(&id), "ncclGetUniqueId")) return 1;
    if (hoop_broadcast(c, &id, sizeof id, HOOP_UINT8, 0) != HOOP_OK) {
        fprintf(stderr, "nccl-side: passing NCCL's id: %s\n", hoop_comm_last_error(c));
        return 1;
    }
    ncclComm_t comm;
    if (!nccl_ok(nccl.init_rank(&comm, size, id, rank), "ncclCommInitRank")) return 1;
    cudaStream_t s;
    cudaEvent_t ev[2];
    float *send = NULL, *recv = NULL, *h = NULL;
    size_t hn = CHECK_ELEMS;
    if (!cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate") ||
        !cuda_ok(cudaEventCreate(&ev[0]), "cudaEventCreate") ||
        !cuda_ok(cudaEventCreate(&ev[1]), "cudaEventCreate") ||
        !cuda_ok(cudaMalloc((void **)&send, maxb), "cudaMalloc") ||
        !cuda_ok(cudaMalloc((void **)&recv, maxb), "cudaMalloc") ||
        !cuda_ok(cudaMallocHost((void **)&h, hn * sizeof(float)), "cudaMallocHost"))
        return 1;
    if (rank == 0) {
        printf("# nccl-side: NCCL %d.%d.%d (%s), %d rank(s), --mode %s%s\n", major, minor, patch,
               lib != NULL && lib[0] ? lib : "libnccl.so.2", size, mode,
               !strcmp(mode, "hosts")   ? ": a host per rank, loopback sockets only"
               : !strcmp(mode, "multi") ? ": NCCL_MULTI_RANK_GPU_ENABLE=1"
                                        : "");
        printf("#                                                              out-of-place       "
               "                in-place          \n");
        printf("#       size         count      type   redop    root     time   algbw   busbw "
               "#wrong     time   algbw   busbw #wrong\n");
        printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)    "
               "        (us)  (GB/s)  (GB/s)       \n");
    }
    int rc = 0;
    for (size_t bytes = minb; bytes <= maxb && rc == 0; bytes *= factor) {
        size_t n = bytes / sizeof(float);
        double us[2];
        long bad[2];
        for (int inplace = 0; inplace < 2 && rc == 0; inplace++)
            if (!timed(comm, s, ev, send, inplace ? send : recv, n, iters, warmup, h, hn,
                       &us[inplace], &bad[inplace]))
                rc = 1;
        if (rc != 0) break;
        if (bad[0] != 0 || bad[1] != 0) rc = 1;
        if (rank == 0) {
            double bus = 2.0 * (size - 1) / size;
            printf("%12zu  %12zu   float32     sum      -1", n * sizeof(float), n);
            for (int k = 0; k < 2; k++) {
                double alg = us[k] > 0 ? (double)(n * sizeof(float)) / us[k] / 1e3 : 0;
                printf(" %8.1f %7.2f %7.2f %6ld", us[k], alg, alg * (size > 1 ? bus : 1.0), bad[k]);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    nccl.destroy(comm);
    hoop_comm_destroy(c);
    return rc;
}
