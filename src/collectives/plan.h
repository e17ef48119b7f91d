/* The planner (plan.c): who runs a call, with which schedule, and why. Included by the
 * collectives and by the planner's unit test. */
#ifndef HOOP_PLAN_H
#define HOOP_PLAN_H

#include "collectives/coll.h"
#include "local/local.h"

/* Why a plan is what it is (hoop__plan_t.why). */
typedef enum {
    HOOP__WHY_OWN = 0,  /* a zeroed plan: the communicator's own exchange (a split) */
    HOOP__WHY_FORCED,   /* HOOP_ALGO named it */
    HOOP__WHY_UNFIT,    /* HOOP_ALGO=hier, but the ranks are not several on each of several hosts */
    HOOP__WHY_ONE_HOST, /* every rank on one host, a transport that allows shared memory */
    HOOP__WHY_MEASURED, /* a 2-rank all-gather of 32-256 KiB a rank: point to point is faster */
    HOOP__WHY_SMALL,    /* at most HOOP_SMALL_BYTES (the reduce tree: plan.c): latency-bound */
    HOOP__WHY_LARGE,    /* above: bandwidth-bound */
    HOOP__WHY_HOSTS,    /* several hosts of as many ranks each: inside, across, inside */
    HOOP__WHY_ONLY,     /* the collective's one schedule */
    /* After an agreement step: what it found (hoop__verdict_t), past RAN. */
    HOOP__WHY_VERDICT,
    HOOP__WHY_COUNT = HOOP__WHY_VERDICT + HOOP__VERDICT_COUNT
} hoop__plan_why_t;

/* What the planner reads of a call and its communicator: the same on every rank. */
typedef struct hoop__plan_in {
    hoop__kind_t kind;
    size_t bytes;        /* count x the dtype's size: one rank's part */
    int ranks;           /* the communicator's size */
    int hosts, per_host; /* hosts the ring spans; ranks on each, 0 where they differ */
    int one_host;        /* hoop_comm.shm_auto: one host, a transport that allows shared memory */
    int forced;          /* hoop_comm.algo: HOOP_ALGO, or hoop_comm_set_algo's */
    size_t small_bytes;  /* HOOP_SMALL_BYTES, agreed */
    int sym;             /* the communicator has symmetric memory (hoop__sym_live) */
    int cma;             /* HOOP_CMA, agreed: 0 off, 1 auto, 2 on */
} hoop__plan_in_t;

/* The plan from those facts alone (hoop__plan's pure part); *wire: the name its messages carry. */
hoop__plan_t hoop__plan_make(const hoop__plan_in_t *in, hoop__algo_t *wire);
/* The plan once an agreement step found v (not HOOP__VERDICT_RAN): every rank gets the same. */
hoop__plan_t hoop__plan_again(hoop__plan_t p, hoop__verdict_t v);
/* "shm area (every rank on one host; 2 MiB > HOOP_SMALL_BYTES (16 KiB): in rounds)": what call's
 * plan is and why, for INFO lines and traces; sized: with the call's size ("the call" without,
 * so that every call of a kind and plan is said alike). Returns buf. */
const char *hoop__plan_describe(const hoop__call_t *call, int sized, char *buf, size_t n);
/* The algorithm that runs call, in a word or two ("shm", "ipc", "ring", "binomial tree"): the
 * flight recorder's (core/record.c). */
const char *hoop__plan_schedule(const hoop__call_t *call);
/* Says call's plan: a trace line (hoop-perf --explain shows it), and an INFO line when this kind
 * of call gets another plan than the ones INFO said last on the communicator. */
void hoop__plan_say(const hoop__call_t *call);
/* Whether anyone hears hoop__plan_say on c: inline, so that a call nobody traces pays two loads. */
static inline int hoop__plan_heard(const hoop_comm_t *c)
{
    return c->trace_fn != NULL ||
           (c->log.level >= HOOP__LOG_INFO && (c->log.subsys & HOOP__SUB_COLL) != 0);
}

#endif
