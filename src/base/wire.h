/* The wire header that starts every message, whatever the transport. Fixed 64 bytes, little-endian.
 * The decoder is a pure function over bytes so it can be fuzzed. */
#ifndef HOOP_WIRE_H
#define HOOP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "hoop.h"

#define HOOP__WIRE_MAGIC 0x504f4f48u /* "HOOP" */
#define HOOP__WIRE_VERSION 2         /* 2: algo and sched in the header */
#define HOOP__WIRE_HDR_SIZE 64

/* What a message belongs to. Values travel on the wire: append only. */
typedef enum {
    HOOP__K_NONE = 0,
    HOOP__K_ALLREDUCE,
    HOOP__K_BROADCAST,
    HOOP__K_REDUCE,
    HOOP__K_ALLGATHER,
    HOOP__K_GATHER,
    HOOP__K_SCATTER,
    HOOP__K_REDUCE_SCATTER,
    HOOP__K_ALLTOALL,
    HOOP__K_BARRIER,
    HOOP__K_SEND, /* point-to-point; hoop_recv expects this kind too */
    HOOP__K_SPLIT,
    HOOP__K_ABORT, /* control: the sender aborted; the payload is its reason (text, no NUL) */
    HOOP__K_COUNT
} hoop__kind_t;

typedef struct hoop__wire_hdr {
    uint8_t kind;  /* hoop__kind_t */
    uint8_t dtype; /* hoop_dtype_t */
    uint8_t op;    /* hoop_op_t */
    uint8_t flags;
    uint8_t algo; /* the algorithm that shapes the call's schedule (hoop__algo_t), 0 if none */
    int32_t root; /* root of rooted collectives, -1 otherwise */
    uint32_t src; /* sender's rank */
    uint64_t comm_id;
    uint64_t seq;         /* call number on the communicator (per peer pair for point-to-point) */
    uint64_t count;       /* the call's count argument: part of the fingerprint */
    uint64_t payload_len; /* bytes following this header */
    uint32_t sched;       /* digest of the settings that shape schedules (agree.h); the same on
                           * every rank of a communicator, so a difference is a disagreement */
} hoop__wire_hdr_t;

void hoop__wire_encode(const hoop__wire_hdr_t *h, uint8_t out[HOOP__WIRE_HDR_SIZE]);
/* Validates magic, version, enum ranges and payload_len <= max_payload; HOOP_ERR_MISMATCH otherwise. */
hoop_result_t hoop__wire_decode(const uint8_t in[HOOP__WIRE_HDR_SIZE], uint64_t max_payload,
                                hoop__wire_hdr_t *h);
/* HOOP_OK when got is the message expected (same call, same schedule, same length),
 * HOOP_ERR_MISMATCH if not. */
hoop_result_t hoop__wire_match(const hoop__wire_hdr_t *expect, const hoop__wire_hdr_t *got);
/* "allreduce(count=20, float32, sum)", "broadcast(count=10, float32, root=0)". Returns buf. */
const char *hoop__wire_describe(const hoop__wire_hdr_t *h, char *buf, size_t n);
const char *hoop__kind_name(int kind);
/* The algorithms' names by hdr.algo value (hoop__algo_t: "auto", "ring", "rd", ...), "unknown"
 * outside; the one table of them. */
const char *hoop__wire_algo_name(int algo);
#define HOOP__WIRE_ALGO_COUNT 10
/* The algorithm a name (any case) of that table names, -1 for none: HOOP_ALGO (base/config.c) and
 * hoop_comm_set_algo. */
int hoop__wire_algo_parse(const char *s);
/* The sentence for a received header that does not match the posted receive, naming both calls:
 * "rank 1 called broadcast(count=10, float32, root=0) as call #7 where rank 0 called ..."; a
 * point-to-point receive (kind send on the wire, as its message) is named recv. */
const char *hoop__wire_mismatch_msg(const hoop__wire_hdr_t *expect, const hoop__wire_hdr_t *got,
                                    int peer, int me, char *buf, size_t n);
/* The one check of a header that arrived (got, from peer) against the receive posted (posted,
 * with len payload bytes), for every transport. valid: the transport could read got as a header
 * (it decoded; no flag the transport does not know). HOOP_OK, or HOOP_ERR_MISMATCH with the
 * sentence of hoop__wire_mismatch_msg in msg. */
hoop_result_t hoop__wire_check_recv(const hoop__wire_hdr_t *posted, uint64_t len,
                                    const hoop__wire_hdr_t *got, int valid, int peer, int me,
                                    char *msg, size_t n);

/* ---- Status datagrams (core/explain.c) ----
 * A rank whose call timed out, or lost a peer, asks every peer where it is: one request datagram,
 * one answer, each of exactly HOOP__STATUS_SIZE bytes, little-endian, over a UDP side channel that
 * never carries collective data (so neither can ever be taken for a message of a call). Apart
 * from the wire header above: a magic and a version of their own. */
#define HOOP__STATUS_MAGIC 0x41545348u /* "HSTA" */
#define HOOP__STATUS_VERSION 1
#define HOOP__STATUS_SIZE 64
enum { HOOP__STATUS_REQ = 1, HOOP__STATUS_ANS = 2 };
/* flags of an answer */
#define HOOP__STATUS_HAS_CALL 1u /* seq..code describe the newest collective call */
#define HOOP__STATUS_REC_OFF 2u  /* HOOP_RECORD=0: nothing is known of its calls */
#define HOOP__STATUS_FLAGS 3u
/* The rank of a question from outside the communicator (hoop-status, hooprun --status). */
#define HOOP__STATUS_TOOL 0xffffffffu

typedef struct hoop__status_msg {
    uint8_t type;  /* HOOP__STATUS_REQ or HOOP__STATUS_ANS */
    uint8_t flags; /* answer: HOOP__STATUS_* */
    uint8_t state; /* answer: hoop__rec_state_t of the call, 0 without one */
    uint8_t code;  /* answer: the failure's hoop_result_t where state is failed */
    uint8_t kind;  /* answer: hoop__kind_t of the call */
    uint8_t dtype; /* answer */
    /* answer: how the call runs (plan.h's engine, algorithm and small flag, which
     * hoop__plan_schedule names); engine < 8, algo < 32, small 0 or 1 */
    uint8_t engine, algo, small;
    uint32_t rank;    /* the sender's rank */
    uint32_t pid;     /* the sender's process */
    uint32_t age_ms;  /* answer: since the call ended, or since it was posted while it runs */
    uint64_t comm_id; /* the communicator asked about */
    uint64_t nonce;   /* the request's, echoed by its answer */
    uint64_t seq;     /* answer: the call's number */
    uint64_t count;   /* answer: its count argument */
} hoop__status_msg_t;

void hoop__status_encode(const hoop__status_msg_t *m, uint8_t out[HOOP__STATUS_SIZE]);
/* Validates the length (exactly HOOP__STATUS_SIZE), magic, version, type, reserved bytes (zero)
 * and every enum's range; a request must carry no answer fields. HOOP_ERR_MISMATCH otherwise. */
hoop_result_t hoop__status_decode(const uint8_t *in, size_t len, hoop__status_msg_t *m);

#endif
