/* Init-method resolution: "env://", "tcp://HOST:PORT" or "file:///PATH", plus the variables that
 * launchers (torchrun, srun, mpirun) export, become a hoop__rdv_t. Each scheme is one row of the
 * table of methods below. Nothing here touches the network; a PMIx launcher is asked in
 * hoop__rdv_exchange, after resolution. */
#define HOOP__LOG_SUBSYS HOOP__SUB_RENDEZVOUS /* of its INFO and TRACE lines (base/log.h) */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/slurm.h"
#ifdef HOOP__HAVE_PMIX
#include "rendezvous/pmix.h"
#endif

/* Launcher variables in order of preference: torchrun, then Slurm, then Open MPI. */
static const char *const rank_vars[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"};
static const char *const size_vars[] = {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"};
static const char *const lrank_vars[] = {"LOCAL_RANK", "SLURM_LOCALID",
                                         "OMPI_COMM_WORLD_LOCAL_RANK"};
static const char *const lsize_vars[] = {"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE"};
#define NVARS 3

#define MAX_RANKS HOOP__MAX_RANKS

static hoop_result_t fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static hoop_result_t fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hoop__vsay(err, errlen, fmt, ap);
    va_end(ap);
    return HOOP_ERR_INVALID_ARGUMENT;
}

/* Strict decimal within [lo, hi]: no spaces, no trailing junk. 0 on success. */
static int parse_long(const char *s, long lo, long hi, long *out)
{
    if (s == NULL || *s == '\0' || isspace((unsigned char)*s)) return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* An empty variable counts as unset, so that `RANK= cmd` falls through to the next launcher. */
static const char *env(const char *name)
{
    const char *v = getenv(name);
    return (v != NULL && *v != '\0') ? v : NULL;
}

static const char *getenv_ctx(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

/* Reads the first set variable of vars. 1: *out holds its value and *from its name; 0: none set;
 * -1: the value is not a number in [lo, hi] (err written). */
static int env_int(const char *const *vars, long lo, long hi, const char *what, long *out,
                   const char **from, char *err, size_t errlen)
{
    for (int i = 0; i < NVARS; i++) {
        const char *v = env(vars[i]);
        if (v == NULL) continue;
        if (parse_long(v, lo, hi, out) != 0) {
            fail(err, errlen,
                 "%s=\"%.64s\" is not a valid %s: set %s to a whole number from %ld to %ld",
                 vars[i], v, what, vars[i], lo, hi);
            return -1;
        }
        *from = vars[i];
        return 1;
    }
    return 0;
}

/* A host name or address: printable, no spaces, fits in host[]. IPv6 brackets are stripped. */
static hoop_result_t copy_host(const char *s, size_t n, const char *source, char *host, size_t cap,
                               char *err, size_t errlen)
{
    if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
        s++;
        n -= 2;
    }
    if (n == 0) return fail(err, errlen, "%s has an empty host name", source);
    if (n >= cap)
        return fail(err, errlen, "%s has a host name longer than %zu characters", source, cap - 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c >= 0x7f || c == '/' || c == '[' || c == ']')
            return fail(err, errlen, "%s has an invalid host name \"%.*s\"", source, (int)n, s);
    }
    memcpy(host, s, n);
    host[n] = '\0';
    return HOOP_OK;
}

static hoop_result_t parse_port(const char *s, size_t n, const char *source, const char *fix,
                                int *port, char *err, size_t errlen)
{
    char buf[16];
    long v;
    if (n == 0 || n >= sizeof buf) goto bad;
    memcpy(buf, s, n);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)buf[i])) goto bad;
    if (parse_long(buf, 1, 65535, &v) != 0) goto bad;
    *port = (int)v;
    return HOOP_OK;
bad:
    return fail(err, errlen, "%s has an invalid port \"%.*s\": %s a number from 1 to 65535", source,
                (int)(n > 32 ? 32 : n), s, fix);
}

/* tcp://HOST:PORT or tcp://[V6ADDR]:PORT, an optional trailing '/'. */
static hoop_result_t parse_tcp(const char *init_method, const char *rest, hoop__rdv_t *out,
                               char *err, size_t errlen)
{
    size_t n = strlen(rest);
    if (n > 0 && rest[n - 1] == '/') n--;
    const char *colon;
    const char *host = rest;
    size_t hostlen;
    if (n > 0 && rest[0] == '[') {
        const char *close = memchr(rest, ']', n);
        if (close == NULL)
            return fail(err, errlen, "init method \"%.300s\" has no ']' after the IPv6 address",
                        init_method);
        colon = close + 1;
        if (colon >= rest + n || *colon != ':')
            return fail(err, errlen, "init method \"%.300s\" has no port: use tcp://[ADDRESS]:PORT",
                        init_method);
        hostlen = (size_t)(colon - rest);
    } else {
        colon = NULL;
        for (size_t i = 0; i < n; i++)
            if (rest[i] == ':') colon = rest + i;
        if (colon == NULL)
            return fail(err, errlen, "init method \"%.300s\" has no port: use tcp://HOST:PORT",
                        init_method);
        hostlen = (size_t)(colon - rest);
        if (memchr(rest, ':', hostlen) != NULL)
            return fail(err, errlen,
                        "init method \"%.300s\" looks like an IPv6 address without brackets: "
                        "use tcp://[ADDRESS]:PORT",
                        init_method);
    }
    hoop_result_t r = copy_host(host, hostlen, "the tcp:// init method", out->host,
                                sizeof out->host, err, errlen);
    if (r != HOOP_OK) return r;
    size_t portlen = (size_t)(rest + n - (colon + 1));
    r = parse_port(colon + 1, portlen, "the tcp:// init method", "use tcp://HOST:PORT with PORT",
                   &out->port, err, errlen);
    if (r != HOOP_OK) return r;
    snprintf(out->method, sizeof out->method, "tcp");
    return HOOP_OK;
}

/* env:// (and slurm://, pmix://, which force one launcher's way): the address of rank 0's store
 * comes from MASTER_ADDR and MASTER_PORT. Where one or both are unset, a launcher gives the rest:
 * PMIx where the launcher offers it (PMIX_NAMESPACE: mpirun, srun --mpi=pmix), else Slurm's
 * variables in an srun step. Explicit wins: a set MASTER_ADDR or MASTER_PORT is always used. */
static hoop_result_t parse_launcher(const char *init_method, const char *rest, const char *force,
                                    hoop__rdv_t *out, char *err, size_t errlen)
{
    if (rest[0] != '\0' && strcmp(rest, "/") != 0)
        return fail(err, errlen,
                    "init method \"%.300s\" has text after the scheme: the address comes from "
                    "MASTER_ADDR and MASTER_PORT or from the launcher",
                    init_method);
    const char *addr = env("MASTER_ADDR");
    const char *port = env("MASTER_PORT");
    hoop_result_t r;
    if (addr != NULL) {
        r = copy_host(addr, strlen(addr), "MASTER_ADDR", out->host, sizeof out->host, err, errlen);
        if (r != HOOP_OK) return r;
        out->addr_given = 1;
    }
    if (port != NULL) {
        r = parse_port(port, strlen(port), "MASTER_PORT", "set MASTER_PORT to", &out->port, err,
                       errlen);
        if (r != HOOP_OK) return r;
        out->port_given = 1;
    }
    snprintf(out->method, sizeof out->method, "tcp");
    const int pmix = env("PMIX_NAMESPACE") != NULL, slurm = hoop__slurm_in_step();
    if (force != NULL && strcmp(force, "pmix") == 0 && !pmix)
        return fail(err, errlen,
                    "the pmix:// init method needs a PMIx launcher (mpirun, srun --mpi=pmix), "
                    "and PMIX_NAMESPACE is not set");
    if (force != NULL && strcmp(force, "slurm") == 0 && !slurm)
        return fail(err, errlen,
                    "the slurm:// init method needs to run as a task of srun (SLURM_JOB_ID, "
                    "SLURM_STEP_ID and SLURM_PROCID set)");
    if (force == NULL && addr != NULL && port != NULL) return HOOP_OK;
    if (force != NULL)
        snprintf(out->via, sizeof out->via, "%s", force);
    else if (pmix || slurm)
        snprintf(out->via, sizeof out->via, "%s", pmix ? "pmix" : "slurm");
    else if (addr == NULL)
        return fail(
            err, errlen,
            "the env:// init method needs MASTER_ADDR: set MASTER_ADDR to the host name or address "
            "of the machine that runs rank 0 (under srun or mpirun the launcher gives it)");
    else
        return fail(
            err, errlen,
            "the env:// init method needs MASTER_PORT: set MASTER_PORT to a free TCP port on the "
            "machine that runs rank 0 (e.g. 29500)");
    return HOOP_OK;
}

static hoop_result_t parse_env(const char *init_method, const char *rest, hoop__rdv_t *out,
                               char *err, size_t errlen)
{
    return parse_launcher(init_method, rest, NULL, out, err, errlen);
}

static hoop_result_t parse_slurm(const char *init_method, const char *rest, hoop__rdv_t *out,
                                 char *err, size_t errlen)
{
    return parse_launcher(init_method, rest, "slurm", out, err, errlen);
}

static hoop_result_t parse_pmix(const char *init_method, const char *rest, hoop__rdv_t *out,
                                char *err, size_t errlen)
{
    return parse_launcher(init_method, rest, "pmix", out, err, errlen);
}

static hoop_result_t parse_file(const char *init_method, const char *rest, hoop__rdv_t *out,
                                char *err, size_t errlen)
{
    (void)init_method;
    size_t n = strlen(rest);
    if (n == 0 || rest[0] != '/')
        return fail(
            err, errlen,
            "the file:// init method needs an absolute path: use file:///PATH (three slashes), "
            "e.g. file:///shared/job42.store");
    if (rest[n - 1] == '/')
        return fail(err, errlen,
                    "the file:// init method needs the path of a file, not of a directory "
                    "(\"%.300s\" ends with '/')",
                    rest);
    /* The store appends ".d/" and key file names; leave them room. */
    if (n >= sizeof out->path - 8)
        return fail(err, errlen, "the file:// path is longer than %zu characters",
                    sizeof out->path - 9);
    memcpy(out->path, rest, n + 1);
    snprintf(out->method, sizeof out->method, "file");
    return HOOP_OK;
}

/* The init methods by scheme (matched without regard to case). A new one is a parser and a row. */
static const struct {
    const char *scheme;
    hoop_result_t (*parse)(const char *init_method, const char *rest, hoop__rdv_t *out, char *err,
                           size_t errlen);
} methods[] = {
    {"env://", parse_env},     {"tcp://", parse_tcp},   {"file://", parse_file},
    {"slurm://", parse_slurm}, {"pmix://", parse_pmix},
};

/* The job id from the launcher (see hoop__rdv_t.job). torchrun's default "none" names no job. A
 * value is kept printable and bounded: it goes into messages and into the key derivation. */
static hoop_result_t job_id(hoop__rdv_t *out, char *err, size_t errlen)
{
    static const char *const vars[] = {"HOOP_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
                                       "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = env(vars[i]);
        if (v == NULL || (i == 1 && strcmp(v, "none") == 0)) continue;
        const char *step = i == 2 ? env("SLURM_STEP_ID") : NULL;
        int n = snprintf(out->job, sizeof out->job, "%s%s%s", v, step ? "." : "", step ? step : "");
        if (n < 0 || (size_t)n >= sizeof out->job)
            return fail(err, errlen, "%s is longer than %zu characters", vars[i],
                        sizeof out->job - 1);
        for (const char *c = out->job; *c; c++)
            if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f)
                return fail(err, errlen, "%s=\"%.64s\" has a space or an unprintable character",
                            vars[i], v);
        snprintf(out->job_from, sizeof out->job_from, "%s%s", vars[i],
                 step ? "+SLURM_STEP_ID" : "");
        return HOOP_OK;
    }
    return HOOP_OK;
}

/* out starts empty, and the caller's rank and size are each a number or -1. */
static hoop_result_t check_args(int rank, int size, hoop__rdv_t *out, char *err, size_t errlen)
{
    if (out == NULL) return fail(err, errlen, "internal error: no place to store the rendezvous");
    memset(out, 0, sizeof *out);
    out->rank = out->size = -1;
    out->local_rank = out->local_size = -1;
    if (rank < -1)
        return fail(err, errlen,
                    "rank %d is invalid: pass a rank >= 0, or -1 to take it from the environment",
                    rank);
    if (size == 0 || size < -1 || size > MAX_RANKS)
        return fail(err, errlen,
                    "world size %d is invalid: pass a size from 1 to %d, or -1 to take it from the "
                    "environment",
                    size, MAX_RANKS);
    return HOOP_OK;
}

/* The row of methods[] whose scheme starts m, into *row. */
static hoop_result_t find_method(const char *m, size_t *row, char *err, size_t errlen)
{
    size_t i = 0;
    while (i < sizeof methods / sizeof methods[0] &&
           strncasecmp(m, methods[i].scheme, strlen(methods[i].scheme)) != 0)
        i++;
    if (i == sizeof methods / sizeof methods[0])
        return fail(err, errlen,
                    "unknown init method \"%.300s\": use env://, tcp://HOST:PORT, file:///PATH, "
                    "slurm:// or pmix://",
                    m);
    *row = i;
    return HOOP_OK;
}

/* This rank's number and the world size, each from the caller or else from the first
 * launcher variable set (rank_vars, size_vars), and the one in range of the other. */
static hoop_result_t resolve_rank_size(int rank, int size, hoop__rdv_t *out, char *err,
                                       size_t errlen)
{
    long v;
    const char *rank_from = NULL, *size_from = NULL;
    if (rank >= 0) {
        out->rank = rank;
    } else {
        int got = env_int(rank_vars, 0, MAX_RANKS - 1, "rank", &v, &rank_from, err, errlen);
        if (got < 0) return HOOP_ERR_INVALID_ARGUMENT;
        if (got == 0)
            return fail(err, errlen,
                        "no rank was given: pass one to hoop_init or set RANK (as torchrun does); "
                        "SLURM_PROCID and OMPI_COMM_WORLD_RANK are read too");
        out->rank = (int)v;
    }
    if (size >= 1) {
        out->size = size;
    } else {
        int got = env_int(size_vars, 1, MAX_RANKS, "world size", &v, &size_from, err, errlen);
        if (got < 0) return HOOP_ERR_INVALID_ARGUMENT;
        if (got == 0)
            return fail(
                err, errlen,
                "no world size was given: pass one to hoop_init or set WORLD_SIZE (as torchrun "
                "does); SLURM_NTASKS and OMPI_COMM_WORLD_SIZE are read too");
        out->size = (int)v;
    }
    if (out->rank >= out->size) {
        char rs[64], ss[64];
        if (rank_from != NULL)
            snprintf(rs, sizeof rs, "%s=%d", rank_from, out->rank);
        else
            snprintf(rs, sizeof rs, "%d", out->rank);
        if (size_from != NULL)
            snprintf(ss, sizeof ss, "%s=%d", size_from, out->size);
        else
            snprintf(ss, sizeof ss, "%d", out->size);
        return fail(err, errlen,
                    "rank %s is out of range for world size %s: a rank must be from 0 to size-1",
                    rs, ss);
    }
    return HOOP_OK;
}

/* Local placement, a hint for transports. When the caller passed both rank and size
 * (strict = 0), stray launcher variables (a test run inside an allocation) must not make init
 * fail: inconsistent ones are dropped. When the rank came from a launcher, an inconsistency is a
 * launcher error. */
static hoop_result_t resolve_local(int strict, hoop__rdv_t *out, char *err, size_t errlen)
{
    const char *lr_from = NULL, *ls_from = NULL;
    long lr = -1, ls = -1;
    int got = env_int(lrank_vars, 0, MAX_RANKS - 1, "local rank", &lr, &lr_from, err, errlen);
    if (got < 0) {
        if (strict) return HOOP_ERR_INVALID_ARGUMENT;
        lr = -1;
    } else if (got == 0) {
        lr = -1;
    }
    /* Under srun the step's own count comes first (after LOCAL_WORLD_SIZE): an allocation's
     * SLURM_NTASKS_PER_NODE is inherited by steps that run fewer tasks. */
    got = env("LOCAL_WORLD_SIZE") == NULL ? hoop__slurm_local_size(&ls, &ls_from, err, errlen) : 0;
    if (got == 0)
        got = env_int(lsize_vars, 1, MAX_RANKS, "local world size", &ls, &ls_from, err, errlen);
    if (got < 0) {
        if (strict) return HOOP_ERR_INVALID_ARGUMENT;
        ls = -1;
    } else if (got == 0) {
        ls = -1;
    }
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (ls > out->size) {
        if (strict)
            return fail(err, errlen, "%s=%ld is larger than the world size %d", ls_from, ls,
                        out->size);
        ls = lr = -1;
    }
    if (lr >= 0 && ls >= 1 && lr >= ls) {
        if (strict)
            return fail(err, errlen,
                        "%s=%ld is out of range for %s=%ld: a local rank must be from 0 to %ld",
                        lr_from, lr, ls_from, ls, ls - 1);
        ls = lr = -1;
    }
    out->local_rank = (int)lr;
    out->local_size = (int)ls;
    return HOOP_OK;
}

/* Rank 0's address from Slurm's variables where the launcher's way is Slurm's; under
 * srun --mpi=pmix, the same made ready in case libpmix does not load (hoop__rdv_exchange), which
 * is not an error until then. */
static hoop_result_t launcher_address(hoop__rdv_t *out, char *err, size_t errlen)
{
    if (strcmp(out->via, "slurm") == 0)
        return hoop__slurm_address(out, out->addr_given, out->port_given, err, errlen);
    if (strcmp(out->via, "pmix") == 0 && hoop__slurm_in_step()) {
        char why[256];
        out->slurm_ok = hoop__slurm_address(out, out->addr_given, out->port_given, why,
                                            sizeof why) == HOOP_OK;
        if (!out->slurm_ok) {
            if (!out->addr_given) out->host[0] = '\0';
            if (!out->port_given) out->port = 0;
        }
    }
    return HOOP_OK;
}

/* The arguments, the kind of method, who this rank is, where to meet, where it sits, its job, what
 * the launcher says of rank 0's address, and the key: one step each, the first failure ends it. */
hoop_result_t hoop__rdv_resolve(const char *init_method, int rank, int size, hoop__rdv_t *out,
                                char *err, size_t errlen)
{
    if (err != NULL && errlen > 0) err[0] = '\0';
    hoop_result_t r = check_args(rank, size, out, err, errlen);
    if (r != HOOP_OK) return r;
    const char *m = (init_method == NULL || *init_method == '\0') ? "env://" : init_method;
    size_t row = 0;
    r = find_method(m, &row, err, errlen);
    /* Who before where: a launcher variable that is not a number would otherwise hide behind
     * the address it failed to give (mpirun with a garbled OMPI_COMM_WORLD_SIZE is not "missing
     * MASTER_ADDR"). */
    if (r == HOOP_OK) r = resolve_rank_size(rank, size, out, err, errlen);
    if (r == HOOP_OK) r = methods[row].parse(m, m + strlen(methods[row].scheme), out, err, errlen);
    if (r == HOOP_OK) r = resolve_local(!(rank >= 0 && size >= 1), out, err, errlen);
    if (r == HOOP_OK) r = job_id(out, err, errlen);
    if (r == HOOP_OK) r = launcher_address(out, err, errlen);
    /* Last, so that no error path above leaves a key behind. */
    if (r == HOOP_OK && strcmp(out->method, "tcp") == 0)
        r = hoop__auth_key_from_env(&out->auth, getenv_ctx, NULL, err, errlen);
    return r;
}

hoop_result_t hoop__rdv_exchange(hoop__rdv_t *rdv, double timeout_s, const hoop__log_t *log,
                                 char *err, size_t errlen)
{
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (strcmp(rdv->via, "pmix") != 0 || rdv->size <= 1) return HOOP_OK;
    char why[400] = "";
    int missing = 1;
#ifdef HOOP__HAVE_PMIX
    hoop_result_t r = hoop__pmix_exchange(rdv, timeout_s, why, sizeof why, &missing);
    if (r == HOOP_OK) {
        HOOP__INFO(log, "rendezvous through PMIx: rank 0's store is on %s port %d", rdv->host,
                   rdv->port);
        return HOOP_OK;
    }
    if (!missing) {
        hoop__say(err, errlen, "%s", why);
        return r;
    }
#else
    (void)timeout_s;
    hoop__say(why, sizeof why, "this libhoop was built without PMIx (no libpmix-dev headers)");
#endif
    (void)missing;
    if (rdv->slurm_ok) {
        snprintf(rdv->via, sizeof rdv->via, "slurm");
        HOOP__INFO(log, "PMIx is offered but %s: meeting rank 0 through Slurm's variables instead",
                   why);
        return HOOP_OK;
    }
    return fail(err, errlen,
                "the launcher offers PMIx (PMIX_NAMESPACE is set), through which hoop finds rank "
                "0, but %s: set MASTER_ADDR and MASTER_PORT instead",
                why);
}
