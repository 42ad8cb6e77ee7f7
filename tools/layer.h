/*
 * A stack of Llama-style decoder layers run on the library's calls alone:
 * the code behind oclfuse-layer, and what tests/test_layer.c checks
 * against an fp64 host reference.
 *
 * One step of one layer, with x the residual stream (the hidden states of
 * the step's new tokens, [T, hidden] of the activation dtype), in place:
 *
 *   n   = rms_norm(x) * norm_in                       oclf_rms_norm
 *   qkv = n . Wqkv^T      Wqkv [(Hq + 2 Hk) hd, H]     oclf_linear / oclf_linear_q
 *   Q, K per-head RMSNorm (unit weights), NeoX rotary at each token's
 *   position; K and V written into the layer's paged cache
 *                                                     oclf_qk_norm_rope_cache
 *     (qk_norm 0: no per-head norm, as Llama:         oclf_rotary_embedding,
 *                                                     oclf_kv_cache_write)
 *   a   = attention(Q, cached K, V), causal, aligned bottom-right (the
 *         step's queries are the last keys of their sequence), scale
 *         1/sqrt(hd), GQA                             oclf_attention_paged (fused)
 *   o_residual 0: o = a . Wo^T;  x += o, n = rms_norm(x) * norm_post
 *                                                     oclf_linear, oclf_add_rms_norm
 *   o_residual 1: x = x + a . Wo^T (residual epilogue); n = rms_norm(x) * norm_post
 *                                                     oclf_linear, oclf_rms_norm
 *   gu  = n . Wgu^T       Wgu [2 MLP, H]: rows [0, MLP) gate, [MLP, 2 MLP) up
 *   h   = silu(gu[:, :MLP]) * gu[:, MLP:]             oclf_act_and_mul
 *   x   = x + h . Wd^T    Wd [H, MLP], residual epilogue, in place
 *
 * Every call goes on the caller's in-order queue with no host round trip
 * inside a step: the per-step metadata (positions, slots, query offsets,
 * sequence lengths) and every step's input hidden states are on the device
 * before the first step.
 *
 * Steps: step 0 is the prefill, `prefill` tokens of every sequence (rows
 * b * prefill + i of the step, position i); step s in 1..decode appends one
 * token to every sequence (row b of the step, position prefill + s - 1).
 * Each sequence has its own block table row over a shared pool of blocks
 * (a seeded permutation, so neighbouring blocks of a sequence are not
 * neighbours in memory); every layer has its own K and V pool.
 *
 * Weights come from a seeded generator: dense weights uniform with
 * standard deviation 1/sqrt(fan_in), stored in the activation dtype; INT4
 * weights (group 128, f16 scales, no zero points: w = (q - 8) s) with
 * uniform nibbles and per-group scales of the same spread; norm weights
 * uniform in [0.8, 1.2). The inputs are uniform in [-sqrt(3), sqrt(3)).
 */
#ifndef OCLF_LAYER_H
#define OCLF_LAYER_H

#include "oclfuse.h"

#include <stddef.h>
#include <stdint.h>

typedef struct layer_config {
    size_t hidden, q_heads, kv_heads, head_dim, mlp;
    float eps;     /* the RMSNorms' (the per-head one too) */
    double theta;  /* rotary base */
    size_t layers, batch, prefill, decode, block_size;
    oclf_dtype dtype; /* activations (and dense weights) */
    int int4;         /* 1: INT4 weights through oclf_linear_q */
    int qk_norm;      /* 1: oclf_qk_norm_rope_cache; 0: rotary + cache write */
    int o_residual;   /* 1: the output projection adds the residual */
    oclf_path path;   /* every call's path but attention_paged's (fused) */
    uint64_t seed;
    int keep_host;    /* keep host copies of the weights (layer_host_weights) */
    /* 1: step 0 (the prefill) is never run, so its buffers are sized for a
     * decode step; the cache holds zeros where the prompt's keys would be,
     * which leaves the bytes a decode step reads, and its time, unchanged. */
    int decode_only;
} layer_config;

/* Llama-3-8B's sizes (hidden 4096, 32 q heads, 8 kv heads, head dim 128,
 * MLP 14336, eps 1e-5, theta 500000), 2 layers, batch 1, prefill 128,
 * decode 8, block size 16, f16, dense weights, qk_norm 1, o_residual 0,
 * path AUTO, seed 1. */
void layer_config_default(layer_config *c);
/* 0 when layer_model_create would take the sizes, else -1 and why: a size
 * of 0, q heads not a multiple of kv heads, an odd head dim or one above
 * 256, an unknown dtype, INT4 widths that are not multiples of 128. */
int layer_config_check(const layer_config *c, char *err, size_t errlen);

/* The ops of a step, in order; the names depend on the configuration
 * (layer_op_name), and an op a configuration does not run is skipped. */
enum {
    LAYER_OP_NORM_IN,
    LAYER_OP_QKV,
    LAYER_OP_ROPE,
    LAYER_OP_CACHE, /* qk_norm 0 only */
    LAYER_OP_ATTN,
    LAYER_OP_O,
    LAYER_OP_NORM_POST,
    LAYER_OP_GATE_UP,
    LAYER_OP_ACT,
    LAYER_OP_DOWN,
    LAYER_OPS
};
/* "rms_norm", "linear_qkv", ...; NULL for an op the configuration skips. */
const char *layer_op_name(const layer_config *c, int op);

typedef struct layer_model layer_model;

/* Makes the weights, caches, metadata and inputs on the device (blocking).
 * The queue must be in order; profiling is used when it is enabled. 0, or
 * -1 with a sentence in err. */
int layer_model_create(cl_context cl, cl_device_id device, cl_command_queue queue,
                       oclf_context *ctx, const layer_config *config, layer_model **out,
                       char *err, size_t errlen);
void layer_model_destroy(layer_model *m);
const layer_config *layer_model_config(const layer_model *m);

/* 1 + decode. */
size_t layer_steps(const layer_model *m);
/* Tokens of step s (batch x prefill, or batch). */
size_t layer_step_tokens(const layer_model *m, size_t s);
/* Keys sequence b holds after step s (prefill, then one more a step). */
size_t layer_step_seq_len(const layer_model *m, size_t s);

typedef struct layer_step_stats {
    double wall_ns;   /* host: the first enqueue to the end of clFinish */
    double device_ns; /* profiling: the step's start marker to its last op's end; <0 without */
    /* Device time per op summed over the layers: each op's end minus the
     * end of what precedes it on the in-order queue; <0 without profiling. */
    double op_ns[LAYER_OPS];
} layer_step_stats;

/* Enqueues step s on every layer and waits for it. stats may be NULL.
 * Steps run in order; after the last one layer_reset allows another pass.
 * 0, or -1 with the failing call and oclf_last_error in err. */
int layer_step(layer_model *m, size_t s, layer_step_stats *stats, char *err, size_t errlen);
/* The op whose library call is running (LAYER_OP_*), -1 outside a call:
 * lets a log callback attribute each kernel launch to its op. */
int layer_current_op(const layer_model *m);

/* Writes every step's input hidden states back (blocking), for a new pass
 * over the same steps (the caches are rewritten as the steps run). */
int layer_reset(layer_model *m, char *err, size_t errlen);

/* The step's hidden states (its rows of x: the inputs before the step, the
 * last layer's output after it), widened to float, [tokens, hidden]. */
int layer_read_hidden(layer_model *m, size_t s, float *out);
/* The inputs of step s as stored (rounded to the dtype), [tokens, hidden]. */
const float *layer_input(const layer_model *m, size_t s);

/* Host copies (keep_host): floats of the values the device computes with
 * (dense weights rounded to the dtype; INT4 dequantized, (q - 8) s). */
typedef struct layer_host_weights {
    float *norm_in, *norm_post; /* [H] */
    float *wqkv;                /* [(Hq + 2 Hk) hd, H] */
    float *wo;                  /* [H, Hq hd] */
    float *wgu;                 /* [2 MLP, H] */
    float *wd;                  /* [H, MLP] */
} layer_host_weights;
const layer_host_weights *layer_host(const layer_model *m, size_t layer);

/* Bytes of every layer's weights on the device: matrices, INT4 scales and
 * the norm weights. */
double layer_weight_bytes(const layer_model *m);
/* Bytes of K and V that step s's attention reads over all layers: every
 * sequence's keys so far, the step's own included. */
double layer_kv_bytes(const layer_model *m, size_t s);
/* Multiply-adds x 2 of step s: the projections and the attention's two
 * products (the causal half of a prefill). */
double layer_step_flops(const layer_model *m, size_t s);
/* The least bytes op `op` of step s moves over all layers (each operand
 * read or written once: weights with their scales, the K and V read,
 * activations in and out, the rotary table rows) and its multiply-adds x 2;
 * 0 for an op the configuration skips. */
double layer_op_bytes(const layer_model *m, size_t s, int op);
double layer_op_flops(const layer_model *m, size_t s, int op);

#endif
