/*
 * hooprun's output: our own stdout and stderr (sinks, appended whole lines at a time, so that
 * ranks never interleave mid-line), and the pipes from the ranks read into them line by line with
 * each rank's prefix (streams).
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/clock.h"
#include "hooprun.h"

void sink_flush(struct sink *s)
{
    size_t off = 0;
    int64_t stall_start = -1;
    while (off < s->len && !s->broken) {
        ssize_t n = write(s->fd, s->buf + off, s->len - off);
        if (n > 0) {
            off += (size_t)n;
            stall_start = -1;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* Our stdout may be non-blocking when shared with another program. */
            int64_t t = now_ms();
            if (stall_start < 0) stall_start = t;
            if (t - stall_start > WRITE_STALL_MS) {
                s->broken = true;
                break;
            }
            struct pollfd p = {.fd = s->fd, .events = POLLOUT};
            (void)poll(&p, 1, 100);
        } else {
            s->broken = true;
        }
    }
    s->len = 0;
}

void sink_put(struct sink *s, const char *prefix, size_t plen, const char *data, size_t dlen,
              bool add_newline)
{
    size_t need = plen + dlen + (add_newline ? 1 : 0);
    if (s->len + need > SINK_CAP) sink_flush(s);
    if (need > SINK_CAP) { /* cannot happen with LINE_CAP lines; keep the bound anyway */
        dlen = SINK_CAP - plen - 1;
        add_newline = true;
    }
    memcpy(s->buf + s->len, prefix, plen);
    memcpy(s->buf + s->len + plen, data, dlen);
    s->len += plen + dlen;
    if (add_newline) s->buf[s->len++] = '\n';
}

void say(struct sink *err, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    sink_put(err, "hooprun: ", 9, line, len, true);
    sink_flush(err);
}

void stream_init(struct stream *st, int fd, struct sink *sink, const char *prefix, size_t plen)
{
    *st = (struct stream){.fd = fd, .sink = sink, .prefix = prefix, .plen = plen};
}

static void stream_emit_lines(struct stream *st)
{
    size_t start = 0;
    char *nl;
    while ((nl = memchr(st->buf + st->scanned, '\n', st->len - st->scanned)) != NULL) {
        size_t end = (size_t)(nl - st->buf) + 1;
        sink_put(st->sink, st->prefix, st->plen, st->buf + start, end - start, false);
        start = end;
        st->scanned = end;
    }
    if (start > 0) {
        memmove(st->buf, st->buf + start, st->len - start);
        st->len -= start;
    }
    st->scanned = st->len;
}

void stream_close(struct stream *st)
{
    if (st->fd < 0) return;
    if (st->len > 0) /* a last line without its newline */
        sink_put(st->sink, st->prefix, st->plen, st->buf, st->len, true);
    st->len = st->scanned = 0;
    close(st->fd);
    st->fd = -1;
    free(st->buf);
    st->buf = NULL;
    st->cap = 0;
}

bool stream_pump(struct stream *st, int max_reads)
{
    for (int r = 0; r < max_reads && st->fd >= 0; r++) {
        if (st->len == st->cap) {
            if (st->cap < LINE_CAP) {
                size_t ncap = st->cap ? st->cap * 2 : 4096;
                char *nb = realloc(st->buf, ncap);
                if (nb == NULL) return false;
                st->buf = nb;
                st->cap = ncap;
            } else {
                /* A line longer than LINE_CAP: emit this part as a line of its own. */
                sink_put(st->sink, st->prefix, st->plen, st->buf, st->len, true);
                st->len = st->scanned = 0;
            }
        }
        ssize_t n = read(st->fd, st->buf + st->len, st->cap - st->len);
        if (n > 0) {
            st->len += (size_t)n;
            stream_emit_lines(st);
        } else if (n == 0) {
            stream_close(st);
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            break;
        } else {
            stream_close(st);
        }
    }
    return true;
}
