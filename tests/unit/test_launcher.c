/* Launchers as a rendezvous: Slurm's host list expander, the port derived from the job and step,
 * what env://, slurm:// and pmix:// resolve to from srun's and mpirun's variables (and which of
 * MASTER_ADDR / MASTER_PORT and the launcher wins), and the PMIx exchange's fallback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/log.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/slurm.h"

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

int main(void)
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
    return cmocka_run_group_tests(tests, NULL, NULL);
}
