/*
 * tcp-stream: what one plain TCP stream moves between two processes over loopback, the yardstick
 * for a 2-rank all-reduce over TCP (each rank sends and receives about the whole buffer at once).
 *
 *   tcp-stream [-s BYTES] [-m BYTES]      total to send (default 1G), bytes per write/read (1M)
 *
 * The parent listens on 127.0.0.1, a forked child connects and writes; the parent reads and times
 * from the first byte to the last. Prints "stream_GBps <GB/s>" (1e9 bytes per second).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../bench_util.h"

#define TIMEOUT_S 30 /* no byte for this long: give up rather than hang */

static void set_timeouts(int fd)
{
    struct timeval tv = {.tv_sec = TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int sender(const struct sockaddr_in *addr, size_t total, size_t msg)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char *buf = calloc(1, msg);
    if (fd < 0 || !buf) return 1;
    set_timeouts(fd);
    if (connect(fd, (const struct sockaddr *)addr, sizeof *addr) != 0) {
        perror("tcp-stream: connect");
        return 1;
    }
    for (size_t sent = 0; sent < total;) {
        size_t want = total - sent < msg ? total - sent : msg;
        ssize_t n = send(fd, buf, want, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            perror("tcp-stream: send");
            return 1;
        }
        sent += (size_t)n;
    }
    close(fd);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    size_t total = (size_t)1 << 30, msg = (size_t)1 << 20;
    int c;
    while ((c = getopt(argc, argv, "s:m:h")) != -1) {
        if (c == 's' && !bench_parse_size(optarg, &total) && total > 0) continue;
        if (c == 'm' && !bench_parse_size(optarg, &msg) && msg > 0) continue;
        fprintf(c == 'h' ? stdout : stderr, "usage: tcp-stream [-s TOTAL_BYTES] [-m MSG_BYTES]\n");
        return c == 'h' ? 0 : 2;
    }
    if (optind < argc) {
        fprintf(stderr, "usage: tcp-stream [-s TOTAL_BYTES] [-m MSG_BYTES]\n");
        return 2;
    }

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&addr, &len) != 0) {
        perror("tcp-stream: listen on 127.0.0.1");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("tcp-stream: fork");
        return 1;
    }
    if (pid == 0) {
        close(lfd);
        _exit(sender(&addr, total, msg));
    }

    char *buf = malloc(msg);
    int ok = buf != NULL, fd = -1;
    struct timeval tv = {.tv_sec = TIMEOUT_S};
    setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv); /* bounds accept() too */
    if (ok && (fd = accept(lfd, NULL, NULL)) < 0) {
        perror("tcp-stream: accept");
        ok = 0;
    }
    if (fd >= 0) set_timeouts(fd);
    double t0 = 0, t1 = 0;
    size_t got = 0;
    while (ok && got < total) {
        ssize_t n = recv(fd, buf, msg, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            fprintf(stderr, "tcp-stream: recv after %zu of %zu bytes: %s\n", got, total,
                    n == 0 ? "peer closed" : strerror(errno));
            ok = 0;
            break;
        }
        if (got == 0) t0 = now_s();
        got += (size_t)n;
    }
    t1 = now_s();
    if (fd >= 0) close(fd);
    close(lfd);
    free(buf);
    int status = 0;
    if (!ok) kill(pid, SIGTERM);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    printf("# tcp-stream: %zu bytes in %zu-byte writes, 127.0.0.1, one connection\n", total, msg);
    printf("stream_GBps %.3f\n", t1 > t0 ? (double)got / 1e9 / (t1 - t0) : 0.0);
    return 0;
}
