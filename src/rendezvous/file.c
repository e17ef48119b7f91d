/* The file store's kind: one file per key under PATH.d, written to a temporary file and renamed
 * into place so that a reader sees either nothing or the whole value; a claim links its file into
 * place, so that the file system decides who was first. Readers poll (store.c). */
#define HOOP__LOG_SUBSYS HOOP__SUB_RENDEZVOUS /* of its INFO and TRACE lines (base/log.h) */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rendezvous/store_ops.h"

typedef struct file_store {
    char dir[PATH_MAX];
    int dir_ok; /* dir was created: only then may close clean it up */
} file_store_t;

/* Creates dir and its parents; an existing directory is fine. */
static int mkdir_p(const char *dir)
{
    char buf[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        const char saved = buf[i];
        buf[i] = '\0';
        struct stat sb;
        /* Existing parents may answer EACCES or EROFS rather than EEXIST. Where the directory is
         * not there, mkdir's error is the reason, not the look's ENOENT. */
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            const int e = errno;
            if (!(stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode))) {
                errno = e;
                return -1;
            }
        }
        buf[i] = saved;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* Escaped path of key below f->dir, and in *name_at the offset of its last component.
 * Characters outside [A-Za-z0-9_.-] become %XX, and so does a '.' that starts a component (no ".",
 * "..", or clash with the ".tmp." files). Names longer than one component allows are split into
 * directories whose names end in '+', which no escaped name contains, so that the mapping stays
 * one to one. */
#define NAME_CHUNK 200
static int key_path(const file_store_t *f, const char *key, char *out, size_t cap, size_t *name_at)
{
    static const char hex[] = "0123456789ABCDEF";
    int n = snprintf(out, cap, "%s/", f->dir);
    if (n < 0 || (size_t)n >= cap) return -1;
    size_t j = (size_t)n, comp = j;
    for (const unsigned char *k = (const unsigned char *)key; *k != '\0'; k++) {
        if (j - comp >= NAME_CHUNK) {
            if (j + 2 >= cap) return -1;
            out[j++] = '+';
            out[j++] = '/';
            comp = j;
        }
        if (j + 4 >= cap) return -1;
        const unsigned char c = *k;
        const int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                          (c >= '0' && c <= '9') || c == '_' || c == '-' || (c == '.' && j != comp);
        if (plain) {
            out[j++] = (char)c;
        } else {
            out[j++] = '%';
            out[j++] = hex[c >> 4];
            out[j++] = hex[c & 15];
        }
    }
    out[j] = '\0';
    *name_at = comp;
    return 0;
}

/* key_path into path (PATH_MAX bytes), or a sentence in st->err. */
static hoop_result_t file_path(hoop__store_t *st, const char *key, char *path, size_t *name_at)
{
    const file_store_t *f = st->state;
    if (key_path(f, key, path, PATH_MAX, name_at) == 0) return HOOP_OK;
    hoop__say(st->err, sizeof st->err,
              "the file store path for a key is too long (store directory %s)", f->dir);
    return HOOP_ERR_INVALID_ARGUMENT;
}

/* Writes val into a fresh temporary file beside key's path; path and tmp get both names. */
static hoop_result_t file_write_tmp(hoop__store_t *st, const char *key, const void *val, size_t len,
                                    char *path, char *tmp)
{
    const file_store_t *f = st->state;
    size_t name_at;
    if (file_path(st, key, path, &name_at) != HOOP_OK) return HOOP_ERR_INVALID_ARGUMENT;
    /* Split names need their directories. */
    if (name_at > strlen(f->dir) + 1) {
        char d[PATH_MAX];
        memcpy(d, path, name_at - 1);
        d[name_at - 1] = '\0';
        if (mkdir_p(d) != 0) {
            hoop__say(st->err, sizeof st->err, "cannot create %s: %s", d, strerror(errno));
            return HOOP_ERR_SYSTEM;
        }
    }
    snprintf(tmp, PATH_MAX, "%.*s.tmp.XXXXXX", (int)name_at, path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        hoop__say(st->err, sizeof st->err, "cannot create a file in the store directory %s: %s",
                  f->dir, strerror(errno));
        return HOOP_ERR_SYSTEM;
    }
    const uint8_t *p = val;
    size_t left = len;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            hoop__say(st->err, sizeof st->err, "cannot write %s: %s", tmp,
                      n < 0 ? strerror(errno) : "short write");
            close(fd);
            unlink(tmp);
            return HOOP_ERR_SYSTEM;
        }
        p += n;
        left -= (size_t)n;
    }
    if (close(fd) != 0) {
        hoop__say(st->err, sizeof st->err, "cannot write %s: %s", tmp, strerror(errno));
        unlink(tmp);
        return HOOP_ERR_SYSTEM;
    }
    return HOOP_OK;
}

static hoop_result_t file_set(hoop__store_t *st, const char *key, size_t keylen, const void *val,
                              size_t len)
{
    (void)keylen;
    char path[PATH_MAX], tmp[PATH_MAX];
    hoop_result_t r = file_write_tmp(st, key, val, len, path, tmp);
    if (r != HOOP_OK) return r;
    if (rename(tmp, path) != 0) {
        hoop__say(st->err, sizeof st->err, "cannot rename %s to %s: %s", tmp, path,
                  strerror(errno));
        unlink(tmp);
        return HOOP_ERR_SYSTEM;
    }
    return HOOP_OK;
}

/* 1 found, 0 not there yet, -1 error (st->err set). */
static int file_try_get(hoop__store_t *st, const char *path, void *buf, size_t cap, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        hoop__say(st->err, sizeof st->err, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 0 ||
        (uint64_t)sb.st_size > HOOP__STORE_MAX_VALUE) {
        hoop__say(st->err, sizeof st->err,
                  "%s is not a store value (not a regular file, or over %u bytes)", path,
                  (unsigned)HOOP__STORE_MAX_VALUE);
        close(fd);
        return -1;
    }
    const size_t size = (size_t)sb.st_size;
    size_t want = size < cap ? size : cap, got = 0;
    while (got < want) {
        ssize_t n = read(fd, (uint8_t *)buf + got, want - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            hoop__say(st->err, sizeof st->err, "cannot read %s: %s", path,
                      n < 0 ? strerror(errno) : "file shrank");
            close(fd);
            return -1;
        }
        got += (size_t)n;
    }
    close(fd);
    if (len != NULL) *len = size;
    return 1;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (type == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0; /* best effort: keep going */
}

static hoop_result_t file_claim(hoop__store_t *st, const char *key, size_t keylen, const void *val,
                                size_t len, int *taken, void *holder, size_t cap,
                                size_t *holder_len)
{
    (void)keylen;
    /* link(2) fails with EEXIST when the name exists: the file system decides. */
    char path[PATH_MAX], tmp[PATH_MAX];
    hoop_result_t r = file_write_tmp(st, key, val, len, path, tmp);
    if (r != HOOP_OK) return r;
    if (link(tmp, path) == 0) {
        unlink(tmp);
    } else if (errno == EEXIST) {
        unlink(tmp);
        *taken = 1;
        int got = file_try_get(st, path, holder, cap, holder_len);
        if (got < 0) r = HOOP_ERR_SYSTEM;
    } else {
        hoop__say(st->err, sizeof st->err, "cannot link %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        r = HOOP_ERR_SYSTEM;
    }
    return r;
}

static hoop_result_t file_get(hoop__store_t *st, const char *key, size_t keylen, void *buf,
                              size_t cap, size_t *len, int *found, double wait_s, double deadline)
{
    (void)keylen;
    (void)wait_s; /* a directory cannot be waited on here: store.c polls */
    (void)deadline;
    char path[PATH_MAX];
    size_t name_at;
    hoop_result_t r = file_path(st, key, path, &name_at);
    if (r != HOOP_OK) return r;
    int got = file_try_get(st, path, buf, cap, len);
    *found = got > 0;
    return got < 0 ? HOOP_ERR_SYSTEM : HOOP_OK;
}

static hoop_result_t file_check(const hoop__rdv_t *rdv, char *err, size_t errlen)
{
    if (memchr(rdv->path, '\0', sizeof rdv->path) == NULL || rdv->path[0] == '\0') {
        hoop__say(err, errlen, "internal error: the rendezvous has no file path");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    return HOOP_OK;
}

static hoop_result_t file_open(hoop__store_t *st, const hoop__rdv_t *rdv, char *err, size_t errlen)
{
    file_store_t *f = st->state;
    int n = snprintf(f->dir, sizeof f->dir, "%s.d", rdv->path);
    if (n < 0 || (size_t)n >= sizeof f->dir) {
        hoop__say(err, errlen, "the file store path %s is too long", rdv->path);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (mkdir_p(f->dir) != 0) {
        hoop__say(err, errlen, "cannot create the file store directory %s: %s", f->dir,
                  strerror(errno));
        return HOOP_ERR_SYSTEM;
    }
    f->dir_ok = 1;
    HOOP__INFO(st->log, "rendezvous through the file store %s", f->dir);
    return HOOP_OK;
}

static void file_close(hoop__store_t *st)
{
    const file_store_t *f = st->state;
    if (st->rank == 0 && f->dir_ok) nftw(f->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const hoop__store_ops_t hoop__store_file_ops = {
    .method = "file",
    .state_size = sizeof(file_store_t),
    .check = file_check,
    .open = file_open,
    .set = file_set,
    .claim = file_claim,
    .get = file_get,
    .auth_failures = NULL,
    .close = file_close,
};
