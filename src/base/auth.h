/*
 * Authentication of connections by a key shared by every rank (HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE).
 *
 * On a freshly connected stream each side proves that it holds the key by a mutual HMAC-SHA-256
 * challenge-response (libsodium); nothing else is read from the connection before. The exchange:
 *
 *   both    -> hello: "HOOPAUTH", version 1, role (0 client, 1 server), 6 zero bytes, 32-byte nonce
 *   client  -> proof  HMAC(key, "hoop-auth-v1 client" | context | client nonce | server nonce)
 *   server  -> verdict 0 and its proof HMAC(key, "hoop-auth-v1 server" | ...), or verdict 1 (rejected)
 *
 * Fresh nonces on both sides defeat replay; the role in the label and in the hello defeats reflection
 * (a server never produces what a client must send, nor a client what a server must); the context
 * binds a proof to one purpose (the rendezvous store, or one connection of one communicator between
 * two given ranks). The server speaks its proof only once the client's has checked out, so a stranger
 * learns nothing but a random nonce. Only the connection set-up is authenticated: the traffic after
 * it is neither encrypted nor integrity-protected.
 *
 * The key lives in the configuration of each communicator (never in a global) and is wiped with
 * hoop__auth_key_wipe when that goes away.
 */
#ifndef HOOP_AUTH_H
#define HOOP_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "hoop.h"

#define HOOP__AUTH_KEY_BYTES 32
#define HOOP__AUTH_NONCE_BYTES 32
#define HOOP__AUTH_HELLO_BYTES 48
#define HOOP__AUTH_MAC_BYTES 32
/* Longest message of the exchange: the server's verdict and proof. */
#define HOOP__AUTH_MAX_MSG (1 + HOOP__AUTH_MAC_BYTES)
/* What a peer without a key answers a hello with before it closes the connection: the other side
 * then fails at once. A peer that closes without a word may only be going away (a store that is
 * closing, a listener making room), which a client may retry. */
#define HOOP__AUTH_NO_KEY "HOOPNOKY"

typedef struct hoop__auth_key {
    int set; /* 0: no key, connections are not authenticated */
    unsigned char bytes[HOOP__AUTH_KEY_BYTES];
} hoop__auth_key_t;

/* The key from the text of HOOP_AUTH_KEY: exactly 64 hex digits are the key itself (what hooprun
 * makes); any other non-empty text is a passphrase, hashed to 32 bytes with BLAKE2b. */
hoop_result_t hoop__auth_key_from_string(hoop__auth_key_t *k, const char *text, char *err,
                                         size_t errlen);
/* The key from a file (HOOP_AUTH_KEY_FILE): a regular file that neither group nor others may read or
 * write (as ssh demands of private keys), holding a key as HOOP_AUTH_KEY would; surrounding white
 * space is ignored. */
hoop_result_t hoop__auth_key_from_file(hoop__auth_key_t *k, const char *path, char *err,
                                       size_t errlen);
/* HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE as get() returns them (empty counts as unset; both set is an
 * error). Neither set leaves k->set = 0. Errors are HOOP_ERR_INVALID_ARGUMENT with a sentence. */
hoop_result_t hoop__auth_key_from_env(hoop__auth_key_t *k,
                                      const char *(*get)(const char *name, void *ctx), void *ctx,
                                      char *err, size_t errlen);
void hoop__auth_key_wipe(hoop__auth_key_t *k);
/* Binds a set key to a job: replaces it by BLAKE2b(key, "hoop job" | job), so that two jobs that
 * share a key file but not a job id cannot authenticate to each other. No-op for an unset key or
 * an empty job. */
void hoop__auth_key_bind(hoop__auth_key_t *k, const char *job);

/* Folds identifying numbers (communicator id, ranks, socket index) into a handshake context. */
uint64_t hoop__auth_context(uint64_t base, uint64_t a, uint64_t b, uint64_t c);

/* The exchange as a state machine, for poll loops that serve many connections at once. */
typedef struct hoop__auth {
    const hoop__auth_key_t *key; /* borrowed */
    uint64_t context;
    int is_server;
    int phase;
    hoop_result_t code; /* why it failed */
    unsigned char nonce[HOOP__AUTH_NONCE_BYTES], peer_nonce[HOOP__AUTH_NONCE_BYTES];
    unsigned char out[HOOP__AUTH_HELLO_BYTES];
    size_t out_len, out_off;
    unsigned char in[HOOP__AUTH_HELLO_BYTES];
    size_t in_len, in_need;
    int gone; /* errno of a send that found the peer gone; what it sent before is still read */
} hoop__auth_t;

enum { HOOP__AUTH_FAILED = -1, HOOP__AUTH_MORE = 0, HOOP__AUTH_DONE = 1 };

/* key must be set and outlive a. */
void hoop__auth_start(hoop__auth_t *a, const hoop__auth_key_t *key, int is_server,
                      uint64_t context);
/* Moves the exchange on fd without blocking, reading no byte past its own messages.
 * HOOP__AUTH_DONE: the peer holds the key. HOOP__AUTH_MORE: call again once fd is ready for *events
 * (POLLIN / POLLOUT). HOOP__AUTH_FAILED: a->code and a sentence in err (the caller closes fd). */
int hoop__auth_step(hoop__auth_t *a, int fd, short *events, char *err, size_t errlen);
/* Wipes the nonces. */
void hoop__auth_clear(hoop__auth_t *a);

/*
 * The whole exchange on a connected stream fd (TCP or Unix socket, blocking or not), waiting in
 * poll() until deadline (monotonic seconds, as CLOCK_MONOTONIC). HOOP_OK once both sides have
 * proved the key; HOOP_ERR_AUTH when the peer's proof is wrong, it rejected ours, it answered that
 * it has no key (HOOP__AUTH_NO_KEY), or it spoke something else; HOOP_ERR_PEER_LOST when it closed
 * the connection before the exchange was through (a server may drop connections to make room, or
 * be closing: a client may retry); HOOP_ERR_TIMEOUT at the deadline; HOOP_ERR_SYSTEM on another
 * socket error. err gets a sentence (without the peer's name: the caller knows it).
 */
hoop_result_t hoop__auth_handshake(int fd, const hoop__auth_key_t *key, int is_server,
                                   uint64_t context, double deadline, char *err, size_t errlen);

/*
 * Datagrams under the key (the status socket, core/explain.c): a sealed datagram is the message,
 * the sender's wall clock in milliseconds (8 bytes, little-endian) and
 * HMAC(key, label | message | clock). The label tells a question from an answer (neither can be
 * reflected as the other); the clock bounds how long a captured question can be replayed, and the
 * receiver refuses a nonce it saw within that window. The message itself is neither hidden nor
 * changed.
 */
#define HOOP__AUTH_SEAL_BYTES (8 + HOOP__AUTH_MAC_BYTES)
/* How far a sealed datagram's clock may be from the receiver's, either way. */
#define HOOP__AUTH_SEAL_WINDOW_MS 30000
/* out gets len + HOOP__AUTH_SEAL_BYTES bytes; is_answer picks the label; now_ms the sender's clock
 * (0: read it). */
void hoop__auth_seal(const hoop__auth_key_t *key, int is_answer, const uint8_t *msg, size_t len,
                     uint64_t now_ms, uint8_t *out);
/* Checks a sealed datagram of n bytes (the message is its first n - HOOP__AUTH_SEAL_BYTES):
 * 0 when the MAC is right and its clock within the window of now_ms (0: read it), -1 otherwise.
 * *sent_ms gets the sender's clock. Constant time in the MAC's bytes. */
int hoop__auth_unseal(const hoop__auth_key_t *key, int is_answer, const uint8_t *in, size_t n,
                      uint64_t now_ms, uint64_t *sent_ms);

#endif
