/* hooprun --status: each hooprun leaves a small state file, mode 0600, in $XDG_RUNTIME_DIR/hoop
 * or else /tmp/hoop-UID (a directory of the user's alone), named hooprun-PID: where the job's
 * store is and the key its ranks were given. It is rewritten for each attempt and removed at
 * exit. `hooprun --status [PID|JOBID]` reads the only one (or the named one) and runs the query
 * of hoop-status (status/query.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/auth.h"
#include "hooprun.h"
#include "status/query.h"

/* The directory, made if need be; "" where there is none we may trust. */
static void state_dir(char *out, size_t n)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg != NULL && xdg[0] == '/')
        snprintf(out, n, "%s/hoop", xdg);
    else
        snprintf(out, n, "/tmp/hoop-%ld", (long)getuid());
    if (mkdir(out, 0700) != 0 && errno != EEXIST) goto none;
    struct stat sb;
    /* Ours, a directory, and nobody else's to write in (or to read keys from). */
    if (lstat(out, &sb) != 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != getuid() ||
        (sb.st_mode & 077) != 0)
        goto none;
    return;
none:
    out[0] = '\0';
}

void state_write(struct job *j)
{
    char dir[512], path[600], tmp[620];
    state_dir(dir, sizeof dir);
    if (dir[0] == '\0') return;
    snprintf(path, sizeof path, "%s/hooprun-%ld", dir, (long)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    if (f == NULL) {
        close(fd);
        unlink(tmp);
        return;
    }
    const char *job = j->job_env[0] != '\0' ? j->job_env + 12 : getenv("HOOP_JOB_ID");
    fprintf(f, "job %s\naddr %s\nport %s\n", job != NULL && job[0] != '\0' ? job : "-",
            j->o->master_addr, j->master_port);
    /* The key as the ranks got it: ours, the user's, or none (--no-auth). */
    const char *key = j->auth_env != NULL ? j->auth_env + 14 : getenv("HOOP_AUTH_KEY");
    const char *key_file = getenv("HOOP_AUTH_KEY_FILE");
    if (j->auth_env == NULL && j->o->no_auth) key = key_file = NULL;
    if (key != NULL && key[0] != '\0')
        fprintf(f, "key %s\n", key);
    else if (key_file != NULL && key_file[0] != '\0')
        fprintf(f, "key_file %s\n", key_file);
    if (fclose(f) != 0 || rename(tmp, path) != 0) unlink(tmp);
}

void state_remove(void)
{
    char dir[512], path[600];
    state_dir(dir, sizeof dir);
    if (dir[0] == '\0') return;
    snprintf(path, sizeof path, "%s/hooprun-%ld", dir, (long)getpid());
    unlink(path);
}

typedef struct state {
    long pid;
    char job[128], addr[256], port[8], key[1024], key_file[1024];
} state_t;

static int state_read(const char *path, state_t *s)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) return -1;
    char line[1200];
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *v = strchr(line, ' ');
        if (v == NULL) continue;
        *v++ = '\0';
        if (strcmp(line, "job") == 0) snprintf(s->job, sizeof s->job, "%s", v);
        if (strcmp(line, "addr") == 0) snprintf(s->addr, sizeof s->addr, "%s", v);
        if (strcmp(line, "port") == 0) snprintf(s->port, sizeof s->port, "%s", v);
        if (strcmp(line, "key") == 0) snprintf(s->key, sizeof s->key, "%s", v);
        if (strcmp(line, "key_file") == 0) snprintf(s->key_file, sizeof s->key_file, "%s", v);
    }
    explicit_bzero(line, sizeof line);
    fclose(f);
    return s->addr[0] != '\0' && s->port[0] != '\0' ? 0 : -1;
}

/* The running jobs' states (a file whose hooprun is gone is stale and skipped), at most cap. */
static int states(state_t *out, int cap)
{
    char dir[512];
    state_dir(dir, sizeof dir);
    DIR *d = dir[0] != '\0' ? opendir(dir) : NULL;
    if (d == NULL) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < cap) {
        char *end = NULL;
        if (strncmp(e->d_name, "hooprun-", 8) != 0) continue;
        long pid = strtol(e->d_name + 8, &end, 10);
        if (end == e->d_name + 8 || *end != '\0' || pid <= 0) continue;
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) continue;
        char path[800];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        memset(&out[n], 0, sizeof out[n]);
        out[n].pid = pid;
        if (state_read(path, &out[n]) == 0) n++;
    }
    closedir(d);
    return n;
}

int status_main(int argc, char **argv)
{
    int i = 2, as_json = 0;
    double timeout_s = 2.0;
    if (hoop__sq_options(argc, argv, &i, &as_json, &timeout_s, "hooprun --status") != 0) return 2;
    const char *want = i < argc ? argv[i++] : NULL;
    if (i < argc) {
        fprintf(stderr, "usage: hooprun --status [--json] [--timeout S] [PID|JOBID]\n");
        return 2;
    }
    enum { CAP = 64 };
    state_t *all = calloc(CAP, sizeof *all);
    if (all == NULL) return 1;
    int n = states(all, CAP), pick = -1, matches = 0;
    for (int k = 0; k < n; k++) {
        char pid[24];
        snprintf(pid, sizeof pid, "%ld", all[k].pid);
        if (want == NULL || strcmp(want, pid) == 0 || strcmp(want, all[k].job) == 0) {
            pick = k;
            matches++;
        }
    }
    int rc = 1;
    if (matches == 0) {
        fprintf(stderr, "hooprun --status: %s\n",
                want != NULL ? "no running job of hooprun's has that pid or job id"
                             : "no job of hooprun's is running (for this user)");
    } else if (matches > 1) {
        fprintf(stderr, "hooprun --status: %d jobs of hooprun's are running; name one:\n", matches);
        for (int k = 0; k < n; k++)
            fprintf(stderr, "  pid %ld, job %s, store %s:%s\n", all[k].pid, all[k].job, all[k].addr,
                    all[k].port);
        rc = 2;
    } else {
        state_t *s = &all[pick];
        hoop__auth_key_t key = {0};
        char err[1024] = "";
        hoop_result_t krc = HOOP_OK;
        if (s->key[0] != '\0')
            krc = hoop__auth_key_from_string(&key, s->key, err, sizeof err);
        else if (s->key_file[0] != '\0')
            krc = hoop__auth_key_from_file(&key, s->key_file, err, sizeof err);
        hoop__sq_t q;
        hoop__sq_opts_t o = {
            .host = s->addr, .port = atoi(s->port), .timeout_s = timeout_s, .key = &key};
        if (krc == HOOP_OK) krc = hoop__sq_run(&o, &q, err, sizeof err);
        hoop__auth_key_wipe(&key);
        if (krc != HOOP_OK) {
            fprintf(stderr, "hooprun --status: job %s (hooprun pid %ld): %s\n", s->job, s->pid,
                    err);
        } else {
            hoop__sq_print(&q, as_json, stdout);
            hoop__sq_free(&q);
            rc = 0;
        }
    }
    explicit_bzero(all, CAP * sizeof *all);
    free(all);
    return rc;
}
