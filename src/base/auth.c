/* Authentication of connections: key loading and the mutual HMAC challenge-response (see auth.h).
 * Every cryptographic operation is libsodium's. */
#include "base/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"

#define HELLO_MAGIC "HOOPAUTH"
#define AUTH_VERSION 1
#define KEY_FILE_MAX 4096
#define VERDICT_OK 0
#define VERDICT_REJECTED 1

/* Passphrases are hashed with this BLAKE2b key, so that the derived key is hoop's own. */
static const unsigned char passphrase_domain[16] = "hoop auth key v1";

enum {
    P_HELLO,   /* both: exchanging hellos */
    P_VERDICT, /* client: proof sent, waiting for the verdict byte */
    P_SPROOF,  /* client: waiting for the server's proof */
    P_CPROOF,  /* server: waiting for the client's proof */
    P_FINISH,  /* server: verdict and proof queued; done once sent */
    P_FAILED,
};

/* ---- keys ---- */

void hoop__auth_key_wipe(hoop__auth_key_t *k)
{
    if (k != NULL) sodium_memzero(k, sizeof(*k));
}

void hoop__auth_key_bind(hoop__auth_key_t *k, const char *job)
{
    if (k == NULL || !k->set || job == NULL || job[0] == '\0') return;
    crypto_generichash_state st;
    unsigned char out[HOOP__AUTH_KEY_BYTES];
    crypto_generichash_init(&st, k->bytes, sizeof(k->bytes), sizeof(out));
    crypto_generichash_update(&st, (const unsigned char *)"hoop job", 8);
    crypto_generichash_update(&st, (const unsigned char *)job, strlen(job));
    crypto_generichash_final(&st, out, sizeof(out));
    memcpy(k->bytes, out, sizeof(out));
    sodium_memzero(out, sizeof(out));
    sodium_memzero(&st, sizeof(st));
}

static int all_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return 0;
    }
    return 1;
}

/* text[0..n) is the key's text (not necessarily NUL-terminated). */
static hoop_result_t key_from_text(hoop__auth_key_t *k, const char *text, size_t n,
                                   const char *what, char *err, size_t errlen)
{
    hoop__auth_key_wipe(k);
    if (sodium_init() < 0) {
        hoop__say(err, errlen, "cannot initialise libsodium");
        return HOOP_ERR_SYSTEM;
    }
    if (n == 0) {
        hoop__say(err, errlen, "%s is empty: a key needs at least one character", what);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (n == 2 * HOOP__AUTH_KEY_BYTES && all_hex(text, n)) {
        size_t got = 0;
        if (sodium_hex2bin(k->bytes, sizeof(k->bytes), text, n, NULL, &got, NULL) != 0 ||
            got != sizeof(k->bytes)) {
            hoop__auth_key_wipe(k);
            hoop__say(err, errlen, "%s: cannot decode 64 hex digits", what);
            return HOOP_ERR_INVALID_ARGUMENT;
        }
    } else {
        crypto_generichash(k->bytes, sizeof(k->bytes), (const unsigned char *)text, n,
                           passphrase_domain, sizeof(passphrase_domain));
    }
    k->set = 1;
    return HOOP_OK;
}

hoop_result_t hoop__auth_key_from_string(hoop__auth_key_t *k, const char *text, char *err,
                                         size_t errlen)
{
    if (k == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    if (text == NULL) text = "";
    return key_from_text(k, text, strlen(text), "HOOP_AUTH_KEY", err, errlen);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

hoop_result_t hoop__auth_key_from_file(hoop__auth_key_t *k, const char *path, char *err,
                                       size_t errlen)
{
    if (k == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop__auth_key_wipe(k);
    if (path == NULL || path[0] == '\0') {
        hoop__say(err, errlen, "HOOP_AUTH_KEY_FILE is empty: give the path of a key file");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        hoop__say(err, errlen, "cannot open HOOP_AUTH_KEY_FILE %s: %s", path, strerror(errno));
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    /* Checked on the open file, so the file read is the file checked. */
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        hoop__say(err, errlen, "cannot stat HOOP_AUTH_KEY_FILE %s: %s", path, strerror(errno));
        close(fd);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (!S_ISREG(sb.st_mode)) {
        hoop__say(err, errlen, "HOOP_AUTH_KEY_FILE %s is not a regular file", path);
        close(fd);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if ((sb.st_mode & 077) != 0) {
        hoop__say(
            err, errlen,
            "HOOP_AUTH_KEY_FILE %s is accessible by group or others (mode %04o): a key must be "
            "private; run chmod 600 %s",
            path, (unsigned)(sb.st_mode & 07777), path);
        close(fd);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (sb.st_uid != geteuid() && sb.st_uid != 0) {
        hoop__say(err, errlen, "HOOP_AUTH_KEY_FILE %s belongs to user id %u, not to this user (%u)",
                  path, (unsigned)sb.st_uid, (unsigned)geteuid());
        close(fd);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    char buf[KEY_FILE_MAX + 1];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            hoop__say(err, errlen, "cannot read HOOP_AUTH_KEY_FILE %s: %s", path, strerror(errno));
            close(fd);
            sodium_memzero(buf, sizeof(buf));
            return HOOP_ERR_INVALID_ARGUMENT;
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n == sizeof(buf)) break;
    }
    close(fd);
    hoop_result_t rc;
    if (n > KEY_FILE_MAX) {
        hoop__say(err, errlen, "HOOP_AUTH_KEY_FILE %s is larger than %d bytes: is it a key file?",
                  path, KEY_FILE_MAX);
        rc = HOOP_ERR_INVALID_ARGUMENT;
    } else {
        size_t b = 0, e = n;
        while (b < e && is_space(buf[b])) b++;
        while (e > b && is_space(buf[e - 1])) e--;
        if (e == b) {
            hoop__say(err, errlen, "HOOP_AUTH_KEY_FILE %s holds no key (it is empty)", path);
            rc = HOOP_ERR_INVALID_ARGUMENT;
        } else {
            rc = key_from_text(k, buf + b, e - b, "HOOP_AUTH_KEY_FILE", err, errlen);
        }
    }
    sodium_memzero(buf, sizeof(buf));
    return rc;
}

hoop_result_t hoop__auth_key_from_env(hoop__auth_key_t *k,
                                      const char *(*get)(const char *name, void *ctx), void *ctx,
                                      char *err, size_t errlen)
{
    if (k == NULL || get == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop__auth_key_wipe(k);
    const char *text = get("HOOP_AUTH_KEY", ctx);
    const char *file = get("HOOP_AUTH_KEY_FILE", ctx);
    if (text != NULL && text[0] == '\0') text = NULL;
    if (file != NULL && file[0] == '\0') file = NULL;
    if (text != NULL && file != NULL) {
        hoop__say(err, errlen, "HOOP_AUTH_KEY and HOOP_AUTH_KEY_FILE are both set: set only one");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (text != NULL) return hoop__auth_key_from_string(k, text, err, errlen);
    if (file != NULL) return hoop__auth_key_from_file(k, file, err, errlen);
    return HOOP_OK;
}

uint64_t hoop__auth_context(uint64_t base, uint64_t a, uint64_t b, uint64_t c)
{
    unsigned char in[32], out[crypto_generichash_BYTES_MIN];
    const uint64_t v[4] = {base, a, b, c};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) in[8 * i + j] = (unsigned char)(v[i] >> (8 * j));
    crypto_generichash(out, sizeof(out), in, sizeof(in), NULL, 0);
    uint64_t r = 0;
    for (int j = 7; j >= 0; j--) r = (r << 8) | out[j];
    return r;
}

/* ---- the exchange ---- */

/* HMAC over the role's label, the context and both nonces (client's first). */
static void proof(const hoop__auth_t *a, int of_server, unsigned char out[HOOP__AUTH_MAC_BYTES])
{
    static const char label_c[] = "hoop-auth-v1 client";
    static const char label_s[] = "hoop-auth-v1 server";
    const unsigned char *cn = a->is_server ? a->peer_nonce : a->nonce;
    const unsigned char *sn = a->is_server ? a->nonce : a->peer_nonce;
    unsigned char ctx[8];
    for (int i = 0; i < 8; i++) ctx[i] = (unsigned char)(a->context >> (8 * i));
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, a->key->bytes, sizeof(a->key->bytes));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)(of_server ? label_s : label_c),
                                  sizeof(label_c));
    crypto_auth_hmacsha256_update(&st, ctx, sizeof(ctx));
    crypto_auth_hmacsha256_update(&st, cn, HOOP__AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, sn, HOOP__AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_final(&st, out);
    sodium_memzero(&st, sizeof(st));
}

static void queue_out(hoop__auth_t *a, const unsigned char *p, size_t n)
{
    memcpy(a->out, p, n);
    a->out_len = n;
    a->out_off = 0;
}

static void expect_in(hoop__auth_t *a, size_t n)
{
    a->in_len = 0;
    a->in_need = n;
}

void hoop__auth_start(hoop__auth_t *a, const hoop__auth_key_t *key, int is_server, uint64_t context)
{
    memset(a, 0, sizeof(*a));
    a->key = key;
    a->is_server = is_server != 0;
    a->context = context;
    a->phase = P_HELLO;
    if (key == NULL || !key->set || sodium_init() < 0) {
        a->phase = P_FAILED;
        a->code = HOOP_ERR_INTERNAL;
        return;
    }
    randombytes_buf(a->nonce, sizeof(a->nonce));
    unsigned char hello[HOOP__AUTH_HELLO_BYTES] = {0};
    memcpy(hello, HELLO_MAGIC, 8);
    hello[8] = AUTH_VERSION;
    hello[9] = (unsigned char)a->is_server;
    memcpy(hello + 16, a->nonce, HOOP__AUTH_NONCE_BYTES);
    queue_out(a, hello, sizeof(hello));
    expect_in(a, HOOP__AUTH_HELLO_BYTES);
}

void hoop__auth_clear(hoop__auth_t *a)
{
    if (a != NULL) sodium_memzero(a, sizeof(*a));
}

static int fail(hoop__auth_t *a, hoop_result_t code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int fail(hoop__auth_t *a, hoop_result_t code, char *err, size_t errlen, const char *fmt, ...)
{
    a->phase = P_FAILED;
    a->code = code;
    va_list ap;
    va_start(ap, fmt);
    hoop__vsay(err, errlen, fmt, ap);
    va_end(ap);
    return HOOP__AUTH_FAILED;
}

/* A whole message has arrived in a->in: check it and move on. */
static int on_message(hoop__auth_t *a, char *err, size_t errlen)
{
    unsigned char mac[HOOP__AUTH_MAC_BYTES];
    switch (a->phase) {
    case P_HELLO: {
        const unsigned char *h = a->in;
        if (h[8] != AUTH_VERSION)
            return fail(a, HOOP_ERR_AUTH, err, errlen,
                        "the peer speaks authentication version %u, not %u", h[8], AUTH_VERSION);
        if (h[9] > 1)
            return fail(a, HOOP_ERR_AUTH, err, errlen,
                        "the peer's authentication hello is malformed");
        if (h[9] == a->is_server)
            return fail(a, HOOP_ERR_AUTH, err, errlen,
                        "the peer also acts as the %s of the exchange",
                        a->is_server ? "server" : "client");
        for (int i = 10; i < 16; i++)
            if (h[i] != 0)
                return fail(a, HOOP_ERR_AUTH, err, errlen,
                            "the peer's authentication hello is malformed");
        memcpy(a->peer_nonce, h + 16, HOOP__AUTH_NONCE_BYTES);
        if (sodium_memcmp(a->peer_nonce, a->nonce, HOOP__AUTH_NONCE_BYTES) == 0)
            return fail(a, HOOP_ERR_AUTH, err, errlen, "the peer sent our own challenge back");
        if (a->is_server) {
            a->phase = P_CPROOF;
            expect_in(a, HOOP__AUTH_MAC_BYTES);
        } else {
            proof(a, 0, mac);
            queue_out(a, mac, sizeof(mac));
            a->phase = P_VERDICT;
            expect_in(a, 1);
        }
        break;
    }
    case P_CPROOF: {
        proof(a, 0, mac);
        int ok = crypto_verify_32(mac, a->in) == 0;
        if (!ok) {
            unsigned char no = VERDICT_REJECTED;
            queue_out(a, &no, 1);
            a->phase = P_FAILED;
            a->code = HOOP_ERR_AUTH;
            hoop__say(err, errlen, "the peer's proof is wrong: it does not hold this job's key");
            break;
        }
        unsigned char yes[1 + HOOP__AUTH_MAC_BYTES];
        yes[0] = VERDICT_OK;
        proof(a, 1, yes + 1);
        queue_out(a, yes, sizeof(yes));
        sodium_memzero(yes, sizeof(yes));
        a->phase = P_FINISH;
        expect_in(a, 0);
        break;
    }
    case P_VERDICT:
        if (a->in[0] == VERDICT_REJECTED)
            return fail(a, HOOP_ERR_AUTH, err, errlen,
                        "the peer rejected our key (is HOOP_AUTH_KEY the same on every rank?); or "
                        "it is of another job, with another job id");
        if (a->in[0] != VERDICT_OK)
            return fail(a, HOOP_ERR_AUTH, err, errlen,
                        "the peer answered the authentication with garbage");
        a->phase = P_SPROOF;
        expect_in(a, HOOP__AUTH_MAC_BYTES);
        break;
    case P_SPROOF:
        proof(a, 1, mac);
        if (crypto_verify_32(mac, a->in) != 0)
            return fail(a, HOOP_ERR_AUTH, err, errlen,
                        "the peer's proof is wrong: it does not hold this job's key");
        sodium_memzero(mac, sizeof(mac));
        return HOOP__AUTH_DONE;
    default: return fail(a, HOOP_ERR_INTERNAL, err, errlen, "authentication in a bad state");
    }
    sodium_memzero(mac, sizeof(mac));
    return HOOP__AUTH_MORE;
}

/* A peer that goes away, before its hello or after, is lost rather than refused: a store that is
 * closing drops the connections it has not served yet, a server drops the oldest to make room,
 * and a client may try again. A peer without a key says so (HOOP__AUTH_NO_KEY). */
static int lost(hoop__auth_t *a, int e, const char *doing, char *err, size_t errlen)
{
    const int gone = e == 0 || e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ECONNABORTED;
    if (gone && a->phase == P_HELLO)
        return fail(a, HOOP_ERR_PEER_LOST, err, errlen,
                    "the peer closed the connection before its authentication hello (it may have "
                    "been closing)");
    if (gone)
        return fail(a, HOOP_ERR_PEER_LOST, err, errlen,
                    "the peer closed the connection during authentication");
    return fail(a, HOOP_ERR_SYSTEM, err, errlen, "%s during authentication: %s", doing,
                strerror(e));
}

/* The first bytes of the peer's hello so far: HOOP__AUTH_MORE while they may still become one
 * (or the answer of a peer without a key), else the failure. */
static int check_magic(hoop__auth_t *a, char *err, size_t errlen)
{
    const size_t m = a->in_len < 8 ? a->in_len : 8;
    if (memcmp(a->in, HELLO_MAGIC, m) == 0) return HOOP__AUTH_MORE;
    if (memcmp(a->in, HOOP__AUTH_NO_KEY, m) == 0)
        return m < 8 ? HOOP__AUTH_MORE
                     : fail(a, HOOP_ERR_AUTH, err, errlen,
                            "the peer has no key: set the same HOOP_AUTH_KEY (or "
                            "HOOP_AUTH_KEY_FILE) on every rank");
    return fail(a, HOOP_ERR_AUTH, err, errlen,
                "the peer did not start the authentication exchange (no key on its side, or not a "
                "hoop rank)");
}

int hoop__auth_step(hoop__auth_t *a, int fd, short *events, char *err, size_t errlen)
{
    if (events != NULL) *events = 0;
    if (a->phase == P_FAILED && a->out_len == 0) {
        if (a->code == HOOP_ERR_INTERNAL) hoop__say(err, errlen, "authentication could not start");
        return HOOP__AUTH_FAILED;
    }
    for (;;) {
        while (a->out_off < a->out_len) {
            ssize_t n = send(fd, a->out + a->out_off, a->out_len - a->out_off,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) {
                a->out_off += (size_t)n;
            } else if (n < 0 && errno == EINTR) {
                continue;
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                break;
            } else if (a->phase == P_FAILED) {
                a->out_len = 0;
                return HOOP__AUTH_FAILED;
            } else if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
                /* Gone; what it sent before still says how far it got, and decides the error. */
                a->gone = errno;
                a->out_off = a->out_len;
            } else {
                return lost(a, errno, "sending", err, errlen);
            }
        }
        const int out_busy = a->out_off < a->out_len;
        if (a->phase == P_FAILED) {
            /* A rejection goes out best effort: never wait for it. */
            a->out_len = 0;
            return HOOP__AUTH_FAILED;
        }
        if (a->phase == P_FINISH) {
            if (!out_busy) {
                a->out_len = 0;
                return HOOP__AUTH_DONE;
            }
            if (events != NULL) *events = POLLOUT;
            return HOOP__AUTH_MORE;
        }
        if (a->in_len < a->in_need) {
            ssize_t n = recv(fd, a->in + a->in_len, a->in_need - a->in_len, MSG_DONTWAIT);
            if (n > 0) {
                size_t before = a->in_len;
                a->in_len += (size_t)n;
                /* Tell a stranger (or a peer without a key) apart as soon as the magic is in. */
                if (a->phase == P_HELLO && before < 8) {
                    int r = check_magic(a, err, errlen);
                    if (r != HOOP__AUTH_MORE) return r;
                }
                continue;
            }
            if (n == 0) return lost(a, 0, "receiving", err, errlen);
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (a->gone) return lost(a, a->gone, "sending", err, errlen);
                if (events != NULL) *events = (short)(POLLIN | (out_busy ? POLLOUT : 0));
                return HOOP__AUTH_MORE;
            }
            return lost(a, errno, "receiving", err, errlen);
        }
        /* A message may queue an answer: what is queued goes out first. */
        if (out_busy) {
            if (events != NULL) *events = POLLOUT;
            return HOOP__AUTH_MORE;
        }
        int r = on_message(a, err, errlen);
        if (r != HOOP__AUTH_MORE) return r;
    }
}

hoop_result_t hoop__auth_handshake(int fd, const hoop__auth_key_t *key, int is_server,
                                   uint64_t context, double deadline, char *err, size_t errlen)
{
    if (key == NULL || !key->set) {
        hoop__say(err, errlen, "no key to authenticate with");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    hoop__auth_t a;
    hoop__auth_start(&a, key, is_server, context);
    hoop_result_t rc = HOOP_OK;
    for (;;) {
        short ev = 0;
        int s = hoop__auth_step(&a, fd, &ev, err, errlen);
        if (s == HOOP__AUTH_DONE) break;
        if (s == HOOP__AUTH_FAILED) {
            rc = a.code != HOOP_OK ? a.code : HOOP_ERR_AUTH;
            break;
        }
        double left = deadline - hoop__now();
        if (left <= 0) {
            hoop__say(err, errlen, "the peer did not complete the authentication in time");
            rc = HOOP_ERR_TIMEOUT;
            break;
        }
        struct pollfd p = {.fd = fd, .events = ev};
        int n = poll(&p, 1, left > 1.0 ? 1000 : (int)(left * 1000.0) + 1);
        if (n < 0 && errno != EINTR) {
            int e = errno;
            hoop__say(err, errlen, "waiting during authentication: %s", strerror(e));
            rc = HOOP_ERR_SYSTEM;
            break;
        }
    }
    hoop__auth_clear(&a);
    return rc;
}

/* ---- sealed datagrams ---- */

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void seal_mac(const hoop__auth_key_t *key, int is_answer, const uint8_t *msg, size_t len,
                     const uint8_t clock[8], unsigned char out[HOOP__AUTH_MAC_BYTES])
{
    static const char label_q[] = "hoop-status-v1 ask";
    static const char label_a[] = "hoop-status-v1 ans";
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key->bytes, sizeof(key->bytes));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)(is_answer ? label_a : label_q),
                                  sizeof(label_q));
    crypto_auth_hmacsha256_update(&st, msg, len);
    crypto_auth_hmacsha256_update(&st, clock, 8);
    crypto_auth_hmacsha256_final(&st, out);
    sodium_memzero(&st, sizeof(st));
}

void hoop__auth_seal(const hoop__auth_key_t *key, int is_answer, const uint8_t *msg, size_t len,
                     uint64_t now_ms, uint8_t *out)
{
    if (now_ms == 0) now_ms = wall_ms();
    memmove(out, msg, len);
    for (int i = 0; i < 8; i++) out[len + (size_t)i] = (uint8_t)(now_ms >> (8 * i));
    seal_mac(key, is_answer, out, len, out + len, out + len + 8);
}

int hoop__auth_unseal(const hoop__auth_key_t *key, int is_answer, const uint8_t *in, size_t n,
                      uint64_t now_ms, uint64_t *sent_ms)
{
    if (key == NULL || !key->set || in == NULL || n < HOOP__AUTH_SEAL_BYTES) return -1;
    size_t len = n - HOOP__AUTH_SEAL_BYTES;
    unsigned char mac[HOOP__AUTH_MAC_BYTES];
    seal_mac(key, is_answer, in, len, in + len, mac);
    int bad = sodium_memcmp(mac, in + len + 8, sizeof(mac));
    sodium_memzero(mac, sizeof(mac));
    if (bad != 0) return -1;
    uint64_t t = 0;
    for (int i = 7; i >= 0; i--) t = (t << 8) | in[len + (size_t)i];
    if (sent_ms != NULL) *sent_ms = t;
    if (now_ms == 0) now_ms = wall_ms();
    uint64_t d = t > now_ms ? t - now_ms : now_ms - t;
    return d <= HOOP__AUTH_SEAL_WINDOW_MS ? 0 : -1;
}
