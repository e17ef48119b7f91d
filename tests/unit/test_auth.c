/* Authentication: the handshake over socket pairs (right and wrong keys, truncated and garbage
 * answers, reflection, replay, deadlines) and key loading (passphrase, hex, key files and their
 * permissions, the environment, the configuration). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/auth.h"
#include "base/config.h"
#include "../common/testing.h"

static void key_of(hoop__auth_key_t *k, const char *text)
{
    char err[256];
    assert_int_equal(hoop__auth_key_from_string(k, text, err, sizeof(err)), HOOP_OK);
    assert_true(k->set);
}

static void pair(int sv[2], int nonblocking)
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    if (nonblocking) {
        fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
        fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
    }
}

/* One side of a handshake on its own thread. */
typedef struct side {
    int fd;
    const hoop__auth_key_t *key;
    int is_server;
    uint64_t ctx;
    double timeout;
    hoop_result_t rc;
    char err[256];
    /* After a successful handshake: send these bytes, then read as many back from the other side. */
    const char *tail;
    char got[16];
} side_t;

static void *side_main(void *arg)
{
    side_t *s = arg;
    s->rc = hoop__auth_handshake(s->fd, s->key, s->is_server, s->ctx, now_s() + s->timeout, s->err,
                                 sizeof(s->err));
    if (s->rc == HOOP_OK && s->tail != NULL) {
        size_t n = strlen(s->tail);
        assert_int_equal(send(s->fd, s->tail, n, MSG_NOSIGNAL), (ssize_t)n);
        size_t got = 0;
        double end = now_s() + 5;
        while (got < n && now_s() < end) {
            struct pollfd p = {.fd = s->fd, .events = POLLIN};
            poll(&p, 1, 100);
            ssize_t r = recv(s->fd, s->got + got, n - got, MSG_DONTWAIT);
            if (r > 0) got += (size_t)r;
            if (r == 0) break;
        }
    }
    return NULL;
}

/* Runs both sides at once; returns after both have finished. */
static void run_pair(side_t *c, side_t *s)
{
    pthread_t tc, ts;
    assert_int_equal(pthread_create(&ts, NULL, side_main, s), 0);
    assert_int_equal(pthread_create(&tc, NULL, side_main, c), 0);
    pthread_join(tc, NULL);
    pthread_join(ts, NULL);
}

static void handshake(const hoop__auth_key_t *kc, uint64_t ctx_c, const hoop__auth_key_t *ks,
                      uint64_t ctx_s, int nonblocking, side_t *c, side_t *s)
{
    int sv[2];
    pair(sv, nonblocking);
    *c = (side_t){.fd = sv[0], .key = kc, .is_server = 0, .ctx = ctx_c, .timeout = 5};
    *s = (side_t){.fd = sv[1], .key = ks, .is_server = 1, .ctx = ctx_s, .timeout = 5};
    run_pair(c, s);
    close(sv[0]);
    close(sv[1]);
}

static void right_key(void **state)
{
    (void)state;
    hoop__auth_key_t k;
    key_of(&k, "correct horse battery staple");
    for (int nb = 0; nb < 2; nb++) {
        int sv[2];
        pair(sv, nb);
        side_t c = {
            .fd = sv[0], .key = &k, .is_server = 0, .ctx = 42, .timeout = 5, .tail = "from-c"};
        side_t s = {
            .fd = sv[1], .key = &k, .is_server = 1, .ctx = 42, .timeout = 5, .tail = "from-s"};
        run_pair(&c, &s);
        assert_int_equal(c.rc, HOOP_OK);
        assert_int_equal(s.rc, HOOP_OK);
        /* Neither side read a byte past the exchange: what follows reaches the application. */
        assert_string_equal(s.got, "from-c");
        assert_string_equal(c.got, "from-s");
        close(sv[0]);
        close(sv[1]);
    }
    hoop__auth_key_wipe(&k);
    assert_int_equal(k.set, 0);
}

static void wrong_key(void **state)
{
    (void)state;
    hoop__auth_key_t a, b;
    key_of(&a, "key one");
    key_of(&b, "key two");
    side_t c, s;
    handshake(&a, 7, &b, 7, 0, &c, &s);
    assert_int_equal(c.rc, HOOP_ERR_AUTH);
    assert_int_equal(s.rc, HOOP_ERR_AUTH);
    assert_non_null(strstr(c.err, "rejected our key"));
    assert_non_null(strstr(s.err, "proof is wrong"));
    /* The same key for another purpose (context) is no proof either. */
    handshake(&a, 7, &a, 8, 1, &c, &s);
    assert_int_equal(c.rc, HOOP_ERR_AUTH);
    assert_int_equal(s.rc, HOOP_ERR_AUTH);
}

/* Reads whatever comes within ms milliseconds (until the peer closes or buf is full). */
static size_t drain(int fd, uint8_t *buf, size_t cap, int ms)
{
    size_t got = 0;
    double end = now_s() + ms / 1000.0;
    while (got < cap && now_s() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0) continue;
        ssize_t r = recv(fd, buf + got, cap - got, MSG_DONTWAIT);
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

/* A server thread against bytes written by the test. */
static pthread_t start_server(side_t *s, int fd, const hoop__auth_key_t *k, double timeout)
{
    *s = (side_t){.fd = fd, .key = k, .is_server = 1, .ctx = 1, .timeout = timeout};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, side_main, s), 0);
    return t;
}

static void make_hello(uint8_t h[HOOP__AUTH_HELLO_BYTES], int role)
{
    memset(h, 0, HOOP__AUTH_HELLO_BYTES);
    memcpy(h, "HOOPAUTH", 8);
    h[8] = 1;
    h[9] = (uint8_t)role;
    for (int i = 16; i < HOOP__AUTH_HELLO_BYTES; i++) h[i] = (uint8_t)(i * 37 + 11);
}

static void garbage_and_truncation(void **state)
{
    (void)state;
    hoop__auth_key_t k;
    key_of(&k, "the key");
    side_t s;
    int sv[2];
    uint8_t buf[256];

    /* Random bytes: rejected as soon as the magic is wrong. */
    pair(sv, 0);
    pthread_t t = start_server(&s, sv[1], &k, 5);
    uint8_t junk[40];
    for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (uint8_t)(i * 91 + 7);
    assert_int_equal(send(sv[0], junk, sizeof(junk), MSG_NOSIGNAL), (ssize_t)sizeof(junk));
    pthread_join(t, NULL);
    assert_int_equal(s.rc, HOOP_ERR_AUTH);
    assert_non_null(strstr(s.err, "did not start the authentication"));
    close(sv[0]);
    close(sv[1]);

    /* The right magic, a bad version. */
    pair(sv, 0);
    t = start_server(&s, sv[1], &k, 5);
    uint8_t h[HOOP__AUTH_HELLO_BYTES];
    make_hello(h, 0);
    h[8] = 9;
    assert_int_equal(send(sv[0], h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
    pthread_join(t, NULL);
    assert_int_equal(s.rc, HOOP_ERR_AUTH);
    assert_non_null(strstr(s.err, "version 9"));
    close(sv[0]);
    close(sv[1]);

    /* A valid hello and a made-up proof: the server answers "rejected" and nothing more. */
    pair(sv, 0);
    t = start_server(&s, sv[1], &k, 5);
    make_hello(h, 0);
    uint8_t fake[HOOP__AUTH_MAC_BYTES];
    memset(fake, 0x5a, sizeof(fake));
    assert_int_equal(send(sv[0], h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
    assert_int_equal(send(sv[0], fake, sizeof(fake), MSG_NOSIGNAL), (ssize_t)sizeof(fake));
    pthread_join(t, NULL);
    close(sv[1]);
    assert_int_equal(s.rc, HOOP_ERR_AUTH);
    size_t n = drain(sv[0], buf, sizeof(buf), 500);
    assert_int_equal(n, HOOP__AUTH_HELLO_BYTES + 1); /* its hello, then the verdict: no proof */
    assert_int_equal(buf[HOOP__AUTH_HELLO_BYTES], 1);
    close(sv[0]);

    /* Half a hello, then the connection closes: a peer that went away, not a wrong key. */
    pair(sv, 0);
    t = start_server(&s, sv[1], &k, 5);
    assert_int_equal(send(sv[0], h, 20, MSG_NOSIGNAL), 20);
    close(sv[0]);
    pthread_join(t, NULL);
    assert_int_equal(s.rc, HOOP_ERR_PEER_LOST);
    assert_non_null(strstr(s.err, "closed the connection before its authentication hello"));
    close(sv[1]);

    /* A client whose server closes without a word (a store that is closing): it may retry. */
    pair(sv, 0);
    side_t c0 = {.fd = sv[0], .key = &k, .is_server = 0, .ctx = 1, .timeout = 5};
    pthread_create(&t, NULL, side_main, &c0);
    assert_true(drain(sv[1], buf, HOOP__AUTH_HELLO_BYTES, 2000) == HOOP__AUTH_HELLO_BYTES);
    close(sv[1]);
    pthread_join(t, NULL);
    assert_int_equal(c0.rc, HOOP_ERR_PEER_LOST);
    close(sv[0]);

    /* A server without a key says so (in two pieces here): final, and named. */
    pair(sv, 0);
    c0 = (side_t){.fd = sv[0], .key = &k, .is_server = 0, .ctx = 1, .timeout = 5};
    pthread_create(&t, NULL, side_main, &c0);
    assert_true(drain(sv[1], buf, HOOP__AUTH_HELLO_BYTES, 2000) == HOOP__AUTH_HELLO_BYTES);
    assert_int_equal(send(sv[1], HOOP__AUTH_NO_KEY, 5, MSG_NOSIGNAL), 5);
    usleep(50 * 1000);
    assert_int_equal(send(sv[1], &HOOP__AUTH_NO_KEY[5], 3, MSG_NOSIGNAL), 3);
    pthread_join(t, NULL);
    assert_int_equal(c0.rc, HOOP_ERR_AUTH);
    assert_non_null(strstr(c0.err, "has no key"));
    close(sv[0]);
    close(sv[1]);

    /* Bytes that start like a hello and then are not one. */
    pair(sv, 0);
    c0 = (side_t){.fd = sv[0], .key = &k, .is_server = 0, .ctx = 1, .timeout = 5};
    pthread_create(&t, NULL, side_main, &c0);
    assert_true(drain(sv[1], buf, HOOP__AUTH_HELLO_BYTES, 2000) == HOOP__AUTH_HELLO_BYTES);
    assert_int_equal(send(sv[1], "HOOPAXTH", 8, MSG_NOSIGNAL), 8);
    pthread_join(t, NULL);
    assert_int_equal(c0.rc, HOOP_ERR_AUTH);
    assert_non_null(strstr(c0.err, "did not start the authentication"));
    close(sv[0]);
    close(sv[1]);

    /* A server that closes after its hello (to make room for others): the client may retry. */
    pair(sv, 0);
    side_t c1 = {.fd = sv[0], .key = &k, .is_server = 0, .ctx = 1, .timeout = 5};
    pthread_create(&t, NULL, side_main, &c1);
    make_hello(h, 1);
    assert_int_equal(send(sv[1], h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
    assert_true(drain(sv[1], buf, HOOP__AUTH_HELLO_BYTES + HOOP__AUTH_MAC_BYTES, 2000) ==
                HOOP__AUTH_HELLO_BYTES + HOOP__AUTH_MAC_BYTES);
    close(sv[1]);
    pthread_join(t, NULL);
    assert_int_equal(c1.rc, HOOP_ERR_PEER_LOST);
    close(sv[0]);

    /* A hello and a truncated proof, then the connection closes. */
    pair(sv, 0);
    t = start_server(&s, sv[1], &k, 5);
    make_hello(h, 0);
    assert_int_equal(send(sv[0], h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
    assert_int_equal(send(sv[0], fake, 10, MSG_NOSIGNAL), 10);
    close(sv[0]);
    pthread_join(t, NULL);
    assert_int_equal(s.rc, HOOP_ERR_PEER_LOST);
    close(sv[1]);

    /* A client that gets a garbage verdict. */
    pair(sv, 0);
    side_t c = {.fd = sv[0], .key = &k, .is_server = 0, .ctx = 1, .timeout = 5};
    pthread_create(&t, NULL, side_main, &c);
    make_hello(h, 1);
    assert_int_equal(send(sv[1], h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
    assert_true(drain(sv[1], buf, HOOP__AUTH_HELLO_BYTES + HOOP__AUTH_MAC_BYTES, 2000) ==
                HOOP__AUTH_HELLO_BYTES + HOOP__AUTH_MAC_BYTES);
    uint8_t v = 0x77;
    assert_int_equal(send(sv[1], &v, 1, MSG_NOSIGNAL), 1);
    pthread_join(t, NULL);
    assert_int_equal(c.rc, HOOP_ERR_AUTH);
    assert_non_null(strstr(c.err, "garbage"));
    close(sv[0]);
    close(sv[1]);
    hoop__auth_key_wipe(&k);
}

static void reflection(void **state)
{
    (void)state;
    hoop__auth_key_t k;
    key_of(&k, "the key");
    int sv[2];
    side_t s;
    uint8_t h[HOOP__AUTH_HELLO_BYTES];

    /* The server's own hello sent back to it. */
    pair(sv, 0);
    pthread_t t = start_server(&s, sv[1], &k, 5);
    assert_int_equal(drain(sv[0], h, sizeof(h), 2000), sizeof(h));
    assert_int_equal(send(sv[0], h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
    pthread_join(t, NULL);
    assert_int_equal(s.rc, HOOP_ERR_AUTH);
    assert_non_null(strstr(s.err, "also acts as the server"));
    close(sv[0]);
    close(sv[1]);

    /* ... and with the role byte turned into a client's. */
    pair(sv, 0);
    t = start_server(&s, sv[1], &k, 5);
    assert_int_equal(drain(sv[0], h, sizeof(h), 2000), sizeof(h));
    h[9] = 0;
    assert_int_equal(send(sv[0], h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
    pthread_join(t, NULL);
    assert_int_equal(s.rc, HOOP_ERR_AUTH);
    assert_non_null(strstr(s.err, "our own challenge"));
    close(sv[0]);
    close(sv[1]);

    /* Two servers (or two clients) holding the key still do not pass: roles are part of the proof. */
    for (int role = 0; role < 2; role++) {
        pair(sv, 1);
        side_t a = {.fd = sv[0], .key = &k, .is_server = role, .ctx = 3, .timeout = 5};
        side_t b = {.fd = sv[1], .key = &k, .is_server = role, .ctx = 3, .timeout = 5};
        run_pair(&a, &b);
        assert_int_equal(a.rc, HOOP_ERR_AUTH);
        assert_int_equal(b.rc, HOOP_ERR_AUTH);
        close(sv[0]);
        close(sv[1]);
    }
    hoop__auth_key_wipe(&k);
}

/* Moves whatever is readable from one fd to another, appending it to rec. */
static void relay(int from, int to, uint8_t *rec, size_t *rec_len, size_t cap)
{
    uint8_t b[128];
    ssize_t r = recv(from, b, sizeof(b), MSG_DONTWAIT);
    if (r <= 0) return;
    assert_int_equal(send(to, b, (size_t)r, MSG_NOSIGNAL), r);
    assert_true(*rec_len + (size_t)r <= cap);
    memcpy(rec + *rec_len, b, (size_t)r);
    *rec_len += (size_t)r;
}

static void replay(void **state)
{
    (void)state;
    hoop__auth_key_t k;
    key_of(&k, "the key");
    /* A legitimate exchange, driven step by step through a recording relay: client <-> relay <->
     * server, all non-blocking in this thread. */
    int cs[2], ss[2];
    pair(cs, 1);
    pair(ss, 1);
    hoop__auth_t ca, sa;
    hoop__auth_start(&ca, &k, 0, 5);
    hoop__auth_start(&sa, &k, 1, 5);
    uint8_t from_client[256], from_server[256];
    size_t nc = 0, ns = 0;
    int cdone = HOOP__AUTH_MORE, sdone = HOOP__AUTH_MORE;
    char err[256];
    for (int i = 0; i < 1000 && (cdone == HOOP__AUTH_MORE || sdone == HOOP__AUTH_MORE); i++) {
        short ev;
        if (cdone == HOOP__AUTH_MORE) cdone = hoop__auth_step(&ca, cs[0], &ev, err, sizeof(err));
        relay(cs[1], ss[0], from_client, &nc, sizeof(from_client));
        if (sdone == HOOP__AUTH_MORE) sdone = hoop__auth_step(&sa, ss[1], &ev, err, sizeof(err));
        relay(ss[0], cs[1], from_server, &ns, sizeof(from_server));
    }
    assert_int_equal(cdone, HOOP__AUTH_DONE);
    assert_int_equal(sdone, HOOP__AUTH_DONE);
    assert_int_equal(nc, HOOP__AUTH_HELLO_BYTES + HOOP__AUTH_MAC_BYTES);
    assert_int_equal(ns, HOOP__AUTH_HELLO_BYTES + 1 + HOOP__AUTH_MAC_BYTES);
    hoop__auth_clear(&ca);
    hoop__auth_clear(&sa);
    for (int i = 0; i < 2; i++) {
        close(cs[i]);
        close(ss[i]);
    }

    /* The recorded client side, played to a fresh server: its new challenge makes the proof stale. */
    int sv[2];
    pair(sv, 0);
    side_t s;
    pthread_t t = start_server(&s, sv[1], &k, 5);
    assert_int_equal(send(sv[0], from_client, nc, MSG_NOSIGNAL), (ssize_t)nc);
    pthread_join(t, NULL);
    assert_int_equal(s.rc, HOOP_ERR_AUTH);
    uint8_t buf[128];
    size_t n = drain(sv[0], buf, sizeof(buf), 500);
    assert_int_equal(n, HOOP__AUTH_HELLO_BYTES + 1);
    assert_int_equal(buf[HOOP__AUTH_HELLO_BYTES], 1);
    close(sv[0]);
    close(sv[1]);

    /* The recorded server side, played to a fresh client. */
    pair(sv, 0);
    side_t c = {.fd = sv[0], .key = &k, .is_server = 0, .ctx = 5, .timeout = 5};
    pthread_create(&t, NULL, side_main, &c);
    assert_int_equal(send(sv[1], from_server, ns, MSG_NOSIGNAL), (ssize_t)ns);
    pthread_join(t, NULL);
    assert_int_equal(c.rc, HOOP_ERR_AUTH);
    assert_non_null(strstr(c.err, "proof is wrong"));
    close(sv[0]);
    close(sv[1]);
    hoop__auth_key_wipe(&k);
}

static void deadline(void **state)
{
    (void)state;
    hoop__auth_key_t k;
    key_of(&k, "the key");
    for (int role = 0; role < 2; role++) {
        /* A silent peer, and one that stops after its hello. */
        for (int say_hello = 0; say_hello < 2; say_hello++) {
            int sv[2];
            pair(sv, role);
            if (say_hello) {
                uint8_t h[HOOP__AUTH_HELLO_BYTES];
                make_hello(h, !role);
                assert_int_equal(send(sv[0], h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
            }
            char err[256] = "";
            double t0 = now_s();
            hoop_result_t rc = hoop__auth_handshake(sv[1], &k, role, 1, t0 + 0.3, err, sizeof(err));
            double took = now_s() - t0;
            assert_int_equal(rc, HOOP_ERR_TIMEOUT);
            assert_true(took >= 0.29 && took < 2.0);
            assert_non_null(strstr(err, "in time"));
            close(sv[0]);
            close(sv[1]);
        }
    }
    /* No key: refused at once. */
    hoop__auth_key_t none = {0};
    char err[256];
    assert_int_equal(hoop__auth_handshake(0, &none, 0, 0, now_s() + 1, err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    hoop__auth_key_wipe(&k);
}

/* ---- keys ---- */

static void key_strings(void **state)
{
    (void)state;
    hoop__auth_key_t a, b;
    char err[256];
    key_of(&a, "passphrase");
    key_of(&b, "passphrase");
    assert_memory_equal(a.bytes, b.bytes, HOOP__AUTH_KEY_BYTES);
    key_of(&b, "passphrasf");
    assert_memory_not_equal(a.bytes, b.bytes, HOOP__AUTH_KEY_BYTES);

    /* 64 hex digits are the key itself, in either case. */
    const char *hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    key_of(&a, hex);
    for (int i = 0; i < HOOP__AUTH_KEY_BYTES; i++) assert_int_equal(a.bytes[i], i);
    key_of(&b, "000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F");
    assert_memory_equal(a.bytes, b.bytes, HOOP__AUTH_KEY_BYTES);
    /* Anything else is a passphrase, 63 hex digits too. */
    key_of(&b, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1");
    assert_memory_not_equal(a.bytes, b.bytes, HOOP__AUTH_KEY_BYTES);

    assert_int_equal(hoop__auth_key_from_string(&a, "", err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_int_equal(a.set, 0);
    assert_non_null(strstr(err, "empty"));
}

static char tmpdir[64];

static int make_tmpdir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/hoop-auth-test-XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int remove_tmpdir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

static void key_files(void **state)
{
    (void)state;
    char path[128], err[512];
    hoop__auth_key_t a, b;

    snprintf(path, sizeof(path), "%s/key", tmpdir);
    write_file(path, "  passphrase\n", 0600);
    assert_int_equal(hoop__auth_key_from_file(&a, path, err, sizeof(err)), HOOP_OK);
    key_of(&b, "passphrase");
    assert_memory_equal(a.bytes, b.bytes, HOOP__AUTH_KEY_BYTES);
    write_file(path, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n", 0400);
    assert_int_equal(hoop__auth_key_from_file(&a, path, err, sizeof(err)), HOOP_OK);
    assert_int_equal(a.bytes[31], 31);

    /* Readable or writable by anyone but the owner: refused, saying how to fix it. */
    static const mode_t open_modes[] = {0644, 0640, 0604, 0620, 0602, 0660};
    for (size_t i = 0; i < sizeof(open_modes) / sizeof(open_modes[0]); i++) {
        assert_int_equal(chmod(path, open_modes[i]), 0);
        err[0] = '\0';
        assert_int_equal(hoop__auth_key_from_file(&a, path, err, sizeof(err)),
                         HOOP_ERR_INVALID_ARGUMENT);
        assert_int_equal(a.set, 0);
        assert_non_null(strstr(err, "accessible by group or others"));
        assert_non_null(strstr(err, "chmod 600"));
        assert_non_null(strstr(err, path));
    }

    char missing[160];
    snprintf(missing, sizeof(missing), "%s/no-such-key", tmpdir);
    assert_int_equal(hoop__auth_key_from_file(&a, missing, err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "No such file"));
    assert_non_null(strstr(err, "no-such-key"));

    assert_int_equal(hoop__auth_key_from_file(&a, tmpdir, err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "not a regular file"));

    write_file(path, " \n\t\n", 0600);
    assert_int_equal(hoop__auth_key_from_file(&a, path, err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "holds no key"));

    /* Something that is too large to be a key file. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 5000; i++) fputc('k', f);
    fclose(f);
    assert_int_equal(hoop__auth_key_from_file(&a, path, err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "larger than"));
}

typedef struct {
    const char *kv[4][2];
} env_t;

static const char *lookup(const char *name, void *ctx)
{
    env_t *e = ctx;
    for (int i = 0; i < 4 && e->kv[i][0] != NULL; i++)
        if (strcmp(e->kv[i][0], name) == 0) return e->kv[i][1];
    return NULL;
}

static void key_environment(void **state)
{
    (void)state;
    char err[512] = "", path[128];
    hoop__auth_key_t k, ref;
    snprintf(path, sizeof(path), "%s/envkey", tmpdir);
    write_file(path, "from a file\n", 0600);

    env_t none = {{{"HOOP_DEBUG", "INFO"}}};
    assert_int_equal(hoop__auth_key_from_env(&k, lookup, &none, err, sizeof(err)), HOOP_OK);
    assert_int_equal(k.set, 0);
    env_t empty = {{{"HOOP_AUTH_KEY", ""}, {"HOOP_AUTH_KEY_FILE", ""}}};
    assert_int_equal(hoop__auth_key_from_env(&k, lookup, &empty, err, sizeof(err)), HOOP_OK);
    assert_int_equal(k.set, 0);

    env_t text = {{{"HOOP_AUTH_KEY", "s3cret"}}};
    assert_int_equal(hoop__auth_key_from_env(&k, lookup, &text, err, sizeof(err)), HOOP_OK);
    key_of(&ref, "s3cret");
    assert_memory_equal(k.bytes, ref.bytes, HOOP__AUTH_KEY_BYTES);

    env_t file = {{{"HOOP_AUTH_KEY_FILE", path}}};
    assert_int_equal(hoop__auth_key_from_env(&k, lookup, &file, err, sizeof(err)), HOOP_OK);
    key_of(&ref, "from a file");
    assert_memory_equal(k.bytes, ref.bytes, HOOP__AUTH_KEY_BYTES);

    env_t both = {{{"HOOP_AUTH_KEY", "s3cret"}, {"HOOP_AUTH_KEY_FILE", path}}};
    assert_int_equal(hoop__auth_key_from_env(&k, lookup, &both, err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "both set"));

    /* Through the configuration, as hoop_init reads it. */
    hoop__config_t c;
    assert_int_equal(hoop__config_parse(&c, lookup, &text, err, sizeof(err)), HOOP_OK);
    assert_true(c.auth.set);
    key_of(&ref, "s3cret");
    assert_memory_equal(c.auth.bytes, ref.bytes, HOOP__AUTH_KEY_BYTES);
    hoop__config_wipe(&c);
    assert_int_equal(c.auth.set, 0);
    static const unsigned char zero[HOOP__AUTH_KEY_BYTES];
    assert_memory_equal(c.auth.bytes, zero, HOOP__AUTH_KEY_BYTES);

    assert_int_equal(hoop__config_parse(&c, lookup, &none, err, sizeof(err)), HOOP_OK);
    assert_int_equal(c.auth.set, 0);

    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(hoop__config_parse(&c, lookup, &file, err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "HOOP_AUTH_KEY_FILE"));
    assert_non_null(strstr(err, "chmod 600"));
}

static void contexts(void **state)
{
    (void)state;
    uint64_t base = hoop__auth_context(1, 2, 3, 4);
    assert_true(base == hoop__auth_context(1, 2, 3, 4));
    assert_true(base != hoop__auth_context(1, 3, 2, 4));
    assert_true(base != hoop__auth_context(1, 2, 3, 5));
    assert_true(base != hoop__auth_context(2, 2, 3, 4));
}

/* A sealed datagram unseals only with its key and label, within the window of its clock, and not
 * once a byte of it changed. */
static void sealed_datagrams(void **state)
{
    (void)state;
    hoop__auth_key_t k = {.set = 1}, other = {.set = 1}, none = {0};
    memset(k.bytes, 0x5a, sizeof(k.bytes));
    memset(other.bytes, 0x5b, sizeof(other.bytes));
    const uint64_t now = UINT64_C(1700000000000);
    uint8_t msg[64], b[64 + HOOP__AUTH_SEAL_BYTES];
    for (size_t i = 0; i < sizeof(msg); i++) msg[i] = (uint8_t)(i * 13);
    hoop__auth_seal(&k, 0, msg, sizeof(msg), now, b);
    assert_memory_equal(b, msg, sizeof(msg)); /* the message itself goes as it is */
    uint64_t t = 0;
    assert_int_equal(hoop__auth_unseal(&k, 0, b, sizeof(b), now, &t), 0);
    assert_true(t == now);
    assert_int_equal(hoop__auth_unseal(&k, 0, b, sizeof(b), now - HOOP__AUTH_SEAL_WINDOW_MS, NULL),
                     0);
    assert_int_equal(
        hoop__auth_unseal(&k, 0, b, sizeof(b), now + HOOP__AUTH_SEAL_WINDOW_MS + 1, NULL), -1);
    assert_int_equal(
        hoop__auth_unseal(&k, 0, b, sizeof(b), now - HOOP__AUTH_SEAL_WINDOW_MS - 1, NULL), -1);
    assert_int_equal(hoop__auth_unseal(&k, 1, b, sizeof(b), now, NULL), -1);
    assert_int_equal(hoop__auth_unseal(&other, 0, b, sizeof(b), now, NULL), -1);
    assert_int_equal(hoop__auth_unseal(&none, 0, b, sizeof(b), now, NULL), -1);
    assert_int_equal(hoop__auth_unseal(&k, 0, b, sizeof(b) - 1, now, NULL), -1);
    assert_int_equal(hoop__auth_unseal(&k, 0, b, 3, now, NULL), -1);
    for (size_t i = 0; i < sizeof(b); i++) {
        b[i] ^= 1;
        assert_int_equal(hoop__auth_unseal(&k, 0, b, sizeof(b), now, NULL), -1);
        b[i] ^= 1;
    }
    /* The clock read here when none is given. */
    hoop__auth_seal(&k, 1, msg, sizeof(msg), 0, b);
    assert_int_equal(hoop__auth_unseal(&k, 1, b, sizeof(b), 0, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(right_key),
        cmocka_unit_test(wrong_key),
        cmocka_unit_test(garbage_and_truncation),
        cmocka_unit_test(reflection),
        cmocka_unit_test(replay),
        cmocka_unit_test(deadline),
        cmocka_unit_test(key_strings),
        cmocka_unit_test(key_files),
        cmocka_unit_test(key_environment),
        cmocka_unit_test(contexts),
        cmocka_unit_test(sealed_datagrams),
    };
    return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
