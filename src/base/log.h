/* Logging: HOOP_DEBUG=WARN|INFO|TRACE, lines prefixed with host and rank. State lives in the
 * communicator (no globals); code without a communicator passes a log it owns. */
#ifndef HOOP_LOG_H
#define HOOP_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

enum { HOOP__LOG_NONE = 0, HOOP__LOG_WARN = 1, HOOP__LOG_INFO = 2, HOOP__LOG_TRACE = 3 };

typedef struct hoop__log {
    int level;   /* messages above this level are dropped */
    FILE *out;   /* stderr unless HOOP_DEBUG_FILE */
    int own_out; /* out was opened by us and must be closed */
    int rank;    /* -1 while unknown */
    char host[64];
} hoop__log_t;

/* Sets up from level/file (file may be "" ; "%h" and "%p" expand to host and pid). */
void hoop__log_open(hoop__log_t *l, int level, const char *file, int rank);
void hoop__log_close(hoop__log_t *l);
/* Writes one line to out without ever raising SIGPIPE (a closed stderr pipe fails quietly). */
void hoop__log_put(FILE *out, const char *line);
void hoop__log_write(const hoop__log_t *l, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define HOOP__LOG_AT(l, lvl, ...)                                                                  \
    do {                                                                                           \
        if ((l) != NULL && (l)->level >= (lvl)) hoop__log_write((l), (lvl), __VA_ARGS__);          \
    } while (0)
#define HOOP__WARN(l, ...) HOOP__LOG_AT(l, HOOP__LOG_WARN, __VA_ARGS__)
#define HOOP__INFO(l, ...) HOOP__LOG_AT(l, HOOP__LOG_INFO, __VA_ARGS__)
#define HOOP__TRACE(l, ...) HOOP__LOG_AT(l, HOOP__LOG_TRACE, __VA_ARGS__)

/* The one way an error sentence reaches a caller's buffer: formats into err (nothing when err is
 * NULL or errlen 0). Every layer that reports through an (err, errlen) pair uses it. */
void hoop__say(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void hoop__vsay(char *err, size_t errlen, const char *fmt, va_list ap);

#endif
