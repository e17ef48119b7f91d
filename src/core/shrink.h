/* hoop_comm_shrink (shrink.c) and the listener every communicator keeps for it. */
#ifndef HOOP_SHRINK_H
#define HOOP_SHRINK_H

#include "runtime/comm.h"

/* Opens c's shrink listener on the interface facing host toward, or on the address of like (a
 * "host:port" whose host is taken) where like is set, and makes c->shrink_addrs with this rank's
 * entry. A failure leaves no listener (shrink then fails on c), with a warning: HOOP_ERR_SYSTEM
 * with errno kept. */
hoop_result_t hoop__shrink_open(hoop_comm_t *c, const char *toward, const char *like);
/* Stops the listener (and its fence, once shrunk); frees the addresses. */
void hoop__shrink_close(hoop_comm_t *c);
/* hoop_comm_shrink with exclude (n entries), *newcomm already NULL. */
hoop_result_t hoop__comm_shrink(hoop_comm_t *c, const int *exclude, int n, hoop_comm_t **newcomm);

/* The listener's messages (a test plays a stranger with them). Under HOOP_AUTH_KEY every
 * connection to a listener first passes the key's handshake (base/auth.h), which a stranger
 * cannot: nothing is read from it before. */
#define HOOP__SHRINK_MAGIC 0x4b4e495248535048ull /* "HPSHRINK" */

enum {
    HOOP__SM_JOIN = 1, /* a rank taking part, to a lower rank */
    HOOP__SM_HERE,     /* in shrink, not yet decided */
    HOOP__SM_COORD,    /* the coordinator: wait for the members */
    HOOP__SM_REDIRECT, /* not the coordinator (arg: the one this rank joined) */
    HOOP__SM_MEMBERS,  /* the members' old ranks; arg64: the new communicator's id */
    HOOP__SM_ADDR,     /* a member's transport address and shrink listener's */
    HOOP__SM_ADDRS,    /* every member's, in the new order */
    HOOP__SM_READY,    /* connected (arg: 0) or not (arg: the hoop_result_t) */
    HOOP__SM_GO,       /* every member is ready (arg: 0), or the shrink failed (arg: the code) */
    HOOP__SM_SHRUNK,   /* this communicator was shrunk already, without the asker */
    HOOP__SM_PROBE     /* the coordinator looks whether a rank's process is still there */
};

/* Every message: this header, then len bytes. Same-architecture ranks, as the transports'. */
typedef struct hoop__smsg {
    uint64_t magic, comm_id, digest, arg64;
    uint32_t type;
    int32_t rank; /* the sender's old rank */
    uint32_t len;
    int32_t arg;
} hoop__smsg_t;

#endif
