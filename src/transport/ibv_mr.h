/* A cache of memory registrations of user buffers for the verbs transport's zero-copy messages.
 *
 * The danger of any such cache: a buffer is freed, another is allocated at the same address, and
 * the cached registration still pins the old pages, so the NIC reads or writes memory that is no
 * longer the buffer. Without on-demand paging nothing tells the process when a range is unmapped
 * (the kernel's notifiers serve only ODP registrations), so before a cached registration is used
 * again, this cache checks that every page of the range still maps to the page frame it pinned:
 * it reads /proc/self/pagemap, where a process with CAP_SYS_ADMIN sees frame numbers. A pinned
 * page is never migrated, so equal frames mean the very pages the registration holds; a page
 * unmapped, remapped, dropped by MADV_DONTNEED or copied on write shows another frame or none,
 * and the entry is registered again. Where the frames cannot be read (a process without that
 * capability sees zeros) the cache is off and every zero-copy message registers its buffer and
 * deregisters it when it completes, as before. HOOP_IB_REG_CACHE=off turns it off everywhere.
 *
 * Entries cover whole pages, are counted while a transfer uses them, and the least recently used
 * idle one goes when MRC_MAX entries or the pinned-bytes cap are reached; a transfer that finds no
 * room (or a stale entry still in use) gets a registration of its own, dropped when it ends. */
#ifndef HOOP_IBV_MR_H
#define HOOP_IBV_MR_H

#include <stddef.h>
#include <stdint.h>

#include "transport/ibv_sym.h"

#define MRC_MAX 32

typedef struct hoop__ibv_mrc_ent {
    uintptr_t lo, hi; /* page-aligned range; hi == 0: free */
    int access;
    struct ibv_mr *mr;
    uint64_t *pfn; /* the frame of each page when it was registered */
    int refs;
    uint64_t tick; /* last use, for eviction */
} hoop__ibv_mrc_ent_t;

typedef struct hoop__ibv_mrc {
    const hoop__ibv_t *v;
    struct ibv_pd *pd;
    int on;         /* the cache is used: frames can be read */
    int pagemap_fd; /* /proc/self/pagemap, -1 when off */
    size_t page;
    size_t pinned, cap; /* bytes the entries pin, and the most they may */
    uint64_t tick;
    uint64_t hits, misses, stale, transient;
    hoop__ibv_mrc_ent_t ent[MRC_MAX];
} hoop__ibv_mrc_t;

/* Sets the cache up for pd. mode is HOOP_IB_REG_CACHE (NULL, "", "auto": on where the frames of
 * probe, a page of registered memory, can be read; "off"). 0, or -1 with a sentence for a value
 * that is neither. *why says, when the cache is off, why (for an INFO line). */
int hoop__ibv_mrc_init(hoop__ibv_mrc_t *c, const hoop__ibv_t *v, struct ibv_pd *pd,
                       const char *mode, const void *probe, const char **why, char *err,
                       size_t errlen);
/* A registration covering [buf, buf + len) with at least access; *ref says what to give back to
 * put (an entry, or -1 for a registration of its own). NULL with errno set where none can be had. */
struct ibv_mr *hoop__ibv_mrc_get(hoop__ibv_mrc_t *c, void *buf, size_t len, int access, int *ref);
/* Ends a transfer's use of what get gave it. */
void hoop__ibv_mrc_put(hoop__ibv_mrc_t *c, struct ibv_mr *mr, int ref);
/* Deregisters every entry (none may be in use) and closes the pagemap. */
void hoop__ibv_mrc_fini(hoop__ibv_mrc_t *c);

#endif
