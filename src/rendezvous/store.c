/* The store's kind-independent part: opening by kind, the checks of every argument, the lock, and
 * the wait of a get (until the deadline: asking again a kind that waits itself, the tcp store's
 * server, and polling with backoff one that looks once, the file store). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "rendezvous/store_ops.h"

#define GET_BACKOFF_FIRST 0.001
#define GET_BACKOFF_MAX 0.05

/* Every kind of store, found by the method a rendezvous resolved to. */
static const hoop__store_ops_t *const kinds[] = {&hoop__store_tcp_ops, &hoop__store_file_ops};

void hoop__store_sleep(double s)
{
    if (!(s > 0)) return;
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

const char *hoop__store_printable(const char *key, size_t n, char *buf, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; i < n && j + 4 < cap; i++) {
        unsigned char c = (unsigned char)key[i];
        buf[j++] = (c >= ' ' && c < 0x7f && c != '"') ? (char)c : '?';
        if (i == 79 && n > 80) {
            buf[j++] = '.';
            buf[j++] = '.';
            buf[j++] = '.';
            break;
        }
    }
    buf[j] = '\0';
    return buf;
}

hoop_result_t hoop__store_open(const hoop__rdv_t *rdv, double timeout_s, const hoop__log_t *log,
                               hoop__store_t **out, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (out == NULL || rdv == NULL) {
        hoop__say(err, errlen,
                  "internal error: hoop__store_open needs a rendezvous and a place for the store");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    *out = NULL;
    if (timeout_s != timeout_s || timeout_s > 1e9) {
        hoop__say(err, errlen, "invalid rendezvous timeout %g s", timeout_s);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (timeout_s < 0) timeout_s = 0;
    const hoop__store_ops_t *ops = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && ops == NULL; i++)
        if (strcmp(rdv->method, kinds[i]->method) == 0) ops = kinds[i];
    if (ops == NULL) {
        hoop__say(err, errlen, "internal error: unknown rendezvous method \"%.8s\"", rdv->method);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (rdv->rank < 0) {
        hoop__say(err, errlen, "internal error: the rendezvous has no rank");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    hoop_result_t r = ops->check(rdv, err, errlen);
    if (r != HOOP_OK) return r;

    hoop__store_t *st = calloc(1, sizeof *st);
    void *state = st != NULL ? calloc(1, ops->state_size) : NULL;
    if (state == NULL) {
        free(st);
        hoop__say(err, errlen, "out of memory opening the rendezvous store");
        return HOOP_ERR_NO_MEMORY;
    }
    st->state = state;
    st->ops = ops;
    st->rank = rdv->rank;
    st->timeout_s = timeout_s;
    st->log = log;
    if (pthread_mutex_init(&st->mu, NULL) != 0) {
        free(state);
        free(st);
        hoop__say(err, errlen, "cannot create a mutex for the rendezvous store");
        return HOOP_ERR_SYSTEM;
    }
    r = ops->open(st, rdv, err, errlen);
    if (r != HOOP_OK) {
        hoop__store_close(st);
        return r;
    }
    *out = st;
    return HOOP_OK;
}

static hoop_result_t check_key(hoop__store_t *st, const char *key, size_t *keylen)
{
    if (key == NULL || key[0] == '\0') {
        hoop__say(st->err, sizeof st->err, "a store key must not be empty");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    size_t n = strnlen(key, HOOP__STORE_MAX_KEY + 1);
    if (n > HOOP__STORE_MAX_KEY) {
        hoop__say(st->err, sizeof st->err, "store key \"%.40s...\" is longer than %d bytes", key,
                  HOOP__STORE_MAX_KEY);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    *keylen = n;
    return HOOP_OK;
}

hoop_result_t hoop__store_set(hoop__store_t *st, const char *key, const void *val, size_t len)
{
    if (st == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&st->mu);
    size_t keylen = 0;
    hoop_result_t r = check_key(st, key, &keylen);
    if (r == HOOP_OK && len > HOOP__STORE_MAX_VALUE) {
        hoop__say(st->err, sizeof st->err, "store value of %zu bytes is over the %u-byte limit",
                  len, (unsigned)HOOP__STORE_MAX_VALUE);
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    if (r == HOOP_OK && val == NULL && len > 0) {
        hoop__say(st->err, sizeof st->err, "store value is NULL");
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    if (r == HOOP_OK) r = st->ops->set(st, key, keylen, val, len);
    pthread_mutex_unlock(&st->mu);
    return r;
}

hoop_result_t hoop__store_claim(hoop__store_t *st, const char *key, const void *val, size_t len,
                                int *taken, void *holder, size_t cap, size_t *holder_len)
{
    if (st == NULL || taken == NULL || (holder == NULL && cap > 0))
        return HOOP_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&st->mu);
    *taken = 0;
    if (holder_len != NULL) *holder_len = 0;
    size_t keylen = 0;
    hoop_result_t r = check_key(st, key, &keylen);
    if (r == HOOP_OK && (len > HOOP__STORE_MAX_VALUE || (val == NULL && len > 0))) {
        hoop__say(st->err, sizeof st->err, "invalid store value for a claim (%zu bytes)", len);
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    if (r == HOOP_OK) r = st->ops->claim(st, key, keylen, val, len, taken, holder, cap, holder_len);
    pthread_mutex_unlock(&st->mu);
    return r;
}

hoop_result_t hoop__store_get(hoop__store_t *st, const char *key, void *buf, size_t cap,
                              size_t *len, double timeout_s)
{
    if (st == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&st->mu);
    size_t keylen = 0;
    hoop_result_t r = check_key(st, key, &keylen);
    if (r == HOOP_OK && buf == NULL && cap > 0) {
        hoop__say(st->err, sizeof st->err, "store get has a NULL buffer");
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    if (r == HOOP_OK && (timeout_s != timeout_s || timeout_s > 1e9)) {
        hoop__say(st->err, sizeof st->err, "invalid store timeout %g s", timeout_s);
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    if (r != HOOP_OK) {
        pthread_mutex_unlock(&st->mu);
        return r;
    }
    /* Callers pass what is left of a deadline, which may have just passed: look once. */
    if (timeout_s < 0) timeout_s = 0;
    const double deadline = hoop__now() + timeout_s;
    double backoff = GET_BACKOFF_FIRST;
    for (;;) {
        int found = 0;
        const double wait = st->ops->waits ? deadline - hoop__now() : 0;
        r = st->ops->get(st, key, keylen, buf, cap, len, &found, wait, deadline);
        if (r != HOOP_OK || found) break;
        const double now = hoop__now();
        if (now >= deadline) {
            char kbuf[100];
            const unsigned rejected = hoop__store_auth_failures(st);
            hoop__say(st->err, sizeof st->err,
                      "key \"%s\" did not appear in the rendezvous store within %g s (has every "
                      "rank started? did one fail?)",
                      hoop__store_printable(key, keylen, kbuf, sizeof kbuf), timeout_s);
            r = HOOP_ERR_TIMEOUT;
            if (rejected > 0) {
                /* Most likely a rank with another key: say so rather than just "timed out". */
                size_t used = strlen(st->err);
                hoop__say(st->err + used, sizeof st->err - used,
                          "; the store turned away %u connection(s) that failed authentication (is "
                          "HOOP_AUTH_KEY the same on every rank?)",
                          rejected);
                r = HOOP_ERR_AUTH;
            }
            break;
        }
        if (st->ops->waits) continue;
        hoop__store_sleep(backoff < deadline - now ? backoff : deadline - now);
        backoff = backoff * 2 < GET_BACKOFF_MAX ? backoff * 2 : GET_BACKOFF_MAX;
    }
    pthread_mutex_unlock(&st->mu);
    return r;
}

unsigned hoop__store_auth_failures(const hoop__store_t *st)
{
    return st != NULL && st->ops->auth_failures != NULL ? st->ops->auth_failures(st) : 0;
}

const char *hoop__store_error(const hoop__store_t *st) { return st != NULL ? st->err : ""; }

void hoop__store_close(hoop__store_t *st)
{
    if (st == NULL) return;
    st->ops->close(st);
    pthread_mutex_destroy(&st->mu);
    free(st->state);
    free(st);
}
