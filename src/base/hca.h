/* HOOP_IB_HCA, as NCCL_IB_HCA: a comma list of device[:port]. Names are prefixes ("mlx5" is every
 * mlx5_N) unless the list starts with '='; a leading '^' turns the list into what is not used
 * ("^=mlx5_1" uses everything but mlx5_1). Empty: every device and port. Pure text: the
 * configuration parses it to reject a malformed one (config.c), the verbs transport to choose its
 * ports (transport/ibv_dev.c). */
#ifndef HOOP_HCA_H
#define HOOP_HCA_H

#include <stddef.h>

#define HOOP__IBV_HCA_MAX 32  /* entries in HOOP_IB_HCA */
#define HOOP__IBV_NAME_MAX 64 /* a device name and its NUL, as the kernel bounds it */

typedef struct hoop__ibv_hca {
    int exclude;
    int exact;
    int n;
    struct {
        char name[HOOP__IBV_NAME_MAX];
        int port; /* 0 = every port */
    } e[HOOP__IBV_HCA_MAX];
} hoop__ibv_hca_t;

/* Parses spec (NULL or "" selects everything). Returns 0, or -1 with a sentence naming
 * HOOP_IB_HCA and what is wrong with it. */
int hoop__ibv_hca_parse(const char *spec, hoop__ibv_hca_t *h, char *err, size_t errlen);
/* 1 when port of device dev is to be used under h. */
int hoop__ibv_hca_match(const hoop__ibv_hca_t *h, const char *dev, int port);

#endif
