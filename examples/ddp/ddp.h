/*
 * Pieces of the data-parallel trainer (ddp_train.c): the random streams and the synthetic data set,
 * the distributed sampler, the multilayer perceptron, and the checkpoint file. None of them talk to
 * other ranks; ddp_train.c does all the communication.
 */
#ifndef DDP_H
#define DDP_H

#include <stddef.h>
#include <stdint.h>

/* ---- random streams (splitmix64): small, exactly reproducible in any language ---- */

typedef struct {
    uint64_t state;
} ddp_rng_t;

enum { DDP_STREAM_DATA = 1, DDP_STREAM_INIT = 2, DDP_STREAM_SHUFFLE = 3 };

ddp_rng_t ddp_rng(uint64_t seed, uint64_t stream);
uint64_t ddp_rng_next(ddp_rng_t *r);
/* Uniform on [-1, 1) with 24 random bits: every value is a float32 exactly. */
float ddp_rng_uniform(ddp_rng_t *r);

/* ---- data set: y = w_true . x + b_true + 0.1 * noise, x, w_true, b_true, noise uniform on [-1, 1) ---- */

typedef struct {
    size_t samples, features;
    float *x; /* samples x features, row-major */
    float *y; /* samples */
} ddp_data_t;

int ddp_data_make(ddp_data_t *d, size_t samples, size_t features, uint64_t seed);
void ddp_data_free(ddp_data_t *d);

/* ---- distributed sampler (torch.utils.data.DistributedSampler, shuffle=True) ----
 * Epoch e permutes 0..samples-1 with the stream (seed + e, SHUFFLE), so every rank computes the same
 * order. Without drop_last the order is padded with its own beginning up to a multiple of world;
 * with drop_last it is cut down to one. Rank r takes positions r, r + world, r + 2 world, ... */

typedef struct {
    size_t samples;
    int world, rank;
    int drop_last;
    size_t per_rank; /* indices this rank sees per epoch, the same on every rank */
    size_t *order;   /* samples */
    size_t *mine;    /* per_rank */
    size_t *deal;    /* the epoch's list, dealt out: rank r takes deal[r], deal[r + world], ... */
    size_t ndeal;    /* per_rank x world */
} ddp_sampler_t;

int ddp_sampler_init(ddp_sampler_t *s, size_t samples, int world, int rank, int drop_last);
void ddp_sampler_set_epoch(ddp_sampler_t *s, uint64_t seed, uint64_t epoch);
/* The epoch goes on with another world (survivors after a rank was lost): every rank has taken
 * the first `taken` indices of its share, so the first taken x world entries of the list are
 * done. The rest, in list order, is dealt again over the new world the same way, padded with
 * its own beginning to a multiple of it (cut down to one with drop_last). Every survivor
 * computes the same list. -1 when out of memory. The next epoch needs a sampler made anew for
 * the new world (ddp_sampler_free, ddp_sampler_init). */
int ddp_sampler_reshard(ddp_sampler_t *s, size_t taken, int world, int rank);
void ddp_sampler_free(ddp_sampler_t *s);

/* ---- multilayer perceptron: Linear, ReLU, ..., Linear; no hidden layer is linear regression ----
 * Parameters live in one flat array in PyTorch's order: W0 (dims[1] x dims[0], row-major, as
 * nn.Linear.weight), b0, W1, b1, ... Gradients use the same layout, so that any run of tensors taken
 * from the end (the order gradients become ready in backward) is one contiguous range. */

#define DDP_MAX_LAYERS 16

typedef struct {
    int layers;                      /* Linear layers */
    size_t dims[DDP_MAX_LAYERS + 1]; /* dims[0] inputs, dims[layers] = 1 output */
    size_t w_off[DDP_MAX_LAYERS], b_off[DDP_MAX_LAYERS];
    size_t params;
    float *param, *grad;
    size_t max_batch;
    float *act[DDP_MAX_LAYERS + 1]; /* act[0] input batch, act[l] output of layer l (after ReLU) */
    float *delta[2];                /* gradients of the loss w.r.t. a layer's output, ping-pong */
} ddp_mlp_t;

/* Checks the shape (returns -1 with a sentence in err if it cannot be built) and allocates. */
int ddp_mlp_init(ddp_mlp_t *m, int layers, const size_t *dims, size_t max_batch, char *err,
                 size_t errlen);
void ddp_mlp_free(ddp_mlp_t *m);
/* nn.Linear's default: weights and biases uniform on [-1/sqrt(fan_in), 1/sqrt(fan_in)). */
void ddp_mlp_init_params(ddp_mlp_t *m, uint64_t seed);
/* Forward pass of the batch x (batch x dims[0]) against targets y; returns the mean squared error. */
double ddp_mlp_forward(ddp_mlp_t *m, const float *x, const float *y, size_t batch);
/* Backward pass of the last forward, from the last layer to the first. After layer l's gradients
 * are final, ready(l, ctx) is called: they may be handed to communication at once. */
void ddp_mlp_backward(ddp_mlp_t *m, const float *y, size_t batch,
                      void (*ready)(int layer, void *ctx), void *ctx);
/* param -= lr * grad */
void ddp_mlp_sgd(ddp_mlp_t *m, float lr);

/* ---- checkpoint file ----
 * Little-endian: "HOOPDDP\0", u32 version, u32 header bytes, then the header fields below, the
 * parameters as float32, and a u64 ddp_hash of everything before it. Written to PATH.tmp.PID,
 * flushed to disk, then renamed over PATH, so a reader sees the old file or the new one. */

#define DDP_CKPT_VERSION 1u

typedef struct {
    uint64_t epochs_done; /* epochs completed; training resumes at this epoch */
    uint64_t seed;
    uint64_t samples;
    uint32_t layers;
    uint64_t dims[DDP_MAX_LAYERS + 1];
    uint64_t batch; /* per rank */
    uint32_t world;
    uint32_t drop_last;
    double lr;
} ddp_ckpt_info_t;

int ddp_ckpt_save(const char *path, const ddp_ckpt_info_t *info, const float *param, size_t n,
                  char *err, size_t errlen);
/* Reads path into *info and a new array *param of *n floats (free() it); -1 with a sentence in err
 * if the file is missing, damaged or not a checkpoint of this version. */
int ddp_ckpt_load(const char *path, ddp_ckpt_info_t *info, float **param, size_t *n, char *err,
                  size_t errlen);

/* 64-bit FNV-1a over little-endian 64-bit words, then the tail bytes; h starts at
 * 0xCBF29CE484222325. For replica checks, option fingerprints and checkpoints. */
uint64_t ddp_hash(const void *p, size_t len, uint64_t h);

#endif
