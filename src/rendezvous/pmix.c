/* The PMIx exchange of rank 0's store address (pmix.h). */
#include "rendezvous/pmix.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/port.h"
#include "base/sock.h"
#include "rendezvous/pmix_sym.h"

#define KEY "hoop.store"

/* Binds res's addresses at port in turn; the port the first bind got (port 0: the kernel's
 * choice), or -1 with the last errno in *e. */
static int bind_probe(const struct addrinfo *res, int port, int *e)
{
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            *e = errno;
            continue;
        }
        struct sockaddr_storage ss;
        memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
        uint16_t *sp = ss.ss_family == AF_INET6 ? &((struct sockaddr_in6 *)&ss)->sin6_port
                                                : &((struct sockaddr_in *)&ss)->sin_port;
        *sp = htons((uint16_t)port);
        socklen_t len = sizeof ss;
        if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
            close(fd);
            return ntohs(*sp);
        }
        *e = errno;
        close(fd);
    }
    return -1;
}

/* A port free on host a moment ago, drawn below the kernel's ephemeral range (base/port.h).
 * The store binds it a moment later; should something take it in between, the store says the
 * port is in use. */
static int free_port(const char *host, int *port, char *err, size_t errlen)
{
    struct addrinfo *res = NULL;
    int g = hoop__sock_resolve(host, 0, &res);
    if (g != 0) {
        hoop__say(err, errlen, "cannot resolve rank 0's host \"%s\": %s (set MASTER_ADDR)", host,
                  g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        return -1;
    }
    int e = EADDRNOTAVAIL;
    hoop__port_draw_t d;
    hoop__port_draw_start(&d, 32);
    *port = -1;
    for (int want; *port < 0 && (want = hoop__port_draw_next(&d)) > 0;)
        if (bind_probe(res, want, &e) == want) *port = want;
    if (*port < 0) *port = bind_probe(res, 0, &e);
    freeaddrinfo(res);
    if (*port > 0) return 0;
    hoop__say(err, errlen, "cannot find a free port on rank 0's host \"%s\": %s", host,
              strerror(e));
    return -1;
}

static void info_bool(pmix_info_t *i, const char *key, int v)
{
    memset(i, 0, sizeof *i);
    snprintf(i->key, sizeof i->key, "%s", key);
    i->value.type = PMIX_BOOL;
    i->value.data.flag = v != 0;
}

static void info_int(pmix_info_t *i, const char *key, int v)
{
    memset(i, 0, sizeof *i);
    snprintf(i->key, sizeof i->key, "%s", key);
    i->value.type = PMIX_INT;
    i->value.data.integer = v;
}

/* A value PMIx_Get allocated: of the types read here, only a string owns more memory. */
static void value_free(pmix_value_t *v)
{
    if (v == NULL) return;
    if (v->type == PMIX_STRING) free(v->data.string);
    free(v);
}

/* libpmix's calls block until its server answers, and none can be cancelled: they run on a
 * helper thread, which the caller waits for until HOOP_TIMEOUT and otherwise leaves behind. The
 * helper owns what it touches (the job below, freed by whichever of the two lets go last), never
 * the caller's memory.
 *
 * libpmix is one per process, and a stuck call may hold it: one helper at a time uses it, and an
 * exchange waits (within its own deadline) for the last helper to be through, PMIx_Finalize
 * included, so that a new PMIx_Init never overlaps a call still under way. */
static struct {
    pthread_once_t once;
    pthread_mutex_t mu; /* guards busy and every job's shared fields */
    pthread_cond_t cv;  /* on the monotonic clock: a job is done, or the helper is through */
    int busy;           /* a helper is in libpmix */
} gate = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

static void gate_init(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&gate.cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* Waits on gate.cv (gate.mu held) until deadline (hoop__now() seconds) at the latest. */
static void gate_wait(double deadline)
{
    double left = deadline - hoop__now();
    if (left <= 0) return;
    if (left > 1.0) left = 1.0; /* the caller looks again */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)left;
    ts.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&gate.cv, &gate.mu, &ts);
}

/* One exchange, shared by the helper thread and its caller. */
typedef struct pmix_job {
    int refs;          /* 2 while both hold it */
    int done;          /* the helper has posted r, missing, err and rdv */
    int abandoned;     /* the caller has given up: the helper calls nothing more than it must */
    const char *doing; /* the libpmix call under way (a literal), for the sentence of a timeout */
    double deadline;
    hoop__rdv_t rdv; /* a copy without the key: rank, size, host, port, what was given */
    hoop_result_t r;
    int missing;
    char err[400];
} pmix_job_t;

/* The helper is about to call what (a literal); 0 to go on, -1 once the caller has given up. */
static int job_step(pmix_job_t *j, const char *what)
{
    pthread_mutex_lock(&gate.mu);
    j->doing = what;
    const int stop = j->abandoned;
    pthread_mutex_unlock(&gate.mu);
    return stop ? -1 : 0;
}

/* Lets go of j (gate.mu held); 1 when this side held it last, and is to free it. */
static int job_release(pmix_job_t *j) { return --j->refs == 0; }

static hoop_result_t exchange(hoop__pmix_t *px, const pmix_proc_t *me, pmix_job_t *j, char *err,
                              size_t errlen)
{
    hoop__rdv_t *rdv = &j->rdv;
    if (job_step(j, "PMIx_Get of the job size") != 0) return HOOP_ERR_TIMEOUT;
    /* The numbering hoop uses is the launcher's own (OMPI_COMM_WORLD_RANK, SLURM_PROCID): PMIx
     * must agree, or rank 0 would publish for processes that look elsewhere. */
    pmix_proc_t job = *me;
    job.rank = PMIX_RANK_WILDCARD;
    pmix_value_t *v = NULL;
    pmix_status_t s = px->get(&job, PMIX_JOB_SIZE, NULL, 0, &v);
    if (s != PMIX_SUCCESS || v == NULL || v->type != PMIX_UINT32) {
        hoop__say(err, errlen, "PMIx gives no job size (%s)",
                  s != PMIX_SUCCESS ? px->error_string(s) : "not a number");
        value_free(v);
        return HOOP_ERR_SYSTEM;
    }
    const unsigned size = v->data.uint32;
    value_free(v);
    if ((long)me->rank != rdv->rank || (long)size != rdv->size) {
        hoop__say(err, errlen,
                  "PMIx says this is rank %u of %u in %.64s, hoop has rank %d of %d: every "
                  "process of the launch must be one rank of the communicator, numbered as the "
                  "launcher does (else set MASTER_ADDR and MASTER_PORT)",
                  me->rank, size, me->nspace, rdv->rank, rdv->size);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (rdv->rank == 0) {
        if (!rdv->addr_given && gethostname(rdv->host, sizeof rdv->host) != 0) {
            hoop__say(err, errlen, "gethostname: %s (set MASTER_ADDR)", strerror(errno));
            return HOOP_ERR_SYSTEM;
        }
        rdv->host[sizeof rdv->host - 1] = '\0';
        if (!rdv->port_given && free_port(rdv->host, &rdv->port, err, errlen) != 0)
            return HOOP_ERR_SYSTEM;
        char buf[300];
        snprintf(buf, sizeof buf, "%d %s", rdv->port, rdv->host);
        pmix_value_t val;
        memset(&val, 0, sizeof val);
        val.type = PMIX_STRING;
        val.data.string = buf;
        if (job_step(j, "PMIx_Put of the store address") != 0) return HOOP_ERR_TIMEOUT;
        s = px->put(PMIX_GLOBAL, KEY, &val);
        if (s == PMIX_SUCCESS && job_step(j, "PMIx_Commit of the store address") != 0)
            return HOOP_ERR_TIMEOUT;
        if (s == PMIX_SUCCESS) s = px->commit();
        if (s != PMIX_SUCCESS) {
            hoop__say(err, errlen, "PMIx_Put of the store address failed: %s", px->error_string(s));
            return HOOP_ERR_SYSTEM;
        }
    }
    pmix_info_t info[2];
    info_bool(&info[0], PMIX_COLLECT_DATA, 1);
    /* PMIx's own bound on the fence, should its server answer: what is left of the exchange's. */
    const double left = j->deadline - hoop__now();
    int secs = left >= 1 ? (int)ceil(left < 1e6 ? left : 1e6) : 1;
    info_int(&info[1], PMIX_TIMEOUT, secs);
    if (job_step(j, "PMIx_Fence") != 0) return HOOP_ERR_TIMEOUT;
    s = px->fence(NULL, 0, info, 2);
    if (s != PMIX_SUCCESS) {
        hoop__say(err, errlen,
                  "PMIx_Fence of the %u processes of %.64s failed: %s (has every process called "
                  "hoop_init? HOOP_TIMEOUT is %d s)",
                  size, me->nspace, px->error_string(s), secs);
        return s == PMIX_ERR_TIMEOUT ? HOOP_ERR_TIMEOUT : HOOP_ERR_SYSTEM;
    }
    if (rdv->rank == 0) return HOOP_OK;
    pmix_proc_t root = *me;
    root.rank = 0;
    v = NULL;
    if (job_step(j, "PMIx_Get of rank 0's store address") != 0) return HOOP_ERR_TIMEOUT;
    s = px->get(&root, KEY, NULL, 0, &v);
    if (s != PMIX_SUCCESS || v == NULL || v->type != PMIX_STRING || v->data.string == NULL) {
        hoop__say(err, errlen, "PMIx_Get of rank 0's store address failed: %s",
                  s != PMIX_SUCCESS ? px->error_string(s) : "not a string");
        value_free(v);
        return HOOP_ERR_SYSTEM;
    }
    int port = 0, used = 0;
    const char *str = v->data.string;
    if (sscanf(str, "%d %n", &port, &used) != 1 || port < 1 || port > 65535 || used == 0 ||
        str[used] == '\0' || strlen(str + used) >= sizeof rdv->host) {
        hoop__say(err, errlen, "rank 0 published a malformed store address \"%.80s\"", str);
        value_free(v);
        return HOOP_ERR_MISMATCH;
    }
    /* Rank 0 used MASTER_ADDR/MASTER_PORT where set; what it published is what it serves. */
    rdv->port = port;
    snprintf(rdv->host, sizeof rdv->host, "%s", str + used);
    value_free(v);
    return HOOP_OK;
}

static void *helper_main(void *arg)
{
    pmix_job_t *j = arg;
    (void)pthread_setname_np(pthread_self(), "hoop-pmix");
    char err[400] = "";
    int missing = 1, inited = 0;
    hoop_result_t r = HOOP_ERR_UNSUPPORTED;
    hoop__pmix_t px;
    if (hoop__pmix_load(&px, err, sizeof err) == 0 && job_step(j, "PMIx_Init") == 0) {
        pmix_proc_t me;
        memset(&me, 0, sizeof me);
        pmix_status_t s = px.init(&me, NULL, 0);
        if (s != PMIX_SUCCESS) {
            hoop__say(err, sizeof err, "PMIx_Init cannot reach the launcher's PMIx server: %s",
                      px.error_string(s));
        } else {
            inited = 1;
            missing = 0;
            r = exchange(&px, &me, j, err, sizeof err);
        }
    }
    pthread_mutex_lock(&gate.mu);
    j->r = r;
    j->missing = missing;
    memcpy(j->err, err, sizeof j->err);
    j->done = 1;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    /* Counted: where the program itself uses PMIx (through MPI), its own PMIx_Init still holds.
     * The caller has its answer already; the next exchange waits for this. */
    if (inited) {
        (void)job_step(j, "PMIx_Finalize");
        px.finalize(NULL, 0);
    }
    hoop__pmix_unload(&px);
    pthread_mutex_lock(&gate.mu);
    gate.busy = 0;
    const int last = job_release(j);
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    if (last) free(j);
    return NULL;
}

/* " at ADDRESS (VARIABLE)": where libpmix looks for its server, as the launcher said; "" where no
 * variable says. */
static void server_of(char *buf, size_t cap)
{
    static const char *const vars[] = {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3",
                                       "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"};
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v == NULL || v[0] == '\0') continue;
        const char *uri = strrchr(v, ';'); /* "NSPACE.RANK;URI" */
        snprintf(buf, cap, " at %.120s (%s)", uri != NULL ? uri + 1 : v, vars[i]);
        return;
    }
}

hoop_result_t hoop__pmix_exchange(hoop__rdv_t *rdv, double timeout_s, char *err, size_t errlen,
                                  int *missing)
{
    *missing = 0;
    const double deadline = hoop__now() + (timeout_s > 0 ? timeout_s : 0);
    char server[200];
    server_of(server, sizeof server);
    pthread_once(&gate.once, gate_init);
    pthread_mutex_lock(&gate.mu);
    while (gate.busy && hoop__now() < deadline) gate_wait(deadline);
    if (gate.busy) {
        pthread_mutex_unlock(&gate.mu);
        hoop__say(err, errlen,
                  "an earlier PMIx call of this process is still waiting for the launcher's PMIx "
                  "server%s after HOOP_TIMEOUT (%g s): is the launcher (mpirun, srun) stopped?",
                  server, timeout_s);
        return HOOP_ERR_TIMEOUT;
    }
    pmix_job_t *j = calloc(1, sizeof *j);
    if (j == NULL) {
        pthread_mutex_unlock(&gate.mu);
        hoop__say(err, errlen, "out of memory for the PMIx exchange");
        return HOOP_ERR_NO_MEMORY;
    }
    j->refs = 2;
    j->deadline = deadline;
    j->doing = "PMIx_Init";
    j->rdv.rank = rdv->rank;
    j->rdv.size = rdv->size;
    j->rdv.port = rdv->port;
    j->rdv.addr_given = rdv->addr_given;
    j->rdv.port_given = rdv->port_given;
    memcpy(j->rdv.host, rdv->host, sizeof j->rdv.host);
    gate.busy = 1;
    pthread_mutex_unlock(&gate.mu);

    /* Detached, and deaf to signals: they belong to the application's threads. */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int e = pthread_create(&t, &attr, helper_main, j);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        pthread_mutex_lock(&gate.mu);
        gate.busy = 0;
        pthread_cond_broadcast(&gate.cv);
        pthread_mutex_unlock(&gate.mu);
        free(j);
        hoop__say(err, errlen, "cannot start a thread for the PMIx exchange: %s", strerror(e));
        return HOOP_ERR_SYSTEM;
    }

    pthread_mutex_lock(&gate.mu);
    while (!j->done && hoop__now() < deadline) gate_wait(deadline);
    hoop_result_t r;
    if (j->done) {
        r = j->r;
        *missing = j->missing;
        hoop__say(err, errlen, "%s", j->err);
        if (r == HOOP_OK) {
            rdv->port = j->rdv.port;
            memcpy(rdv->host, j->rdv.host, sizeof rdv->host);
        }
    } else {
        j->abandoned = 1;
        hoop__say(err, errlen,
                  "%s got no answer from the launcher's PMIx server%s within HOOP_TIMEOUT (%g s): "
                  "is the launcher (mpirun, srun) stopped or overloaded%s?",
                  j->doing, server, timeout_s,
                  strcmp(j->doing, "PMIx_Fence") == 0
                      ? ", or has a process of the launch not called hoop_init"
                      : "");
        r = HOOP_ERR_TIMEOUT;
    }
    const int last = job_release(j);
    pthread_mutex_unlock(&gate.mu);
    if (last) free(j);
    return r;
}
