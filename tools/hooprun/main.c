/*
 * hooprun: start the local ranks of a hoop job.
 *
 * Sets the same variables as torchrun (RANK, WORLD_SIZE, LOCAL_RANK, ...), so programs written for
 * either launcher run under both. Output of every rank is read through pipes and written line by line
 * with a "[RANK] " prefix; the first rank to fail brings the whole job down, so a crashed rank never
 * leaves its peers blocked in a collective forever.
 *
 * Standalone: C11 + POSIX (+ signalfd, PR_SET_PDEATHSIG and PR_SET_CHILD_SUBREAPER on Linux), no
 * libhoop. hooprun.h says which file holds what.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../../common/clock.h"
#include "hooprun.h"

int main(int argc, char **argv)
{
    /* With 0, 1 or 2 closed, a pipe could land there and be clobbered by the child's dup2. */
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDWR) != fd) return 1;

    if (argc > 1 && strcmp(argv[1], "--status") == 0) return status_main(argc, argv);
    struct opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;

    int status = 1;
    char *prog_path = resolve_program(o.prog_argv[0], &status);
    if (prog_path == NULL) return status;
    if (!o.port_given && !find_free_port(o.master_addr, o.master_port)) {
        free(prog_path);
        return 1;
    }

    struct job j = {.o = &o,
                    .prog_path = prog_path,
                    .sigfd = -1,
                    .devnull = -1,
                    .timeout_deadline = -1,
                    .failed_rank = -1};
    j.ranks = calloc((size_t)o.nproc, sizeof *j.ranks);
    j.out = malloc(sizeof *j.out);
    j.err = malloc(sizeof *j.err);
    if (j.ranks == NULL || j.out == NULL || j.err == NULL) {
        fprintf(stderr, "hooprun: out of memory\n");
        free(j.ranks);
        free(j.out);
        free(j.err);
        free(prog_path);
        return 1;
    }
    memcpy(j.master_port, o.master_port, sizeof j.master_port);
    j.out->fd = STDOUT_FILENO;
    j.out->broken = false;
    j.out->mid_line = false;
    j.out->len = 0;
    j.err->fd = STDERR_FILENO;
    j.err->broken = false;
    j.err->mid_line = false;
    j.err->len = 0;
    fflush(NULL);

    setup_job_id(&j);
    setup_threads(&j);
    setup_bind(&j);
    if (!setup_auth(&j)) {
        status = 1;
        goto out;
    }
    if (!setup_signals(&j)) {
        fprintf(stderr, "hooprun: cannot set up signal handling: %s\n", strerror(errno));
        status = 1;
        goto out;
    }
    j.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (j.devnull < 0) {
        fprintf(stderr, "hooprun: /dev/null: %s\n", strerror(errno));
        status = 1;
        goto out;
    }
    /* Three descriptors per rank: large jobs can pass the usual soft limit of 1024. The ranks get
     * the limit they would have had without us. */
    if (getrlimit(RLIMIT_NOFILE, &j.orig_nofile) == 0) {
        rlim_t need = (rlim_t)o.nproc * 3 + 64;
        if (j.orig_nofile.rlim_cur != RLIM_INFINITY && j.orig_nofile.rlim_cur < need) {
            struct rlimit raised = j.orig_nofile;
            raised.rlim_cur = j.orig_nofile.rlim_max == RLIM_INFINITY ||
                                      j.orig_nofile.rlim_max > need
                                  ? need
                                  : j.orig_nofile.rlim_max;
            j.nofile_raised = setrlimit(RLIMIT_NOFILE, &raised) == 0;
        }
    }
    if (o.has_timeout) j.timeout_deadline = now_ms() + (int64_t)(o.timeout_s * 1000.0 + 0.999);

    for (;;) {
        state_write(&j);
        bool started = true;
        /* No exec pipe before a start, at every attempt (a restart zeroes the ranks, and 0 is
         * a descriptor): a start that fails waits for the ranks before it, not on stdin. */
        for (int i = 0; i < o.nproc; i++) j.ranks[i].exec_fd = -1;
        for (int local = 0; local < o.nproc && started; local++) started = start_rank(&j, local);
        if (!started || !await_execs(&j)) begin_stop(&j);
        run_loop(&j);
        if (!j.ending || !may_restart(&j) || !prepare_restart(&j)) {
            status = j.ending ? j.status : 0;
            break;
        }
    }

out:
    state_remove();
    if (j.auth_env != NULL) {
        explicit_bzero(j.auth_env, strlen(j.auth_env));
        free(j.auth_env);
    }
    if (j.sigfd >= 0) close(j.sigfd);
    if (j.devnull >= 0) close(j.devnull);
    free(j.bind);
    free(j.inherited);
    free(j.ranks);
    free(j.out);
    free(j.err);
    free(prog_path);
    return status;
}
