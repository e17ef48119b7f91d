#include "base/log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "hoop.h"

static const char *const level_names[] = {"NONE", "WARN", "INFO", "TRACE"};

void hoop__log_open(hoop__log_t *l, int level, const char *file, int rank)
{
    memset(l, 0, sizeof(*l));
    l->level = level;
    l->subsys = HOOP__SUB_ALL;
    l->rank = rank;
    l->out = stderr;
    if (gethostname(l->host, sizeof(l->host) - 1) != 0) strcpy(l->host, "?");
    if (file != NULL && file[0] != '\0') {
        /* %h and %p keep ranks on one host from writing into the same file. */
        char path[512];
        size_t o = 0;
        for (const char *p = file; *p != '\0' && o + 32 < sizeof(path); p++) {
            if (p[0] == '%' && p[1] == 'h') {
                o += (size_t)snprintf(path + o, sizeof(path) - o, "%s", l->host);
                p++;
            } else if (p[0] == '%' && p[1] == 'p') {
                o += (size_t)snprintf(path + o, sizeof(path) - o, "%ld", (long)getpid());
                p++;
            } else {
                path[o++] = *p;
            }
        }
        path[o] = '\0';
        FILE *f = fopen(path, "a");
        if (f != NULL) {
            l->out = f;
            l->own_out = 1;
        } else {
            /* Said once per communicator (its splits do not try again), so the lines that follow
             * on stderr are not a surprise. */
            int e = errno;
            if (strcmp(file, path) == 0)
                HOOP__WARN(l, "cannot open HOOP_DEBUG_FILE \"%s\": %s; logging to stderr", path,
                           strerror(e));
            else
                HOOP__WARN(l, "cannot open HOOP_DEBUG_FILE \"%s\" (\"%s\"): %s; logging to stderr",
                           file, path, strerror(e));
        }
    }
}

int hoop__log_subsys_parse(const char *s, unsigned *mask, char *err, size_t errlen)
{
    static const struct {
        const char *name;
        unsigned bits;
    } names[] = {{"INIT", HOOP__SUB_INIT},
                 {"RENDEZVOUS", HOOP__SUB_RENDEZVOUS},
                 {"BOOTSTRAP", HOOP__SUB_RENDEZVOUS},
                 {"TRANSPORT", HOOP__SUB_TRANSPORT},
                 {"NET", HOOP__SUB_TRANSPORT},
                 {"COLL", HOOP__SUB_COLL},
                 {"COLLECTIVE", HOOP__SUB_COLL},
                 {"AUTH", HOOP__SUB_AUTH},
                 {"ALL", HOOP__SUB_ALL}};
    const char *p = s;
    int exclude = p[0] == '^';
    if (exclude) p++;
    unsigned bits = 0;
    while (*p != '\0') {
        size_t n = strcspn(p, ",");
        size_t i = 0;
        for (; i < sizeof(names) / sizeof(names[0]); i++)
            if (n == strlen(names[i].name) && strncasecmp(p, names[i].name, n) == 0) break;
        if (n > 0 && i == sizeof(names) / sizeof(names[0])) {
            hoop__say(err, errlen,
                      "HOOP_DEBUG_SUBSYS=\"%s\": no subsystem \"%.*s\" (INIT, RENDEZVOUS, "
                      "TRANSPORT, COLL, AUTH or ALL, comma-separated; \"^\" first keeps all but "
                      "those)",
                      s, (int)(n < 64 ? n : 64), p);
            return -1;
        }
        if (n > 0) bits |= names[i].bits;
        p += n;
        if (*p == ',') p++;
    }
    /* An empty list is the default: every subsystem. */
    if (p == s) bits = HOOP__SUB_ALL;
    *mask = exclude ? HOOP__SUB_ALL & ~bits : bits;
    return 0;
}

void hoop__log_banner(const hoop__log_t *l, int auth_set)
{
#ifdef HOOP__CUDA_BUILT
    const char *cuda = "CUDA (libhoop-cuda.so, loaded when a buffer may be device memory)";
#else
    const char *cuda = "no CUDA";
#endif
#ifdef HOOP__HAVE_IBVERBS
    const char *verbs = "RDMA verbs (libibverbs opened at run time)";
#else
    const char *verbs = "no RDMA verbs";
#endif
    HOOP__INFO_IN(l, HOOP__SUB_INIT,
                  "hoop version %s; built with %s, %s, authentication by libsodium %s; "
                  "this run %s",
                  HOOP_VERSION_STRING, cuda, verbs, sodium_version_string(),
                  auth_set ? "authenticates (HOOP_AUTH_KEY)"
                           : "does not authenticate (no HOOP_AUTH_KEY)");
}

void hoop__log_close(hoop__log_t *l)
{
    if (l->own_out && l->out != NULL) fclose(l->out);
    l->out = NULL;
    l->own_out = 0;
    l->level = HOOP__LOG_NONE;
}

void hoop__log_put(FILE *out, const char *line)
{
    /* stderr may be a pipe whose reader is gone (a launcher that exited): the write must fail
     * with EPIPE, not raise SIGPIPE in the user's process. Block it on this thread for the write
     * and take back the one the write raised, unless one was pending already (not ours). */
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    fputs(line, out);
    fflush(out);
    if (!was_pending) {
        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE)) {
            const struct timespec zero = {0, 0};
            while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
            }
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void hoop__log_write(const hoop__log_t *l, int level, const char *fmt, ...)
{
    if (l->out == NULL) return;
    char line[1024];
    int n = snprintf(line, sizeof(line), "%s:%ld:%d hoop %s ", l->host, (long)getpid(), l->rank,
                     level_names[level < 0 || level > 3 ? 0 : level]);
    if (n < 0) return;
    va_list ap;
    va_start(ap, fmt);
    if ((size_t)n < sizeof(line)) vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    /* One fputs per line so lines from threads do not interleave. */
    size_t len = strlen(line);
    if (len + 1 < sizeof(line)) {
        line[len] = '\n';
        line[len + 1] = '\0';
    }
    hoop__log_put(l->out, line);
}

void hoop__vsay(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (err != NULL && errlen > 0) vsnprintf(err, errlen, fmt, ap);
}

void hoop__say(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hoop__vsay(err, errlen, fmt, ap);
    va_end(ap);
}
