/* Logging: HOOP_DEBUG=WARN|INFO|TRACE, lines prefixed with host and rank, INFO and TRACE lines
 * filtered by subsystem (HOOP_DEBUG_SUBSYS). State lives in the communicator (no globals); code
 * without a communicator passes a log it owns.
 *
 * Each source file logs as one subsystem: it names it with `#define HOOP__LOG_SUBSYS
 * HOOP__SUB_...` before its first #include (init otherwise); HOOP__INFO_IN and HOOP__TRACE_IN name
 * another for one line. Warnings are never filtered by subsystem. */
#ifndef HOOP_LOG_H
#define HOOP_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

enum { HOOP__LOG_NONE = 0, HOOP__LOG_WARN = 1, HOOP__LOG_INFO = 2, HOOP__LOG_TRACE = 3 };

/* HOOP_DEBUG_SUBSYS bits. */
enum {
    HOOP__SUB_INIT = 1u << 0,       /* hoop_init, split, destroy, what was chosen */
    HOOP__SUB_RENDEZVOUS = 1u << 1, /* the stores (tcp://, file://, env://) */
    HOOP__SUB_TRANSPORT = 1u << 2,  /* shm, tcp, verbs, which one each peer gets */
    HOOP__SUB_COLL = 1u << 3,       /* collectives and point-to-point calls */
    HOOP__SUB_AUTH = 1u << 4,       /* HOOP_AUTH_KEY: who proved what */
    HOOP__SUB_ALL = (1u << 5) - 1
};

#ifndef HOOP__LOG_SUBSYS
#define HOOP__LOG_SUBSYS HOOP__SUB_INIT
#endif

typedef struct hoop__log {
    int level;       /* messages above this level are dropped */
    unsigned subsys; /* HOOP__SUB_* bits whose INFO and TRACE lines are kept */
    FILE *out;       /* stderr unless HOOP_DEBUG_FILE */
    int own_out;     /* out was opened by us and must be closed */
    int rank;        /* -1 while unknown */
    char host[64];
} hoop__log_t;

/* Sets up from level/file (file may be "" ; "%h" and "%p" expand to host and pid), every
 * subsystem on. */
void hoop__log_open(hoop__log_t *l, int level, const char *file, int rank);
/* HOOP_DEBUG_SUBSYS: a comma-separated list of INIT RENDEZVOUS TRANSPORT COLL AUTH ALL (any case;
 * BOOTSTRAP, NET and COLLECTIVE as aliases, as NCCL's names), "^" first to keep all but those.
 * Returns 0 with *mask set, or -1 with a sentence in err. */
int hoop__log_subsys_parse(const char *s, unsigned *mask, char *err, size_t errlen);
/* The opening INFO line, as NCCL's "NCCL version": the version and what this build can do
 * (CUDA, verbs, authentication), and whether this run authenticates. */
void hoop__log_banner(const hoop__log_t *l, int auth_set);
void hoop__log_close(hoop__log_t *l);
/* Writes one line to out without ever raising SIGPIPE (a closed stderr pipe fails quietly). */
void hoop__log_put(FILE *out, const char *line);
void hoop__log_write(const hoop__log_t *l, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define HOOP__LOG_SUB(l, lvl, sub, ...)                                                            \
    do {                                                                                           \
        if ((l) != NULL && (l)->level >= (lvl) &&                                                  \
            ((lvl) <= HOOP__LOG_WARN || ((l)->subsys & (unsigned)(sub)) != 0))                     \
            hoop__log_write((l), (lvl), __VA_ARGS__);                                              \
    } while (0)
#define HOOP__LOG_AT(l, lvl, ...) HOOP__LOG_SUB(l, lvl, HOOP__LOG_SUBSYS, __VA_ARGS__)
#define HOOP__WARN(l, ...) HOOP__LOG_AT(l, HOOP__LOG_WARN, __VA_ARGS__)
#define HOOP__INFO(l, ...) HOOP__LOG_AT(l, HOOP__LOG_INFO, __VA_ARGS__)
#define HOOP__TRACE(l, ...) HOOP__LOG_AT(l, HOOP__LOG_TRACE, __VA_ARGS__)
#define HOOP__INFO_IN(l, sub, ...) HOOP__LOG_SUB(l, HOOP__LOG_INFO, sub, __VA_ARGS__)
#define HOOP__TRACE_IN(l, sub, ...) HOOP__LOG_SUB(l, HOOP__LOG_TRACE, sub, __VA_ARGS__)

/* The one way an error sentence reaches a caller's buffer: formats into err (nothing when err is
 * NULL or errlen 0). Every layer that reports through an (err, errlen) pair uses it. */
void hoop__say(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void hoop__vsay(char *err, size_t errlen, const char *fmt, va_list ap);

#endif
