/* The wire of the tcp store, between its clients (client.c) and rank 0's server (server.c); exposed
 * for tests and fuzzing. All integers are little-endian. A request is
 *   u8 op ('S' set, 'W' get, 'C' claim) | u32 keylen | u32 vallen | key | value
 * and a reply is u8 status (0 ok, 1 missing, 2 taken: a claim's key existed) | u32 vallen | value
 * (a get's value, or the existing value of a taken claim). A 'W' carries as its value a u32: the
 * milliseconds (at most HOOP__STORE_MAX_HOLD_MS) the server may hold it for the key to be set;
 * it is answered once the key is there or when the hold is over, whichever is first (at once for
 * a hold of 0). 'G', a get without a hold, is no request any more: no client sends it.
 * The server reads nothing more from a connection while it holds its request, so a connection
 * holds one at most. With a key, each connection first runs the handshake of auth.h in the
 * context HOOP__STORE_AUTH_TAG, before any request is read. */
#ifndef HOOP_STORE_PROTO_H
#define HOOP_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "rendezvous/store.h"

#define HOOP__STORE_REQ_HDR 9 /* op, keylen, vallen */
#define HOOP__STORE_REP_HDR 5 /* status, vallen */
#define HOOP__STORE_MAX_REQ                                                                        \
    ((size_t)HOOP__STORE_REQ_HDR + HOOP__STORE_MAX_KEY + HOOP__STORE_MAX_VALUE)
#define HOOP__STORE_REP_OK 0
#define HOOP__STORE_REP_MISSING 1
#define HOOP__STORE_REP_TAKEN 2 /* a claim found its key set: the value is the existing one */
/* A 'W' request's value: its hold in milliseconds. */
#define HOOP__STORE_HOLD_LEN 4
/* The longest hold the server grants: a waiting client asks again after it, so that a server
 * gone silent (no close) is found out within it plus the reply's grace, whatever the timeout. */
#define HOOP__STORE_MAX_HOLD_MS 10000u
/* Context of the store's handshakes: "STORE", apart from every communicator's. */
#define HOOP__STORE_AUTH_TAG 0x45524f5453ull

typedef struct hoop__store_req {
    uint8_t op;
    const char *key;
    uint32_t keylen;
    const uint8_t *val;
    uint32_t vallen;
} hoop__store_req_t;

/* Returns the number of bytes of buf that form one complete request (> 0), 0 if more bytes are
 * needed, -1 if the bytes can never form a valid request (the connection is then dropped). */
long hoop__store_parse(const uint8_t *buf, size_t len, hoop__store_req_t *req);
/* The whole length that a request starting with these HOOP__STORE_REQ_HDR bytes claims, header
 * included (how much to buffer for it; parse says whether it is valid). */
size_t hoop__store_req_len(const uint8_t *hdr);
/* Writes a request's header and its key into out (HOOP__STORE_REQ_HDR + keylen bytes, returned);
 * the value follows on the wire. */
size_t hoop__store_req_encode(uint8_t *out, uint8_t op, const char *key, size_t keylen,
                              size_t vallen);
/* A 'W' request's hold: its value as milliseconds (the request must have parsed). */
uint32_t hoop__store_hold_ms(const hoop__store_req_t *req);
/* Writes the value of a 'W' request holding ms milliseconds (HOOP__STORE_HOLD_LEN bytes). */
void hoop__store_hold_encode(uint8_t *out, uint32_t ms);
/* Writes a reply's header into out (HOOP__STORE_REP_HDR bytes); the value follows. */
void hoop__store_rep_encode(uint8_t *out, uint8_t status, uint32_t vallen);

/* What a client makes of the header of the reply to its request op. */
enum {
    HOOP__STORE_REP_VALID = 0, /* status in rep[0], *vallen value bytes follow */
    HOOP__STORE_REP_AUTH,      /* the start of an authentication hello: the server wants a key */
    HOOP__STORE_REP_INVALID    /* no reply of a store to that request */
};
int hoop__store_rep_check(uint8_t op, const uint8_t *rep, uint32_t *vallen);

#endif
