/* The GPU reduction kernels: out[i] = a[i] op b[i] and the average's buf[i] /= divisor, for every
 * dtype and op, built from the element-wise math of elementwise.h (the CPU kernels' bits).
 *
 * Memory speed: each thread moves 16-byte vectors (one 128-bit load per operand, one store) and
 * keeps UNROLL of them in flight before it computes, in a grid-stride loop over a grid sized to
 * the device, so that enough loads are outstanding to cover the latency of HBM. Any size and
 * alignment: when the three buffers sit at the same offset modulo 16, the elements before the
 * first 16-byte boundary (the head) and after the last (the tail) are done one by one and the
 * rest in vectors; buffers at different offsets fall back to one element per load. (Pointers that
 * are not even aligned to their element are staged by the module, module.c.) */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/elementwise.h"
#include "cuda/kernels.h"

namespace
{

constexpr int THREADS = 256;
constexpr int UNROLL = 4;
constexpr int BLOCKS_PER_SM = 4; /* resident blocks of 256 threads: 1024 threads per SM */

/* W bytes of elements of type T, loaded and stored as one access. */
template <typename T, int W> struct alignas(W) Pack {
    T e[W / sizeof(T)];
};

template <hoop_dtype_t DT, hoop_op_t OP> struct Binary {
    typedef typename hoop_ew<DT>::T T;
    __device__ __forceinline__ T operator()(T a, T b) const
    {
        return hoop_ew<DT>::template apply<OP>(a, b);
    }
};

template <hoop_dtype_t DT> struct Divide {
    typedef typename hoop_ew<DT>::T T;
    int d;
    __device__ __forceinline__ T operator()(T a, T) const { return hoop_ew<DT>::div(a, d); }
};

/* out[i] = f(a[i], b[i]) for i < n. The first `head` elements precede the first W-aligned one of
 * all three buffers; then come nvec packs of W bytes, then the rest (fewer than one pack). With
 * W == sizeof(T) there is neither head nor tail and every element is a pack. out may be a or b:
 * each element is read and written by one thread, reads first. */
template <class F, int W>
__global__ void __launch_bounds__(THREADS)
    ew_kernel(F f, typename F::T *out, const typename F::T *a, const typename F::T *b, size_t n,
              size_t head, size_t nvec)
{
    typedef typename F::T T;
    typedef Pack<T, W> P;
    constexpr int E = W / sizeof(T);
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t tail0 = head + nvec * E;
    if (tid < head) out[tid] = f(a[tid], b[tid]);
    if (tid < n - tail0) out[tail0 + tid] = f(a[tail0 + tid], b[tail0 + tid]);
    P *vo = reinterpret_cast<P *>(out + head);
    const P *va = reinterpret_cast<const P *>(a + head);
    const P *vb = reinterpret_cast<const P *>(b + head);
    for (size_t i = tid; i < nvec; i += stride * UNROLL) {
        P x[UNROLL], y[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            size_t j = i + (size_t)u * stride;
            if (j < nvec) {
                x[u] = va[j];
                y[u] = vb[j];
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            size_t j = i + (size_t)u * stride;
            if (j < nvec) {
#pragma unroll
                for (int e = 0; e < E; e++) x[u].e[e] = f(x[u].e[e], y[u].e[e]);
                vo[j] = x[u];
            }
        }
    }
}

int g_blocks(size_t work, int sms)
{
    size_t want = (work + (size_t)THREADS * UNROLL - 1) / ((size_t)THREADS * UNROLL);
    size_t most = (size_t)(sms > 0 ? sms : 1) * BLOCKS_PER_SM;
    return (int)(want < 1 ? 1 : want > most ? most : want);
}

/* Picks 16-byte packs when the buffers allow, else one element per access, and launches. */
template <class F>
cudaError_t launch(F f, void *out, const void *a, const void *b, size_t n, int sms, cudaStream_t s)
{
    typedef typename F::T T;
    if (n == 0) return cudaSuccess;
    uintptr_t po = (uintptr_t)out, pa = (uintptr_t)a, pb = (uintptr_t)b;
    T *o = static_cast<T *>(out);
    const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
    if (po % 16 == pa % 16 && po % 16 == pb % 16) {
        constexpr size_t E = 16 / sizeof(T);
        size_t head = ((16 - po % 16) % 16) / sizeof(T);
        if (head > n) head = n;
        size_t nvec = (n - head) / E;
        ew_kernel<F, 16><<<g_blocks(nvec, sms), THREADS, 0, s>>>(f, o, x, y, n, head, nvec);
    } else {
        ew_kernel<F, sizeof(T)><<<g_blocks(n, sms), THREADS, 0, s>>>(f, o, x, y, n, 0, n);
    }
    return cudaGetLastError();
}

template <hoop_dtype_t DT>
cudaError_t reduce_dt(void *out, const void *a, const void *b, size_t n, hoop_op_t op, int sms,
                      cudaStream_t s)
{
    switch (op) {
    case HOOP_SUM:
    case HOOP_AVG: return launch(Binary<DT, HOOP_SUM>(), out, a, b, n, sms, s);
    case HOOP_PROD: return launch(Binary<DT, HOOP_PROD>(), out, a, b, n, sms, s);
    case HOOP_MIN: return launch(Binary<DT, HOOP_MIN>(), out, a, b, n, sms, s);
    case HOOP_MAX: return launch(Binary<DT, HOOP_MAX>(), out, a, b, n, sms, s);
    default: return cudaErrorInvalidValue;
    }
}

template <hoop_dtype_t DT>
cudaError_t avg_dt(void *buf, size_t n, int divisor, int sms, cudaStream_t s)
{
    Divide<DT> f;
    f.d = divisor;
    return launch(f, buf, buf, buf, n, sms, s);
}

} // namespace

/* clang-format off */
#define HOOP__EACH_DTYPE(X)                                                                        \
    X(HOOP_INT8)                                                                                   \
    X(HOOP_UINT8)                                                                                  \
    X(HOOP_INT32) X(HOOP_UINT32) X(HOOP_INT64) X(HOOP_UINT64) X(HOOP_FLOAT16) X(HOOP_BFLOAT16)     \
        X(HOOP_FLOAT32) X(HOOP_FLOAT64)
/* clang-format on */

extern "C" int hoop_cuda_launch_reduce(void *out, const void *a, const void *b, size_t count,
                                       hoop_dtype_t dt, hoop_op_t op, int sms, void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (dt) {
#define CASE(DT)                                                                                   \
    case DT: return (int)reduce_dt<DT>(out, a, b, count, op, sms, s);
        HOOP__EACH_DTYPE(CASE)
#undef CASE
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int hoop_cuda_launch_avg(void *buf, size_t count, hoop_dtype_t dt, int divisor, int sms,
                                    void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (divisor < 1) return (int)cudaSuccess; /* as the CPU kernel: a caller bug, data untouched */
    switch (dt) {
#define CASE(DT)                                                                                   \
    case DT: return (int)avg_dt<DT>(buf, count, divisor, sms, s);
        HOOP__EACH_DTYPE(CASE)
#undef CASE
    default: return (int)cudaErrorInvalidValue;
    }
}
