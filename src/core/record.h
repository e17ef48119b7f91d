/* The flight recorder (record.c): every communicator keeps its last HOOP_RECORD calls in a ring,
 * each with what it was, how it ran and where it got to, so that a hang or a failure can be read
 * afterwards, on every rank, from hoop_comm_dump's JSON (hoop-trace compares the ranks' dumps).
 *
 * Cheap by construction: the ring is allocated with the communicator, an entry is a handful of
 * relaxed atomic stores made by whoever posts or runs the call (under the locks the call takes
 * anyway), and its times are one clock read at posting, one at the start where the start is not
 * the posting, and one at the end. A reader (a dump, on any thread) never stops a writer: it takes
 * an entry only if its record id reads the same before and after (a seqlock), so that an entry
 * overwritten meanwhile is left out rather than shown half old, half new. */
#ifndef HOOP_RECORD_H
#define HOOP_RECORD_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "hoop.h"
#include "runtime/comm.h"

struct hoop__call;

typedef enum {
    HOOP__REC_POSTED = 1,
    HOOP__REC_STARTED,
    HOOP__REC_FINISHED,
    HOOP__REC_FAILED,
} hoop__rec_state_t;

/* One call. Every field is atomic so that a dump may read while the call moves on; all are
 * written with relaxed stores, but for id (see above). */
typedef struct hoop__rec_entry {
    _Atomic uint64_t id;    /* the record id + 1; 0 while the entry is being (re)written */
    _Atomic uint64_t seq;   /* a collective's call number, or the p2p number on the comm */
    _Atomic uint64_t desc;  /* kind, dtype, op, algo, engine, mem, flags: 8 bits each */
    _Atomic int64_t root;   /* root, or the peer of a send or receive; -1 for neither */
    _Atomic uint64_t count; /* the caller's count argument */
    _Atomic uint32_t state; /* hoop__rec_state_t | the failure's hoop_result_t << 8 */
    _Atomic uint64_t t_posted, t_started, t_finished; /* monotonic ns; 0 until then */
    /* The communicator's transport bytes (sent + received) as the call started, then, once it
     * ended, what moved while it ran (a send or receive: its payload). */
    _Atomic uint64_t bytes0, bytes;
} hoop__rec_entry_t;

typedef struct hoop__rec {
    hoop__rec_entry_t *ring; /* cap entries; NULL when the recorder is off (HOOP_RECORD=0) */
    uint32_t cap;
    _Atomic uint64_t next; /* the next record id: calls recorded so far (posting thread) */
    uint32_t slot;         /* next's entry: next modulo cap, kept apart (posting thread) */
    uint64_t p2p_next;     /* the next point-to-point number (posting thread) */
    /* The communicator's name in the dump ("0" for one made by hoop_init, else its id in hex)
     * and whether it is registered for HOOP_RECORD_SIGNAL's dumps. */
    char name[24];
    int on_signal;
    struct hoop_comm *next_registered;
} hoop__rec_t;

/* The monotonic clock in nanoseconds. */
static inline uint64_t hoop__rec_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* The recorder's clock, in ticks that cost little to read: the TSC where the CPU says it is
 * invariant (x86-64: a third of the monotonic clock's cost, which is most of what recording a
 * call costs; record.c turns ticks into monotonic nanoseconds as it dumps), else the monotonic
 * clock's nanoseconds. Set once, before the first communicator records. */
extern int hoop__rec_tsc;
static inline uint64_t hoop__rec_clock(void)
{
#if defined(__x86_64__)
    if (hoop__rec_tsc) return __builtin_ia32_rdtsc();
#endif
    return hoop__rec_ns();
}

/* c->rec: the ring of c (cap entries, 0 for none) and its name; HOOP_ERR_NO_MEMORY, c->rec
 * NULL, when it cannot be had. Once, as c is made. */
hoop_result_t hoop__rec_open(struct hoop_comm *c, uint32_t cap, const char *name);
/* Once, as c is freed (after hoop__rec_forget). */
void hoop__rec_close(struct hoop_comm *c);

/* A call is posted (posting thread; call->seq set for a collective). Sets call->rec. With started
 * set, it runs now: started at the same time. */
void hoop__rec_post(struct hoop_comm *c, struct hoop__call *call, int started);
/* The call starts (the thread that runs it). */
void hoop__rec_start(struct hoop_comm *c, const struct hoop__call *call);
/* The call ended with st. Once per call; a second end (a failure found by two paths) is
 * ignored. */
void hoop__rec_end(struct hoop_comm *c, const struct hoop__call *call, hoop_result_t st);

/* Writes c's dump to path (NULL: HOOP_RECORD_DIR/hoop-trace-<rank>.json, the communicator's
 * name before the rank where it is not "0"). Any thread; the call path goes on meanwhile. */
hoop_result_t hoop__rec_dump(struct hoop_comm *c, const char *path);
/* Writes the dump a timeout asked for, if one did (cheap otherwise). Called where a failed call
 * returns to its caller. */
void hoop__rec_dump_due(struct hoop_comm *c);
/* Whether hoop__rec_dump_due would write (two loads). */
static inline int hoop__rec_dump_wanted(const struct hoop_comm *c)
{
    return atomic_load(&c->rec_dump_due) ||
           (atomic_load(&c->abort_dumps) && !atomic_load(&c->rec_dumped));
}

/* HOOP_RECORD_SIGNAL=1: c's dump is written, by a thread of hoop's, whenever the process gets
 * SIGUSR2 (the handler only writes to a pipe, then calls the handler that was there before).
 * The handler is installed with the first communicator registered and restored with the last
 * one gone. */
void hoop__rec_register(struct hoop_comm *c);
void hoop__rec_forget(struct hoop_comm *c);

/* The newest collective call of c as the recorder holds it, for a status answer or a timeout's
 * explanation (core/explain.c). Any thread, without stopping the posting one. */
typedef struct hoop__rec_latest {
    int have; /* 0: no collective call recorded (yet, or with HOOP_RECORD=0) */
    int off;  /* the recorder is off */
    uint64_t seq, count;
    int kind, dtype;
    uint32_t state;          /* hoop__rec_state_t | the failure's code << 8 */
    uint64_t age_ns;         /* since it ended, or since it was posted while it has not */
    char schedule[32];       /* its algorithm in a word or two (hoop__plan_schedule) */
    int engine, algo, small; /* what the schedule is named from */
} hoop__rec_latest_t;
void hoop__rec_latest(const struct hoop_comm *c, hoop__rec_latest_t *out);

#endif
