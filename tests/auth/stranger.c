/*
 * A stranger knocking on a rank's port (the rendezvous store's or a transport listener's):
 *
 *   stranger MODE PORT [COMM_ID RANK]
 *
 *   random    sends 64 pseudo-random bytes
 *   wrongkey  the handshake with a key that is not the job's; with COMM_ID and RANK (a transport
 *             port) after a hello naming that communicator and rank, as a peer would, and with the
 *             proof sent at once rather than after the listener's challenge
 *   huge      a well-formed wire header announcing a 2^60-byte payload, and a few bytes of it
 *   storehuge a rendezvous-store SET request announcing a 4 GiB value
 *   silent    connects and says nothing
 *
 * It prints "stranger MODE from 127.0.0.1:LOCALPORT" first, then "closed by the peer after T s" and
 * exits 0 once the rank has dropped the connection (within 30 s), or exits 1 if it has not. The
 * wrong-key stranger exits 0 only if its handshake was turned down.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/auth.h"
#include "base/wire.h"
#include "../common/testing.h"

#define WAIT_S 30.0

/* Waits until the peer closes (recv returns 0 or an error), reading and discarding what comes. */
static int wait_closed(int fd, double t0)
{
    uint8_t sink[512];
    while (now_s() - t0 < WAIT_S) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0) continue;
        ssize_t r = recv(fd, sink, sizeof(sink), 0);
        if (r <= 0) {
            printf("closed by the peer after %.1f s\n", now_s() - t0);
            return 0;
        }
    }
    printf("still connected after %.0f s\n", WAIT_S);
    return 1;
}

static int send_all(int fd, const void *b, size_t n)
{
    return send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) {
        fprintf(stderr,
                "usage: stranger random|wrongkey|huge|storehuge|silent PORT [COMM_ID RANK]\n");
        return 2;
    }
    const char *mode = argv[1];
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)atoi(argv[2])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        printf("stranger %s: cannot connect to port %s: %s\n", mode, argv[2], strerror(errno));
        return 1;
    }
    struct sockaddr_in me;
    socklen_t ml = sizeof(me);
    getsockname(fd, (struct sockaddr *)&me, &ml);
    printf("stranger %s from 127.0.0.1:%u\n", mode, ntohs(me.sin_port));
    double t0 = now_s();

    if (strcmp(mode, "random") == 0) {
        uint8_t b[64];
        uint32_t x = 2463534242u ^ (uint32_t)getpid();
        for (size_t i = 0; i < sizeof(b); i++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            b[i] = (uint8_t)x;
        }
        if (send_all(fd, b, sizeof(b)) != 0) return 1;
        return wait_closed(fd, t0);
    }
    if (strcmp(mode, "huge") == 0) {
        hoop__wire_hdr_t h;
        memset(&h, 0, sizeof(h));
        h.kind = HOOP__K_ALLREDUCE;
        h.dtype = HOOP_FLOAT32;
        h.root = -1;
        h.count = 1;
        h.payload_len = (uint64_t)1 << 60;
        uint8_t b[HOOP__WIRE_HDR_SIZE + 32];
        memset(b, 0x11, sizeof(b));
        hoop__wire_encode(&h, b);
        if (send_all(fd, b, sizeof(b)) != 0) return 1;
        return wait_closed(fd, t0);
    }
    if (strcmp(mode, "storehuge") == 0) {
        uint8_t b[9 + 8] = {'S', 8,   0,   0,   0,   0xff, 0xff, 0xff, 0xff,
                            'h', 'o', 'o', 'p', '/', 'i',  'd',  'x'};
        if (send_all(fd, b, sizeof(b)) != 0) return 1;
        return wait_closed(fd, t0);
    }
    if (strcmp(mode, "silent") == 0) return wait_closed(fd, t0);
    if (strcmp(mode, "wrongkey") == 0) {
        uint64_t comm = 0;
        uint32_t rank = 0, k = 0;
        hoop__auth_key_t key;
        char err[256] = "";
        if (hoop__auth_key_from_string(&key, "not the job's key", err, sizeof(err)) != HOOP_OK)
            return 1;
        if (argc >= 5) {
            comm = strtoull(argv[3], NULL, 16);
            rank = (uint32_t)strtoul(argv[4], NULL, 10);
            /* The transport's hello: "HOOPHELO", communicator id, rank, socket index. */
            uint8_t hello[24];
            const uint64_t magic = 0x4f4c4548504f4f48ull;
            for (int i = 0; i < 8; i++) hello[i] = (uint8_t)(magic >> (8 * i));
            for (int i = 0; i < 8; i++) hello[8 + i] = (uint8_t)(comm >> (8 * i));
            for (int i = 0; i < 4; i++) hello[16 + i] = (uint8_t)(rank >> (8 * i));
            for (int i = 0; i < 4; i++) hello[20 + i] = (uint8_t)(k >> (8 * i));
            if (send_all(fd, hello, sizeof(hello)) != 0) return 1;
            /* A transport listener serves strangers only while it waits for the last peer, which
             * may come within milliseconds: everything goes out at once, the authentication hello
             * and a proof made with the wrong key, so the listener judges the proof before that. */
            uint8_t out[HOOP__AUTH_HELLO_BYTES + HOOP__AUTH_MAC_BYTES] = {0};
            memcpy(out, "HOOPAUTH", 8);
            out[8] = 1; /* version; role 0: client */
            randombytes_buf(out + 16, HOOP__AUTH_NONCE_BYTES);
            crypto_auth_hmacsha256(out + HOOP__AUTH_HELLO_BYTES, out + 16, HOOP__AUTH_NONCE_BYTES,
                                   key.bytes);
            hoop__auth_key_wipe(&key);
            if (send_all(fd, out, sizeof(out)) != 0) return 1;
            uint8_t in[HOOP__AUTH_HELLO_BYTES + 1];
            size_t got = 0;
            while (got < sizeof(in) && now_s() - t0 < WAIT_S) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 200) <= 0) continue;
                ssize_t r = recv(fd, in + got, sizeof(in) - got, 0);
                if (r <= 0) break;
                got += (size_t)r;
            }
            int rejected = got == sizeof(in) && memcmp(in, "HOOPAUTH", 8) == 0 &&
                           in[HOOP__AUTH_HELLO_BYTES] == 1;
            printf("handshake: %s after %.1f s\n",
                   rejected ? "the listener rejected our key" : "no verdict", now_s() - t0);
            return rejected ? 0 : 1;
        }
        hoop_result_t rc = hoop__auth_handshake(fd, &key, 0, 0, now_s() + WAIT_S, err, sizeof(err));
        hoop__auth_key_wipe(&key);
        printf("handshake: %s (%s) after %.1f s\n", hoop_error_string(rc), err, now_s() - t0);
        return rc == HOOP_ERR_AUTH || rc == HOOP_ERR_PEER_LOST ? 0 : 1;
    }
    fprintf(stderr, "stranger: unknown mode %s\n", mode);
    return 2;
}
