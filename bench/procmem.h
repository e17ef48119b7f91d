/* What a process holds, read from /proc: resident memory, the shared memory it maps (memfd and
 * /dev/shm mappings: hoop's one-host area and rings) and its open file descriptors. Used by
 * hoop-perf -M and bench/scale. Header-only, as bench_util.h. */
#ifndef HOOP_BENCH_PROCMEM_H
#define HOOP_BENCH_PROCMEM_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A "Key:   N kB" line of /proc/self/status (or /proc/meminfo), in bytes; 0 if absent. */
static inline int64_t procmem_kb_line(const char *file, const char *key)
{
    FILE *f = fopen(file, "r");
    char line[256];
    int64_t v = 0;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            v = strtoll(line + n + 1, NULL, 10);
            break;
        }
    if (f) fclose(f);
    return v * 1024;
}

static inline int64_t procmem_rss(void) { return procmem_kb_line("/proc/self/status", "VmRSS"); }

/* Size and Rss of this process's shared-memory mappings (memfd, /dev/shm), summed. */
static inline void procmem_shm(int64_t *size, int64_t *rss)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in_shm = 0;
    *size = *rss = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int path = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path) == 2 && path > 0) {
            const char *p = line + path;
            in_shm = !strncmp(p, "/memfd:", 7) || !strncmp(p, "/dev/shm/", 9);
        } else if (in_shm && !strncmp(line, "Size:", 5)) {
            *size += strtoll(line + 5, NULL, 10) * 1024;
        } else if (in_shm && !strncmp(line, "Rss:", 4)) {
            *rss += strtoll(line + 4, NULL, 10) * 1024;
        }
    }
    if (f) fclose(f);
}

static inline int64_t procmem_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int64_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n > 0 ? n - 1 : 0; /* less the directory's own */
}

#endif
