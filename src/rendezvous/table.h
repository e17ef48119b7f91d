/* The tcp store server's table of keys and values (table.c). */
#ifndef HOOP_STORE_TABLE_H
#define HOOP_STORE_TABLE_H

#include <stddef.h>
#include <stdint.h>

/* The table refuses to hold more than this many bytes of values: a runaway client must not take
 * rank 0's memory with it. */
#define HOOP__STORE_TABLE_MAX_BYTES ((uint64_t)1 << 30)

typedef struct hoop__store_table {
    struct hoop__store_entry **buckets;
    size_t nbuckets, nentries;
    uint64_t bytes; /* of values held */
} hoop__store_table_t;

/* An empty table; -1 when out of memory (hoop__store_table_free still runs). */
int hoop__store_table_init(hoop__store_table_t *t);
/* Sets key (keylen bytes) to a copy of val. 0, or -1 when the value cannot be stored (no memory,
 * or over HOOP__STORE_TABLE_MAX_BYTES in all); the old value then stays. */
int hoop__store_table_set(hoop__store_table_t *t, const char *key, uint32_t keylen,
                          const uint8_t *val, uint32_t vallen);
/* 1 with key's value in *val (the table's, valid until the next set) and *vallen, or 0 when key is
 * not there. */
int hoop__store_table_get(const hoop__store_table_t *t, const char *key, uint32_t keylen,
                          const uint8_t **val, uint32_t *vallen);
void hoop__store_table_free(hoop__store_table_t *t);

#endif
