/* The tcp store server's table of keys and values: chained hashing (FNV-1a) that doubles its
 * buckets as it fills, and a cap on the bytes of values it holds. Only the server's thread uses it. */
#include <stdlib.h>
#include <string.h>

#include "rendezvous/table.h"

typedef struct hoop__store_entry {
    struct hoop__store_entry *next;
    uint64_t hash;
    uint8_t *val;
    uint32_t vallen;
    uint32_t keylen;
    char key[];
} entry_t;

int hoop__store_table_init(hoop__store_table_t *t)
{
    memset(t, 0, sizeof *t);
    t->nbuckets = 64;
    t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
    return t->buckets != NULL ? 0 : -1;
}

static uint64_t hash_key(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)k[i];
        h *= 1099511628211ull;
    }
    return h;
}

static entry_t *table_find(const hoop__store_table_t *t, const char *key, uint32_t keylen,
                           uint64_t h)
{
    for (entry_t *e = t->buckets[h & (t->nbuckets - 1)]; e != NULL; e = e->next)
        if (e->hash == h && e->keylen == keylen && memcmp(e->key, key, keylen) == 0) return e;
    return NULL;
}

static int table_grow(hoop__store_table_t *t)
{
    size_t nb = t->nbuckets * 2;
    entry_t **b = calloc(nb, sizeof *b);
    if (b == NULL) return -1;
    for (size_t i = 0; i < t->nbuckets; i++) {
        entry_t *e = t->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
    return 0;
}

int hoop__store_table_set(hoop__store_table_t *t, const char *key, uint32_t keylen,
                          const uint8_t *val, uint32_t vallen)
{
    const uint64_t h = hash_key(key, keylen);
    entry_t *e = table_find(t, key, keylen, h);
    const uint64_t old = e != NULL ? e->vallen : 0;
    if (t->bytes - old + vallen > HOOP__STORE_TABLE_MAX_BYTES) return -1;
    uint8_t *copy = malloc(vallen > 0 ? vallen : 1);
    if (copy == NULL) return -1;
    if (vallen > 0) memcpy(copy, val, vallen);
    if (e == NULL) {
        if (t->nentries >= t->nbuckets && table_grow(t) != 0) {
            free(copy);
            return -1;
        }
        e = malloc(sizeof *e + keylen);
        if (e == NULL) {
            free(copy);
            return -1;
        }
        e->hash = h;
        e->keylen = keylen;
        memcpy(e->key, key, keylen);
        e->val = NULL;
        e->vallen = 0;
        e->next = t->buckets[h & (t->nbuckets - 1)];
        t->buckets[h & (t->nbuckets - 1)] = e;
        t->nentries++;
    }
    free(e->val);
    e->val = copy;
    e->vallen = vallen;
    t->bytes = t->bytes - old + vallen;
    return 0;
}

int hoop__store_table_get(const hoop__store_table_t *t, const char *key, uint32_t keylen,
                          const uint8_t **val, uint32_t *vallen)
{
    const entry_t *e = table_find(t, key, keylen, hash_key(key, keylen));
    if (e == NULL) return 0;
    *val = e->val;
    *vallen = e->vallen;
    return 1;
}

void hoop__store_table_free(hoop__store_table_t *t)
{
    for (size_t i = 0; t->buckets != NULL && i < t->nbuckets; i++) {
        entry_t *e = t->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            free(e->val);
            free(e);
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = NULL;
}
