/*
 * Linear layer with fused prologue and epilogue: oclf_linear.
 *
 *   fused:   linear_fused (tiled GEMM, prologue where x is loaded, epilogue
 *            where y is stored), or linear_mv (few rows, NK)
 *   unfused: [lin_prep x] [lin_prep W] -> the GEMM library's Sgemm ->
 *            [lin_bias] [lin_res] [lin_act] (in the epilogue's order)
 *            [lin_store]
 *
 * Fused parameters: MB, NB (register block), VEC, WGM, WGN (blocks per
 * group along M and N), STAGE, KC (local-memory tiles, KC columns of K at a
 * time), MV (matrix-vector shape). The unfused path has none. STAGE 2, the
 * matrix-unit structure (f16 and bf16), reads MB x NB as a warp's 16 x 8
 * fragments and WGM x WGN as warps of 32 work-items; its instruction form
 * is the device's (OCLF_MMA: inline PTX on compute capability 8.0 and
 * newer, else the emulation, which only a forced STAGE 2 runs). STAGE 3,
 * the register-tiled structure (every dtype, f32 arithmetic: the GPU
 * default where no matrix unit serves), reads MB x NB as a work-item's
 * tile of the product in registers (multiples of 4) and VEC as the width
 * of its global loads. STAGE 4, the same matrix-unit structure on the
 * wavefront's 16x16x16 instruction, reads MB x NB as a wavefront's 16 x 16
 * fragments and WGM x WGN as wavefronts of 64 (OCLF_MFMA: clang's builtin
 * on CDNA 2 and 3, else the emulation, which only a forced STAGE 4 runs).
 *
 * oclf_linear_q (op linear_q) runs the same kernels built with a quantized
 * W (OCLF_QW), dequantized at its load; its unfused path dequantizes a tile
 * of W's rows at a time (lin_dequant) into an f32 temporary and runs the
 * unfused path above on each tile. Its entry, the quantized weight's checks
 * and oclf_qweight_convert (lin_qconvert) are in linear_q.c.
 */
#include "linear.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The fused path's parameters, all compiled in. */
static const oclf_param_spec lin_params[] = {
    {"MB", 1, 8, 1, OCLF_PARAM_DEFINE},
    {"NB", 1, 8, 1, OCLF_PARAM_DEFINE},
    {"VEC", 1, 16, 1, OCLF_PARAM_DEFINE},
    {"WGM", 1, OCLF_PARAM_MAX_WGS, 0, OCLF_PARAM_DEFINE},
    {"WGN", 1, OCLF_PARAM_MAX_WGS, 0, OCLF_PARAM_DEFINE},
    {"STAGE", 0, 4, 0, OCLF_PARAM_DEFINE},
    {"KC", 4, 256, 0, OCLF_PARAM_DEFINE},
    {"MV", 0, 1, 0, OCLF_PARAM_DEFINE},
};
enum { P_MB, P_NB, P_VEC, P_WGM, P_WGN, P_STAGE, P_KC, P_MV, P_COUNT };
_Static_assert(sizeof lin_params / sizeof lin_params[0] == P_COUNT, "one spec per parameter");
/* linear_q's one more: QSCALE, where the unstaged tiled kernel applies a
 * group's scale (1: once to the group's partial sums; 0: to each weight as
 * it is loaded, shared by the block's rows). */
/* PRE, a strategy rather than a kernel parameter: 1 dequantizes W a tile
 * of rows at a time into an f32 temporary (lin_dequant_w) and runs the
 * dense tiled kernel, built to read an f32 W (OCLF_WF32), with the other
 * parameters over it, so the weights reach the fp32 products exactly as
 * the kernels that dequantize at the load give them; many
 * rows amortize the one dequantization, where the kernels that dequantize
 * at the load repeat it for every block of rows. */
static const oclf_param_spec linq_params[] = {{"QSCALE", 0, 1, 0, OCLF_PARAM_DEFINE},
                                              {"PRE", 0, 1, 0, OCLF_PARAM_ARG}};
enum { Q_QSCALE, Q_PRE, Q_COUNT };

/* The fused configuration for one weight layout: kc is 0 unless staged and
 * mv 0 for KN (no program per unused value); `defines` holds the layout
 * and the parameters, the call adds its prologue. */
typedef struct lin_cfg {
    int mb, nb, vec, wgm, wgn, stage, kc, mv;
    int mma; /* STAGE 2: the instruction form (OCLF_MMA); STAGE 4: OCLF_MFMA */
    int pre; /* linear_q: the tile is dequantized first (PRE) */
    char defines[OCLF_DEFINES_MAX];
} lin_cfg;
OCLF_CFG_FITS(lin_cfg);

/* Rows from which a device with a matrix unit takes the matrix-unit
 * structure (STAGE 2) for f16 and bf16 by default: below, a 64-row tile
 * is mostly padding and the matrix-vector or staged shapes serve. */
#define LIN_MMA_MIN_ROWS 64

/* The matrix-unit structures: STAGE 2 (a warp of 32, fragments of 16 x 8)
 * and STAGE 4 (a wavefront of 64, fragments of 16 x 16). */
static int lin_lanes(int stage) { return stage == 4 ? 64 : 32; }
static int lin_frag_cols(int stage) { return stage == 4 ? 16 : 8; }

/* Local memory of the staged kernel: the x tile (TM x (KC + 1)) and the W
 * tile (NK: TN x (KC + 1); KN: KC x TN). The matrix-vector shape holds at
 * most MB x NB partial sums a work-item (its reduction where it does not
 * shuffle); a grouped W's staged scales come on top (mv_qlocal_bytes). */
static uint64_t lin_local_bytes(const lin_cfg *c, int wkn)
{
    if (c->mv)
        return (uint64_t)c->wgm * (uint64_t)c->wgn * (uint64_t)(c->mb * c->nb) * 4;
    if (!c->stage)
        return 0;
    if (c->stage == 2 || c->stage == 4) {
        /* two buffers of (TM + TN) rows of LROW words (cl/linear.cl), and
         * the emulation's per-warp (per-wavefront) scratch: cl/mma.h's
         * OCLF_MMA_SCRATCH_WORDS, OCLF_MFMA_SCRATCH_WORDS */
        const uint64_t half = (uint64_t)c->kc / 2, lrow = half + (half % 32 == 0 ? 16 : 0);
        const uint64_t rows = (uint64_t)c->wgm * c->mb * 16 +
                              (uint64_t)c->wgn * c->nb * (uint64_t)lin_frag_cols(c->stage);
        const uint64_t scratch = c->stage == 4 ? 64 * 2 + 64 * 2 : 32 * 4 + 32 * 2;
        return (2 * rows * lrow + (c->mma ? 0 : (uint64_t)c->wgm * c->wgn * scratch)) * 4;
    }
    const uint64_t tm = (uint64_t)c->wgm * (uint64_t)c->mb, kc = (uint64_t)c->kc;
    if (c->stage == 3) /* two buffers of KC rows of TM + 4 and TN + 4 floats */
        return 2 * kc * (tm + 4 + (uint64_t)c->wgn * (uint64_t)c->nb + 4) * 4;
    const uint64_t tn = (uint64_t)c->wgn * (uint64_t)c->nb * (uint64_t)(wkn ? c->vec : 1);
    return (tm * (kc + 1) + (wkn ? kc * tn : tn * (kc + 1))) * 4;
}

/* The fused kernel's work-group size and its tile of the product. */
static void lin_geometry(const lin_cfg *c, int wkn, size_t *wgs, size_t *tm, size_t *tn)
{
    if (c->stage == 2 || c->stage == 4) {
        *wgs = (size_t)lin_lanes(c->stage) * (size_t)c->wgm * (size_t)c->wgn;
        *tm = 16 * (size_t)c->wgm * (size_t)c->mb;
        *tn = (size_t)lin_frag_cols(c->stage) * (size_t)c->wgn * (size_t)c->nb;
        return;
    }
    *wgs = (size_t)c->wgm * (size_t)c->wgn;
    /* the matrix-vector shape: WGM segments of NB columns each, MB rows */
    *tm = c->mv ? (size_t)c->mb : (size_t)c->wgm * (size_t)c->mb;
    *tn = c->mv ? (size_t)c->wgm * (size_t)c->nb
                : (size_t)c->wgn * (size_t)c->nb *
                      (size_t)(wkn && c->stage != 3 ? c->vec : 1);
}

static void oclf_linear_heuristic(const oclf_context *ctx, oclf_dtype dtype, const oclf_shape *shape,
                           oclf_path path, oclf_params *out)
{
    if (path == OCLF_PATH_UNFUSED)
        return;
    const oclf_device_info *dev = &ctx->info;
    const uint64_t m = shape->dim[0] ? shape->dim[0] : 1;
    int mb, nb, vec, wgm, wgn, stage, kc = 16, mv = 0;
    if (dev->type & CL_DEVICE_TYPE_CPU) {
        /* A CPU: the dot-product block of l2_topk's scan (NK), 16-wide
         * vectors, no barriers; a group's work-items run one after another
         * on one core and share the W block through its cache, so they are
         * all along M. NK: 2 rows x 8 columns (16-20% faster than 4 x 4 at
         * 1024^3 here, 6 of 6 interleaved pairs); KN: 4 rows x 2 vectors
         * of 16 columns (4 x 4 of those spilled: 2.5-3x slower at 512^3).
         * A single row (decode) reads each W row once. */
        const int kn = shape->dim[3] == OCLF_WEIGHT_KN, quant = shape->dim[3] >= 1000;
        mb = kn ? (m >= 4 ? 4 : m >= 2 ? 2 : 1) : (m >= 2 ? 2 : 1);
        nb = kn ? 2 : 8;
        if (quant) {
            /* A quantized W: one row against 8 columns for decode; from 4
             * rows, 4 x 2, whose dequantized weights serve 4 rows (2.2x
             * the 2 x 8 block at 16 x 4096 x 4096 INT4 here). */
            mb = m >= 4 ? 4 : 1;
            nb = m >= 4 ? 2 : 8;
        }
        vec = 16;
        wgn = 1;
        stage = 0;
        const uint64_t blocks = (m + (uint64_t)mb - 1) / (uint64_t)mb;
        wgm = blocks < 16 ? (int)blocks : 16;
    } else {
        /* GPUs: tiles of x and W staged in local memory by the whole group
         * (coalesced), 8 x 8 work-items of at most 16 accumulator floats
         * (AMD's compiler spilled larger blocks; these defaults build without
         * a spill on every back end of tests/gpu_compile.py, while the search
         * space, which varies the rest of the kernel too, stops at 8).
         * Few rows (decode): the matrix-vector shape, 4 segments a group,
         * each of one sub-group's width (the warp, the wave; 32 where the
         * device reduces through local memory) and 2 columns, whose lanes
         * read W in 16-byte units (VEC: 16 bytes of the dtype; a quantized
         * W's pieces of x are 8 wide). From 4 rows a quantized or f32 W
         * takes one column a segment: at 4 x 2, ptxas gave sm_90 77-96
         * registers (under 50% occupancy), at 4 x 1 58-62. */
        stage = 1;
        kc = 32;
        if (m <= 16) {
            const int quant = shape->dim[3] >= 1000;
            mv = 1;
            stage = 0;
            mb = m >= 4 ? 4 : m >= 2 ? 2 : 1;
            nb = m >= 4 && (quant || dtype == OCLF_F32) ? 1 : 2;
            vec = quant ? 8 : 16 / (int)oclf_dtype_size(dtype);
            wgm = 4;
            if (dev->subgroup_form && dev->subgroup_width >= 16 && dev->subgroup_width <= 64)
                wgn = (int)dev->subgroup_width;
            else
                wgn = dev->simd_width > 64 ? 64 : dev->simd_width < 32 ? 32 : (int)dev->simd_width;
        } else if (dev->gemm_staged) {
            /* where the register tile builds worse (lib/device.h): 8 x 8
             * work-items of 2 x 2 blocks of float4, staged 32 of K at a time */
            mb = 2;
            nb = 2;
            vec = 4;
            wgm = 8;
            wgn = 8;
        } else {
            /* The register-tiled structure (STAGE 3): 16 x 16 work-items
             * of 8 x 8 accumulators (a tile of 128 x 128), K in chunks of 8
             * in two buffers (17 KiB of local memory); below 128 rows 4 x 8
             * (64 x 128), K in 16. Global loads of 4 elements (16 bytes of
             * f32; 8 of f16 and bf16, whose 8-wide pieces took two more
             * staging registers and spilled on gfx1100 with a bf16 KN W).
             * What the GPU compilers make of them:
             * docs/notes/2026-11-28-gemm-fp32.md. */
            stage = 3;
            mb = m >= 128 ? 8 : 4;
            nb = 8;
            kc = m >= 128 ? 8 : 16;
            vec = 4;
            wgm = 16;
            wgn = 16;
        }
        while ((size_t)(wgm * wgn) > dev->max_wgs && wgm > 1)
            wgm /= 2;
        /* A quantized W takes the matrix unit from 17 rows (the
         * matrix-vector shape's end): its tile dequantizes each weight
         * once per 64 or 128 rows into the operands, where the staged
         * FP32 structures would run the products on the vector units. */
        const uint64_t mma_min = shape->dim[3] >= 1000 ? 17 : LIN_MMA_MIN_ROWS;
        /* A matrix unit (the device's instruction form, never the
         * emulation) for f16 and bf16 from LIN_MMA_MIN_ROWS rows: 2 x 4
         * warps of 4 x 4 fragments, a tile of 128 x 128 (64 x 128 below 128
         * rows), K in chunks of 32, two buffers: 32 KiB of local memory. */
        if (dev->mma && dtype != OCLF_F32 && m >= mma_min && dev->max_wgs >= 256) {
            stage = 2;
            mv = 0;
            kc = 32;
            mb = m >= 128 ? 4 : 2;
            nb = 4;
            vec = 8;
            wgm = 2;
            wgn = 4;
        }
        /* The wavefront's matrix unit (CDNA 2 and 3, natively): 2 x 4
         * wavefronts of 4 x 2 fragments of 16 x 16, a tile of 128 x 128
         * (2 x 2 fragments, 64 x 128, below 128 rows), K in chunks of 32,
         * two buffers: 32 KiB of local memory, two groups (16 wavefronts)
         * a CU, four a SIMD, where a 4 x 4 warp-sized tile of four
         * wavefronts would leave two a SIMD to hide the instruction's
         * latency (docs/notes/2026-11-29-gemm-mfma.md). */
        if (dev->mfma && dtype != OCLF_F32 && m >= mma_min && dev->max_wgs >= 512) {
            stage = 4;
            mv = 0;
            kc = 32;
            mb = m >= 128 ? 4 : 2;
            nb = 2;
            vec = 8;
            wgm = 2;
            wgn = 4;
        }
    }
    oclf_params_set(out, "MB", mb);
    oclf_params_set(out, "NB", nb);
    oclf_params_set(out, "VEC", vec);
    oclf_params_set(out, "WGM", wgm);
    oclf_params_set(out, "WGN", wgn);
    oclf_params_set(out, "STAGE", stage);
    oclf_params_set(out, "KC", kc);
    oclf_params_set(out, "MV", mv);
    /* A quantized W (linear_q's qformat, never a layout): each group's
     * partial sums scaled once (faster than scaling every weight at 1 and
     * 16 rows here, INT4 in groups of 128). */
    if (shape->dim[3] >= 1000) {
        oclf_params_set(out, "QSCALE", 1);
        /* From 128 rows (CPU): W dequantized once into a temporary, then
         * the dense kernel (512 x 4096 x 4096 INT4 here: 1.10x the f16
         * weight's time, against 1.39x dequantizing at every load; at 16
         * rows the dequantization alone took 2.5x the product). A GPU's
         * staged tiles dequantize once per tile of TM rows already. */
        oclf_params_set(out, "PRE", (dev->type & CL_DEVICE_TYPE_CPU) && m >= 128);
    }
}

/* `q`: a quantized W (NULL or fmt 0: none), whose group VEC must divide
 * (twice VEC for the 4-bit formats' pairs of nibble vectors), so that no
 * step straddles two scales. */
static oclf_status lin_config(const oclf_context *ctx, const oclf_params *p, oclf_dtype dtype,
                              int wkn, const lin_qkind *q, lin_cfg *cfg)
{
    const unsigned qgroup = q && q->fmt ? q->group : 0;
    int64_t qv[Q_COUNT] = {0, 0};
    int64_t v[P_COUNT];
    memset(cfg, 0, sizeof *cfg);
    oclf_status st = oclf_params_read(ctx, lin_params, P_COUNT, p, v);
    if (st != OCLF_SUCCESS)
        return st;
    const int mma = v[P_STAGE] == 2 || v[P_STAGE] == 4;
    if (v[P_STAGE] == 3) {
        /* float4 local reads of a work-item's rows and columns */
        if (v[P_MB] % 4 || v[P_NB] % 4)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "kernel parameters MB = %lld and NB = %lld must be multiples of 4 "
                             "(STAGE = 3)",
                             (long long)v[P_MB], (long long)v[P_NB]);
        if (wkn && (v[P_WGN] * v[P_NB]) % v[P_VEC])
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "kernel parameter VEC = %lld does not divide the tile's %lld columns "
                             "(STAGE = 3, KN)",
                             (long long)v[P_VEC], (long long)(v[P_WGN] * v[P_NB]));
        v[P_MV] = 0;
    }
    if (mma) {
        /* warps of 32; 16-byte pieces of 8 elements (a quantized W's runs
         * dequantized 8 weights at a time); MV and VEC unused */
        if (dtype == OCLF_F32)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "kernel parameter STAGE = %lld (matrix units) takes f16 or bf16 x",
                             (long long)v[P_STAGE]);
        if (v[P_KC] % 32)
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "kernel parameter KC = %lld is not a multiple of 32 (STAGE = %lld)",
                             (long long)v[P_KC], (long long)v[P_STAGE]);
        v[P_VEC] = 8;
        v[P_MV] = 0;
    }
    if (v[P_WGM] * v[P_WGN] * (mma ? lin_lanes((int)v[P_STAGE]) : 1) >
        (int64_t)ctx->info.max_wgs)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "kernel parameters WGM x WGN = %lld x %lld%s exceed the device's %zu "
                         "work-items a group",
                         (long long)v[P_WGM], (long long)v[P_WGN],
                         !mma                 ? ""
                         : v[P_STAGE] == 4 ? " wavefronts of 64"
                                              : " warps of 32",
                         ctx->info.max_wgs);
    if (v[P_STAGE] && v[P_KC] % v[P_VEC])
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "kernel parameter KC = %lld is not a multiple of VEC = %lld",
                         (long long)v[P_KC], (long long)v[P_VEC]);
    /* A quantized W's matrix-vector shape reads x in pieces of 8, whatever
     * VEC says (its W unit is 16 bytes or a GGUF block). */
    if (v[P_MV] && q && q->fmt && !wkn)
        v[P_VEC] = 8;
    const int pairs = q && (q->fmt == OCLF_QFORMAT_INT4 || q->fmt == OCLF_QFORMAT_Q4_0);
    if (qgroup && qgroup % (unsigned)(v[P_VEC] * (pairs ? 2 : 1)))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "kernel parameter VEC = %lld%s does not divide the weight's group of %u",
                         (long long)v[P_VEC], pairs ? " (x 2 weights a byte)" : "", qgroup);
    if (q && q->fmt && (st = oclf_params_read(ctx, linq_params, Q_COUNT, p, qv)))
        return st;
    /* the matrix-unit structure stages W's integers itself: PRE unused */
    if (mma)
        qv[Q_PRE] = 0;
    const int64_t wgn = v[P_WGN];
    if (v[P_MV] && (v[P_STAGE] || (wgn & (wgn - 1))))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "kernel parameter MV = 1 needs STAGE = 0 and WGN a power of two (got "
                         "%lld, %lld)",
                         (long long)v[P_STAGE], (long long)wgn);
    /* The matrix-vector shape is NK's; a KN call runs the tiled kernel with
     * the same block, whose lanes along N already read consecutive columns. */
    if (!v[P_STAGE])
        v[P_KC] = 0;
    if (wkn)
        v[P_MV] = 0;
    cfg->mb = (int)v[P_MB];
    cfg->nb = (int)v[P_NB];
    cfg->vec = (int)v[P_VEC];
    cfg->wgm = (int)v[P_WGM];
    cfg->wgn = (int)v[P_WGN];
    cfg->stage = (int)v[P_STAGE];
    cfg->kc = (int)v[P_KC];
    cfg->mv = (int)v[P_MV];
    cfg->mma = v[P_STAGE] == 4 ? (int)ctx->info.mfma : v[P_STAGE] == 2 ? ctx->info.mma : 0;
    uint64_t local = lin_local_bytes(cfg, wkn);
    /* a quantized W's scales beside the matrix-unit tiles: two buffers of
     * one f32 per tile column and run of 32 of K */
    if (mma && q && q->fmt) {
        size_t wgs, tm, tn;
        lin_geometry(cfg, wkn, &wgs, &tm, &tn);
        local += 2 * (uint64_t)tn * (uint64_t)(cfg->kc / 32) * 4;
    }
    if (local > ctx->info.local_mem)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "linear: the parameters need %llu bytes of local memory, the device has "
                         "%llu",
                         (unsigned long long)local, (unsigned long long)ctx->info.local_mem);
    int used = snprintf(cfg->defines, sizeof cfg->defines, "-DOCLF_WKN=%d ", wkn);
    if (mma)
        used += snprintf(cfg->defines + used, sizeof cfg->defines - (size_t)used,
                         v[P_STAGE] == 4 ? "-DOCLF_MFMA=%d " : "-DOCLF_MMA=%d ", cfg->mma);
    oclf_param_defines(cfg->defines + used, sizeof cfg->defines - (size_t)used, lin_params,
                       P_COUNT, v);
    /* PRE runs the dense kernel, which takes no QSCALE */
    cfg->pre = (int)qv[Q_PRE];
    if (q && q->fmt && !cfg->pre) {
        size_t len = strlen(cfg->defines);
        if (len + 1 < sizeof cfg->defines)
            cfg->defines[len++] = ' ';
        oclf_param_defines(cfg->defines + len, sizeof cfg->defines - len, linq_params, 1, qv);
    }
    return OCLF_SUCCESS;
}

static void lin_qdefines(const lin_qkind *q, char *buf, size_t len)
{
    if (!q || !q->fmt)
        snprintf(buf, len, "%s", "");
    else
        snprintf(buf, len, "-DOCLF_QW=%d -DOCLF_QG=%u -DOCLF_QZ=%d -DOCLF_QSF32=%d ", q->fmt,
                 q->group, q->zero, q->sf32);
}

/* The fused program for (dtype, prologue, weight, cfg) and its kernel;
 * w_f32: a dense W of f32 whatever the dtype (PRE's dequantized tile);
 * qlocal: the matrix-vector shape stages a grouped W's scales. */
static oclf_status fused_program(oclf_context *ctx, oclf_dtype dtype, int prologue,
                                 const lin_qkind *q, int w_f32, const lin_cfg *cfg, int aligned,
                                 int qlocal, oclf_program **prog, const char **kernel)
{
    char qd[96], defines[OCLF_DEFINES_MAX + 160], opts[OCLF_OPTIONS_MAX + 64];
    lin_qdefines(q, qd, sizeof qd);
    /* (the aligned mark added here: a quantized W's defines are longer
     * than oclf_program_options_aligned's buffer) */
    snprintf(defines, sizeof defines, "-DOCLF_PRO=%d %s%s%s%s%s", prologue, qd,
             w_f32 && dtype != OCLF_F32 ? "-DOCLF_WF32=1 " : "", cfg->defines,
             qlocal ? " -DOCLF_QLOCAL=1" : "", aligned ? " -DOCLF_ALIGNED=1" : "");
    oclf_program_options(opts, sizeof opts, dtype, -1, defines);
    *kernel = cfg->mv ? "linear_mv" : "linear_fused";
    return oclf_program_get(ctx, "linear.cl", opts, prog);
}

oclf_status oclf_lin_unfused_program(oclf_context *ctx, oclf_dtype dtype, const lin_qkind *q,
                                     oclf_program **prog)
{
    char qd[96], defines[160], opts[OCLF_OPTIONS_MAX];
    lin_qdefines(q, qd, sizeof qd);
    /* lin_dequant_w's vectors: 16 weights, which divide every group */
    snprintf(defines, sizeof defines, "-DOCLF_UNFUSED=1 %s%s", qd,
             q && q->fmt ? "-DOCLF_VEC=16" : "");
    oclf_program_options(opts, sizeof opts, dtype, -1, defines);
    return oclf_program_get(ctx, "linear.cl", opts, prog);
}

/* The weight kind a linear_q shape names (its qformat dim); validation
 * assumes f16 scales and no zero points, the programs of which differ from
 * the others only in how a scale is read. */
static lin_qkind qkind_of_shape(oclf_op op, const oclf_shape *shape)
{
    lin_qkind q = {0, 0, 0, 0};
    if (op == OCLF_OP_LINEAR_Q) {
        q.fmt = (int)(shape->dim[3] / 1000u);
        q.group = (unsigned)(shape->dim[3] % 1000u);
    }
    return q;
}

/* Whether the matrix-vector shape stages this W's scales: INT8 and INT4 in
 * groups (a GGUF block carries its own; INT8 per channel has one a row). */
static int mv_qlocal_kind(const lin_qkind *q)
{
    return q && q->group && (q->fmt == OCLF_QFORMAT_INT8 || q->fmt == OCLF_QFORMAT_INT4);
}

/* The staged scales' (and zero points') bytes: WGM x NB rows of K / group
 * floats each. */
static uint64_t mv_qlocal_bytes(const lin_cfg *cfg, const lin_call *c)
{
    const uint64_t per = (uint64_t)cfg->wgm * (uint64_t)cfg->nb * (c->k / c->q.group) * 4;
    return per * (c->q.zero ? 2 : 1);
}

static oclf_status oclf_linear_validate(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                 const oclf_shape *shape, const oclf_resolved *r, int deep,
                                 oclf_op_cfg *out)
{
    oclf_program *prog;
    oclf_status st;
    const lin_qkind q = qkind_of_shape(op, shape);
    if (q.fmt && (q.fmt >= OCLF_QFORMAT_COUNT_ || q.group > 128))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "linear_q: unknown weight format %llu",
                         (unsigned long long)shape->dim[3]);
    if (r->path == OCLF_PATH_UNFUSED) {
        /* No parameters: the GEMM library tunes itself. */
        if (out)
            memset(out, 0, sizeof(lin_cfg));
        if (!deep || (st = oclf_lin_unfused_program(ctx, dtype, &q, &prog)))
            return deep ? st : OCLF_SUCCESS;
        static const char *const names[] = {"lin_prep", "lin_bias", "lin_res",  "lin_act",
                                            "lin_store", "lin_dequant"};
        return oclf_check_kernel_wgs(ctx, prog, names, OCLF_NARGS(names) - (q.fmt ? 0 : 1),
                                     LIN_ELEM_WGS);
    }
    lin_cfg cfg;
    const int wkn = !q.fmt && shape->dim[3] == OCLF_WEIGHT_KN;
    if ((st = lin_config(ctx, &r->params, dtype, wkn, &q, &cfg)))
        return st;
    if (out)
        memcpy(out, &cfg, sizeof cfg);
    if (!deep)
        return OCLF_SUCCESS;
    if (q.fmt) {
        const char *kernel, *dequant = "lin_dequant_w";
        const int ql = cfg.mv && !cfg.pre && mv_qlocal_kind(&q);
        /* the matrix-vector shape's aligned build, for the cross-compile
         * suite's list (a call builds it where its operands take it) */
        if (cfg.mv && ctx->program_sink)
            (void)fused_program(ctx, dtype, 0, &q, 0, &cfg, 1, ql, &prog, &kernel);
        /* the matrix-unit structure's aligned build (x's rows on 16 bytes) */
        const int mu = cfg.stage == 2 || cfg.stage == 4;
        if (mu && ctx->program_sink)
            (void)fused_program(ctx, dtype, 0, &q, 0, &cfg, 1, 0, &prog, &kernel);
        size_t wgs, tm, tn;
        lin_geometry(&cfg, 0, &wgs, &tm, &tn);
        if ((st = fused_program(ctx, dtype, 0, cfg.pre ? NULL : &q, cfg.pre, &cfg, 0, ql, &prog,
                                &kernel)) ||
            (st = oclf_check_kernel_wgs(ctx, prog, &kernel, 1, wgs)))
            return st;
        if (cfg.pre && ((st = oclf_lin_unfused_program(ctx, OCLF_F32, &q, &prog)) ||
                        (st = oclf_check_kernel_wgs(ctx, prog, &dequant, 1, LIN_ELEM_WGS))))
            return st;
        return OCLF_SUCCESS;
    }
    /* The other layout's program too: it runs the same parameters when that
     * layout has no record of its own (dispatch falls back on the nearest
     * shape), and so the cross-compile suite, which lists the programs
     * deep validation builds from the NK shapes of the descriptor, sees the
     * KN kernels. One more (cached) build per record taken. */
    oclf_status listed = OCLF_SUCCESS;
    for (int l = 0; l < 2; l++) {
        const char *kernel;
        lin_cfg lc;
        if ((st = lin_config(ctx, &r->params, dtype, l ? !wkn : wkn, NULL, &lc)))
            return l ? listed : st; /* the other layout's tile may not fit */
        size_t wgs, tm, tn;
        lin_geometry(&lc, l ? !wkn : wkn, &wgs, &tm, &tn);
        /* the matrix-unit and register-tiled structures' 16-byte loads:
         * their aligned builds */
        if (lc.stage >= 2) {
            char defines[OCLF_DEFINES_MAX + 32];
            snprintf(defines, sizeof defines, "-DOCLF_PRO=0 %s", lc.defines);
            oclf_list_aligned_variant(ctx, "linear.cl", dtype, -1, defines,
                                      lc.stage == 3 ? lc.vec : 8);
        }
        if (lc.mv && ctx->program_sink)
            (void)fused_program(ctx, dtype, 0, NULL, 0, &lc, 1, 0, &prog, &kernel);
        if ((st = fused_program(ctx, dtype, 0, NULL, 0, &lc, 0, 0, &prog, &kernel)) ||
            (st = oclf_check_kernel_wgs(ctx, prog, &kernel, 1, wgs))) {
            /* A program sink names programs without building them, which
             * fails each: the matrix-unit structure's other layout is
             * named all the same, for the cross-compile suite. */
            if (!(ctx->program_sink && (lc.stage == 2 || lc.stage == 4)))
                return st;
            listed = st;
        }
    }
    return listed;
}

const oclf_op_hooks oclf_linear_hooks = {oclf_linear_heuristic, oclf_linear_validate};

void oclf_linear_epilogue_init(oclf_linear_epilogue *epilogue)
{
    if (epilogue)
        *epilogue = (oclf_linear_epilogue)OCLF_LINEAR_EPILOGUE_INIT;
}

/* quant 0: W is `w` in the call's dtype (oclf_linear); 1: the quantized
 * weight of oclf_linear_q, already checked into c (`w` and `layout`
 * unused). The epilogue is read (its size checked) before anything else. */
oclf_status oclf_lin_check_args(oclf_context *ctx, oclf_dtype dtype, size_t m, size_t n, size_t k,
                                oclf_buf x, oclf_linear_act prologue, oclf_buf w,
                                oclf_weight_layout layout, int quant, oclf_buf y,
                                const oclf_linear_epilogue *epi, lin_call *c)
{
    const char *op = quant ? "linear_q" : "linear";
    /* linear_q's weight is checked already (lib/ops/linear_q.c), into c */
    const lin_call qw = quant ? *c : (lin_call){0};
    memset(c, 0, sizeof *c);
    if (quant) {
        c->w = qw.w, c->qscale = qw.qscale, c->qzero = qw.qzero;
        c->q = qw.q;
    }
    oclf_linear_epilogue plain;
    oclf_linear_epilogue_init(&plain);
    if (epi) {
        char what[32];
        snprintf(what, sizeof what, "%s: epilogue", op);
        oclf_status st = oclf_options_read(ctx, what, epi, sizeof plain, &plain, sizeof plain,
                                           _Alignof(oclf_linear_epilogue));
        if (st != OCLF_SUCCESS)
            return st;
    }
    epi = &plain;
    if ((unsigned)prologue >= OCLF_LINEAR_ACT_COUNT_)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: unknown prologue activation %d", op,
                         (int)prologue);
    if ((unsigned)epi->act >= OCLF_LINEAR_ACT_COUNT_)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: unknown epilogue activation %d", op,
                         (int)epi->act);
    if ((unsigned)layout >= OCLF_WEIGHT_LAYOUT_COUNT_)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: unknown weight layout %d", op,
                         (int)layout);
    if (epi->residual_before_act != 0 && epi->residual_before_act != 1)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: residual_before_act must be 0 or 1", op);
    if (!isfinite(epi->alpha) || !isfinite(epi->beta))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: alpha (%g) and beta (%g) must be finite",
                         op, (double)epi->alpha, (double)epi->beta);
    if (n == 0)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: N is 0", op);
    /* Kernels index rows and columns with 32-bit integers. */
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "%s: M, N and K must be below 2^31 (%zu, %zu, %zu)",
                         op, m, n, k);
    const size_t el = oclf_dtype_size(dtype);
    const int wkn = layout == OCLF_WEIGHT_KN;
    oclf_status st;
    char nx[32], nw[32], ny[32], nb[32], nr[32];
    snprintf(nx, sizeof nx, "%s: x", op);
    snprintf(nw, sizeof nw, "%s: w", op);
    snprintf(ny, sizeof ny, "%s: y", op);
    snprintf(nb, sizeof nb, "%s: bias", op);
    snprintf(nr, sizeof nr, "%s: residual", op);
    if ((st = oclf_check_2d(ctx, nx, x, m, k, el, &c->x)) ||
        (!quant && (st = oclf_check_2d(ctx, nw, w, wkn ? k : n, wkn ? n : k, el, &c->w))) ||
        (st = oclf_check_2d(ctx, ny, y, m, n, el, &c->y)))
        return st;
    if (epi->bias && (st = oclf_check_vector(ctx, nb, *epi->bias, n, el, &c->bias)))
        return st;
    if (epi->residual && (st = oclf_check_2d(ctx, nr, *epi->residual, m, n, el, &c->res)))
        return st;
    if (oclf_overlap(&c->y, &c->x) || oclf_overlap(&c->y, &c->w) ||
        (epi->bias && oclf_overlap(&c->y, &c->bias)) || oclf_overlap(&c->y, &c->qscale) ||
        oclf_overlap(&c->y, &c->qzero))
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT, "%s: y overlaps x, w or bias", op);
    if (epi->residual) {
        c->inplace = oclf_same_range(&c->y, &c->res);
        if (!c->inplace && oclf_overlap(&c->y, &c->res))
            return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                             "%s: y overlaps the residual without being exactly its range", op);
    }
    c->dtype = dtype;
    c->m = m;
    c->n = n;
    c->k = k;
    c->wkn = wkn;
    c->prologue = (int)prologue;
    c->has_bias = epi->bias != NULL;
    c->has_res = epi->residual != NULL;
    c->alpha = epi->alpha;
    c->beta = epi->beta;
    c->act = (cl_uint)epi->act;
    c->before = (cl_uint)epi->residual_before_act;
    return OCLF_SUCCESS;
}

static oclf_status run_fused(oclf_context *ctx, cl_command_queue queue, const lin_call *c,
                             const lin_cfg *cfg, cl_uint num_events, const cl_event *wait_list,
                             cl_event *event)
{
    oclf_program *prog;
    const char *kernel;
    /* x's and W's rows on 16-byte boundaries: the matrix-unit structure's
     * aligned build, whose pieces are single 16-byte loads; the register-
     * tiled structure's, whose VEC-wide pieces are single loads (a
     * quantized W is read as bytes, whatever its alignment) */
    const oclf_operand ops[] = {c->x, c->w};
    int aligned =
        cfg->stage == 2 || cfg->stage == 4
            ? oclf_rows_aligned(8, ops, c->q.fmt ? 1 : OCLF_NARGS(ops))
        : cfg->stage == 3 ? oclf_rows_aligned(cfg->vec, ops, c->q.fmt ? 1 : OCLF_NARGS(ops))
                          : 0;
    /* The matrix-vector shape's: x's pieces (VEC elements) and W's units
     * (VEC elements; a quantized W's 16 bytes) start on their own size, so
     * each is one load; else the element-aligned build. A GGUF W is read
     * a block a unit either way. */
    uint64_t qlocal = 0;
    if (cfg->mv) {
        const oclf_operand wb[] = {c->w};
        aligned = oclf_rows_aligned(cfg->vec, ops, 1) &&
                  (c->q.fmt >= OCLF_QFORMAT_Q8_0 ||
                   oclf_rows_aligned(c->q.fmt ? 16 : cfg->vec, wb, 1));
        /* a grouped W's scales staged where they fit beside the reduction */
        if (mv_qlocal_kind(&c->q) &&
            mv_qlocal_bytes(cfg, c) + lin_local_bytes(cfg, 0) <= ctx->info.local_mem)
            qlocal = mv_qlocal_bytes(cfg, c);
    }
    oclf_status st = fused_program(ctx, c->dtype, c->prologue, &c->q, c->w_f32, cfg, aligned,
                                   qlocal != 0, &prog, &kernel);
    if (st != OCLF_SUCCESS)
        return st;
    size_t wgs, tm, tn;
    lin_geometry(cfg, c->wkn, &wgs, &tm, &tn);
    const size_t groups = ((c->m + tm - 1) / tm) * ((c->n + tn - 1) / tn);
    if (groups > OCLF_MAX_LAUNCH_ITEMS / wgs)
        return oclf_fail(ctx, OCLF_UNSUPPORTED, "linear: %zu work-groups of %zu exceed the launch "
                                                "range",
                         groups, wgs);
    /* An absent bias or residual is never read; y stands in for its handle. */
    cl_mem bm = c->has_bias ? c->bias.mem : c->y.mem, rm = c->has_res ? c->res.mem : c->y.mem;
    cl_ulong xo = c->x.offset, xs = c->x.stride, wo = c->w.offset, ws = c->w.stride;
    cl_ulong bo = c->bias.offset, ro = c->res.offset, rs = c->res.stride;
    cl_ulong yo = c->y.offset, ys = c->y.stride;
    cl_uint hb = (cl_uint)c->has_bias, hr = (cl_uint)c->has_res;
    cl_uint m = (cl_uint)c->m, n = (cl_uint)c->n, k = (cl_uint)c->k;
    /* A quantized W's scales and zero points come last; absent
     * ones (GGUF scales live in W, symmetric formats have no zeros) are
     * never read and W's handle stands in. */
    cl_mem sm = c->qscale.mem ? c->qscale.mem : c->w.mem, zm = c->qzero.mem ? c->qzero.mem : c->w.mem;
    cl_ulong so = c->qscale.offset, ss = c->qscale.stride, zo = c->qzero.offset,
             zs = c->qzero.stride;
    oclf_arg a[] = {OCLF_ARG(c->x.mem), OCLF_ARG(xo),      OCLF_ARG(xs),       OCLF_ARG(c->w.mem),
                    OCLF_ARG(wo),       OCLF_ARG(ws),      OCLF_ARG(bm),       OCLF_ARG(bo),
                    OCLF_ARG(hb),       OCLF_ARG(rm),      OCLF_ARG(ro),       OCLF_ARG(rs),
                    OCLF_ARG(hr),       OCLF_ARG(c->y.mem), OCLF_ARG(yo),      OCLF_ARG(ys),
                    OCLF_ARG(c->alpha), OCLF_ARG(c->beta), OCLF_ARG(c->act),   OCLF_ARG(c->before),
                    OCLF_ARG(m),        OCLF_ARG(n),       OCLF_ARG(k),        OCLF_ARG(sm),
                    OCLF_ARG(so),       OCLF_ARG(ss),      OCLF_ARG(zm),       OCLF_ARG(zo),
                    OCLF_ARG(zs),       OCLF_ARG_LOCAL(qlocal ? qlocal : 4)};
    /* A plain W's kernel ends before the scale and zero-point arguments,
     * a quantized W's before the staged scales unless they are staged. */
    return oclf_enqueue(ctx, queue, prog, kernel, a,
                        OCLF_NARGS(a) - (c->q.fmt ? 0 : 6) - (qlocal ? 0 : 1), groups * wgs, wgs,
                        num_events, wait_list, event);
}

/* One elementwise launch of the unfused path over rows x cols. */
static oclf_status elem_launch(oclf_chain *ch, oclf_program *prog, const char *name,
                               const oclf_arg *args, unsigned nargs, size_t rows, size_t cols)
{
    return oclf_chain_launch(ch, prog, name, args, nargs, oclf_round_up(rows * cols, LIN_ELEM_WGS),
                             LIN_ELEM_WGS);
}

/* What a user of the GEMM library writes by hand. The GEMM computes in
 * f32 (the library's half GEMM accumulates in half precision, whose error
 * grows with K past the f16 tolerance), so f16 and bf16 operands are
 * widened into f32 copies first, the prologue applied in the same pass. The
 * product goes straight into y for f32 unless y is the residual (which the
 * GEMM would overwrite before it is read) or K is 0; otherwise into an f32
 * temporary that lin_store rounds into y once. */
static oclf_status run_unfused(oclf_context *ctx, oclf_chain *ch, const lin_call *c)
{
    oclf_program *prog;
    oclf_status st = oclf_lin_unfused_program(ctx, c->dtype, NULL, &prog);
    if (st != OCLF_SUCCESS)
        return st;
    const int conv = c->dtype != OCLF_F32;
    const int conv_w = conv && !c->w_f32;
    const int prep_x = (conv || c->prologue) && c->k > 0;
    const int direct = !conv && !c->inplace && c->k > 0;
    const size_t wr = c->wkn ? c->k : c->n, wc = c->wkn ? c->n : c->k;
    cl_mem xf = NULL, wf = NULL, cf = NULL;
    if ((prep_x && (st = oclf_temp_buffer(ctx, c->m * c->k * 4, &xf))) ||
        (conv_w && c->k > 0 && (st = oclf_temp_buffer(ctx, wr * wc * 4, &wf))) ||
        (!direct && (st = oclf_temp_buffer(ctx, c->m * c->n * 4, &cf))))
        goto done;
    const cl_uint m = (cl_uint)c->m, n = (cl_uint)c->n;
    if (prep_x) {
        cl_ulong io = c->x.offset, is = c->x.stride;
        cl_uint rows = m, cols = (cl_uint)c->k, act = (cl_uint)c->prologue;
        oclf_arg a[] = {OCLF_ARG(c->x.mem), OCLF_ARG(io),   OCLF_ARG(is),  OCLF_ARG(xf),
                        OCLF_ARG(rows),     OCLF_ARG(cols), OCLF_ARG(act)};
        if ((st = elem_launch(ch, prog, "lin_prep", a, OCLF_NARGS(a), c->m, c->k)))
            goto done;
    }
    if (wf) {
        cl_ulong io = c->w.offset, is = c->w.stride;
        cl_uint rows = (cl_uint)wr, cols = (cl_uint)wc, act = 0;
        oclf_arg a[] = {OCLF_ARG(c->w.mem), OCLF_ARG(io),   OCLF_ARG(is),  OCLF_ARG(wf),
                        OCLF_ARG(rows),     OCLF_ARG(cols), OCLF_ARG(act)};
        if ((st = elem_launch(ch, prog, "lin_prep", a, OCLF_NARGS(a), wr, wc)))
            goto done;
    }
    cl_mem cm = direct ? c->y.mem : cf;
    cl_ulong co = direct ? c->y.offset : 0, cs = direct ? c->y.stride : c->n;
    if (c->k == 0) {
        /* An empty product: the epilogue of zeros. */
        const float zero = 0.0f;
        cl_event ev = NULL;
        cl_int err = clEnqueueFillBuffer(ch->queue, cf, &zero, sizeof zero, 0, c->m * c->n * 4,
                                         ch->prev ? 1 : ch->num_events,
                                         ch->prev ? &ch->prev : ch->wait_list, &ev);
        if (err != CL_SUCCESS) {
            st = oclf_fail_cl(ctx, err, "clEnqueueFillBuffer(product)");
            goto done;
        }
        if (ch->prev)
            clReleaseEvent(ch->prev);
        ch->prev = ev;
    } else if ((st = oclf_chain_sgemm(ch, "linear", !c->wkn, c->m, c->n, c->k, c->alpha,
                                      xf ? xf : c->x.mem, xf ? 0 : c->x.offset,
                                      xf ? c->k : c->x.stride, wf ? wf : c->w.mem,
                                      wf ? 0 : c->w.offset, wf ? wc : c->w.stride, cm, co, cs))) {
        goto done;
    }
    if (c->has_bias) {
        cl_ulong bo = c->bias.offset;
        oclf_arg a[] = {OCLF_ARG(cm), OCLF_ARG(co), OCLF_ARG(cs),         OCLF_ARG(m),
                        OCLF_ARG(n),  OCLF_ARG(c->bias.mem), OCLF_ARG(bo)};
        if ((st = elem_launch(ch, prog, "lin_bias", a, OCLF_NARGS(a), c->m, c->n)))
            goto done;
    }
    for (int step = 0; step < 2; step++) {
        /* the residual before or after the activation */
        const int res_now = c->has_res && (step == 0) == (c->before == 1);
        if (res_now) {
            cl_ulong ro = c->res.offset, rs = c->res.stride;
            oclf_arg a[] = {OCLF_ARG(cm), OCLF_ARG(co), OCLF_ARG(cs),        OCLF_ARG(m),
                            OCLF_ARG(n),  OCLF_ARG(c->res.mem), OCLF_ARG(ro), OCLF_ARG(rs),
                            OCLF_ARG(c->beta)};
            if ((st = elem_launch(ch, prog, "lin_res", a, OCLF_NARGS(a), c->m, c->n)))
                goto done;
        }
        if (step == 0 && c->act != OCLF_LINEAR_NONE) {
            oclf_arg a[] = {OCLF_ARG(cm), OCLF_ARG(co), OCLF_ARG(cs),
                            OCLF_ARG(m),  OCLF_ARG(n),  OCLF_ARG(c->act)};
            if ((st = elem_launch(ch, prog, "lin_act", a, OCLF_NARGS(a), c->m, c->n)))
                goto done;
        }
    }
    if (!direct) {
        cl_ulong yo = c->y.offset, ys = c->y.stride;
        oclf_arg a[] = {OCLF_ARG(cm), OCLF_ARG(co),       OCLF_ARG(cs), OCLF_ARG(m),
                        OCLF_ARG(n),  OCLF_ARG(c->y.mem), OCLF_ARG(yo), OCLF_ARG(ys)};
        st = elem_launch(ch, prog, "lin_store", a, OCLF_NARGS(a), c->m, c->n);
    }
done:;
    cl_mem all[] = {xf, wf, cf};
    for (int i = 0; i < 3; i++)
        if (all[i])
            clReleaseMemObject(all[i]); /* freed by OpenCL once the launches finish */
    return st;
}

/* One of the dequantize kernels (lin_dequant: f32, an element a work-item;
 * lin_dequant_w: the call's dtype, 256 a work-item) over W's rows n0 ..
 * n0 + nt into dst [nt, K], `per_row` work-items a row. */
static oclf_status launch_dequant(oclf_chain *ch, oclf_program *prog, const char *kernel,
                                  const lin_call *c, size_t n0, size_t nt, cl_mem dst,
                                  size_t per_row)
{
    cl_mem sm = c->qscale.mem ? c->qscale.mem : c->w.mem, zm = c->qzero.mem ? c->qzero.mem : c->w.mem;
    cl_ulong wo = c->w.offset + n0 * c->w.stride, ws = c->w.stride;
    cl_ulong so = c->qscale.offset + n0 * c->qscale.stride, ss = c->qscale.stride;
    cl_ulong zo = c->qzero.offset + n0 * c->qzero.stride, zs = c->qzero.stride;
    cl_uint rows = (cl_uint)nt, cols = (cl_uint)c->k;
    oclf_arg a[] = {OCLF_ARG(c->w.mem), OCLF_ARG(wo), OCLF_ARG(ws),   OCLF_ARG(sm),
                    OCLF_ARG(so),       OCLF_ARG(ss), OCLF_ARG(zm),   OCLF_ARG(zo),
                    OCLF_ARG(zs),       OCLF_ARG(dst), OCLF_ARG(rows), OCLF_ARG(cols)};
    return elem_launch(ch, prog, kernel, a, OCLF_NARGS(a), nt, per_row);
}

/* The unfused path's f32 weight tile: at most this many bytes of W's rows. */
#define LIN_QTILE_BYTES ((size_t)64 << 20)

/* A quantized W's unfused path: lin_dequant writes a tile of W's rows as
 * packed f32, and the plain unfused path computes that tile's columns of y;
 * one temporary serves every tile (the chain orders each tile's dequantize
 * after the previous tile's GEMM). */
static oclf_status run_unfused_q(oclf_context *ctx, oclf_chain *ch, const lin_call *c)
{
    oclf_program *prog;
    oclf_status st = oclf_lin_unfused_program(ctx, c->dtype, &c->q, &prog);
    if (st != OCLF_SUCCESS)
        return st;
    size_t tile = c->k ? LIN_QTILE_BYTES / (c->k * 4) : c->n;
    tile = tile < 1 ? 1 : tile > c->n ? c->n : tile;
    cl_mem wf = NULL;
    if (c->k && (st = oclf_temp_buffer(ctx, tile * c->k * 4, &wf)))
        return st;
    for (size_t n0 = 0; n0 < c->n && st == OCLF_SUCCESS; n0 += tile) {
        const size_t nt = c->n - n0 < tile ? c->n - n0 : tile;
        if (c->k && (st = launch_dequant(ch, prog, "lin_dequant", c, n0, nt, wf, c->k)))
            break;
        lin_call t = *c;
        t.n = nt;
        t.w = (oclf_operand){.mem = wf, .offset = 0, .stride = c->k};
        t.w_f32 = 1;
        t.q.fmt = 0;
        t.y.offset += n0;
        t.bias.offset += n0;
        t.res.offset += n0;
        st = run_unfused(ctx, ch, &t);
    }
    if (wf)
        clReleaseMemObject(wf); /* freed by OpenCL once the launches finish */
    return st;
}

/* The PRE strategy: a tile of W's rows dequantized into an f32 temporary
 * (lin_dequant_w of the f32 program), then the dense tiled kernel, reading
 * an f32 W, computes that tile's columns of y; tiles of at most
 * LIN_QTILE_BYTES, one temporary for all (the chain orders each tile's
 * dequantization after the previous tile's product). */
static oclf_status run_fused_pre(oclf_context *ctx, oclf_chain *ch, const lin_call *c,
                                 const lin_cfg *cfg)
{
    oclf_program *prog;
    oclf_status st = oclf_lin_unfused_program(ctx, OCLF_F32, &c->q, &prog);
    if (st != OCLF_SUCCESS)
        return st;
    const size_t el = sizeof(float);
    size_t tile = c->k ? LIN_QTILE_BYTES / (c->k * el) : c->n;
    tile = tile < 1 ? 1 : tile > c->n ? c->n : tile;
    cl_mem wt = NULL;
    if (c->k && (st = oclf_temp_buffer(ctx, tile * c->k * el, &wt)))
        return st;
    for (size_t n0 = 0; n0 < c->n && st == OCLF_SUCCESS; n0 += tile) {
        const size_t nt = c->n - n0 < tile ? c->n - n0 : tile;
        if (c->k &&
            (st = launch_dequant(ch, prog, "lin_dequant_w", c, n0, nt, wt, (c->k + 255) / 256)))
            break;
        lin_call t = *c;
        t.n = nt;
        t.w = (oclf_operand){.mem = wt ? wt : c->y.mem, .offset = 0, .stride = c->k};
        t.w_f32 = 1;
        t.q.fmt = 0;
        t.y.offset += n0;
        t.bias.offset += n0;
        t.res.offset += n0;
        cl_event ev = NULL;
        st = run_fused(ctx, ch->queue, &t, cfg, ch->prev ? 1 : ch->num_events,
                       ch->prev ? &ch->prev : ch->wait_list, &ev);
        if (st == OCLF_SUCCESS) {
            if (ch->prev)
                clReleaseEvent(ch->prev);
            ch->prev = ev;
        }
    }
    if (wt)
        clReleaseMemObject(wt); /* freed by OpenCL once the launches finish */
    return st;
}

/* The call's fused configuration from its resolved choice. */
static oclf_status resolved_cfg(oclf_context *ctx, const oclf_resolved *r, const lin_call *c,
                                lin_cfg *cfg)
{
    if (r->path != OCLF_PATH_FUSED)
        return OCLF_SUCCESS;
    if (r->has_cfg) {
        memcpy(cfg, &r->cfg, sizeof *cfg);
        return OCLF_SUCCESS;
    }
    return lin_config(ctx, &r->params, c->dtype, c->wkn, &c->q, cfg);
}

/* Everything after the checks, shared by both entry points. */
oclf_status oclf_lin_run(oclf_context *ctx, cl_command_queue queue, oclf_op op, const lin_call *c,
                         const oclf_shape *shape, const oclf_choice *choice, cl_uint num_events,
                         const cl_event *wait_list, cl_event *event)
{
    oclf_status st;
    oclf_resolved r;
    lin_cfg cfg;
    if ((st = oclf_dispatch_resolve(ctx, op, &oclf_linear_hooks, c->dtype, shape, choice, &r)) ||
        (st = resolved_cfg(ctx, &r, c, &cfg)))
        return st;
    if (c->m == 0)
        return oclf_enqueue_marker(ctx, queue, num_events, wait_list, event);
    if (r.path == OCLF_PATH_FUSED && !(c->q.fmt && cfg.pre))
        return run_fused(ctx, queue, c, &cfg, num_events, wait_list, event);
    /* One work-item per element of x, W or y in the unfused kernels. */
    size_t big = c->m * c->n > c->m * c->k ? c->m * c->n : c->m * c->k;
    big = big > c->n * c->k ? big : c->n * c->k;
    if (big > OCLF_MAX_LAUNCH_ITEMS - LIN_ELEM_WGS)
        return oclf_fail(ctx, OCLF_UNSUPPORTED,
                         "%s: the unfused path's %zu elements exceed the launch range",
                         c->q.fmt ? "linear_q" : "linear", big);
    oclf_chain ch;
    oclf_chain_begin(&ch, ctx, queue, num_events, wait_list);
    st = r.path == OCLF_PATH_FUSED ? run_fused_pre(ctx, &ch, c, &cfg)
         : c->q.fmt                ? run_unfused_q(ctx, &ch, c)
                                   : run_unfused(ctx, &ch, c);
    oclf_chain_end(&ch, st == OCLF_SUCCESS ? event : NULL);
    return st;
}

oclf_status oclf_linear(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype, size_t m,
                        size_t n, size_t k, oclf_buf x, oclf_buf w, oclf_buf y,
                        oclf_weight_layout layout, oclf_linear_act prologue,
                        const oclf_linear_epilogue *epilogue, const oclf_choice *choice,
                        cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    oclf_status st;
    lin_call c;
    if ((st = oclf_check_call(ctx, "linear", queue, num_events, wait_list, dtype, event)) ||
        (st = oclf_lin_check_args(ctx, dtype, m, n, k, x, prologue, w, layout, 0, y, epilogue, &c)))
        return st;
    const oclf_shape shape = {{m, n, k, (uint64_t)layout}};
    return oclf_lin_run(ctx, queue, OCLF_OP_LINEAR, &c, &shape, choice, num_events, wait_list,
                        event);
}
