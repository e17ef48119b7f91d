/* Random streams, the synthetic regression data set and the distributed sampler. */
#include "ddp.h"

#include <stdlib.h>

ddp_rng_t ddp_rng(uint64_t seed, uint64_t stream)
{
    /* Distinct streams from one seed, so that the data, the initial weights and the shuffles do
     * not share numbers. */
    ddp_rng_t r = {seed ^ (stream * UINT64_C(0xD6E8FEB86659FD93))};
    return r;
}

uint64_t ddp_rng_next(ddp_rng_t *r)
{
    uint64_t z = (r->state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

float ddp_rng_uniform(ddp_rng_t *r)
{
    int32_t v = (int32_t)(ddp_rng_next(r) >> 40); /* 0 .. 2^24 - 1 */
    return (float)(v - (1 << 23)) * 0x1p-23f;
}

int ddp_data_make(ddp_data_t *d, size_t samples, size_t features, uint64_t seed)
{
    d->samples = samples;
    d->features = features;
    d->x = malloc(samples * features * sizeof(float));
    d->y = malloc(samples * sizeof(float));
    float *w = malloc(features * sizeof(float));
    if (d->x == NULL || d->y == NULL || w == NULL) {
        free(w);
        ddp_data_free(d);
        return -1;
    }
    ddp_rng_t r = ddp_rng(seed, DDP_STREAM_DATA);
    for (size_t k = 0; k < features; k++) w[k] = ddp_rng_uniform(&r);
    float b = ddp_rng_uniform(&r);
    for (size_t i = 0; i < samples; i++) {
        float *x = d->x + i * features;
        float acc = b;
        for (size_t k = 0; k < features; k++) {
            x[k] = ddp_rng_uniform(&r);
            acc += w[k] * x[k];
        }
        d->y[i] = acc + 0.1f * ddp_rng_uniform(&r);
    }
    free(w);
    return 0;
}

void ddp_data_free(ddp_data_t *d)
{
    free(d->x);
    free(d->y);
    d->x = d->y = NULL;
}

int ddp_sampler_init(ddp_sampler_t *s, size_t samples, int world, int rank, int drop_last)
{
    s->samples = samples;
    s->world = world;
    s->rank = rank;
    s->drop_last = drop_last;
    size_t w = (size_t)world;
    s->per_rank = drop_last ? samples / w : (samples + w - 1) / w;
    s->ndeal = s->per_rank * w;
    s->order = malloc((samples > 0 ? samples : 1) * sizeof(size_t));
    s->mine = malloc((s->per_rank > 0 ? s->per_rank : 1) * sizeof(size_t));
    s->deal = malloc((s->ndeal > 0 ? s->ndeal : 1) * sizeof(size_t));
    if (s->order == NULL || s->mine == NULL || s->deal == NULL) {
        ddp_sampler_free(s);
        return -1;
    }
    return 0;
}

void ddp_sampler_set_epoch(ddp_sampler_t *s, uint64_t seed, uint64_t epoch)
{
    size_t n = s->samples;
    for (size_t i = 0; i < n; i++) s->order[i] = i;
    ddp_rng_t r = ddp_rng(seed + epoch, DDP_STREAM_SHUFFLE);
    for (size_t i = n; i > 1; i--) { /* Fisher-Yates, from the end */
        size_t j = (size_t)(ddp_rng_next(&r) % i);
        size_t t = s->order[i - 1];
        s->order[i - 1] = s->order[j];
        s->order[j] = t;
    }
    /* Padding repeats the order from its start (position p holds order[p mod n]). */
    s->ndeal = s->per_rank * (size_t)s->world;
    for (size_t p = 0; p < s->ndeal; p++) s->deal[p] = s->order[p % n];
    for (size_t j = 0; j < s->per_rank; j++)
        s->mine[j] = s->deal[(size_t)s->rank + j * (size_t)s->world];
}

int ddp_sampler_reshard(ddp_sampler_t *s, size_t taken, int world, int rank)
{
    size_t done = (taken < s->per_rank ? taken : s->per_rank) * (size_t)s->world;
    size_t left = s->ndeal - done, w = (size_t)world;
    size_t per = s->drop_last ? left / w : (left + w - 1) / w;
    size_t need = per * w;
    size_t *deal = malloc((need > 0 ? need : 1) * sizeof(size_t));
    size_t *mine = malloc((per > 0 ? per : 1) * sizeof(size_t));
    if (deal == NULL || mine == NULL) {
        free(deal);
        free(mine);
        return -1;
    }
    for (size_t p = 0; p < need; p++) deal[p] = s->deal[done + p % left];
    for (size_t j = 0; j < per; j++) mine[j] = deal[(size_t)rank + j * w];
    free(s->deal);
    free(s->mine);
    s->deal = deal;
    s->mine = mine;
    s->ndeal = need;
    s->world = world;
    s->rank = rank;
    s->per_rank = per;
    return 0;
}

void ddp_sampler_free(ddp_sampler_t *s)
{
    free(s->order);
    free(s->mine);
    free(s->deal);
    s->order = s->mine = s->deal = NULL;
}

uint64_t ddp_hash(const void *p, size_t len, uint64_t h)
{
    /* FNV-1a with 64-bit little-endian words instead of bytes (then the tail bytes): eight times
     * fewer multiplications, and still a few lines for any reader to redo. */
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = 0;
        for (int k = 7; k >= 0; k--) w = (w << 8) | b[i + (size_t)k];
        h = (h ^ w) * UINT64_C(0x100000001B3);
    }
    for (; i < len; i++) h = (h ^ b[i]) * UINT64_C(0x100000001B3);
    return h;
}
