/* The PMIx exchange of rank 0's store address (pmix.h). */
#include "rendezvous/pmix.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

static hoop_result_t exchange(hoop__pmix_t *px, const pmix_proc_t *me, hoop__rdv_t *rdv,
                              double timeout_s, char *err, size_t errlen)
{
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
        s = px->put(PMIX_GLOBAL, KEY, &val);
        if (s == PMIX_SUCCESS) s = px->commit();
        if (s != PMIX_SUCCESS) {
            hoop__say(err, errlen, "PMIx_Put of the store address failed: %s", px->error_string(s));
            return HOOP_ERR_SYSTEM;
        }
    }
    pmix_info_t info[2];
    info_bool(&info[0], PMIX_COLLECT_DATA, 1);
    int secs = timeout_s >= 1 ? (int)ceil(timeout_s < 1e6 ? timeout_s : 1e6) : 1;
    info_int(&info[1], PMIX_TIMEOUT, secs);
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

hoop_result_t hoop__pmix_exchange(hoop__rdv_t *rdv, double timeout_s, char *err, size_t errlen,
                                  int *missing)
{
    *missing = 1;
    hoop__pmix_t px;
    if (hoop__pmix_load(&px, err, errlen) != 0) return HOOP_ERR_UNSUPPORTED;
    pmix_proc_t me;
    memset(&me, 0, sizeof me);
    pmix_status_t s = px.init(&me, NULL, 0);
    if (s != PMIX_SUCCESS) {
        hoop__say(err, errlen, "PMIx_Init cannot reach the launcher's PMIx server: %s",
                  px.error_string(s));
        hoop__pmix_unload(&px);
        return HOOP_ERR_UNSUPPORTED;
    }
    *missing = 0;
    hoop_result_t r = exchange(&px, &me, rdv, timeout_s, err, errlen);
    /* Counted: where the program itself uses PMIx (through MPI), its own PMIx_Init still holds. */
    px.finalize(NULL, 0);
    hoop__pmix_unload(&px);
    return r;
}
