/*
 * The multilayer perceptron: plain loops written so that gcc and clang vectorize them (at -O3, which
 * meson.build asks for; gcc 12 at -O2 vectorizes the dot products only).
 *
 * Every loop visits a weight row once per batch (the row stays in L1 while the batch, a few hundred
 * KiB at most, stays in L2), and the inner loops are either a[] += s * b[] (vectorized as is) or a dot
 * product with eight separate partial sums (vectorized without -ffast-math, and with a summation
 * order fixed by the code rather than by the compiler or the vector width).
 */
#include "ddp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float dot(const float *restrict a, const float *restrict b, size_t n)
{
    float acc[8] = {0};
    size_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (size_t j = 0; j < 8; j++) acc[j] += a[k + j] * b[k + j];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

static void axpy(float *restrict y, float a, const float *restrict x, size_t n)
{
    for (size_t k = 0; k < n; k++) y[k] += a * x[k];
}

int ddp_mlp_init(ddp_mlp_t *m, int layers, const size_t *dims, size_t max_batch, char *err,
                 size_t errlen)
{
    memset(m, 0, sizeof(*m));
    if (layers < 1 || layers > DDP_MAX_LAYERS) {
        snprintf(err, errlen, "%d layers: want 1 to %d", layers, DDP_MAX_LAYERS);
        return -1;
    }
    const size_t max_params = (size_t)1 << 30; /* 4 GiB of float32, and again for the gradients */
    m->layers = layers;
    size_t max_dim = 1;
    for (int l = 0; l <= layers; l++) {
        if (dims[l] == 0 || dims[l] > max_params) {
            snprintf(err, errlen, "layer width %zu: want 1 to %zu", dims[l], max_params);
            return -1;
        }
        m->dims[l] = dims[l];
        if (dims[l] > max_dim) max_dim = dims[l];
    }
    size_t n = 0;
    for (int l = 0; l < layers; l++) {
        size_t w = dims[l + 1] * dims[l];
        if (dims[l] != 0 && w / dims[l] != dims[l + 1]) w = SIZE_MAX;
        if (w > max_params || dims[l + 1] > max_params - w || n > max_params - w - dims[l + 1]) {
            snprintf(err, errlen, "the model has more than %zu parameters", max_params);
            return -1;
        }
        m->w_off[l] = n;
        m->b_off[l] = n + w;
        n += w + dims[l + 1];
    }
    m->params = n;
    if (max_batch == 0 || max_batch > max_params / max_dim) {
        snprintf(err, errlen, "batch %zu: want 1 to %zu for this model", max_batch,
                 max_params / max_dim);
        return -1;
    }
    m->max_batch = max_batch;
    m->param = calloc(n, sizeof(float));
    m->grad = calloc(n, sizeof(float));
    int ok = m->param != NULL && m->grad != NULL;
    for (int l = 0; l <= layers && ok; l++)
        ok = (m->act[l] = malloc(max_batch * dims[l] * sizeof(float))) != NULL;
    for (int k = 0; k < 2 && ok; k++)
        ok = (m->delta[k] = malloc(max_batch * max_dim * sizeof(float))) != NULL;
    if (!ok) {
        ddp_mlp_free(m);
        snprintf(err, errlen, "out of memory for %zu parameters and a batch of %zu", n, max_batch);
        return -1;
    }
    return 0;
}

void ddp_mlp_free(ddp_mlp_t *m)
{
    free(m->param);
    free(m->grad);
    for (int l = 0; l <= DDP_MAX_LAYERS; l++) free(m->act[l]);
    free(m->delta[0]);
    free(m->delta[1]);
    memset(m, 0, sizeof(*m));
}

void ddp_mlp_init_params(ddp_mlp_t *m, uint64_t seed)
{
    ddp_rng_t r = ddp_rng(seed, DDP_STREAM_INIT);
    for (int l = 0; l < m->layers; l++) {
        float bound = 1.0f / sqrtf((float)m->dims[l]);
        float *w = m->param + m->w_off[l], *b = m->param + m->b_off[l];
        for (size_t k = 0; k < m->dims[l + 1] * m->dims[l]; k++) w[k] = ddp_rng_uniform(&r) * bound;
        for (size_t k = 0; k < m->dims[l + 1]; k++) b[k] = ddp_rng_uniform(&r) * bound;
    }
}

double ddp_mlp_forward(ddp_mlp_t *m, const float *x, const float *y, size_t batch)
{
    memcpy(m->act[0], x, batch * m->dims[0] * sizeof(float));
    for (int l = 0; l < m->layers; l++) {
        size_t din = m->dims[l], dout = m->dims[l + 1];
        const float *in = m->act[l], *W = m->param + m->w_off[l], *b = m->param + m->b_off[l];
        float *out = m->act[l + 1];
        for (size_t o = 0; o < dout; o++) {
            const float *w = W + o * din;
            for (size_t i = 0; i < batch; i++) out[i * dout + o] = b[o] + dot(w, in + i * din, din);
        }
        if (l + 1 < m->layers)
            for (size_t k = 0; k < batch * dout; k++) out[k] = out[k] > 0.0f ? out[k] : 0.0f;
    }
    const float *pred = m->act[m->layers];
    double sum = 0;
    for (size_t i = 0; i < batch; i++) {
        double e = (double)pred[i] - (double)y[i];
        sum += e * e;
    }
    return batch > 0 ? sum / (double)batch : 0.0;
}

void ddp_mlp_backward(ddp_mlp_t *m, const float *y, size_t batch,
                      void (*ready)(int layer, void *ctx), void *ctx)
{
    /* d(mean (pred - y)^2) / d pred */
    float *g = m->delta[0], *gin = m->delta[1];
    const float *pred = m->act[m->layers];
    float scale = 2.0f / (float)batch;
    for (size_t i = 0; i < batch; i++) g[i] = scale * (pred[i] - y[i]);

    for (int l = m->layers - 1; l >= 0; l--) {
        size_t din = m->dims[l], dout = m->dims[l + 1];
        const float *in = m->act[l], *W = m->param + m->w_off[l];
        float *gW = m->grad + m->w_off[l], *gb = m->grad + m->b_off[l];
        if (l > 0) memset(gin, 0, batch * din * sizeof(float));
        for (size_t o = 0; o < dout; o++) {
            float *gw = gW + o * din;
            const float *w = W + o * din;
            memset(gw, 0, din * sizeof(float));
            float sb = 0.0f;
            for (size_t i = 0; i < batch; i++) {
                float go = g[i * dout + o];
                if (go == 0.0f) continue; /* a unit ReLU switched off: nothing flows back */
                sb += go;
                axpy(gw, go, in + i * din, din);
                if (l > 0) axpy(gin + i * din, go, w, din);
            }
            gb[o] = sb;
        }
        if (l >
            0) /* through the ReLU in front of this layer: its output is positive where it passed */
            for (size_t k = 0; k < batch * din; k++) gin[k] = in[k] > 0.0f ? gin[k] : 0.0f;
        if (ready != NULL) ready(l, ctx);
        float *t = g;
        g = gin;
        gin = t;
    }
}

void ddp_mlp_sgd(ddp_mlp_t *m, float lr)
{
    float *restrict p = m->param;
    const float *restrict g = m->grad;
    for (size_t k = 0; k < m->params; k++) p[k] -= lr * g[k];
}
