/*
 * CPU reference implementations (fp64 accumulation) and host-side dtype
 * helpers, shared by the tests, the benchmark and the tuner. Not installed.
 *
 * Inputs are read from the same stored (rounded) values the device reads;
 * outputs are doubles, compared with oclf_ref_compare under the per-dtype
 * tolerances (oclf_ref_tolerance).
 */
#ifndef OCLF_REF_H
#define OCLF_REF_H

#include "oclfuse.h"

#include <stddef.h>
#include <stdint.h>

/* ---- host dtype conversion ---------------------------------------------- */
uint16_t oclf_f32_to_f16(float f); /* round to nearest even */
float oclf_f16_to_f32(uint16_t h);
uint16_t oclf_f32_to_bf16(float f); /* round to nearest even */
float oclf_bf16_to_f32(uint16_t h);

/* Element i of an array of `dtype`, widened to float. */
float oclf_ref_get(oclf_dtype dtype, const void *base, size_t i);
/* Stores v rounded once to `dtype`. */
void oclf_ref_set(oclf_dtype dtype, void *base, size_t i, float v);
/* v rounded to `dtype` and widened back. */
float oclf_ref_round(oclf_dtype dtype, float v);

/* Per-dtype tolerances (f32 1e-5 and 1e-5, f16 2e-3 and 2e-3, bf16 1e-2 and
 * 1.6e-2): |got - ref| <= atol + rtol * |ref|. */
void oclf_ref_tolerance(oclf_dtype dtype, double *atol, double *rtol);

/* Compares rows x cols of `got` (dtype, row stride gs) with `ref` (packed
 * doubles). Returns the number of elements out of tolerance; the first one's
 * position and the largest error go to the optional outputs. NaN matches NaN. */
size_t oclf_ref_compare(oclf_dtype dtype, const void *got, size_t gs, const double *ref,
                        size_t rows, size_t cols, size_t *first_bad, double *max_err);

/* ---- softmax cross-entropy ------------------------------------- */
/* PyTorch's F.cross_entropy over rows x cols logits of dtype (row stride
 * xs) and int64 targets, in fp64 from the stored logits: z = softcap > 0 ?
 * softcap tanh(x / softcap) : x, lse = logsumexp(z), per row
 * (1 - eps)(lse - z_t) + eps (lse - mean(z)) + zl lse^2, 0 when t == ignore.
 * loss_rows[rows] (optional), lse[rows] (optional), *reduced: sum (reduction
 * 1) or mean over the rows not ignored (2; NaN when none), and grad
 * (optional, rows x cols packed): d(reduced loss)/dx times the upstream
 * gradient gup (per row for reduction 0, gup[0] otherwise; NULL: 1).
 * Targets outside [0, cols) that are not ignored are the caller's error. */
void oclf_ref_cross_entropy(oclf_dtype dtype, size_t rows, size_t cols, const void *x, size_t xs,
                            const int64_t *targets, int64_t ignore, int reduction, double eps,
                            double softcap, double zl, const float *gup, double *loss_rows,
                            double *lse, double *reduced, double *grad);
/* Linear + cross-entropy: the logits x W^T (x [tokens, hidden] at row
 * stride xs, w [vocab, hidden] at ws) summed in fp64 and rounded to the
 * dtype as the device stores them, then oclf_ref_cross_entropy on them;
 * grad_x [tokens, hidden] = dZ W and grad_w [vocab, hidden] = dZ^T x (both
 * optional, packed), with dZ the logits' gradient rounded to the dtype.
 * -1 when out of host memory, else 0. */
int oclf_ref_linear_cross_entropy(oclf_dtype dtype, size_t tokens, size_t hidden, size_t vocab,
                                  const void *x, size_t xs, const void *w, size_t ws,
                                  const int64_t *targets, int64_t ignore, int reduction,
                                  double eps, double softcap, double zl, const float *gup,
                                  double *loss_rows, double *lse, double *reduced,
                                  double *grad_x, double *grad_w);

/* ---- normalization ----------------------------------------- */
/* x: rows x cols of dtype, row stride xs; w, b: cols of dtype or NULL;
 * y: rows x cols packed doubles. */
void oclf_ref_rms_norm(oclf_dtype dtype, size_t rows, size_t cols, const void *x, size_t xs,
                       const void *w, float eps, double *y);
void oclf_ref_layer_norm(oclf_dtype dtype, size_t rows, size_t cols, const void *x, size_t xs,
                         const void *w, const void *b, float eps, double *y);
/* res <- round(in + res) in place, in storage (the first half of the add
 * variants); then the norm of res gives the rest. */
void oclf_ref_add_rows(oclf_dtype dtype, size_t rows, size_t cols, const void *in, size_t is,
                       void *res, size_t rs);

/* ---- normalization backward ------------------------------------------ */
/* The gradients of RMSNorm (ln 0) or LayerNorm (ln 1) over rows x cols of
 * dtype: x (row stride xs), dy (dys), w (cols of dtype, NULL: 1), dres
 * (NULL, or rows x cols of dtype, stride drs, added to dx). Outputs, each
 * optional: dx rows x cols packed doubles, dw and db cols doubles. */
void oclf_ref_norm_backward(oclf_dtype dtype, int ln, size_t rows, size_t cols, const void *x,
                            size_t xs, const void *dy, size_t dys, const void *w,
                            const void *dres, size_t drs, float eps, double *dx, double *dw,
                            double *db);

/* ---- activation-and-multiply --------------------------------- */
/* in: rows x 2d of dtype, row stride is; out: rows x d packed doubles. */
void oclf_ref_act_and_mul(oclf_dtype dtype, const oclf_activation *act, size_t rows, size_t d,
                          const void *in, size_t is, double *out);
/* The gradient of oclf_ref_act_and_mul: dout rows x d of dtype (row stride
 * gs); din rows x 2d packed doubles (dL/dx | dL/dy, or the interleaved
 * pairs of SWIGLU_OAI), the derivatives taken in closed form in fp64. */
void oclf_ref_act_and_mul_backward(oclf_dtype dtype, const oclf_activation *act, size_t rows,
                                   size_t d, const void *in, size_t is, const void *dout,
                                   size_t gs, double *din);

/* ---- rotary embedding ----------------------------------------- */
/* Host view of oclf_rope: positions widened to int64. */
typedef struct oclf_ref_rope {
    int gptj;
    size_t hd, rot;
    const int64_t *pos;
    const void *cache; /* [max_pos, rot] of cdtype, row stride cs */
    oclf_dtype cdtype;
    size_t cs, max_pos;
} oclf_ref_rope;

/* Rotates `nh` heads of `tokens` tokens (head h of token t at
 * t * ts + h * hs of x) into y: [tokens, nh, hd] packed doubles. Tokens with
 * a position outside [0, max_pos) are copied unchanged. */
void oclf_ref_rotary(oclf_dtype dtype, size_t tokens, size_t nh, const void *x, size_t ts,
                     size_t hs, const oclf_ref_rope *r, double *y);
/* The same with the inverse rotation (x c + y s, y c - x s): the gradient
 * of oclf_ref_rotary. */
void oclf_ref_rotary_backward(oclf_dtype dtype, size_t tokens, size_t nh, const void *x,
                              size_t ts, size_t hs, const oclf_ref_rope *r, double *y);
/* Per-head RMSNorm of the nq Q and nk K heads (weights qw, kw of hd or
 * NULL), then the rotation, all in fp64; V heads copied. y: [tokens,
 * (nq + nk + nv) * hd] packed doubles. */
void oclf_ref_qk_norm_rope(oclf_dtype dtype, size_t tokens, size_t nq, size_t nk, size_t nv,
                           const void *qkv, size_t ts, const void *qw, const void *kw, float eps,
                           const oclf_ref_rope *r, double *y);
/* ---- L2 distance + top-k --------------------------------------- */
/* Exact k nearest rows of x (n rows of d in dtype, row stride xs) for each
 * of nq f32 queries (row stride qs): squared distances in fp64 from the
 * stored values, the total order of the spec (ties to the smaller index,
 * NaN after every number), padding -1 / FLT_MAX for k > n. dist and idx are
 * nq x k packed. */
void oclf_ref_l2_topk(oclf_dtype dtype, size_t nq, size_t n, size_t d, size_t k, const float *q,
                      size_t qs, const void *x, size_t xs, double *dist, int64_t *idx);
/* The same over the rows whose bit is set in `allowed` (bit i % 8 of byte
 * i / 8; NULL: every row); fewer allowed rows than k leave padding. */
void oclf_ref_l2_topk_allowed(oclf_dtype dtype, size_t nq, size_t n, size_t d, size_t k,
                              const float *q, size_t qs, const void *x, size_t xs,
                              const uint8_t *allowed, double *dist, int64_t *idx);
/* All n squared distances of one query, fp64. */
void oclf_ref_l2_dists(oclf_dtype dtype, size_t n, size_t d, const float *q, const void *x,
                       size_t xs, double *out);
/* Merge of per-shard top-k lists (rows sorted, padding id -1 last, ids
 * global): every real entry of every list pooled and fully sorted in the
 * same total order, the first k kept, padded with -1 / FLT_MAX. */
void oclf_ref_l2_merge(size_t nq, size_t k, size_t lists, const float *const *dists,
                       const int64_t *const *ids, const size_t *list_k, float *dist,
                       int64_t *idx);

/* ---- linear layer ------------------------------------------------------- */
typedef struct oclf_ref_linear_args {
    oclf_dtype dtype;
    size_t m, n, k;
    const void *x; /* [m, k], row stride xs */
    size_t xs;
    oclf_linear_act prologue;
    const void *w; /* [n, k] (NK) or [k, n] (KN), row stride ws */
    size_t ws;
    oclf_weight_layout layout;
    const void *bias;     /* n elements or NULL */
    const void *residual; /* [m, n], row stride rs, or NULL */
    size_t rs;
    float alpha, beta;
    int residual_before_act;
    oclf_linear_act act;
    /* When set, the weight as fp64 [n, k] packed (layout NK; a dequantized
     * weight from oclf_ref_dequant), read instead of w. */
    const double *wd;
} oclf_ref_linear_args;
double oclf_ref_linear_act(oclf_linear_act act, double t);
/* y: [m, n] packed doubles. scale (may be NULL): per element the magnitude
 * the tolerance is relative to besides |y|: |alpha| sum_k |p(x) w| plus
 * |bias| and |beta residual| (the terms whose fp32 rounding reaches y). */
void oclf_ref_linear(const oclf_ref_linear_args *args, double *y, double *scale);
/* Elements of got (dtype, row stride gs) outside |got - ref| <= tol (|ref|
 * + scale) with tol 1e-5 (f32), 2e-3 (f16), 1.6e-2 (bf16); NaN matches NaN. */
/* A quantized weight in host memory, as oclf_qweight describes it on the
 * device: q (bytes, row stride qs bytes), scale (scale_dtype elements, row
 * stride ss), zero (bytes, row stride zs) or NULL. */
typedef struct oclf_ref_qweight {
    oclf_qformat format;
    unsigned group;
    const uint8_t *q;
    size_t qs;
    const void *scale;
    oclf_dtype scale_dtype;
    size_t ss;
    const uint8_t *zero;
    size_t zs;
} oclf_ref_qweight;
/* The weight [n, k] in fp64 by the formulas of the format (oclfuse.h,
 * "Quantized weights"): out [n, k] packed. */
void oclf_ref_dequant(const oclf_ref_qweight *w, size_t n, size_t k, double *out);

size_t oclf_ref_linear_compare(oclf_dtype dtype, const void *got, size_t gs, const double *ref,
                               const double *scale, size_t rows, size_t cols, size_t *first_bad,
                               double *max_err);

/* ---- attention -------------------------------------------------------- */
/* One operand of heads: token t, head h starts at element
 * off + t * ts + h * hs of `base`. */
typedef struct oclf_ref_heads {
    const void *base;
    size_t off, ts, hs;
} oclf_ref_heads;
typedef struct oclf_ref_attention_args {
    oclf_dtype dtype;
    size_t batch, hq, hk, d;
    const int32_t *cu_q, *cu_k; /* batch + 1 offsets each */
    oclf_ref_heads q, k, v;
    float scale; /* 0: 1 / sqrt(d) */
    int causal, window;
    int64_t left, right; /* -1: unbounded */
    float softcap;       /* <= 0: none */
    const float *alibi;  /* [hq] or NULL */
    const float *sinks;  /* [hq] or NULL */
    float dropout_p;     /* 0: none */
    uint64_t dropout_seed, dropout_offset;
} oclf_ref_attention_args;
/* 1 when dropout keeps the probability of packed query token t, query
 * head h and key j (the header's Philox mapping). */
int oclf_ref_attention_keep(const oclf_ref_attention_args *a, uint64_t t, size_t h, int64_t j);
/* o: [total_q, hq, d] packed doubles; lse (may be NULL): [hq, total_q];
 * vmax (may be NULL): [total_q, hq], max_j |v_j| over the row's sequence's
 * keys (1 for a sequence without keys), times 1 / (1 - p) with dropout:
 * the scale of the tolerance. */
void oclf_ref_attention(const oclf_ref_attention_args *a, size_t total_q, double *o, double *lse,
                        double *vmax);
/* Output rows of got (token t, head h at off + t * ts + h * hs) outside
 * |o - ref| <= tol (1 + vmax) with tol 2e-5 (f32), 2e-3 (f16), 1.6e-2
 * (bf16); NaN never matches. */
size_t oclf_ref_attention_compare(oclf_dtype dtype, const void *got, size_t off, size_t ts,
                                  size_t hs, size_t total_q, size_t hq, size_t d,
                                  const double *ref, const double *vmax, size_t *first_bad,
                                  double *max_err);
/* LSE [hq, total_q] f32 (row stride ls) within tol absolute of ref; -inf
 * matches -inf only. */
size_t oclf_ref_attention_lse_compare(oclf_dtype dtype, const float *got, size_t ls,
                                      size_t total_q, size_t hq, const double *ref,
                                      size_t *first_bad, double *max_err);

/* ---- elementwise expressions ---------------------------------------------- */
/* Philox4x32-10: out = the block for counter ctr under key. */
void oclf_ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* dropout(v, p) of element n (row * cols + col + offset) in stream `stream`. */
double oclf_ref_dropout(double v, float p, uint64_t seed, uint64_t n, uint32_t stream);

#endif
