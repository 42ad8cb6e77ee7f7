/*
 * Operation descriptors shared by oclfuse-bench and oclfuse-tune.
 *
 * Each op family describes, in tune/op_<family>.c, how to make device inputs
 * for a shape, run one call with a given choice (path + parameters), verify
 * the result against the CPU reference, count the minimum bytes it must
 * move, and enumerate its tuning search space. The benchmark and the tuner
 * only iterate this table, so a new operation needs a descriptor and nothing
 * in their cores.
 */
#ifndef OCLF_OPDESC_H
#define OCLF_OPDESC_H

#include "oclfuse.h"

#include <stddef.h>
#include <stdint.h>

#define OP_MAX_DIMS 8
#define OP_YARDSTICK_PARAM "YARDSTICK"

typedef struct op_env {
    cl_platform_id platform;
    cl_device_id device;
    cl_context cl;
    cl_command_queue queue;
    oclf_context *ctx;
} op_env;

typedef struct op_shape {
    int ndims;
    uint64_t d[OP_MAX_DIMS];
} op_shape;

struct op_desc;
/* How tests/test_kernels.c checks the op's kernels under oclgrind
 * (tests/oclgrind_run.py): every dtype x structure x shape x path against
 * the reference, and the global bytes of one call in the traffic
 * configuration. */
typedef struct op_kernel_check {
    /* Small shapes with vector tails and several work-groups. */
    const char *shapes;
    /* Kernel structures, ';'-separated NAME=VALUE lists. */
    const char *configs;
    /* The configuration whose traffic is measured: every input read from
     * global memory once (LAYOUT 1 stages the row in local memory, and with
     * ROWS covering the shape's rows, weight and bias are loaded once). */
    const char *traffic_config;
    const char *traffic_shape;
    /* The unfused path runs another library's kernels (CLBlast's GEMM),
     * whose internal padding oclgrind's uninitialized-value check flags;
     * that path is checked for races and memory errors in a run of its own
     * (OCLF_KERNELS_EXTERNAL=1). */
    int external_unfused;
    /* 1: the fused traffic is held to the bound; 2: to exactly the
     * minimum; 0: reported only. */
    int traffic_bounded;
} op_kernel_check;

typedef struct op_desc {
    const char *name;
    /* The library's op (lib/ops.def) this descriptor runs, when its own
     * name is not one: each preset expression (tune/op_expr.c) runs "expr".
     * NULL: the name. */
    const char *lib_op;
    /* How --shapes is read for this op, e.g. "ROWSxHIDDEN (rows x hidden size)". */
    const char *shape_help;
    int ndims;
    const char *dim_names[OP_MAX_DIMS]; /* JSON keys of the shape object */
    const char *bench_shapes;           /* default shapes for the benchmark */
    const char *bench_full_shapes;      /* more that its --full adds (NULL: none) */
    /* The benchmark's out-of-cache shape: this shape with dimension
     * uncached_dim grown until the operands exceed twice the device's
     * last-level cache (op_uncached_shape, tune/memory.h). NULL: none. */
    const char *uncached_shape;
    int uncached_dim;
    const char *tune_shapes;            /* default shapes for the tuner */
    const char *llm_shapes;             /* the tuner's "llm" preset (NULL: tune_shapes) */
    /* The tuner's "layer" preset: the shapes a Llama-3-8B decoder layer
     * (oclfuse-layer's defaults) calls the op with, decoding 1 and 16
     * sequences and prefilling 512 tokens; NULL for an op it never calls. */
    const char *layer_shapes;
    const char *test_shape;             /* one small shape with tails, for tests */
    int has_unfused;
    /* A plain call of another library timed beside the paths in the same
     * run as a yardstick (linear: the GEMM library's plain GEMM), or NULL.
     * run() performs it when the choice's params hold OP_YARDSTICK_PARAM = 1;
     * the library never sees that parameter. */
    const char *yardstick;

    /* Device inputs with random values for (shape, dtype); NULL and a
     * sentence in err on failure. */
    void *(*create)(const op_env *env, const op_shape *shape, oclf_dtype dtype, char *err,
                    size_t errlen);
    /* One call, enqueued; *event (may be NULL) completes with it. */
    oclf_status (*run)(const op_env *env, void *inst, const oclf_choice *choice,
                       cl_event *event);
    /* Restores the inputs, runs once with `choice`, waits, compares with the
     * reference under the dtype's tolerance. 1 when right; else 0 and why. */
    int (*verify)(const op_env *env, void *inst, const oclf_choice *choice, char *msg,
                  size_t len);
    /* Inputs read once and outputs written once, in bytes. */
    double (*min_bytes)(const op_shape *shape, oclf_dtype dtype);
    /* Arithmetic for GFLOP/s, or NULL where bandwidth is the measure. */
    double (*flops)(const op_shape *shape);
    void (*destroy)(void *inst);
    /* 1 when a run of this instance waits on the host before it returns (a
     * sharded search merges there), so it cannot be enqueued behind a held
     * queue to time the host cost of a call. NULL: never. */
    int (*blocks)(const void *inst);

    /* Tuning: writes up to `max` candidate parameter sets for `path` into
     * out and returns how many; points the library would reject
     * (oclf_tuning_params_valid, the op's own rules) are left out here,
     * before anything compiles. */
    int (*space)(const op_env *env, const struct op_desc *op, const op_shape *shape,
                 oclf_dtype dtype, oclf_path path, oclf_params *out, int max);

    /* The shape as the library keys it (database records,
     * oclf_tuning_explain) where that differs from the descriptor's own,
     * which also says how to make the inputs: its dims into `dims`, and
     * their count returned; names in lib_dim_names. NULL: the same. */
    int (*lib_shape)(const op_shape *shape, uint64_t *dims);
    const char *lib_dim_names[OP_MAX_DIMS];

    /* The oclgrind kernel check (required: the check fails an op without). */
    const op_kernel_check *kernel_check;

    /* Bytes of device temporaries the instance's last run on `path` held,
     * as the library reported them (linear_cross_entropy's chunks), shown
     * beside the row and in the JSON; NULL: the op does not report them. */
    double (*temp_bytes)(const void *inst, oclf_path path);
} op_desc;

/* Every op, NULL-terminated. */
extern const op_desc *const op_table[];
const op_desc *op_find(const char *name);
/* The library's op name of a descriptor (database records, explain). */
const char *op_lib_op(const op_desc *op);

/* "4096x4096" -> shape; 0 on a malformed string or wrong dimension count. */
int op_parse_shape(const op_desc *op, const char *text, op_shape *out);
/* The next shape of comma list *p: its text into text[n], *p past it.
 * Returns 0 at the end of the list. */
int op_list_next(const char **p, char *text, size_t n);
void op_format_shape(const op_shape *shape, char *buf, size_t len);
/* The library's dims of `shape` into dims (OP_MAX_DIMS), their JSON names
 * into *names (may be NULL); returns how many. */
int op_lib_shape(const op_desc *op, const op_shape *shape, uint64_t *dims,
                 const char *const **names);
int op_parse_dtype(const char *name, oclf_dtype *out);

/* Opens the device: platform/device by index or name substring (NULL:
 * the first device). Returns 0 and fills env, or -1 with a message. */
int op_env_open(op_env *env, const char *platform, const char *device, char *err, size_t errlen);
/* The same with context options (the tuner turns the databases off). */
int op_env_open_opts(op_env *env, const char *platform, const char *device,
                     const oclf_context_options *options, char *err, size_t errlen);
/* A context and profiling queue of its own on one given device. */
int op_env_open_device(op_env *env, cl_platform_id platform, cl_device_id device,
                       const oclf_context_options *options, char *err, size_t errlen);
void op_env_close(op_env *env);
/* Prints every platform and device with its index and fingerprint (the
 * --list of the tools). 1 and a message naming `tool` when there is none. */
int op_list_devices(const char *tool);

/* Copy-kernel bandwidth of the device in GB/s (read + write bytes / time)
 * over buffers larger than any cache (tune/memory.h has the rest). */
double op_copy_gbps(const op_env *env);

/* Monotonic clock, seconds. */
double op_now_s(void);

/* The bench shapes of a short run (tools/run.sh without --full), malloc'd
 * as a comma list: the first SHORT_MAX_SHAPES of the list whose call an
 * estimate puts under SHORT_CALL_S in f32 (min_bytes at 10 GB/s, flops at
 * 50 GFLOP/s: two CPU cores), or, where no shape is, the one of the fewest
 * bytes, so every op is still run. The cap keeps an op with many cheap
 * shapes (linear_q's six formats) from holding a short run up: each shape
 * costs three dtypes of three paths and a copy. The estimate sees the
 * fused call only; the unfused one can be 16 times slower (l2_topk over a
 * million rows of 768: 3.8 s a call here), and a large database is made
 * and checked on the host in every dtype.
 * A full run's calls reach tens of seconds, each verified against the
 * CPU reference and timed several times. NULL when out of memory. */
#define SHORT_CALL_S 0.1
#define SHORT_MAX_SHAPES 2
char *op_short_shapes(const op_desc *op);

/* Do two parameter sets name the same values (in any order)? */
int op_params_same(const oclf_params *a, const oclf_params *b);

/* Is `name` in the comma-separated list (NULL: everything)? */
int op_listed(const char *list, const char *name);

/* Helpers for descriptors. */
void op_fill_random(oclf_dtype dtype, void *host, size_t n, float lo, float hi, uint64_t seed);
cl_mem op_upload(const op_env *env, const void *host, size_t bytes, char *err, size_t errlen);
int op_download(const op_env *env, cl_mem mem, void *host, size_t bytes);
int op_rewrite(const op_env *env, cl_mem mem, const void *host, size_t bytes);
/* The row-structure points (LAYOUT, WGS, VEC) for rows of `width` elements:
 * LAYOUT 0 with WGS in [l0_min, l0_max] (rows, or heads, per group), LAYOUT 1
 * with WGS from l1_min up to the device limit and no more work-items than
 * the row has vectors, twice over; VEC 1..16 up to the width. Writes up to
 * `max` sets and returns how many. */
/* Whether the library would take a point of op's space for (shape, dtype,
 * path): its validation (oclf_tuning_params_valid) is the one place the
 * parameters' rules are written; spaces only choose what to try. */
typedef struct op_point_check {
    const op_env *env;
    const char *op;
    oclf_dtype dtype;
    oclf_path path;
    uint64_t dims[OP_MAX_DIMS];
    int ndims;
} op_point_check;
void op_point_check_init(op_point_check *c, const op_env *env, const op_desc *op,
                         const op_shape *shape, oclf_dtype dtype, oclf_path path);
int op_point_valid(const op_point_check *c, const oclf_params *p);
/* Adds p to out[*n] when *n < max and the library would take it. */
void op_space_add_valid(const op_point_check *c, oclf_params *out, int *n, int max,
                        const oclf_params *p);

int op_row_space(const op_point_check *c, uint64_t width, size_t l0_min, size_t l0_max,
                 size_t l1_min, oclf_params *out, int max);
/* The row-structure points of op_row_space, each with STAGE (0, and 1 for
 * LAYOUT 1 where the op takes it: the stage must fit local memory) and ROWS
 * (1, and 4 for LAYOUT 1 where there are 64 rows or more; only when staged
 * if rows_need_stage). */
typedef struct op_stage_space {
    uint64_t width, rows;
    size_t l0_min, l0_max, l1_min; /* as op_row_space */
    int rows_need_stage;
    int l0_stage; /* LAYOUT 0 points staged as well (a row per work-item) */
} op_stage_space;
int op_staged_row_space(const op_point_check *c, const op_stage_space *s, oclf_params *out,
                        int max);
/* 1 when the library plans for a GPU on this device (its class, which
 * OCLF_DEVICE_CLASS may override). */
int op_is_gpu(const op_env *env);
/* GPU search spaces offer no point that a GPU compiler spills (the
 * cross-compile suite, tests/gpu_compile.py, builds them with AMD's, NVIDIA's
 * and Intel's back ends). The tightest register file among them is Intel's
 * Xe-HPC compiling SIMD32: 128 registers of 64 bytes shared by 32 lanes,
 * 64 floats a work-item, where AMD's and NVIDIA's give up to 255 or 256.
 * So the spaces stop at vectors of 4 floats for kernels that keep several
 * temporaries per element (16-bit elements count as the floats they are
 * computed in: 8 bf16 lanes spilled where 8 f32 ones would too) and at 8
 * accumulator floats in a register block (l2_topk QB x RB x VEC, linear's
 * matrix-vector MB x NB x VEC); 16 spilled on Xe-HPC in most of l2_topk's
 * variants. */
#define OP_GPU_MAX_VEC_FLOATS 4
#define OP_GPU_MAX_BLOCK_FLOATS 8
/* A GEMM tile staged in local memory (linear's STAGE 1): each step of a K
 * chunk loads MB + NB operand vectors from local memory, KC / VEC steps a
 * chunk. What spilled on Xe-HPC went with the vector, not the
 * accumulators: 8-float blocks of float and float2 spilled in a quarter of
 * their group and chunk shapes, in no order a cap could follow (keeping
 * the loops rolled did not help), float4 tiles in none, 2x2 of float4 (16
 * accumulator floats) included. So staged tiles load vectors of exactly
 * OP_GPU_MAX_VEC_FLOATS, at most this many a step (4x1 and 1x4 of float4
 * spilled with bf16 elements, 2x2 did not). */
#define OP_GPU_STAGED_STEP_VECTORS 4
/* On a GPU, keeps the points of out[0..n) whose VEC is at most
 * OP_GPU_MAX_VEC_FLOATS; returns how many are left (n elsewhere). */
int op_gpu_vector_cap(const op_env *env, oclf_dtype dtype, oclf_params *out, int n);

/* Expressions (tune/op_expr.c): milliseconds from oclf_expr_compile of an
 * expression whose program the context already holds (memory) or only the
 * disk cache holds (a new context), to the end of its first run; medians
 * of 5. 0, or -1 when a call failed. */
int op_expr_first_launch_ms(const op_env *env, double *memory_ms, double *disk_ms);

/* Reads rows x cols packed elements of `out` and compares them with the
 * reference under the dtype's tolerance: 1 when right, else 0 and why. */
/* got (rows x cols, row stride ld) against want under the dtype's
 * tolerance: 1, or 0 with the count, first index and largest error in msg. */
int op_compare(oclf_dtype dtype, const void *got, size_t ld, const double *want, size_t rows,
               size_t cols, char *msg, size_t len);
int op_verify_packed(const op_env *env, cl_mem out, oclf_dtype dtype, const double *want,
                     size_t rows, size_t cols, char *msg, size_t len);

/* Adds p to out[*n] when *n < max. */
void op_space_add(oclf_params *out, int *n, int max, const oclf_params *p);

#endif
