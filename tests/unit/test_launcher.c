/* Launchers as a rendezvous: Slurm's host list expander, the port derived from the job and step,
 * what env://, slurm:// and pmix:// resolve to from srun's and mpirun's variables (and which of
 * MASTER_ADDR / MASTER_PORT and the launcher wins), and the PMIx exchange's fallback. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/slurm.h"
#include "../common/testing.h"

static const char *const all_vars[] = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "HOOP_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "HOOP_AUTH_KEY",
    "HOOP_AUTH_KEY_FILE",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NODEID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURMD_NODENAME",
    "PMIX_NAMESPACE",
    "PMIX_RANK",
    "PMIX_SERVER_URI4",
    "PMIX_SERVER_URI3",
    "PMIX_SERVER_URI2",
    "PMIX_SERVER_URI21",
    "PMIX_SERVER_URI41",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_ess_base_jobid",
};

static int env_setup(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
    return 0;
}

/* The whole expansion of list, as names joined by spaces; the host count in *count. */
static int expand(const char *list, char *out, size_t cap, long *count, char *err, size_t errlen)
{
    char host[64];
    size_t used = 0;
    long n = 0;
    out[0] = '\0';
    if (hoop__nodelist_host(list, 0, host, sizeof host, &n, err, errlen) != 0) return -1;
    for (long i = 0; i < n; i++) {
        long again = -1;
        assert_int_equal(hoop__nodelist_host(list, i, host, sizeof host, &again, err, errlen), 0);
        assert_int_equal(again, n);
        used += (size_t)snprintf(out + used, cap - used, "%s%s", i ? " " : "", host);
        assert_true(used < cap);
    }
    *count = n;
    return 0;
}

static void test_nodelist_valid(void **state)
{
    (void)state;
    static const struct {
        const char *list, *hosts;
    } cases[] = {
        {"node01", "node01"},
        {"localhost", "localhost"},
        {"node[01-04,07]", "node01 node02 node03 node04 node07"},
        {"a[1-2],b3", "a1 a2 b3"},
        {"b3,a[1-2]", "b3 a1 a2"},
        {"n[8-10]", "n8 n9 n10"},
        {"n[08-10]", "n08 n09 n10"},
        {"n[098-101]", "n098 n099 n100 n101"},
        {"n[0-1]", "n0 n1"},
        {"n[7]", "n7"},
        {"n[007]", "n007"},
        {"x[001-003]y", "x001y x002y x003y"},
        {"[1-3]", "1 2 3"},
        {"r[1-2]-n[1-2]", "r1-n1 r1-n2 r2-n1 r2-n2"},
        {"r[1-2]n[01,03]s[5],z", "r1n01s5 r1n03s5 r2n01s5 r2n03s5 z"},
        {"gpu-a.b_c[3,1]", "gpu-a.b_c3 gpu-a.b_c1"},
        {"a,b,c", "a b c"},
        {"a[1-1],a[1]", "a1 a1"},
        {"h[999999998-999999999]", "h999999998 h999999999"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char got[512], err[256] = "";
        long n = 0;
        if (expand(cases[i].list, got, sizeof got, &n, err, sizeof err) != 0)
            fail_msg("\"%s\": %s", cases[i].list, err);
        if (strcmp(got, cases[i].hosts) != 0)
            fail_msg("\"%s\" expands to \"%s\", want \"%s\"", cases[i].list, got, cases[i].hosts);
        long words = 1;
        for (const char *c = cases[i].hosts; *c; c++) words += *c == ' ';
        assert_int_equal(n, words);
    }
    /* A large list, read at its ends: the count and the padding of the last. */
    char host[64], err[256];
    long n = 0;
    assert_int_equal(
        hoop__nodelist_host("c[00001-100000],d", 99999, host, sizeof host, &n, err, sizeof err), 0);
    assert_int_equal(n, 100001);
    assert_string_equal(host, "c100000");
    assert_int_equal(
        hoop__nodelist_host("c[00001-100000],d", 100000, host, sizeof host, &n, err, sizeof err),
        0);
    assert_string_equal(host, "d");
    assert_int_equal(
        hoop__nodelist_host("c[00001-100000],d", 0, host, sizeof host, &n, err, sizeof err), 0);
    assert_string_equal(host, "c00001");
}

static void test_nodelist_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *list, *says;
    } cases[] = {
        {"", "empty"},
        {"n[", "bracket"},
        {"n[]", "bracket"},
        {"n[1-]", "bracket"},
        {"n[-1]", "bracket"},
        {"n[3-1]", "bracket"},
        {"n[1,,2]", "bracket"},
        {"n[1,]", "bracket"},
        {"n[1-2", "bracket"},
        {"n[a-b]", "bracket"},
        {"n[[1]]", "bracket"},
        {"n[1-2-3]", "bracket"},
        {"n[1 ]", "bracket"},
        {"n[1234567890]", "bracket"},
        {"n]", "no '['"},
        {"a,,b", "empty host"},
        {",a", "empty host"},
        {"a,", "ends with a comma"},
        {"n 1", "space"},
        {"n\t1", "space"},
        {"n\xc3\xa9", "unprintable"},
        {"a[1][2][3][4][5][6][7][8][9]", "8 bracket groups"},
        {"a[1-999999999]b[1-999999999]", "too many hosts"},
        {"a[1-16777216],b[1-16777216]", "too many hosts"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char host[64] = "", err[400] = "";
        long n = -5;
        if (hoop__nodelist_host(cases[i].list, 0, host, sizeof host, &n, err, sizeof err) == 0)
            fail_msg("\"%s\" was accepted (as %s)", cases[i].list, host);
        if (strstr(err, cases[i].says) == NULL || strstr(err, "malformed") == NULL)
            fail_msg("\"%s\": \"%s\" does not say \"%s\"", cases[i].list, err, cases[i].says);
    }
    /* Beyond the list, and a host that does not fit. */
    char host[8], err[400];
    long n = 0;
    assert_int_equal(hoop__nodelist_host("a[1-3]", 3, host, sizeof host, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "has 3 host(s)"));
    assert_int_equal(hoop__nodelist_host("abcdefgh", 0, host, sizeof host, &n, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "longer than 7"));
    assert_string_equal(host, ""); /* a failure leaves no half-written name */
    assert_int_equal(
        hoop__nodelist_host("abc[1000-1001]", 1, host, sizeof host, &n, err, sizeof err), 0);
    assert_string_equal(host, "abc1001");
    assert_int_equal(
        hoop__nodelist_host("abcd[1000-1001]", 1, host, sizeof host, &n, err, sizeof err), -1);
}

static void test_slurm_port(void **state)
{
    (void)state;
    /* In range, below Linux's ephemeral ports, and different for jobs and steps that run side by
     * side: the 1250 jobs around one, each with up to 16 steps. */
    static unsigned char seen[HOOP__SLURM_PORT_SPAN];
    memset(seen, 0, sizeof seen);
    for (unsigned long job = 777000; job < 778250; job++)
        for (unsigned long step = 0; step < 16; step++) {
            int p = hoop__slurm_port(job, step);
            assert_true(p >= HOOP__SLURM_PORT_BASE &&
                        p < HOOP__SLURM_PORT_BASE + HOOP__SLURM_PORT_SPAN);
            assert_true(p < 32768);
            assert_int_equal(seen[p - HOOP__SLURM_PORT_BASE], 0);
            seen[p - HOOP__SLURM_PORT_BASE] = 1;
        }
    assert_int_equal(hoop__slurm_port(0, 0), HOOP__SLURM_PORT_BASE);
    assert_int_equal(hoop__slurm_port(4294967295UL, 4294967294UL),
                     HOOP__SLURM_PORT_BASE +
                         (int)((4294967295ULL * 16 + 4294967294ULL % 16) % HOOP__SLURM_PORT_SPAN));
}

static void test_tasks_per_node(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        long node, tasks; /* tasks -1: refused */
    } cases[] = {
        {"4", 0, 4},      {"4", 1, -1},      {"2(x3)", 0, 2},    {"2(x3)", 2, 2},
        {"2(x3)", 3, -1}, {"2(x3),1", 3, 1}, {"1,2,3", 1, 2},    {"3(x2),1,5(x2)", 4, 5},
        {"", 0, -1},      {"2(x0)", 0, -1},  {"2(3)", 0, -1},    {"2(x3", 0, -1},
        {"2,", 0, -1},    {",2", 0, -1},     {"2(x3),a", 0, -1}, {"2 ", 0, -1},
        {"-1", 0, -1},    {"4", -1, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long t = -7;
        int rc = hoop__slurm_tasks_on_node(cases[i].spec, cases[i].node, &t);
        if (cases[i].tasks < 0 && rc == 0)
            fail_msg("\"%s\" node %ld: accepted as %ld", cases[i].spec, cases[i].node, t);
        if (cases[i].tasks >= 0 && (rc != 0 || t != cases[i].tasks))
            fail_msg("\"%s\" node %ld: rc %d, %ld tasks, want %ld", cases[i].spec, cases[i].node,
                     rc, t, cases[i].tasks);
    }
}

static void srun_task(const char *procid)
{
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_STEP_ID", "3", 1);
    setenv("SLURM_PROCID", procid, 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_LOCALID", procid, 1);
    setenv("SLURM_STEP_NODELIST", "gpu[07-08],cpu1", 1);
    setenv("SLURM_JOB_NODELIST", "gpu[01-09],cpu[1-4]", 1);
    setenv("SLURMD_NODENAME", strcmp(procid, "0") == 0 ? "gpu07" : "gpu08", 1);
}

static void test_resolve_slurm(void **state)
{
    (void)state;
    hoop__rdv_t r;
    char err[512];
    srun_task("1");
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.method, "tcp");
    assert_string_equal(r.via, "slurm");
    assert_string_equal(r.host, "gpu07");
    assert_int_equal(r.port, hoop__slurm_port(4242, 3));
    assert_int_equal(r.rank, 1);
    assert_int_equal(r.size, 4);
    assert_string_equal(r.job, "4242.3");
    assert_int_equal(r.local_rank, 1);
    assert_int_equal(r.local_size, -1);
    /* The step's tasks on this node, not an allocation's inherited SLURM_NTASKS_PER_NODE. */
    setenv("SLURM_NTASKS_PER_NODE", "8", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "1,2(x2)", 1);
    setenv("SLURM_NODEID", "2", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_int_equal(r.local_size, 2);
    setenv("SLURM_NODEID", "3", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "SLURM_STEP_TASKS_PER_NODE=\"1,2(x2)\""));
    setenv("LOCAL_WORLD_SIZE", "3", 1); /* explicit wins */
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_int_equal(r.local_size, 3);
    unsetenv("LOCAL_WORLD_SIZE");
    unsetenv("SLURM_STEP_TASKS_PER_NODE");
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT); /* 8 of an allocation, more than the 4 tasks */
    unsetenv("SLURM_NTASKS_PER_NODE");
    unsetenv("SLURM_NODEID");
    /* Nothing to exchange without PMIx. */
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__rdv_exchange(&r, 1, NULL, err, sizeof err), HOOP_OK);
    assert_int_equal(r.port, hoop__slurm_port(4242, 3));

    /* Rank 0 on the first host; the job's list where the step's is missing. */
    srun_task("0");
    unsetenv("SLURM_STEP_NODELIST");
    assert_int_equal(hoop__rdv_resolve("env://", -1, -1, &r, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "rank 0 runs on gpu07, not on gpu01"));
    assert_non_null(strstr(err, "SLURM_JOB_NODELIST"));
    setenv("SLURMD_NODENAME", "gpu01", 1);
    assert_int_equal(hoop__rdv_resolve("slurm://", -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.host, "gpu01");
    assert_int_equal(r.rank, 0);

    /* Explicit wins, one variable at a time. */
    srun_task("2");
    setenv("MASTER_ADDR", "10.0.0.9", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.host, "10.0.0.9");
    assert_int_equal(r.port, hoop__slurm_port(4242, 3));
    unsetenv("MASTER_ADDR");
    setenv("MASTER_PORT", "29511", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.host, "gpu07");
    assert_int_equal(r.port, 29511);
    setenv("MASTER_ADDR", "10.0.0.9", 1);
    setenv("RANK", "3", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.via, "");
    assert_string_equal(r.host, "10.0.0.9");
    assert_int_equal(r.port, 29511);
    assert_int_equal(r.rank, 3);
    /* slurm:// takes Slurm's way for what MASTER_* leave unset, here nothing. */
    assert_int_equal(hoop__rdv_resolve("slurm://", -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.via, "slurm");
    assert_string_equal(r.host, "10.0.0.9");
}

static void test_resolve_slurm_errors(void **state)
{
    (void)state;
    hoop__rdv_t r;
    char err[512];
    srun_task("1");
    setenv("SLURM_STEP_NODELIST", "gpu[07-", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "SLURM_STEP_NODELIST"));
    assert_non_null(strstr(err, "malformed"));
    assert_non_null(strstr(err, "MASTER_ADDR"));
    srun_task("1");
    setenv("SLURM_STEP_ID", "batch", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "MASTER_PORT"));
    /* Outside a step (the batch script itself): env:// asks for MASTER_ADDR, slurm:// says why. */
    env_setup(NULL);
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "4", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "needs MASTER_ADDR"));
    assert_int_equal(hoop__rdv_resolve("slurm://", -1, -1, &r, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "task of srun"));
    assert_int_equal(hoop__rdv_resolve("pmix://", -1, -1, &r, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "PMIX_NAMESPACE"));
    assert_int_equal(hoop__rdv_resolve("slurm://x", -1, -1, &r, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "text after the scheme"));
}

static void test_resolve_pmix(void **state)
{
    (void)state;
    hoop__rdv_t r;
    char err[512];
    /* mpirun: PMIx is the only way to rank 0. */
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("PMIX_NAMESPACE", "prterun-vm-1234@1", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.via, "pmix");
    assert_string_equal(r.method, "tcp");
    assert_int_equal(r.slurm_ok, 0);
    assert_int_equal(r.rank, 2);
    assert_string_equal(r.job, "prterun-vm-1234@1");
    /* Both MASTER_* set: no launcher is asked. */
    setenv("MASTER_ADDR", "h", 1);
    setenv("MASTER_PORT", "5", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.via, "");
    assert_int_equal(hoop__rdv_exchange(&r, 1, NULL, err, sizeof err), HOOP_OK);
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    /* srun --mpi=pmix: Slurm's way stands ready. */
    srun_task("1");
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.via, "pmix");
    assert_int_equal(r.slurm_ok, 1);
    assert_string_equal(r.host, "gpu07");
    assert_string_equal(r.job, "4242.3");
    /* A PMIx that cannot be reached (no server here): Slurm's way instead, said in the log. */
    hoop__log_t log;
    hoop__log_open(&log, HOOP__LOG_WARN, NULL, 1);
    assert_int_equal(hoop__rdv_exchange(&r, 2, &log, err, sizeof err), HOOP_OK);
    assert_string_equal(r.via, "slurm");
    assert_string_equal(r.host, "gpu07");
    assert_int_equal(r.port, hoop__slurm_port(4242, 3));
    /* Without Slurm to fall back on, a sentence: what is missing and what to set. */
    env_setup(NULL);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("PMIX_NAMESPACE", "prterun-vm-1234@1", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_int_not_equal(hoop__rdv_exchange(&r, 2, &log, err, sizeof err), HOOP_OK);
    assert_non_null(strstr(err, "offers PMIx"));
    assert_non_null(strstr(err, "set MASTER_ADDR and MASTER_PORT"));
    hoop__log_close(&log);
    srun_task("1");
    setenv("PMIX_NAMESPACE", "slurm.pmix.4242.3", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    /* A single rank meets nobody: nothing asked. */
    r.size = 1;
    assert_int_equal(hoop__rdv_exchange(&r, 1, NULL, err, sizeof err), HOOP_OK);
    assert_string_equal(r.via, "pmix");
}

/* A PMIx server that takes connections and never answers, as a stopped mpirun's socket does: a
 * child process listening on loopback that accepts and holds every connection until it is killed.
 * Its port in *port; *accepts is a pipe that gets a byte for each connection it accepted. */
static pid_t silent_pmix_server(int *port, int *accepts)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        /* Gone with the test, whatever becomes of it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(60);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
            getsockname(fd, (struct sockaddr *)&a, &len) != 0)
            _exit(1);
        int got = ntohs(a.sin_port);
        if (write(p[1], &got, sizeof got) != (ssize_t)sizeof got) _exit(1);
        for (;;) /* kept open, never read */
            if (accept(fd, NULL, NULL) >= 0 && write(p[1], "a", 1) != 1) _exit(1);
    }
    close(p[1]);
    assert_int_equal(read(p[0], port, sizeof *port), (ssize_t)sizeof *port);
    *accepts = p[0];
    return pid;
}

/* Kills the server; returns how many connections it had accepted. */
static int stop_child(pid_t pid, int accepts)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int n = 0;
    char b[64];
    ssize_t got;
    while ((got = read(accepts, b, sizeof b)) > 0) n += (int)got;
    close(accepts);
    return n;
}

/* What mpirun gives rank 1 of 2, its PMIx server on loopback port. */
static void pmix_launch_env(int port)
{
    static const char *const uris[] = {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3",
                                       "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"};
    char uri[128];
    snprintf(uri, sizeof uri, "silent@1.0;tcp4://127.0.0.1:%d", port);
    for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) setenv(uris[i], uri, 1);
    setenv("PMIX_NAMESPACE", "silent@1", 1);
    setenv("PMIX_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
}

typedef struct timed_call {
    int whole_init; /* hoop_init itself, else the exchange alone */
    double timeout;
    hoop_result_t rc;
    double took;
    char err[512];
} timed_call_t;

static void *timed_call_main(void *arg)
{
    timed_call_t *x = arg;
    const double t0 = now_s();
    if (x->whole_init) {
        hoop_comm_t *c = NULL;
        x->rc = hoop_init(&c, "env://", -1, -1);
        if (c != NULL) hoop_comm_destroy(c);
    } else {
        hoop__rdv_t r;
        x->rc = hoop__rdv_resolve(NULL, -1, -1, &r, x->err, sizeof x->err);
        if (x->rc == HOOP_OK)
            x->rc = hoop__rdv_exchange(&r, x->timeout, NULL, x->err, sizeof x->err);
    }
    x->took = now_s() - t0;
    return NULL;
}

/* Runs x on a thread and fails the test unless it is back within limit seconds (a call stuck in
 * libpmix is left behind: the test has failed anyway). */
static void call_within(timed_call_t *x, double limit)
{
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, timed_call_main, x), 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)limit;
    ts.tv_nsec += (long)((limit - (double)(time_t)limit) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    if (pthread_timedjoin_np(t, NULL, &ts) != 0) {
        pthread_detach(t);
        fail_msg("%s still waits for the PMIx server after %g s (HOOP_TIMEOUT %g s)",
                 x->whole_init ? "hoop_init" : "hoop__rdv_exchange", limit, x->timeout);
    }
}

/* Every wait of init is bounded by HOOP_TIMEOUT, libpmix's too: a PMIx server that never answers
 * is a timeout that names PMIx and the server, within the timeout and 2 s. */
static void test_pmix_server_silent(void **state)
{
    (void)state;
    int port = 0, accepts = -1;
    pid_t srv = silent_pmix_server(&port, &accepts);
    pmix_launch_env(port);
    char want[96];
    snprintf(want, sizeof want, "PMIx server at tcp4://127.0.0.1:%d (PMIX_SERVER_URI41)", port);
    timed_call_t x = {.timeout = 2.0};
    call_within(&x, x.timeout + 2);
    if (strstr(x.err, "install PMIx") != NULL) {
        stop_child(srv, accepts);
        skip(); /* no libpmix here to be stuck in */
    }
    if (x.rc != HOOP_ERR_TIMEOUT || x.took < x.timeout - 0.1 ||
        strstr(x.err, "PMIx_Init") == NULL || strstr(x.err, want) == NULL)
        fail_msg("a silent PMIx server: %s after %.2f s: \"%s\"", hoop_error_string(x.rc), x.took,
                 x.err);
    /* hoop_init as a program calls it, while the last PMIx_Init is still stuck. */
    setenv("HOOP_TIMEOUT", "2", 1);
    timed_call_t w = {.whole_init = 1, .timeout = 2.0};
    call_within(&w, w.timeout + 2);
    unsetenv("HOOP_TIMEOUT");
    if (w.rc != HOOP_ERR_TIMEOUT)
        fail_msg("hoop_init under a silent PMIx server: %s after %.2f s", hoop_error_string(w.rc),
                 w.took);
    /* Once the server is gone the stuck call ends, and the next exchange asks PMIx afresh. */
    stop_child(srv, accepts);
    srv = silent_pmix_server(&port, &accepts);
    pmix_launch_env(port);
    snprintf(want, sizeof want, "PMIx server at tcp4://127.0.0.1:%d (PMIX_SERVER_URI41)", port);
    x = (timed_call_t){.timeout = 3.0};
    call_within(&x, x.timeout + 2);
    if (x.rc != HOOP_ERR_TIMEOUT || strstr(x.err, "PMIx_Init") == NULL ||
        strstr(x.err, want) == NULL)
        fail_msg("a second silent PMIx server: %s after %.2f s: \"%s\"", hoop_error_string(x.rc),
                 x.took, x.err);
    /* Asked afresh means a connection to the new server, not a timeout on the old one's. */
    if (stop_child(srv, accepts) < 1)
        fail_msg("the second silent PMIx server was never reached: its timeout is not the one "
                 "of a fresh PMIx_Init");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodelist_valid),
        cmocka_unit_test(test_nodelist_malformed),
        cmocka_unit_test(test_slurm_port),
        cmocka_unit_test(test_tasks_per_node),
        cmocka_unit_test_setup(test_resolve_slurm, env_setup),
        cmocka_unit_test_setup(test_resolve_slurm_errors, env_setup),
        cmocka_unit_test_setup(test_resolve_pmix, env_setup),
    };
    /* In a process of its own: libpmix crashes in a PMIx_Init that reaches a server after one in
     * the same process found none (test_resolve_pmix's). */
    const struct CMUnitTest silent[] = {
        cmocka_unit_test_setup(test_pmix_server_silent, env_setup),
    };
    if (argc > 1 && strcmp(argv[1], "--pmix-silent") == 0)
        return cmocka_run_group_tests(silent, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
