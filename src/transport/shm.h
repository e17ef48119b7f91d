/*
 * Shared-memory transport, for peers on the same host.
 *
 * Every rank owns one segment (a memfd: it has no name, so nothing is left behind whatever way
 * the processes end) holding its inbound rings, one per peer. A peer maps it by opening
 * /proc/<pid>/fd/<fd>, which the kernel allows only to processes that may already read the
 * owner's memory, so no socket and no extra handshake is needed; the rendezvous store (which is
 * authenticated) carries the pid, fd and a random nonce that the mapped header must repeat.
 *
 *   segment of rank j:  header | ring control[i] for each peer i | ring data[i] for each peer i
 *   ring i -> j:        producer i writes bytes and moves head; consumer j reads and moves tail;
 *                       head and tail are monotonic byte counters on their own cache lines
 *
 * A message is a frame: a stamp word, a 40-byte header (the wire header less what the ring implies)
 * and the payload, padded to a cache line. Large payloads stream through the ring in pieces, so
 * the reader copies out while the writer is still copying in. A frame the writer puts in whole
 * (payload up to 64 KiB, room in the ring) gets its stamp last, a value only that frame's position
 * can have: the reader polls the stamp in the line it will read anyway, so a small message costs
 * one cache-line transfer instead of three (head's line, then the data's). A payload of at least
 * HOOP_SHM_CMA_BYTES (off by default) goes by single copy instead: the frame carries a descriptor
 * (address, length) and the reader pulls the bytes straight from the writer's buffer with
 * process_vm_readv, then counts the message done in the ring control, which completes the send.
 * Where the kernel refuses (no ptrace permission, no CMA), the reader says so at connect time and
 * the writer keeps to the ring.
 *
 * Waiting: a rank that finds nothing to do spins for a while (yielding its core between looks
 * when ranks outnumber cores), then sleeps on the futex word in its own header after announcing
 * it; whoever moves a head, a tail or a single-copy count checks that announcement and wakes it
 * (see publish() for the fences). Peer death is seen through a pidfd, and an aborting rank
 * writes its reason, and the number of calls it had finished, into its header for the others to
 * read; it writes nothing after, so a reader takes in what is in its ring before it counts the
 * peer failed, as a notice that came last.
 *
 * shm_setup.c holds listening, mapping the peers' segments, connecting and settling; shm.c the
 * data path, waiting, abort and close; this header their shared state. Nothing else includes it.
 */
#ifndef HOOP_SHM_H
#define HOOP_SHM_H

#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/proc.h"
#include "transport/transport.h"

#define SEG_MAGIC 0x4d48535f504f4f48ull /* "HOOP_SHM" */
#define LINE 64
#define SHM_CAPS HOOP__TP_MEM(HOOP__MEM_HOST) /* host memory only, unregistered */
#define F_CMA 0x01 /* wire header flag: a descriptor follows, the payload stays with the sender */
#define DESC_SIZE 16
#define PIECE (64 * 1024) /* bytes copied between publications of head or tail */
#define STAMP 8           /* a frame's first word: see send_some() */
#define SHDR_SIZE 40      /* the wire header without what a ring implies (sender, communicator) */
#define CMA_PIECE (1024 * 1024)
#define REASON_LEN 448
#define CONNECT_FAREWELL 1.0 /* seconds a failed connect() waits for its peers to read why */
#define RING_WARN_BYTES (1024.0 * 1024 * 1024) /* rings on a host above this: said at WARN */
/* With up to this many peers on its host, a rank faults in and warms its rings at connect; with
 * more, each page is faulted in by its first use, so that the rings of pairs that never talk
 * (p² of them) cost nothing. */
#define PREFAULT_MAX_PEERS 16
/* With more peers on its host than this, a rank maps at connect only its neighbours in a tree of
 * the host's ranks (its parent and children in a binomial tree), which settle through it, and
 * every other peer's segment at its first transfer with it: mapping every peer's segment on every
 * rank was p² mappings at init and again at destroy, each a costly change of the page tables. */
#define LAZY_PEERS 16
#define ADDR_MAX 64
/* Peers besides those a rank has transfers with whose process one liveness look polls. */
#define SWEEP_PEERS 16
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

typedef struct ring_ctl {
    _Alignas(LINE) _Atomic uint64_t head;     /* written by the producer */
    _Alignas(LINE) _Atomic uint64_t tail;     /* written by the consumer */
    _Alignas(LINE) _Atomic uint64_t cma_done; /* single-copy messages the consumer has read */
    _Atomic uint32_t cma_ok; /* 0 not known yet, 1 the consumer can read the producer, 2 not */
} ring_ctl_t;

typedef struct seg_hdr {
    uint64_t magic, comm_id, nonce, ring_bytes;
    int32_t rank, size;
    uint64_t probe_addr; /* a word in the owner's memory holding nonce: the single-copy probe */
    _Alignas(LINE) _Atomic uint32_t doorbell; /* futex word */
    _Atomic uint32_t sleeping;                /* the owner is about to sleep on doorbell */
    uint32_t membarrier;   /* the owner is registered for, and sleeps behind, a global membarrier */
    _Atomic uint32_t bell; /* the owner sleeps in poll() on its bell pipe (see shm_arm) */
    int32_t bell_wfd;      /* the owner's fd of its bell pipe's write end, -1 if none */
    _Alignas(LINE) _Atomic uint32_t aborted;
    _Atomic uint32_t closed;    /* the owner closed its instance */
    uint64_t abort_done;        /* the calls the owner had finished: written before aborted */
    _Atomic uint32_t mapped_by; /* peers that have mapped this segment */
    _Atomic uint32_t ready;     /* the owner's settle(): all its transports connected (with
                                   more than LAZY_PEERS peers: and those of its subtree) */
    _Atomic uint32_t go;        /* beyond LAZY_PEERS peers: every rank of the host is ready */
    char reason[REASON_LEN];
} seg_hdr_t;

typedef struct op {
    hoop__xfer_t *x;
    size_t pos;  /* bytes of header (+ descriptor) and payload moved through the ring */
    size_t hlen; /* SHDR_SIZE, plus DESC_SIZE for a single copy */
    size_t cma_pos;
    uint64_t ticket;
    int cma;
    uint8_t hdr[SHDR_SIZE + DESC_SIZE];
    struct op *next;
} op_t;

typedef struct queue {
    op_t *head, *tail;
} queue_t;

typedef struct peer {
    int local, lost;
    int exited; /* its pidfd's event came through the epoll set (disarm) */
    /* Unmapped (sh NULL) until its first transfer where the rank maps lazily; sh points at the
     * transport's tombstone where the peer had exited by then. */
    char addr[ADDR_MAX];
    pid_t pid;
    int pidfd;
    uint8_t *map; /* the peer's segment */
    size_t map_len;
    seg_hdr_t *sh;
    ring_ctl_t *out; /* in the peer's segment: our ring to it */
    uint8_t *out_data;
    uint64_t out_head, out_tail_seen;
    ring_ctl_t *in; /* in our segment: its ring to us */
    uint8_t *in_data;
    uint64_t in_tail, in_head_seen, in_tail_pub;
    queue_t sq, aq, rq; /* sends being written, single copies awaiting the reader, receives */
    uint64_t cma_tickets;
    int cheap;      /* publish() without a fence: see there */
    int bell_fd;    /* the peer's bell pipe, opened for reading and writing (see map_peer), or -1 */
    uint64_t moved; /* bytes written to and taken from its rings, read by single copy */
    /* Its abort was seen and reported (as a notice: ab_msg); until what it wrote before is taken
     * in, the peer is not lost (see check_aborted). */
    int ab_heard;
    hoop_result_t ab_code;
    char ab_msg[REASON_LEN + 64];
} peer_t;

struct hoop__tp {
    hoop__tp_params_t p;
    int memfd;
    uint8_t *seg;
    size_t seg_len, ring_bytes, data_off;
    seg_hdr_t *sh;
    ring_ctl_t *ctl;
    uint64_t nonce;
    _Alignas(8) uint64_t probe; /* read by peers through process_vm_readv */
    peer_t *peers;
    op_t *free_ops;
    hoop_result_t failed;
    int nlocal;
    int prefault;        /* the rings are faulted in at connect (PREFAULT_MAX_BYTES) */
    int lazy;            /* peers are mapped at their first transfer (LAZY_PEERS) */
    int parent;          /* with lazy: the tree's parent (-1 at its root), mapped at connect */
    int *kids, nkids;    /* with lazy: the tree's children, mapped at connect */
    seg_hdr_t *tomb;     /* what a peer that had exited before its first transfer reads as */
    double spin_s;       /* how long progress() spins before it sleeps */
    int oversub;         /* more local ranks than cores: yield while spinning */
    double next_check;   /* next liveness check while spinning */
    unsigned idle_polls; /* progress(0) calls that found nothing */
    int sweep;           /* the first peer the next liveness look polls besides busy ones */
    struct pollfd *pfds;
    _Atomic int woken; /* wake() came since progress() last looked: do not sleep */
    int bell[2];       /* pipe that peers write a byte to while this rank is armed */
    int epfd;          /* epoll set of the bell and every peer's pidfd: shm_wait_fd() */
    int armed;         /* shm_arm() announced a sleep that progress() has not ended yet */
};

static inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Shared between shm_setup.c and shm.c. */
/* Wakes peer pe wherever it sleeps (its futex, or its bell while it sleeps in another poll()). */
void hoop__shm_force_wake(const peer_t *pe);
hoop_result_t hoop__shm_listen(const hoop__tp_params_t *p, hoop__tp_t **out, char *addr,
                               size_t addrlen);
hoop_result_t hoop__shm_connect(hoop__tp_t *tp, const char *const *addrs, double deadline);
hoop_result_t hoop__shm_settle(hoop__tp_t *tp, double deadline);
/* Maps peer j at its first transfer (lazy). HOOP_OK also where it had exited: it reads as
 * closed then (tp->tomb). Otherwise the error, with its sentence in msg. */
hoop_result_t hoop__shm_map_lazy(hoop__tp_t *tp, int j, char *msg, size_t n);

#endif
