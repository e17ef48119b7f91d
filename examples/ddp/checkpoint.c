/*
 * Checkpoint files (see ddp.h for the layout). All fields are little-endian whatever the host, so a
 * file moves between machines; the trailing hash catches a torn or damaged file that a crash or a
 * full disk could leave behind despite the rename.
 */
#include "ddp.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'H', 'O', 'O', 'P', 'D', 'D', 'P', '\0'};
#define FNV_BASIS UINT64_C(0xCBF29CE484222325)
#define FIXED_BYTES 72 /* magic .. the reserved word, before dims */

static void put64(unsigned char *p, uint64_t v)
{
    for (int k = 0; k < 8; k++) p[k] = (unsigned char)(v >> (8 * k));
}
static void put32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++) p[k] = (unsigned char)(v >> (8 * k));
}
static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}
static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int k = 3; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

static size_t header_bytes(uint32_t layers) { return FIXED_BYTES + 8 * ((size_t)layers + 1) + 8; }

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* After the rename, the directory entry itself must reach the disk too. */
static int sync_dir_of(const char *path)
{
    char *copy = strdup(path);
    if (copy == NULL) return -1;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int ddp_ckpt_save(const char *path, const ddp_ckpt_info_t *info, const float *param, size_t n,
                  char *err, size_t errlen)
{
    unsigned char head[FIXED_BYTES + 8 * (DDP_MAX_LAYERS + 1) + 8];
    size_t hb = header_bytes(info->layers);
    memset(head, 0, sizeof(head));
    memcpy(head, MAGIC, 8);
    put32(head + 8, DDP_CKPT_VERSION);
    put32(head + 12, (uint32_t)hb);
    put64(head + 16, info->epochs_done);
    put64(head + 24, info->seed);
    put64(head + 32, info->samples);
    put64(head + 40, info->batch);
    uint64_t lr_bits;
    memcpy(&lr_bits, &info->lr, 8);
    put64(head + 48, lr_bits);
    put32(head + 56, info->world);
    put32(head + 60, info->drop_last);
    put32(head + 64, info->layers);
    for (uint32_t l = 0; l <= info->layers; l++) put64(head + FIXED_BYTES + 8 * l, info->dims[l]);
    put64(head + hb - 8, n);

    size_t tmplen = strlen(path) + 32;
    char *tmp = malloc(tmplen);
    if (tmp == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    uint64_t h = ddp_hash(head, hb, FNV_BASIS);
    int bad = write_all(fd, head, hb);
    enum { CHUNK = 4096 }; /* floats; a multiple of 8 bytes keeps the word hash unchanged */
    unsigned char buf[CHUNK * 4];
    for (size_t done = 0; done < n && !bad; done += CHUNK) {
        size_t c = n - done < CHUNK ? n - done : CHUNK;
        for (size_t k = 0; k < c; k++) {
            uint32_t bits;
            memcpy(&bits, &param[done + k], 4);
            put32(buf + 4 * k, bits);
        }
        h = ddp_hash(buf, 4 * c, h);
        bad = write_all(fd, buf, 4 * c);
    }
    unsigned char tail[8];
    put64(tail, h);
    if (!bad) bad = write_all(fd, tail, 8);
    if (bad || fsync(fd) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return -1;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot replace %s with %s: %s", path, tmp, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    if (sync_dir_of(path) != 0) {
        snprintf(err, errlen, "cannot flush the directory of %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int ddp_ckpt_load(const char *path, ddp_ckpt_info_t *info, float **param, size_t *n, char *err,
                  size_t errlen)
{
    *param = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file", path);
        fclose(f);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    unsigned char *buf = malloc(size > 0 ? size : 1);
    if (buf == NULL || fread(buf, 1, size, f) != size) {
        snprintf(err, errlen, "cannot read %s (%zu bytes)", path, size);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);

    int rc = -1;
    if (size < FIXED_BYTES || memcmp(buf, MAGIC, 8) != 0) {
        snprintf(err, errlen, "%s is not a ddp_train checkpoint (no HOOPDDP magic)", path);
        goto out;
    }
    uint32_t version = get32(buf + 8);
    if (version != DDP_CKPT_VERSION) {
        snprintf(err, errlen,
                 "%s is a checkpoint of format version %u; this program reads version %u", path,
                 version, DDP_CKPT_VERSION);
        goto out;
    }
    memset(info, 0, sizeof(*info));
    info->layers = get32(buf + 64);
    if (info->layers < 1 || info->layers > DDP_MAX_LAYERS) {
        snprintf(err, errlen, "%s is damaged: %u layers", path, info->layers);
        goto out;
    }
    size_t hb = header_bytes(info->layers);
    if (get32(buf + 12) != hb || size < hb + 8) {
        snprintf(err, errlen, "%s is damaged or truncated (header of %u bytes, file of %zu)", path,
                 get32(buf + 12), size);
        goto out;
    }
    info->epochs_done = get64(buf + 16);
    info->seed = get64(buf + 24);
    info->samples = get64(buf + 32);
    info->batch = get64(buf + 40);
    uint64_t lr_bits = get64(buf + 48);
    memcpy(&info->lr, &lr_bits, 8);
    info->world = get32(buf + 56);
    info->drop_last = get32(buf + 60);
    uint64_t expect = 0;
    for (uint32_t l = 0; l <= info->layers; l++) {
        info->dims[l] = get64(buf + FIXED_BYTES + 8 * l);
        if (info->dims[l] == 0 || info->dims[l] > (UINT64_C(1) << 30)) {
            snprintf(err, errlen, "%s is damaged: a layer of width %llu", path,
                     (unsigned long long)info->dims[l]);
            goto out;
        }
        if (l > 0) expect += info->dims[l] * (info->dims[l - 1] + 1);
        if (expect > (UINT64_C(1) << 32)) {
            snprintf(err, errlen, "%s is damaged: a model of more than 2^32 parameters", path);
            goto out;
        }
    }
    uint64_t count = get64(buf + hb - 8);
    if (count != expect || (size - hb - 8) / 4 != count || (size - hb - 8) % 4 != 0) {
        snprintf(
            err, errlen,
            "%s is damaged or truncated: %llu parameters for a model of %llu, file of %zu bytes",
            path, (unsigned long long)count, (unsigned long long)expect, size);
        goto out;
    }
    if (ddp_hash(buf, size - 8, FNV_BASIS) != get64(buf + size - 8)) {
        snprintf(err, errlen, "%s is damaged: its checksum does not match its contents", path);
        goto out;
    }
    float *p = malloc((size_t)count * sizeof(float) + 1);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory for %llu parameters", (unsigned long long)count);
        goto out;
    }
    for (size_t k = 0; k < count; k++) {
        uint32_t bits = get32(buf + hb + 4 * k);
        memcpy(&p[k], &bits, 4);
    }
    *param = p;
    *n = (size_t)count;
    rc = 0;
out:
    free(buf);
    return rc;
}
