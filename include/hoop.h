/*
 * hoop: collective communication between processes, over shared memory, TCP and RDMA verbs, on
 * host memory and CUDA device buffers.
 *
 * One communicator joins `size` processes ("ranks"). Every call returns a hoop_result_t (HOOP_OK = 0);
 * hoop_comm_last_error() gives the detail of the last failure on a communicator (peer, call, errno).
 *
 * Counts follow NCCL: allgather and gather take the per-rank send count (recvbuf holds size * sendcount);
 * scatter and reduce_scatter take the per-rank receive count; alltoall takes the count per peer.
 * In place: sendbuf == recvbuf for allreduce, reduce, alltoall and reduce_scatter (whose result then
 * lands at the start of recvbuf; NCCL's recvbuf == sendbuf + rank * recvcount works too); for
 * allgather and gather, NCCL's sendbuf == recvbuf + rank * sendcount; for scatter at the root,
 * recvbuf == sendbuf + root * recvcount. Buffers that overlap in any other way (by a single byte
 * even) are served as if they lay apart: the call first copies its input aside, into memory the
 * communicator keeps for that. HOOP_AVG is the sum divided by the rank count (integers
 * truncate toward zero). A program started without any launcher variable runs as a single rank.
 * Where a collective has a root, only the root's recvbuf (gather, reduce) or sendbuf (scatter) is used.
 *
 * Thread safety: calls on different communicators may run concurrently from different threads. Calls on
 * one communicator must be posted by one thread at a time (as with NCCL and MPI_THREAD_SERIALIZED);
 * hoop_wait/hoop_test on a request may run on any thread. hoop_comm_abort() may be called from any thread
 * at any time. hoop_error_string() is always safe.
 */
#ifndef HOOP_H
#define HOOP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version: these three lines are its one place (meson.build, hooprun and the Python package
 * read it from here or from hoop_version()). */
#define HOOP_VERSION_MAJOR 0
#define HOOP_VERSION_MINOR 1
#define HOOP_VERSION_PATCH 0
#define HOOP__STR1(x) #x
#define HOOP__STR(x) HOOP__STR1(x)
#define HOOP_VERSION_STRING                                                                        \
    HOOP__STR(HOOP_VERSION_MAJOR)                                                                  \
    "." HOOP__STR(HOOP_VERSION_MINOR) "." HOOP__STR(HOOP_VERSION_PATCH)

/* What libhoop exports: this header's functions and nothing else (it is built with hidden
 * visibility, so internal hoop__ symbols stay inside). */
#if defined(__GNUC__) || defined(__clang__)
#define HOOP_API __attribute__((visibility("default")))
#else
#define HOOP_API
#endif

typedef struct hoop_comm hoop_comm_t;
typedef struct hoop_request hoop_request_t;

typedef enum {
    HOOP_OK = 0,
    HOOP_ERR_INVALID_ARGUMENT,
    HOOP_ERR_SYSTEM,
    HOOP_ERR_TIMEOUT,
    HOOP_ERR_PEER_LOST,
    HOOP_ERR_MISMATCH,
    HOOP_ERR_AUTH,
    HOOP_ERR_UNSUPPORTED,
    HOOP_ERR_ABORTED,
    HOOP_ERR_NO_MEMORY,
    HOOP_ERR_INTERNAL
} hoop_result_t;

typedef enum {
    HOOP_INT8,
    HOOP_UINT8,
    HOOP_INT32,
    HOOP_UINT32,
    HOOP_INT64,
    HOOP_UINT64,
    HOOP_FLOAT16,
    HOOP_BFLOAT16,
    HOOP_FLOAT32,
    HOOP_FLOAT64,
    HOOP_DTYPE_COUNT
} hoop_dtype_t;

typedef enum { HOOP_SUM, HOOP_PROD, HOOP_MIN, HOOP_MAX, HOOP_AVG, HOOP_OP_COUNT } hoop_op_t;

/* Static strings; never NULL. */
HOOP_API const char *hoop_error_string(hoop_result_t r);
HOOP_API const char *hoop_dtype_name(hoop_dtype_t dt);
HOOP_API const char *hoop_op_name(hoop_op_t op);
HOOP_API size_t hoop_dtype_size(hoop_dtype_t dt); /* 0 for an invalid dtype */
HOOP_API const char *hoop_version(void);

/* Detail of the last failure on comm ("" if none). Valid until the next call on comm. */
HOOP_API const char *hoop_comm_last_error(const hoop_comm_t *comm);

/*
 * init_method: "env://" (MASTER_ADDR/MASTER_PORT; under srun or mpirun, where they are unset, Slurm's
 * variables or PMIx give rank 0's address), "tcp://HOST:PORT" (rank 0 hosts the rendezvous store
 * there), "file:///PATH" (a fresh path on a shared file system), "slurm://" or "pmix://" (env://
 * through that launcher only). NULL means "env://". rank / world_size of -1 are taken from the
 * environment.
 * Blocks until every rank has joined or HOOP_TIMEOUT expires.
 */
HOOP_API hoop_result_t hoop_init(hoop_comm_t **comm, const char *init_method, int rank,
                                 int world_size);
HOOP_API hoop_result_t hoop_init_from_env(hoop_comm_t **comm); /* = hoop_init(comm, NULL, -1, -1) */

/* Collective over comm: ranks with the same color form a new communicator, ordered by (key, old rank).
 * A negative color (HOOP_SPLIT_NONE) takes part but gets *newcomm = NULL. */
#define HOOP_SPLIT_NONE (-1)
HOOP_API hoop_result_t hoop_comm_split(hoop_comm_t *comm, int color, int key,
                                       hoop_comm_t **newcomm);
/*
 * Survivors continue (docs/reliability.md): every rank of comm that still runs calls it, after a
 * peer was lost (comm failed with HOOP_ERR_PEER_LOST, HOOP_ERR_ABORTED or HOOP_ERR_TIMEOUT) or on
 * a healthy comm, and gets *newcomm, a communicator of the ranks that took part, numbered in
 * their old order. Ranks whose process is gone are left out at once; a rank that is alive but
 * does not call within a quarter of comm's timeout (stopped, or busy elsewhere) is left out after
 * that wait. It returns within comm's timeout. comm itself is not changed: the caller still
 * destroys it; one shrink per communicator (a later call, or a call by a rank that was left out,
 * fails, as does a call that finds no other rank taking part). A failure on any member (one that
 * dies during the shrink) fails it on every member; it may be called again on comm.
 * hoop_comm_shrink_exclude also leaves out the n ranks of exclude, which every caller must pass
 * alike (else HOOP_ERR_MISMATCH on every caller; an entry out of range,
 * HOOP_ERR_INVALID_ARGUMENT on every caller). An excluded rank need not call; where it does, it
 * returns HOOP_OK at once with *newcomm = NULL. A communicator made by hoop_init, by
 * hoop_comm_split or by a shrink can be shrunk; each is shrunk on its own (a parent and a
 * communicator split from it that lost the same rank are shrunk one after the other).
 */
HOOP_API hoop_result_t hoop_comm_shrink(hoop_comm_t *comm, hoop_comm_t **newcomm);
HOOP_API hoop_result_t hoop_comm_shrink_exclude(hoop_comm_t *comm, const int *exclude, int n,
                                                hoop_comm_t **newcomm);
/* Frees comm. Not collective. With calls still pending (posted and not complete, such as a
 * collective that a peer never joins) it first aborts comm, as hoop_comm_abort() does, so that
 * it returns at once rather than after the timeout: the pending calls fail with
 * HOOP_ERR_ABORTED, and the peers learn why. A thread blocked in hoop_wait on one of them
 * returns HOOP_ERR_ABORTED before comm is freed; no other call on comm may run meanwhile.
 * Requests belong to their communicator and go with it: hoop_wait every request you need the
 * result of before destroying comm, and none after (its handles then name freed memory). */
HOOP_API hoop_result_t hoop_comm_destroy(hoop_comm_t *comm);
/* Fails every pending and future call on comm with HOOP_ERR_ABORTED and drops its connections,
 * so that peers fail fast too. The communicator must still be destroyed. */
HOOP_API hoop_result_t hoop_comm_abort(hoop_comm_t *comm);
HOOP_API int hoop_comm_rank(const hoop_comm_t *comm);
HOOP_API int hoop_comm_size(const hoop_comm_t *comm);
/* Algorithm of comm from now on: "auto", "ring", "rd", "rabenseifner", "ps", "ps-sharded", "ipc",
 * "shm", "p2p" or "hier" (as HOOP_ALGO; "ipc": CUDA device buffers on every rank, all on one
 * node, through CUDA IPC; "hier" runs the flat algorithms where the ranks are not several on each of several hosts,
 * as many on each).
 * Every rank must make the same choice before the same call, or that call fails with
 * HOOP_ERR_MISMATCH. */
HOOP_API hoop_result_t hoop_comm_set_algo(hoop_comm_t *comm, const char *algo);
/* Timeout of every blocking wait on comm, in seconds (default HOOP_TIMEOUT, 300). */
HOOP_API hoop_result_t hoop_comm_set_timeout(hoop_comm_t *comm, double seconds);

/*
 * CUDA stream ordering, as NCCL's (docs/cuda.md). stream is a cudaStream_t of the device that holds
 * comm's device buffers (void * so that this header needs no CUDA header); NULL, the setting at
 * creation, means none. While a stream is set, each call on comm whose buffers are CUDA device
 * memory is ordered on it: it starts after the work queued on stream before the call, work queued
 * there after the call sees its result, and the call returns once posted, without waiting for the
 * stream, the device or the peers. A blocking call (hoop_allreduce...) then returns HOOP_OK once
 * the call is queued; a nonblocking one gives a request that completes, on the host, when the
 * result is in device memory (hoop_wait is never needed for stream order). Errors found at posting
 * (arguments, unsupported buffers) return at once; a failure while the call runs aborts comm, so
 * that the next call fails saying why, and stream still moves on (that result is then undefined).
 * hoop_comm_destroy lets the calls already queued this way end first (within the timeout).
 * Calls on host buffers ignore the stream. Without a stream, a call on device buffers returns when
 * its result is in device memory. A local setting (ranks need not agree, nor set the same stream);
 * calls posted under one stream and then another stay in posting order. The stream must stay valid
 * until the calls ordered on it have completed. Set from the thread that posts. */
HOOP_API hoop_result_t hoop_comm_set_stream(hoop_comm_t *comm, void *stream);
/* The legacy default stream (cudaStreamLegacy), for hoop_comm_set_stream: a stream handle of 0
 * (what torch reports for its default stream) is this one, as NULL here means none. */
#define HOOP_STREAM_LEGACY ((void *)1)
/* The stream set on comm, NULL when none. */
HOOP_API void *hoop_comm_get_stream(const hoop_comm_t *comm);
/* A group of stream-ordered calls, as NCCL's ncclGroupStart/ncclGroupEnd: between the two, the
 * calls on device buffers posted while a stream is set start, as always, after the work queued on
 * their stream before them, but none waits for another of the group; the streams are made to wait
 * for all of them at hoop_group_end. Needed where a rank's calls would otherwise wait on each
 * other across ranks, as a ring of irecv-then-isend on one stream does (each receive holds its
 * stream until it is done). Calls without a stream are not affected. Groups nest (the outermost
 * end counts); the posting thread's, local to this rank. hoop_group_end without a start is
 * HOOP_ERR_INVALID_ARGUMENT. */
HOOP_API hoop_result_t hoop_group_start(hoop_comm_t *comm);
HOOP_API hoop_result_t hoop_group_end(hoop_comm_t *comm);

HOOP_API hoop_result_t hoop_allreduce(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                      size_t count, hoop_dtype_t dt, hoop_op_t op);
HOOP_API hoop_result_t hoop_broadcast(hoop_comm_t *c, void *buf, size_t count, hoop_dtype_t dt,
                                      int root);
HOOP_API hoop_result_t hoop_reduce(hoop_comm_t *c, const void *sendbuf, void *recvbuf, size_t count,
                                   hoop_dtype_t dt, hoop_op_t op, int root);
HOOP_API hoop_result_t hoop_allgather(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                      size_t sendcount, hoop_dtype_t dt);
HOOP_API hoop_result_t hoop_gather(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                   size_t sendcount, hoop_dtype_t dt, int root);
HOOP_API hoop_result_t hoop_scatter(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                    size_t recvcount, hoop_dtype_t dt, int root);
HOOP_API hoop_result_t hoop_reduce_scatter(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                           size_t recvcount, hoop_dtype_t dt, hoop_op_t op);
HOOP_API hoop_result_t hoop_alltoall(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                     size_t count, hoop_dtype_t dt);
HOOP_API hoop_result_t hoop_barrier(hoop_comm_t *c);
/* Point-to-point: peer is another rank of c (not the caller); a send matches the peer's receives
 * from this rank in posting order, with the same count and dtype. */
HOOP_API hoop_result_t hoop_send(hoop_comm_t *c, const void *buf, size_t count, hoop_dtype_t dt,
                                 int peer);
HOOP_API hoop_result_t hoop_recv(hoop_comm_t *c, void *buf, size_t count, hoop_dtype_t dt,
                                 int peer);
/* A receive from any source (MPI_ANY_SOURCE): it takes the next send from whichever other rank's
 * has arrived when its turn comes (among several, rank order from the one after the rank it last
 * took), then is a receive from that rank, count and dtype checked as hoop_recv's. *source (if
 * not NULL) is that rank once the call ends, -1 when it matched none. Receives posted after it
 * wait until it has matched (they could take its message), and so do collectives: the send it
 * takes must have been posted before its sender's later collectives. With no send arriving within
 * the communicator's timeout it fails with HOOP_ERR_TIMEOUT and the communicator stays usable. */
HOOP_API hoop_result_t hoop_recv_any(hoop_comm_t *c, void *buf, size_t count, hoop_dtype_t dt,
                                     int *source);

/*
 * Nonblocking twins. Collectives run in the order they were posted, the same order on every rank;
 * buffers must stay untouched until the request completes. A point-to-point request is matched
 * against the peer's in posting order and may overlap with later requests.
 */
HOOP_API hoop_result_t hoop_iallreduce(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                       size_t count, hoop_dtype_t dt, hoop_op_t op,
                                       hoop_request_t **req);
HOOP_API hoop_result_t hoop_ibroadcast(hoop_comm_t *c, void *buf, size_t count, hoop_dtype_t dt,
                                       int root, hoop_request_t **req);
HOOP_API hoop_result_t hoop_ireduce(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                    size_t count, hoop_dtype_t dt, hoop_op_t op, int root,
                                    hoop_request_t **req);
HOOP_API hoop_result_t hoop_iallgather(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                       size_t sendcount, hoop_dtype_t dt, hoop_request_t **req);
HOOP_API hoop_result_t hoop_igather(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                    size_t sendcount, hoop_dtype_t dt, int root,
                                    hoop_request_t **req);
HOOP_API hoop_result_t hoop_iscatter(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                     size_t recvcount, hoop_dtype_t dt, int root,
                                     hoop_request_t **req);
HOOP_API hoop_result_t hoop_ireduce_scatter(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                            size_t recvcount, hoop_dtype_t dt, hoop_op_t op,
                                            hoop_request_t **req);
HOOP_API hoop_result_t hoop_ialltoall(hoop_comm_t *c, const void *sendbuf, void *recvbuf,
                                      size_t count, hoop_dtype_t dt, hoop_request_t **req);
HOOP_API hoop_result_t hoop_ibarrier(hoop_comm_t *c, hoop_request_t **req);
HOOP_API hoop_result_t hoop_isend(hoop_comm_t *c, const void *buf, size_t count, hoop_dtype_t dt,
                                  int peer, hoop_request_t **req);
HOOP_API hoop_result_t hoop_irecv(hoop_comm_t *c, void *buf, size_t count, hoop_dtype_t dt,
                                  int peer, hoop_request_t **req);
/* *source is written by the time hoop_wait (or a hoop_test saying done) returns. */
HOOP_API hoop_result_t hoop_irecv_any(hoop_comm_t *c, void *buf, size_t count, hoop_dtype_t dt,
                                      int *source, hoop_request_t **req);

/* Symmetric memory, for communicators whose ranks all share one host. hoop_mem_alloc is
 * collective: every rank asks for the same bytes (> 0), in the same order of calls, and gets its
 * own buffer of that size in memory every rank of comm maps. A collective whose buffers all lie in
 * such memory on every rank (all-reduce, reduce-scatter, all-gather and broadcast, above
 * HOOP_SMALL_BYTES a rank) reads the peers' inputs and writes their outputs in place, with no
 * copy through the shared area; with ordinary buffers on some rank it runs as it would without. Sizes that differ across ranks fail on every rank with
 * HOOP_ERR_INVALID_ARGUMENT, ranks on several hosts with HOOP_ERR_UNSUPPORTED, and comm stays
 * usable. hoop_mem_free is collective too: every rank frees its pointer of the same allocation
 * (a pointer that is not one hoop_mem_alloc gave on comm, or one freed already, fails on every
 * rank). What is left is unmapped with comm. The memory has no name: nothing stays in /dev/shm. */
HOOP_API hoop_result_t hoop_mem_alloc(hoop_comm_t *comm, size_t bytes, void **ptr);
HOOP_API hoop_result_t hoop_mem_free(hoop_comm_t *comm, void *ptr);
/* Symmetric memory from files the program made: every rank passes a descriptor of its own (a
 * memfd, a file in /dev/shm), a page-aligned offset and the same bytes (> 0), and gets in *ptr
 * its own range mapped anew, which the peers map too; collectives on it run as on hoop_mem_alloc's
 * memory. Collective, compared on every rank as hoop_mem_alloc is: a size that differs, a bad
 * offset or descriptor, or a range past its file's end fails on every rank. The file must stay
 * at least that long while registered (a shorter file faults the mappings); fd may be closed once
 * the call returns. hoop_mem_free undoes it (unmapping what it mapped, never the file). */
HOOP_API hoop_result_t hoop_mem_register_fd(hoop_comm_t *comm, int fd, size_t offset, size_t bytes,
                                            void **ptr);

/* Local reduction with the library's kernels: out[i] = a[i] op b[i] (out may alias a or b). */
HOOP_API hoop_result_t hoop_reduce_local(void *out, const void *a, const void *b, size_t count,
                                         hoop_dtype_t dt, hoop_op_t op);

/* Traffic of this rank on comm since it was created: payload bytes and messages it sent and
 * received (headers not counted). */
typedef struct hoop_stats {
    uint64_t bytes_sent, bytes_received;
    uint64_t messages_sent, messages_received;
} hoop_stats_t;
HOOP_API hoop_result_t hoop_comm_stats(const hoop_comm_t *comm, hoop_stats_t *stats);

/* Memory comm holds on this rank, in bytes, as the library counts it (HOOP_DEBUG=INFO says the
 * same at init; hoop-perf -M prints it). Shared memory is counted as mapped: the one-host area
 * (0 until the first call that uses it; area_next: what it maps once made, 0 where none will be
 * made), the shared-memory transport's rings (this rank's segment and each peer's it maps) and
 * symmetric memory (hoop_mem_alloc: every rank's slices); then the transports' heap state for
 * their connections, open connections (sockets, peers mapped) and the flight recorder. RDMA
 * verbs' queues and registrations are not counted. Waits for a step of a call running on comm. */
typedef struct hoop_memory {
    uint64_t area, area_next, rings, sym;
    uint64_t connections, nconnections, recorder;
} hoop_memory_t;
HOOP_API hoop_result_t hoop_comm_memory(const hoop_comm_t *comm, hoop_memory_t *mem);

/* The flight recorder: every communicator keeps its last HOOP_RECORD calls (default 2048, 0 for
 * none), each with its call number, kind, dtype, count, root or peer, op, algorithm, memory, state
 * (posted, started, finished, failed with its code), times and bytes. hoop_comm_dump writes them
 * as JSON in the layout of PyTorch's flight recorder (docs/reliability.md) to path, or, where
 * path is NULL, to HOOP_RECORD_DIR (default: the current directory)/hoop-trace-<rank>.json
 * (hoop-trace-<id>-<rank>.json for a communicator made by a split). Any thread, at any time,
 * calls in flight or not; it writes a file aside and renames it, so that a reader never sees half
 * of one. The same dump is written by itself where a call on comm fails with HOOP_ERR_TIMEOUT,
 * and, with HOOP_RECORD_SIGNAL=1, whenever the process gets SIGUSR2. tools' hoop-trace reads the
 * dumps of every rank and says where they part. */
HOOP_API hoop_result_t hoop_comm_dump(hoop_comm_t *comm, const char *path);

/* Schedule tracing: while fn is set, every collective on comm reports its schedule, one line per
 * event ("allreduce#3 ring step 2: send segment 1 chunk 0 (256 B) to rank 2"), to fn on the
 * thread that runs it. HOOP_TRACE=1 sets a tracer that writes to the log at start-up. NULL stops. */
typedef void (*hoop_trace_fn)(void *ctx, const char *line);
HOOP_API hoop_result_t hoop_comm_set_trace(hoop_comm_t *comm, hoop_trace_fn fn, void *ctx);

/* Completes and frees req; returns the request's result. A request is waited for once: until its
 * communicator is destroyed, hoop_wait (or hoop_test) on a handle that was already waited for
 * returns HOOP_ERR_INVALID_ARGUMENT, saying so in hoop_comm_last_error(), and leaves alone any
 * newer request that reuses its memory (told apart by a generation number in the handle, which
 * wraps only after the same slot has served 64 more requests). Of two threads waiting for one
 * request, one gets its result and the other HOOP_ERR_INVALID_ARGUMENT. */
HOOP_API hoop_result_t hoop_wait(hoop_request_t *req);
/* *done = 1 once req has completed (then hoop_wait returns at once). Never blocks. Does not free
 * req. On a request already waited for: HOOP_ERR_INVALID_ARGUMENT and *done = 0, as above. */
HOOP_API hoop_result_t hoop_test(hoop_request_t *req, int *done);

#ifdef __cplusplus
}
#endif
#endif /* HOOP_H */
