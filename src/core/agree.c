/*
 * The agreement at init: before any data moves, every rank learns what every other rank believes
 * about the job, and a difference fails init on every rank that can see it.
 *
 * Each rank publishes a hello: what must be equal everywhere (library and wire version, world
 * size, job id, the settings of agree.h), whether it could read all its settings ("ok", or the
 * sentence about the first malformed one: such a rank takes part only to make init fail on every
 * rank with that sentence), and who it is (host, pid). The store:
 *
 *   hoop/rank/R    claimed (set only if absent) by rank R with its hello: a second process that
 *                  claims R finds the first one's hello there and fails, naming both
 *   hoop/verdict   set by rank 0 once it has compared every hello with its own: "ok", or
 *                  "fail <sentence>". Rank 0's hello also carries the communicator id, so that
 *                  ranks can listen for connections while the others arrive
 *   hoop/ack/R     rank R has read what it needs (rank 0 keeps the store up until then)
 *
 * A rank R > 0 first compares its job id with rank 0's, before it claims anything, so a rank that
 * reaches another job's store (a stale job still holding the port) leaves it untouched; then it
 * claims R, compares the rest with rank 0's hello and waits for the verdict. Rank 0 compares every
 * hello: a rank that disagrees with rank 0 fails at once, and rank 0's verdict fails the ranks that
 * agree with rank 0 but not with each other's view of the job (a rank whose WORLD_SIZE differs).
 *
 * A rank that finds its own number claimed by its own process (same host and pid)
 * has reached the store of this process's previous init, which is about to close: it reconnects
 * until the new one answers. That makes init, destroy, init (or two inits back to back) safe.
 */
#include "core/agree.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "runtime/comm.h"
#include "base/wire.h"

/* Lines "name value"; the names of agreed fields are what users set, so messages can quote them. */
#define F_VERSION "version"
#define F_SIZE "WORLD_SIZE"
#define F_JOB "job"
#define F_SETTINGS "settings" /* "ok", or why this rank cannot use its settings (config.h) */

static void put_line(char *buf, size_t cap, size_t *o, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void put_line(char *buf, size_t cap, size_t *o, const char *name, const char *fmt, ...)
{
    if (*o >= cap) return;
    int n = snprintf(buf + *o, cap - *o, "%s ", name);
    if (n < 0) return;
    *o += (size_t)n;
    if (*o >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(buf + *o, cap - *o, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    /* One field a line whatever a value holds (a job id, a sentence quoting a setting): a control
     * byte in one could otherwise forge the fields after it. */
    for (size_t i = *o; i < *o + (size_t)n && i + 1 < cap; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f) buf[i] = '?';
    *o += (size_t)n;
    if (*o + 1 < cap) {
        buf[(*o)++] = '\n';
        buf[*o] = '\0';
    }
}

#define FMT_SIZE(v) "%zu", (size_t)(v)
#define FMT_INT(v) "%d", (int)(v)
#define FMT_WORD(v) "%s", (v)

size_t hoop__agree_settings(const hoop__config_t *cfg, char *buf, size_t cap)
{
    size_t o = 0;
    if (cap > 0) buf[0] = '\0';
#define X(field, env, kind) put_line(buf, cap, &o, env, FMT_##kind(cfg->field));
    HOOP__AGREED_SETTINGS(X)
#undef X
    return o;
}

uint32_t hoop__agree_digest(const hoop__config_t *cfg)
{
    char buf[1024];
    size_t n = hoop__agree_settings(cfg, buf, sizeof(buf));
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)buf[i]) * 16777619u;
    return h;
}

size_t hoop__agree_hello(const hoop__config_t *cfg, const char *job, int rank, int size, char *buf,
                         size_t cap)
{
    size_t o = 0;
    if (cap > 0) buf[0] = '\0';
    char host[256] = "?";
    if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';
    put_line(buf, cap, &o, F_VERSION, "%s/wire%d", HOOP_VERSION_STRING, HOOP__WIRE_VERSION);
    put_line(buf, cap, &o, F_SIZE, "%d", size);
    put_line(buf, cap, &o, F_JOB, "%s", job != NULL && job[0] != '\0' ? job : "-");
    put_line(buf, cap, &o, F_SETTINGS, "%s", cfg->invalid[0] != '\0' ? cfg->invalid : "ok");
    put_line(buf, cap, &o, "rank", "%d", rank);
    put_line(buf, cap, &o, "host", "%s", host);
    put_line(buf, cap, &o, "pid", "%ld", (long)getpid());
    o += hoop__agree_settings(cfg, buf + o, cap > o ? cap - o : 0);
    return o;
}

int hoop__agree_field(const char *hello, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *l = hello; l != NULL && *l != '\0';) {
        const char *end = strchr(l, '\n');
        size_t len = end != NULL ? (size_t)(end - l) : strlen(l);
        if (len > nl && strncmp(l, name, nl) == 0 && l[nl] == ' ') {
            size_t v = len - nl - 1;
            if (v >= cap) v = cap - 1;
            memcpy(out, l + nl + 1, v);
            out[v] = '\0';
            return 1;
        }
        l = end != NULL ? end + 1 : NULL;
    }
    if (cap > 0) out[0] = '\0';
    return 0;
}

/* The fields every rank must share: version, job, whether the settings could be read, size, then
 * the settings. The job comes before the size: a rank of another job (a stale store on the port)
 * differs in both, and the job is why; a malformed setting comes before its value. */
static const char *agreed_name(int i)
{
    static const char *const fixed[] = {F_VERSION, F_JOB, F_SETTINGS, F_SIZE};
    static const char *const settings[] = {
#define X(field, env, kind) env,
        HOOP__AGREED_SETTINGS(X)
#undef X
    };
    int nf = (int)(sizeof(fixed) / sizeof(fixed[0]));
    if (i < nf) return fixed[i];
    i -= nf;
    return i < (int)(sizeof(settings) / sizeof(settings[0])) ? settings[i] : NULL;
}

int hoop__agree_compare(const char *mine, int me, const char *theirs, int them, char *msg, size_t n)
{
    for (int i = 0; agreed_name(i) != NULL; i++) {
        const char *name = agreed_name(i);
        char a[400], b[400];
        hoop__agree_field(mine, name, a, sizeof(a));
        hoop__agree_field(theirs, name, b, sizeof(b));
        if (strcmp(name, F_SETTINGS) == 0) {
            /* Not a comparison: the other rank could not read its own. This rank's own is no
             * difference: it goes on so that its hello reaches every rank, and fails after the
             * verdict (lifecycle.c). */
            if (strcmp(b, "ok") == 0) continue;
            snprintf(msg, n, "rank %d cannot use its settings: %s", them, b);
            return 1;
        }
        if (strcmp(a, b) == 0) continue;
        if (strcmp(name, F_VERSION) == 0)
            snprintf(msg, n,
                     "rank %d runs hoop %s where rank %d runs hoop %s: every rank must use "
                     "the same library",
                     them, b, me, a);
        else if (strcmp(name, F_JOB) == 0)
            snprintf(
                msg, n,
                "rank %d is of job %s where rank %d is of job %s (job ids come from "
                "HOOP_JOB_ID, TORCHELASTIC_RUN_ID, SLURM_JOB_ID or Open MPI): a rank of another "
                "job, or a stale job still holding the rendezvous address",
                them, b, me, a);
        else
            snprintf(msg, n,
                     "rank %d says %s=%s where rank %d says %s=%s: every rank must be "
                     "started with the same %s",
                     them, name, b, me, name, a, name);
        return 1;
    }
    return 0;
}

/* ---- the protocol ---- */

static hoop_result_t store_failed(hoop__store_t *st, hoop_result_t rc, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", hoop__store_error(st));
    return rc;
}

static hoop_result_t mismatch(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return HOOP_ERR_MISMATCH;
}

/* Who holds a claim, for messages: "pid 123 on host a (job j)". */
static void describe_holder(const char *hello, char *out, size_t n)
{
    char host[128], pid[32], job[128];
    hoop__agree_field(hello, "host", host, sizeof(host));
    hoop__agree_field(hello, "pid", pid, sizeof(pid));
    hoop__agree_field(hello, F_JOB, job, sizeof(job));
    snprintf(out, n, "pid %.31s on host %.100s (job %.100s)", pid[0] ? pid : "?",
             host[0] ? host : "?", job[0] ? job : "-");
}

hoop_result_t hoop__agree_conflict(hoop__store_t *st, char *msg, size_t n)
{
    size_t m = 0;
    if (hoop__store_get(st, "hoop/conflict", msg, n - 1, &m, 0) != HOOP_OK) return HOOP_OK;
    msg[m < n ? m : n - 1] = '\0';
    return HOOP_ERR_MISMATCH;
}

/* A get that also watches hoop/conflict: a process that found its rank claimed already writes it,
 * and then the rank this waits for may never come. HOOP_ERR_MISMATCH with the sentence in msg;
 * at the deadline, HOOP_ERR_TIMEOUT (or HOOP_ERR_AUTH when strangers were turned away) with the
 * sentence in msg. A stranger turned away meanwhile does not end the wait: the rank may still come. */
static hoop_result_t get_or_conflict(hoop__store_t *st, const char *key, int rank, char *buf,
                                     size_t cap, size_t *len, double deadline, char *msg, size_t n)
{
    const double start = hoop__now();
    for (;;) {
        double left = deadline - hoop__now(), slice = left < 0.25 ? left : 0.25;
        hoop_result_t rc = hoop__store_get(st, key, buf, cap, len, slice);
        if (rc == HOOP_OK) return rc;
        if (rc != HOOP_ERR_TIMEOUT && rc != HOOP_ERR_AUTH) {
            snprintf(msg, n, "%s", hoop__store_error(st));
            return rc;
        }
        if (left <= slice) {
            snprintf(
                msg, n,
                "%s %d did not reach the rendezvous within %.1f s (has every rank "
                "started, with the same WORLD_SIZE? did one fail?)%s",
                rank > 0 ? "rank" : "the verdict of rank", rank > 0 ? rank : 0, hoop__now() - start,
                rc == HOOP_ERR_AUTH
                    ? "; the store turned away "
                      "connections that failed authentication (is HOOP_AUTH_KEY the same on every "
                      "rank?)"
                    : "");
            return rc;
        }
        if (hoop__agree_conflict(st, msg, n) != HOOP_OK) return HOOP_ERR_MISMATCH;
    }
}

hoop_result_t hoop__agree_claim(hoop__store_t *st, hoop__agree_t *a, uint64_t *comm_id, int *stale,
                                char *err, size_t errlen)
{
    *stale = 0;
    const hoop__agree_in_t *in = &a->in;
    char *mine = a->mine, *zero = a->zero;
    char theirs[HOOP__HELLO_MAX], key[64], msg[512];
    size_t len = 0;
    hoop_result_t rc;
    const int me = in->rank;
    hoop__agree_hello(in->cfg, in->job, me, in->size, mine, sizeof(a->mine));
    if (me == 0) {
        /* The id travels in rank 0's hello, so ranks can listen before the verdict. */
        uint64_t id = 0;
        if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
            id = ((uint64_t)getpid() << 32) ^ (uint64_t)(hoop__now() * 1e9);
        size_t o = strlen(mine);
        put_line(mine, sizeof(a->mine), &o, "comm", "%016" PRIx64, id);
        *comm_id = id;
    }

    if (me != 0) {
        /* Rank 0's hello first: a rank of another job must not leave anything in its store. */
        rc = hoop__store_get(st, "hoop/rank/0", zero, sizeof(a->zero) - 1, &len,
                             in->deadline - hoop__now());
        if (rc != HOOP_OK) return store_failed(st, rc, err, errlen);
        zero[len < sizeof(a->zero) ? len : sizeof(a->zero) - 1] = '\0';
        char a[160], b[160];
        hoop__agree_field(mine, F_JOB, a, sizeof(a));
        hoop__agree_field(zero, F_JOB, b, sizeof(b));
        if (strcmp(a, b) != 0 && hoop__agree_compare(mine, me, zero, 0, msg, sizeof(msg)))
            return mismatch(err, errlen, msg);
    }

    int taken = 0;
    snprintf(key, sizeof(key), "hoop/rank/%d", me);
    rc = hoop__store_claim(st, key, mine, strlen(mine), &taken, theirs, sizeof(theirs) - 1, &len);
    if (rc != HOOP_OK) return store_failed(st, rc, err, errlen);
    if (taken) {
        theirs[len < sizeof(theirs) ? len : sizeof(theirs) - 1] = '\0';
        char host[256], pid[32], myhost[256], mypid[32];
        hoop__agree_field(theirs, "host", host, sizeof(host));
        hoop__agree_field(theirs, "pid", pid, sizeof(pid));
        hoop__agree_field(mine, "host", myhost, sizeof(myhost));
        hoop__agree_field(mine, "pid", mypid, sizeof(mypid));
        if (strcmp(host, myhost) == 0 && strcmp(pid, mypid) == 0) {
            *stale = 1;
            snprintf(err, errlen,
                     "the rendezvous store still serves this process's previous "
                     "communicator (rank %d is claimed by it)",
                     me);
            return HOOP_ERR_TIMEOUT;
        }
        char who[300], self[300];
        describe_holder(theirs, who, sizeof(who));
        describe_holder(mine, self, sizeof(self));
        long holder = strtol(pid, NULL, 10);
        int gone = strcmp(host, myhost) == 0 && holder > 0 && kill((pid_t)holder, 0) != 0 &&
                   errno == ESRCH;
        if (gone)
            snprintf(err, errlen,
                     "rank %d is claimed by %s, which is no longer running: the rendezvous is left "
                     "from an older job (remove a file:// store's directory, or use a fresh path "
                     "or port); this process is %s",
                     me, who, self);
        else
            snprintf(err, errlen,
                     "rank %d is claimed twice: by %s and by this process, %s. Two processes were "
                     "given the same rank, or the rendezvous address is still held by an older "
                     "job",
                     me, who, self);
        /* Rank 0 fails the whole rendezvous with it (the first conflict's sentence wins). */
        int t2 = 0;
        (void)hoop__store_claim(st, "hoop/conflict", err, strlen(err), &t2, NULL, 0, NULL);
        if (me == 0) {
            /* The store goes with rank 0 (a file store's directory too): give the ranks waiting
             * on the verdict a moment to read the conflict instead of timing out. */
            double grace = hoop__now() + 1.0;
            char one[2];
            for (int j = 1; j < in->size; j++) {
                snprintf(key, sizeof(key), "hoop/ack/%d", j);
                (void)hoop__store_get(st, key, one, sizeof(one), &len, grace - hoop__now());
            }
        }
        return HOOP_ERR_MISMATCH;
    }
    if (me != 0) {
        char id[40];
        if (!hoop__agree_field(zero, "comm", id, sizeof(id)) ||
            sscanf(id, "%16" SCNx64, comm_id) != 1) {
            snprintf(err, errlen, "rank 0's hello in the rendezvous store has no communicator id");
            return HOOP_ERR_INTERNAL;
        }
    }
    return HOOP_OK;
}

hoop_result_t hoop__agree_verdict(hoop__store_t *st, hoop__agree_t *a, char *err, size_t errlen)
{
    const hoop__agree_in_t *in = &a->in;
    const char *mine = a->mine, *zero = a->zero;
    char theirs[HOOP__HELLO_MAX], key[64], msg[512];
    size_t len = 0;
    hoop_result_t rc;
    const int me = in->rank, p = in->size;
    char verdict[600];
    if (me == 0) {
        /* Compare every hello with ours; the first difference is the sentence everyone gets, at
         * once: the ranks after it may never come (a WORLD_SIZE larger than the job). */
        int bad = 0, seen = 0, reach = p;
        char first[512] = "";
        /* Rank 0's own malformed setting: the others see it in its hello and fail at once; it
         * reads their hellos all the same, so that the store stays up until they have. */
        char own[400];
        hoop__agree_field(mine, F_SETTINGS, own, sizeof(own));
        for (int j = 1; j < p && !bad; j++) {
            snprintf(key, sizeof(key), "hoop/rank/%d", j);
            rc = get_or_conflict(st, key, j, theirs, sizeof(theirs) - 1, &len, in->deadline, first,
                                 sizeof(first));
            if (rc == HOOP_ERR_MISMATCH) {
                bad = 1;
                break;
            }
            if (rc != HOOP_OK) {
                snprintf(err, errlen, "%s", first);
                return rc;
            }
            seen = j;
            theirs[len < sizeof(theirs) ? len : sizeof(theirs) - 1] = '\0';
            /* A rank that believes the job is larger: ranks beyond ours may be on their way. */
            char sz[32];
            long them = hoop__agree_field(theirs, F_SIZE, sz, sizeof(sz)) ? strtol(sz, NULL, 10)
                                                                          : 0;
            if (them > reach && them <= HOOP__MAX_RANKS) reach = (int)them;
            if (hoop__agree_compare(mine, 0, theirs, j, msg, sizeof(msg))) {
                snprintf(first, sizeof(first), "%s", msg);
                bad = 1;
            }
        }
        if (!bad && strcmp(own, "ok") != 0) {
            snprintf(first, sizeof(first), "rank 0 cannot use its settings: %.450s", own);
            bad = 1;
        }
        if (bad)
            snprintf(verdict, sizeof(verdict), "fail %s", first);
        else
            snprintf(verdict, sizeof(verdict), "ok");
        rc = hoop__store_set(st, "hoop/verdict", verdict, strlen(verdict));
        if (rc != HOOP_OK) return store_failed(st, rc, err, errlen);
        if (bad) {
            /* Keep the store up until the others have read why: the ranks whose hello came, up
             * to the deadline; the others (up to the largest world size any rank said) get a
             * second, as they may not exist. */
            char one[2];
            double grace = hoop__now() + 1.0;
            for (int j = 1; j < reach; j++) {
                snprintf(key, sizeof(key), "hoop/ack/%d", j);
                double until = j <= seen ? in->deadline : grace;
                if (hoop__store_get(st, key, one, sizeof(one), &len, until - hoop__now()) !=
                        HOOP_OK &&
                    j <= seen)
                    break;
            }
            return mismatch(err, errlen, verdict + 5);
        }
        return HOOP_OK;
    }

    snprintf(key, sizeof(key), "hoop/ack/%d", me);
    if (hoop__agree_compare(mine, me, zero, 0, msg, sizeof(msg))) {
        (void)hoop__store_set(st, key, "1", 1);
        return mismatch(err, errlen, msg);
    }
    /* A conflict ends this wait too: rank 0 may be the process that failed on it. */
    rc = get_or_conflict(st, "hoop/verdict", 0, verdict, sizeof(verdict) - 1, &len, in->deadline,
                         msg, sizeof(msg));
    if (rc != HOOP_OK) {
        if (rc == HOOP_ERR_MISMATCH) (void)hoop__store_set(st, key, "1", 1);
        snprintf(err, errlen, "%s", msg);
        return rc;
    }
    verdict[len < sizeof(verdict) ? len : sizeof(verdict) - 1] = '\0';
    if (strncmp(verdict, "fail ", 5) == 0) {
        (void)hoop__store_set(st, key, "1", 1);
        return mismatch(err, errlen, verdict + 5);
    }
    if (strcmp(verdict, "ok") != 0) {
        snprintf(err, errlen, "the rendezvous store holds an invalid verdict \"%.40s\"", verdict);
        return HOOP_ERR_INTERNAL;
    }
    return HOOP_OK;
}
