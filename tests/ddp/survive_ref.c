/*
 * survive_ref: the reference for ddp_train --survive. One process replays the job's schedule of
 * batches: the world it starts on, and at each loss the world it goes on with, at the step where
 * the survivors went on. It shares the data set, the model and the shuffle with the trainer
 * (examples/ddp, checked against PyTorch by ddp-torch), not the schedule: every rank's share is
 * rebuilt here from the rule that docs/ddp.md states, and each step trains on the union of the
 * ranks' batches at once (which the average of per-rank means equals, every rank's batch being
 * of one size), with no communication at all.
 *
 *   survive_ref --world W --out FILE [--lost EPOCH:STEP:WORLD ...] [--model linear|mlp]
 *               [--hidden A,B,...] [--samples N] [--features N] [--seed N] [--lr X] [--batch B]
 *               [--epochs N] [--drop-last]
 *
 * --lost E:S:W: in epoch E, after S steps of the world then running, the job went on with W
 * ranks. Several are applied in the order given. Writes the final parameters as raw float32.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../examples/ddp/ddp.h"

#define MAX_LOST 16

typedef struct {
    long epoch;
    size_t step;
    int world;
} lost_t;

static void bad(const char *what)
{
    fprintf(stderr, "survive_ref: %s\n", what);
    exit(2);
}

/* Rank r's share: entries r, r + world, ... of list (len entries, repeated from its start when
 * the shares run past its end), per entries each. */
static size_t *shares(const size_t *list, size_t len, int world, int drop_last, size_t *per)
{
    size_t w = (size_t)world;
    *per = drop_last ? len / w : (len + w - 1) / w;
    size_t *sh = malloc((*per * w > 0 ? *per * w : 1) * sizeof(size_t));
    if (sh == NULL) bad("out of memory");
    for (int r = 0; r < world; r++)
        for (size_t j = 0; j < *per; j++)
            sh[(size_t)r * *per + j] = list[(j * w + (size_t)r) % len];
    return sh;
}

int main(int argc, char **argv)
{
    int world = 0, mlp = 0, drop_last = 0, nlost = 0, layers = 1;
    size_t samples = 2048, features = 20, batch = 32, dims[DDP_MAX_LAYERS + 1];
    long epochs = 10;
    double lr = 0.01;
    uint64_t seed = 42;
    const char *out = NULL, *hidden = "1024,1024,1024";
    lost_t lost[MAX_LOST];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--drop-last") == 0) {
            drop_last = 1;
            continue;
        }
        if (v == NULL) bad("an option needs a value");
        i++;
        if (strcmp(a, "--world") == 0)
            world = atoi(v);
        else if (strcmp(a, "--out") == 0)
            out = v;
        else if (strcmp(a, "--model") == 0)
            mlp = strcmp(v, "mlp") == 0;
        else if (strcmp(a, "--hidden") == 0)
            hidden = v;
        else if (strcmp(a, "--samples") == 0)
            samples = (size_t)atol(v);
        else if (strcmp(a, "--features") == 0)
            features = (size_t)atol(v);
        else if (strcmp(a, "--seed") == 0)
            seed = (uint64_t)atoll(v);
        else if (strcmp(a, "--lr") == 0)
            lr = atof(v);
        else if (strcmp(a, "--batch") == 0)
            batch = (size_t)atol(v);
        else if (strcmp(a, "--epochs") == 0)
            epochs = atol(v);
        else if (strcmp(a, "--lost") == 0) {
            if (nlost == MAX_LOST) bad("too many --lost");
            if (sscanf(v, "%ld:%zu:%d", &lost[nlost].epoch, &lost[nlost].step,
                       &lost[nlost].world) != 3 ||
                lost[nlost].world < 1)
                bad("--lost wants EPOCH:STEP:WORLD");
            nlost++;
        } else
            bad("unknown option");
    }
    if (world < 1 || out == NULL || samples < 1 || batch < 1) bad("needs --world and --out");
    dims[0] = features;
    if (mlp)
        for (const char *p = hidden; *p != '\0';) {
            char *end;
            dims[layers++] = (size_t)strtoul(p, &end, 10);
            if (layers > DDP_MAX_LAYERS || end == p) bad("bad --hidden");
            p = *end == ',' ? end + 1 : end;
        }
    dims[layers] = 1;
    int max_world = world;
    for (int k = 0; k < nlost; k++)
        if (lost[k].world > max_world) max_world = lost[k].world;

    ddp_data_t data;
    ddp_mlp_t m;
    ddp_sampler_t shuffle; /* one rank: only its permutation, order[], is used */
    char err[256];
    if (ddp_data_make(&data, samples, features, seed) != 0 ||
        ddp_mlp_init(&m, layers, dims, batch * (size_t)max_world, err, sizeof(err)) != 0 ||
        ddp_sampler_init(&shuffle, samples, 1, 0, 0) != 0)
        bad("cannot build the job");
    ddp_mlp_init_params(&m, seed);
    float *bx = malloc(batch * (size_t)max_world * features * sizeof(float));
    float *by = malloc(batch * (size_t)max_world * sizeof(float));
    size_t *rest = malloc((samples + batch * (size_t)max_world) * sizeof(size_t));
    if (bx == NULL || by == NULL || rest == NULL) bad("out of memory");

    int next = 0; /* the next --lost to apply */
    for (long e = 0; e < epochs; e++) {
        ddp_sampler_set_epoch(&shuffle, seed, (uint64_t)e);
        size_t per;
        size_t *sh = shares(shuffle.order, samples, world, drop_last, &per);
        size_t k = 0; /* steps of this world done */
        for (;;) {
            if (next < nlost && lost[next].epoch == e && lost[next].step == k) {
                /* What nobody has trained on yet, in the order of the list: position j of
                 * every share, rank by rank, for j from the first untaken one on. */
                size_t len = 0, from = k * batch < per ? k * batch : per;
                if ((per - from) * (size_t)world > samples + batch * (size_t)max_world)
                    bad("too many losses for this replay");
                for (size_t j = from; j < per; j++)
                    for (int r = 0; r < world; r++) rest[len++] = sh[(size_t)r * per + j];
                free(sh);
                world = lost[next++].world;
                sh = len > 0 ? shares(rest, len, world, drop_last, &per) : malloc(1);
                if (len == 0) per = 0;
                k = 0;
                continue;
            }
            if (k * batch >= per) break;
            size_t bsz = per - k * batch < batch ? per - k * batch : batch, n = 0;
            for (int r = 0; r < world; r++)
                for (size_t i = 0; i < bsz; i++, n++) {
                    size_t idx = sh[(size_t)r * per + k * batch + i];
                    memcpy(bx + n * features, data.x + idx * features, features * sizeof(float));
                    by[n] = data.y[idx];
                }
            ddp_mlp_forward(&m, bx, by, n);
            ddp_mlp_backward(&m, by, n, NULL, NULL);
            ddp_mlp_sgd(&m, (float)lr);
            k++;
        }
        free(sh);
    }
    if (next != nlost) bad("a --lost falls after the job's end or on no step");
    FILE *f = fopen(out, "wb");
    if (f == NULL || fwrite(m.param, sizeof(float), m.params, f) != m.params || fclose(f) != 0)
        bad("cannot write --out");
    free(bx);
    free(by);
    free(rest);
    ddp_sampler_free(&shuffle);
    ddp_mlp_free(&m);
    ddp_data_free(&data);
    return 0;
}
