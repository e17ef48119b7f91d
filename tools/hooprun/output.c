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

/* Writes all of data to the sink's descriptor, unless its reader is gone. */
static void sink_write(struct sink *s, const char *data, size_t len)
{
    size_t off = 0;
    int64_t stall_start = -1;
    while (off < len && !s->broken) {
        ssize_t n = write(s->fd, data + off, len - off);
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
}

void sink_flush(struct sink *s)
{
    sink_write(s, s->buf, s->len);
    s->len = 0;
}

void sink_put(struct sink *s, const char *prefix, size_t plen, const char *data, size_t dlen,
              bool add_newline)
{
    size_t need = plen + dlen + (add_newline ? 1 : 0);
    if (need == 0) return;
    if (s->len + need > SINK_CAP) sink_flush(s);
    if (need > SINK_CAP) {
        /* A line longer than the buffer goes out directly, after what was gathered before it. */
        sink_write(s, prefix, plen);
        sink_write(s, data, dlen);
        if (add_newline) sink_write(s, "\n", 1);
    } else {
        memcpy(s->buf + s->len, prefix, plen);
        memcpy(s->buf + s->len + plen, data, dlen);
        s->len += plen + dlen;
        if (add_newline) s->buf[s->len++] = '\n';
    }
    s->mid_line = !add_newline && (dlen > 0 ? data[dlen - 1] != '\n' : plen > 0 || s->mid_line);
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
    /* After a rank's last line that had no newline (--no-prefix), ours starts a line of its own. */
    sink_put(err, err->mid_line ? "\nhooprun: " : "hooprun: ", err->mid_line ? 10 : 9, line, len,
             true);
    sink_flush(err);
}

bool stream_init(struct stream *st, struct sink *sink, struct sink *notes, int rank,
                 const char *prefix, size_t plen)
{
    *st = (struct stream){
        .fd = -1, .sink = sink, .notes = notes, .rank = rank, .prefix = prefix, .plen = plen};
    st->buf = malloc(STREAM_START);
    st->cap = st->buf != NULL ? STREAM_START : 0;
    return st->buf != NULL;
}

/* Puts out bytes of the current line, prefixed unless part of it went out already. */
static void stream_put(struct stream *st, const char *data, size_t len, bool add_newline)
{
    sink_put(st->sink, st->prefix, st->cut ? 0 : st->plen, data, len, add_newline);
}

/* hoop's explanation of a failed call (core/explain.c): "<host>:<pid>:<rank> hoop WARN <call>
 * waits for rank N; ..." (or "... failed with every rank in it"). Keeps the rank's first. */
static void note_explained(struct stream *st, const char *line, size_t len)
{
    static const char tag[] = " hoop WARN ";
    if (st->explained != NULL || st->cut || len < sizeof(tag)) return;
    const char *t = memmem(line, len, tag, sizeof(tag) - 1);
    if (t == NULL) return;
    t += sizeof(tag) - 1;
    size_t rest = len - (size_t)(t - line);
    while (rest > 0 && (t[rest - 1] == '\n' || t[rest - 1] == '\r')) rest--;
    if (memmem(t, rest, " waits for rank", 15) == NULL &&
        memmem(t, rest, " failed with every rank in it", 29) == NULL)
        return;
    st->explained = strndup(t, rest);
}

static void stream_emit_lines(struct stream *st)
{
    size_t start = 0;
    char *nl;
    while ((nl = memchr(st->buf + st->scanned, '\n', st->len - st->scanned)) != NULL) {
        size_t end = (size_t)(nl - st->buf) + 1;
        note_explained(st, st->buf + start, end - start);
        stream_put(st, st->buf + start, end - start, false);
        st->cut = false;
        start = end;
        st->scanned = end;
    }
    if (st->cut && st->len > start) {
        /* The rest of a line that went out in part follows as it comes. */
        stream_put(st, st->buf + start, st->len - start, false);
        start = st->len;
    }
    if (start > 0) {
        memmove(st->buf, st->buf + start, st->len - start);
        st->len -= start;
        /* Memory taken by one long line is given back once it is out. */
        if (st->cap > LINE_KEEP && st->len <= LINE_KEEP) {
            char *nb = realloc(st->buf, LINE_KEEP);
            if (nb != NULL) {
                st->buf = nb;
                st->cap = LINE_KEEP;
            }
        }
    }
    st->scanned = st->len;
}

void stream_close(struct stream *st)
{
    if (st->fd < 0) {
        free(st->buf); /* a stream whose rank never started */
        st->buf = NULL;
        st->cap = 0;
        return;
    }
    /* A last line without its newline: with a prefix it is ended, so that the next line (another
     * rank's, or ours) starts with its own; without, the rank's bytes go out as they are. */
    if (st->len > 0) stream_put(st, st->buf, st->len, st->plen > 0);
    st->len = st->scanned = 0;
    st->cut = false;
    close(st->fd);
    st->fd = -1;
    free(st->buf);
    st->buf = NULL;
    st->cap = 0;
}

/* Room for more of the current line (the buffer is full): the buffer doubles up to LINE_HOLD.
 * Past that, or without memory for it, what is held goes out as the start of the line and the
 * rest follows as it comes: a line that never ends (a progress bar redrawn with \r) is seen as
 * it is written and does not grow our memory without end. */
static void stream_grow(struct stream *st)
{
    size_t ncap = st->cap * 2;
    bool too_long = ncap > LINE_HOLD;
    char *nb = !too_long && ncap > st->cap ? realloc(st->buf, ncap) : NULL;
    if (nb != NULL) {
        st->buf = nb;
        st->cap = ncap;
        return;
    }
    if (!st->cut && too_long)
        say(st->notes, "rank %d: a line of more than %zu bytes; it goes out in pieces", st->rank,
            st->len);
    else if (!st->cut)
        say(st->notes,
            "rank %d: no memory to hold a line of more than %zu bytes whole; it goes "
            "out in pieces",
            st->rank, st->len);
    stream_put(st, st->buf, st->len, false);
    sink_flush(st->sink);
    st->cut = true;
    st->len = st->scanned = 0;
}

void stream_pump(struct stream *st, int max_reads)
{
    for (int r = 0; r < max_reads && st->fd >= 0; r++) {
        if (st->len == st->cap) stream_grow(st);
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
}

/* The call an explanation is about: its text up to " waits for" (or " failed with"). */
static size_t head_len(const char *e)
{
    const char *w = strstr(e, " waits for ");
    if (w == NULL) w = strstr(e, " failed with every rank");
    return w != NULL ? (size_t)(w - e) : strlen(e);
}

void report_explained(struct sink *err, struct stream *const *streams, int n)
{
    int said = 0;
    for (int i = 0; i < n; i++) said += streams[i]->explained != NULL;
    if (said == 0) return;
    say(err, "timeout report: %d rank(s) said where the others were when a call failed", said);
    bool *done = calloc((size_t)n, sizeof(bool));
    if (done == NULL) return;
    for (int i = 0; i < n; i++) {
        const char *e = streams[i]->explained;
        if (e == NULL || done[i]) continue;
        size_t h = head_len(e);
        /* The ranks that failed in the same call, as ranges. */
        char ranks[256];
        size_t o = 0;
        int count = 0, prev = -2, run_start = -1;
        for (int k = i; k <= n; k++) {
            const char *f = k < n ? streams[k]->explained : NULL;
            bool same = f != NULL && !done[k] && head_len(f) == h && memcmp(f, e, h) == 0;
            int r = k < n ? streams[k]->rank : -1;
            if (same) {
                done[k] = true;
                count++;
                if (r == prev + 1) {
                    prev = r;
                    continue;
                }
            }
            if (run_start >= 0 && o < sizeof(ranks)) {
                int w = prev > run_start ? snprintf(ranks + o, sizeof(ranks) - o, "%s%d-%d",
                                                    o ? ", " : "", run_start, prev)
                                         : snprintf(ranks + o, sizeof(ranks) - o, "%s%d",
                                                    o ? ", " : "", run_start);
                if (w > 0) o += (size_t)w;
                run_start = -1;
            }
            if (same) run_start = prev = r;
        }
        char line[1400];
        int w = snprintf(line, sizeof(line), "  %s %s failed in %.*s;%s (rank %d's view)",
                         count == 1 ? "rank" : "ranks", ranks, (int)h, e, e + h, streams[i]->rank);
        if (w < 0) continue;
        size_t len = (size_t)w < sizeof(line) ? (size_t)w : sizeof(line) - 1;
        sink_put(err, "hooprun: ", 9, line, len, true);
    }
    sink_flush(err);
    free(done);
}

void stream_forget_explained(struct stream *st)
{
    free(st->explained);
    st->explained = NULL;
}
