/*
 * liboclfuse: fused OpenCL kernels with an autotuner.
 *
 * The one public header. Every entry point returns an oclf_status; on any
 * status other than OCLF_SUCCESS, oclf_last_error() on the same thread tells
 * which argument, which limit, which OpenCL error or which build log.
 *
 * Conventions shared by every operation (see also the per-op comments):
 *  - Buffers are cl_mem plus an element offset and a row stride in elements
 *    (oclf_buf). A stride of 0 means "packed": the row stride equals the
 *    row's logical width.
 *  - Calls are asynchronous like OpenCL's own: they enqueue on the caller's
 *    queue after the given wait list and, when `event` is not NULL, return an
 *    event that completes when all the work of the call has completed. A call
 *    with zero rows enqueues a marker so the event still exists.
 *  - Storage dtypes are f32, f16 and bf16; arithmetic and every reduction run
 *    in fp32 and each output element is rounded to its storage type once.
 *  - Accuracy. Each op's comment states how far its results may lie from
 *    an fp64 evaluation of its formula on the stored inputs (what its tests
 *    check). TOL(dtype) names the pair (atol, rtol) = (1e-5, 1e-5) for f32,
 *    (2e-3, 2e-3) for f16, (1e-2, 1.6e-2) for bf16: an element y passes
 *    against its reference r when |y - r| <= atol + rtol |r|.
 *  - A bad argument is rejected on the host before anything is enqueued, so
 *    a failing call leaves every buffer untouched.
 *  - Every sentence in oclf_last_error starts with the name of the public
 *    function that failed: "oclf_rms_norm: cols is 0".
 *  - Argument order, every operation: context, queue, dtype, the sizes,
 *    the buffers read (a buffer updated in place among them), the buffers
 *    only written, scalars, the options struct, the choice, then the wait
 *    list and event.
 *  - Structs that may grow begin with `size_t size`: oclf_context_options,
 *    oclf_activation, oclf_rope, oclf_l2_topk_options,
 *    oclf_linear_epilogue, oclf_qweight, oclf_attention_options,
 *    oclf_kv_cache, oclf_cross_entropy_options, and the reports
 *    oclf_context_stats and oclf_linear_cross_entropy_info (written up to
 *    the size the caller gives). Later versions add fields without
 *    breaking callers: set it with the struct's _init function or _INIT
 *    macro (a zeroed struct, size 0, means the first layout with every
 *    field zero, which for option structs is every default). A
 *    size smaller than this header's (an older layout's sizeof) leaves the
 *    fields past it at their defaults; a larger one (a caller built against
 *    a newer header) is accepted when every byte past this library's layout
 *    is zero. Otherwise, and for a size that is no layout's sizeof (not a
 *    multiple of the struct's alignment), the call fails with
 *    OCLF_INVALID_ARGUMENT, with a sentence naming the struct's size.
 *
 * Threads. One oclf_context may be used from any number of threads at once:
 * every operation (oclf_rms_norm ... oclf_l2_topk, oclf_expr_run),
 * oclf_expr_compile, oclf_tuning_explain, oclf_context_get_stats and the
 * context's getters run concurrently on it. Programs are built once (a
 * thread wanting a program another thread is building waits for it, and
 * different programs build side by side); each thread sets arguments on a
 * kernel object no other thread holds at that moment; the decision cache
 * and the tuning databases (loaded once) are shared under the context's
 * lock; the statistics are atomic. Threads may share a cl_command_queue as
 * OpenCL allows, but the order of their commands is then the order in which
 * the calls happen to enqueue; give each thread its own queue (the tests do)
 * or order them with events. The log callback may be called from any of
 * those threads at once. oclf_context_destroy must not overlap any other
 * call on the same context (nor any later use). An oclf_expr is immutable:
 * any thread may run it until oclf_expr_release. oclf_tuning_db_merge may
 * run from several threads and processes on one file (an advisory lock).
 * oclf_last_error is per thread; functions without a context (versions,
 * names, oclf_params_*, oclf_l2_topk_merge) touch no shared state.
 */
#ifndef OCLFUSE_H
#define OCLFUSE_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(OCLF_STATIC)
#define OCLF_API
#elif defined(OCLF_BUILDING_LIBRARY)
#define OCLF_API __attribute__((visibility("default")))
#else
#define OCLF_API
#endif

/* OCLF_VERSION_MAJOR, _MINOR, _PATCH and _STRING, generated from the
 * version in meson.build (the one version source). */
#include "oclfuse_version.h"
/* 0xMMmmpp, comparable with >= */
#define OCLF_VERSION_HEX                                                      \
    ((OCLF_VERSION_MAJOR << 16) | (OCLF_VERSION_MINOR << 8) | OCLF_VERSION_PATCH)

/* The version of the library actually loaded, as OCLF_VERSION_HEX. */
OCLF_API unsigned oclf_version(void);
/* "0.9.0" */
OCLF_API const char *oclf_version_string(void);

typedef enum oclf_status {
    OCLF_SUCCESS = 0,
    OCLF_INVALID_ARGUMENT = -1,  /* a NULL handle, a bad size, stride or alias */
    OCLF_UNSUPPORTED = -2,       /* valid request this device or build cannot do */
    OCLF_BUILD_FAILED = -3,      /* the OpenCL compiler rejected a kernel */
    OCLF_OUT_OF_RESOURCES = -4,  /* device or host memory, work-group limits */
    OCLF_OPENCL_ERROR = -5,      /* any other OpenCL error */
    OCLF_DB_ERROR = -6,          /* damaged or unknown tuning database */
    OCLF_IO_ERROR = -7           /* a file could not be read or written */
} oclf_status;

/* "OCLF_INVALID_ARGUMENT", ...; never NULL. */
OCLF_API const char *oclf_status_string(oclf_status status);
/* A sentence for a user: "An OpenCL call failed.", ...; "Unknown status."
 * for a value outside the enum; never NULL. (oclf_last_error says what
 * exactly went wrong in a call.) */
OCLF_API const char *oclf_status_message(oclf_status status);

typedef enum oclf_dtype {
    OCLF_F32 = 0,
    OCLF_F16 = 1,  /* IEEE half storage (vload_half); no cl_khr_fp16 needed */
    OCLF_BF16 = 2, /* upper 16 bits of an IEEE float, round-to-nearest-even */
    OCLF_DTYPE_COUNT_ = 3
} oclf_dtype;

/* "f32", "f16", "bf16"; NULL for an unknown value. */
OCLF_API const char *oclf_dtype_name(oclf_dtype dtype);
/* 4, 2, 2; 0 for an unknown value. */
OCLF_API size_t oclf_dtype_size(oclf_dtype dtype);

/* ------------------------------------------------------------------------ */
/* Context                                                                   */

typedef struct oclf_context oclf_context;

/* Where diagnostics that are not errors go (a damaged cache file that was
 * rebuilt, a tuning record skipped). The library never prints. */
typedef enum oclf_log_level { OCLF_LOG_DEBUG, OCLF_LOG_INFO, OCLF_LOG_WARN } oclf_log_level;
typedef void (*oclf_log_fn)(void *user, oclf_log_level level, const char *message);

typedef struct oclf_context_options {
    /* sizeof(oclf_context_options) as the caller was compiled (the _INIT
     * macro and oclf_context_options_init set it); 0: the first layout. */
    size_t size;
    /* Load .cl sources from this folder instead of the copies compiled into
     * the library. NULL: $OCLF_KERNEL_DIR if set, else the embedded ones. */
    const char *kernel_dir;
    /* On-disk program cache folder. NULL: $OCLF_CACHE_DIR, else
     * $XDG_CACHE_HOME/oclfuse, else $HOME/.cache/oclfuse. "" disables it. */
    const char *cache_dir;
    /* Tuning database consulted first. NULL: $OCLF_TUNING_DB if set. */
    const char *tuning_db;
    /* Non-zero: consult no tuning database (context, per-machine or
     * built-in); every choice comes from the heuristics. The tuner uses this
     * to time the defaults it must beat. */
    int no_tuning_db;
    /* Non-zero: check data-dependent arguments on the host before enqueuing
     * (rotary positions against max_pos). Costs a blocking read. */
    int validate;
    oclf_log_fn log;
    void *log_user;
} oclf_context_options;

/* Every default above, with `size` set:
 *   oclf_context_options o = OCLF_CONTEXT_OPTIONS_INIT;   (C)
 *   oclf_context_options o; oclf_context_options_init(&o); */
#define OCLF_CONTEXT_OPTIONS_INIT {.size = sizeof(oclf_context_options)}
OCLF_API void oclf_context_options_init(oclf_context_options *options);

/* Wraps (context, device); both are retained and released by
 * oclf_context_destroy. `options` may be NULL (a bad options.size is
 * OCLF_INVALID_ARGUMENT). On failure *out is NULL and
 * oclf_last_error(NULL) tells why. */
OCLF_API oclf_status oclf_context_create(cl_context context, cl_device_id device,
                                         const oclf_context_options *options,
                                         oclf_context **out);
/* Releases everything the context made, waits for nothing: finish the
 * queues that used it first. NULL is accepted. */
OCLF_API void oclf_context_destroy(oclf_context *ctx);

/* The device class every heuristic of this context follows:
 * CL_DEVICE_TYPE_GPU, _CPU or _ACCELERATOR (0 for a NULL context). It is
 * the device's own type unless the environment variable OCLF_DEVICE_CLASS
 * is "gpu" or "cpu" when the context is created: then the library treats
 * the device as that class, and a GPU class also caps the limits it plans
 * with at 1024 work-items a group and 48 KiB of local memory, so a GPU's
 * defaults can run and be checked on a CPU device. Another value of the
 * variable makes oclf_context_create fail with OCLF_INVALID_ARGUMENT. */
OCLF_API cl_device_type oclf_context_device_type(const oclf_context *ctx);
/* A default work-group size (no tuning record or caller named WGS) above
 * a built kernel's own CL_KERNEL_WORK_GROUP_SIZE is halved until it fits.
 * The environment variable OCLF_KERNEL_WGS_CAP, a positive integer when the
 * context is created, caps every kernel's limit as the library sees it, so
 * that path runs on any device; another value makes oclf_context_create
 * fail with OCLF_INVALID_ARGUMENT. */

/* The detail of the last failed call on this thread for this context,
 * starting with the failing function's name ("oclf_l2_topk: k is 0"). A
 * call reports under the context it works with: its ctx argument, or, for
 * oclf_expr_run, the context that compiled the expression. Pass NULL after
 * a failed oclf_context_create, after a call given a NULL context (or a
 * NULL expression), and for the calls that take no context or several
 * (oclf_params_set, oclf_tuning_db_default_path, oclf_tuning_db_check,
 * oclf_expr_form_id, oclf_l2_topk_sharded, oclf_l2_topk_merge). Empty
 * string when none, or when the last failure on this thread was reported
 * under another context. The pointer stays valid until the next call on
 * this thread. */
OCLF_API const char *oclf_last_error(const oclf_context *ctx);

/* Device fingerprint: "vendor|name|driver|type". Owned by the context. */
OCLF_API const char *oclf_context_fingerprint(const oclf_context *ctx);

/* Counters for diagnostics and tests. */
typedef struct oclf_context_stats {
    /* sizeof(oclf_context_stats) as the caller was compiled (the _INIT
     * macro sets it; 0: the first layout): the call writes the counters
     * that fit. */
    size_t size;
    uint64_t programs_compiled;  /* clBuildProgram from source */
    uint64_t programs_from_disk; /* programs built from a cached binary */
    uint64_t program_hits;       /* served from the in-memory cache */
    uint64_t disk_cache_rejected;/* damaged/foreign cache files rebuilt */
    uint64_t kernels_enqueued;
    uint64_t tuning_lookups;     /* database searches: lookup-cache misses */
    uint64_t tuning_cache_hits;  /* dispatches answered by the lookup cache */
    uint64_t tuning_db_errors;   /* database files rejected (damaged, unknown format) */
} oclf_context_stats;
#define OCLF_CONTEXT_STATS_INIT {.size = sizeof(oclf_context_stats)}
/* OCLF_INVALID_ARGUMENT for a NULL argument or a size that is no layout's
 * (below a size_t, or not a multiple of the struct's alignment); nothing
 * is written then. */
OCLF_API oclf_status oclf_context_get_stats(const oclf_context *ctx, oclf_context_stats *out);

/* ------------------------------------------------------------------------ */
/* Path choice and explicit kernel parameters                                */

typedef enum oclf_path {
    OCLF_PATH_AUTO = 0,    /* the tuning database decides, else the heuristic */
    OCLF_PATH_FUSED = 1,
    OCLF_PATH_UNFUSED = 2
} oclf_path;

#define OCLF_MAX_PARAMS 12
#define OCLF_PARAM_NAME_MAX 16

/* Named integer kernel parameters, the same names the tuning database uses
 * (WGS: work-group size, VEC: vector width, ROWS: rows per work-group,
 * LAYOUT: 0 row per work-item, 1 work-group per row, ...). A parameter that
 * is absent takes the database's or the heuristic's value; one outside its
 * range fails the call with OCLF_INVALID_ARGUMENT. Names are matched
 * exactly, and a name the operation does not use is ignored: a misspelt
 * one ("vec") leaves that parameter to the database or the heuristic. */
typedef struct oclf_params {
    unsigned count;
    struct {
        char name[OCLF_PARAM_NAME_MAX];
        int64_t value;
    } item[OCLF_MAX_PARAMS];
} oclf_params;

/* Sets (or replaces) a parameter. OCLF_INVALID_ARGUMENT if the name is too
 * long or the set is full. */
OCLF_API oclf_status oclf_params_set(oclf_params *params, const char *name, int64_t value);
/* 1 and *value when present, else 0. */
OCLF_API int oclf_params_get(const oclf_params *params, const char *name, int64_t *value);

/* Per-call choice; pass NULL for { OCLF_PATH_AUTO, no parameters }. */
typedef struct oclf_choice {
    oclf_path path;
    oclf_params params;
} oclf_choice;

/* A 2-D operand (or a vector, where stride is ignored). */
typedef struct oclf_buf {
    cl_mem mem;
    size_t offset; /* elements */
    size_t stride; /* elements between rows; 0: packed */
} oclf_buf;

/* ------------------------------------------------------------------------ */
/* Tuning database (docs/tuning.md). Dispatch reads, first hit
 * wins: the context's database (option or $OCLF_TUNING_DB), the per-machine
 * one (oclf_tuning_db_default_path), the one compiled into the library, then
 * the op's heuristic. A damaged or unknown-format file is skipped with
 * OCLF_DB_ERROR ("file:line:column: why") left in oclf_last_error and sent to
 * the log callback; the call itself goes on with the next source.          */

/* The per-machine database: $XDG_DATA_HOME/oclfuse/tuning.json, else
 * $HOME/.local/share/oclfuse/tuning.json. OCLF_IO_ERROR when neither
 * variable is set or the buffer is too small. */
OCLF_API oclf_status oclf_tuning_db_default_path(char *buf, size_t len);

/* Parses a database file as dispatch would. OCLF_SUCCESS and the number of
 * records (when `records` is not NULL); OCLF_IO_ERROR when it cannot be read;
 * OCLF_DB_ERROR naming file, line and column otherwise. Details in
 * oclf_last_error(NULL). */
OCLF_API oclf_status oclf_tuning_db_check(const char *path, size_t *records);

/* Merges records into the database at `path` (created with its folder when
 * missing): `records_json` is a JSON array of records, or a whole database
 * document. A record replaces the one on disk with the same device, op,
 * dtype and shape. Records without "device" get the device of `ctx`. The
 * write holds an advisory lock (flock on path + ".lock") across
 * read-merge-write and is atomic (temporary file, fsync, rename), so
 * concurrent writers lose nothing and a crash leaves the old file. */
OCLF_API oclf_status oclf_tuning_db_merge(const oclf_context *ctx, const char *path,
                                          const char *records_json);

/* Explains which record (from which file) dispatch would use for `op` (a
 * name such as "rms_norm"), dtype, shape (`dims` in the op's order, e.g.
 * rows, cols) and path, and which records it skipped and why: dispatch's
 * own decision, run with a trace. Writes text into buf (truncated to len).
 * OCLF_INVALID_ARGUMENT for an unknown op. */
OCLF_API oclf_status oclf_tuning_explain(oclf_context *ctx, const char *op, oclf_dtype dtype,
                                         const uint64_t *dims, unsigned ndims, oclf_path path,
                                         char *buf, size_t len);

/* What dispatch decides for a call of `op` with no explicit parameters, as
 * parameter sets (for tools such as the tuner; oclf_tuning_explain is the
 * same decision as text). `heuristic`: the op's heuristic default for
 * `path` (AUTO: fused). `decision`: what the call would run, the first
 * usable tuning record laid over the heuristic for its path, else the
 * heuristic; `from_record` says which. OCLF_INVALID_ARGUMENT for an unknown
 * op, dtype or path, the wrong number of dims or a NULL argument. */
typedef struct oclf_tuning_decision {
    oclf_choice heuristic;
    oclf_choice decision;
    int from_record;
} oclf_tuning_decision;
OCLF_API oclf_status oclf_tuning_resolve(oclf_context *ctx, const char *op, oclf_dtype dtype,
                                         const uint64_t *dims, unsigned ndims, oclf_path path,
                                         oclf_tuning_decision *out);

/* 1 when dispatch would take `params` for `op` on `path` (FUSED or UNFUSED)
 * at this shape: laid over the heuristic, within every rule of the op's
 * parameters and the device's limits that needs no build (the tuner's
 * search spaces keep only such points). 0 otherwise, with the reason in
 * oclf_last_error(ctx); 0 for an unknown op, dtype, path or dims too. */
OCLF_API int oclf_tuning_params_valid(oclf_context *ctx, const char *op, oclf_dtype dtype,
                                      const uint64_t *dims, unsigned ndims, oclf_path path,
                                      const oclf_params *params);

/* ------------------------------------------------------------------------ */
/* Normalization (docs/ops/norms.md). Rows are independent; `cols` is the
 * hidden size.
 * `weight` and `bias` are vectors of `cols` elements of `dtype`, or NULL for
 * 1 and 0. Row strides may exceed cols. Statuses: OCLF_INVALID_ARGUMENT for
 * NULL handles, cols == 0, stride < cols, a buffer smaller than the ranges
 * described, overlapping in/out ranges where they must not overlap, eps < 0
 * or not finite; OCLF_UNSUPPORTED for an unknown dtype.                     */

/* out = x * rsqrt(mean(x^2) + eps) * weight. Out of place: `out` must not
 * overlap `in` unless it is exactly the same range (in place is allowed). */
OCLF_API oclf_status oclf_rms_norm(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                   size_t rows, size_t cols, oclf_buf in, const oclf_buf *weight,
                                   oclf_buf out, float eps, const oclf_choice *choice,
                                   cl_uint num_events, const cl_event *wait_list,
                                   cl_event *event);

/* vLLM's fused_add_rms_norm, in place: z = input + residual rounded to
 * storage; residual <- z; input <- rms_norm(z). `input` and `residual` must
 * not overlap (checked by byte range when they share a cl_mem). */
OCLF_API oclf_status oclf_add_rms_norm(oclf_context *ctx, cl_command_queue queue,
                                       oclf_dtype dtype, size_t rows, size_t cols,
                                       oclf_buf input, oclf_buf residual, const oclf_buf *weight,
                                       float eps, const oclf_choice *choice, cl_uint num_events,
                                       const cl_event *wait_list, cl_event *event);

/* PyTorch LayerNorm: (x - mean) / sqrt(biased var + eps) * weight + bias,
 * with a two-pass mean/variance so rows with a large mean stay accurate.
 * Same aliasing rule as oclf_rms_norm. */
OCLF_API oclf_status oclf_layer_norm(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                     size_t rows, size_t cols, oclf_buf in,
                                     const oclf_buf *weight, const oclf_buf *bias, oclf_buf out,
                                     float eps, const oclf_choice *choice, cl_uint num_events,
                                     const cl_event *wait_list, cl_event *event);

/* residual <- input + residual (rounded); out <- layer_norm(residual).
 * `input` and `residual` must not overlap; `out` must not overlap either
 * unless it is exactly `input` (then input is overwritten with the result). */
OCLF_API oclf_status oclf_add_layer_norm(oclf_context *ctx, cl_command_queue queue,
                                         oclf_dtype dtype, size_t rows, size_t cols,
                                         oclf_buf input, oclf_buf residual,
                                         const oclf_buf *weight, const oclf_buf *bias,
                                         oclf_buf out, float eps, const oclf_choice *choice,
                                         cl_uint num_events, const cl_event *wait_list,
                                         cl_event *event);

/* ---- Normalization backward (docs/ops/norms.md#backward) ----------------
 * The gradients of oclf_rms_norm (and of oclf_add_rms_norm) and of
 * oclf_layer_norm. x is the forward call's input (for add + RMSNorm, the
 * sum z it wrote into `residual`), dy the gradient of its output; both
 * rows x cols of `dtype` with row strides and offsets like the forward
 * calls. The statistics are recomputed from x in fp32 (nothing of the
 * forward pass is kept); all arithmetic is fp32.
 *
 * dx: rows x cols of `dtype` (rounded once). It may be exactly dy (or
 * exactly dres), computing in place; it must not overlap x, and must not
 * overlap dy or dres other than as the same range.
 *
 * dw, db: gradients of the weight and bias, vectors of `cols` fp32
 * (offsets in floats), or NULL when not wanted; each sums over the rows.
 * They are deterministic: the rows are taken in fixed chunks of 32, each
 * chunk's column sums added in row order, then the chunks in chunk order
 * by a second kernel (no atomics), so dw and db are bit for bit the same
 * on every run, for every tuning (work-group size, vector width, layout)
 * and on the fused and unfused paths. With rows == 0 they are set to 0.
 * They must not overlap each other or any other operand. A dw with weight
 * NULL is the gradient of a weight of ones.
 *
 * Accuracy: dx within TOL(dtype); dw and db (fp32 sums over the rows)
 * within 2e-5 (1 + rows / 8) + 1e-4 |r|.
 *
 * When dw or db is wanted, a temporary buffer of 2 x ceil(rows / 32) x
 * cols floats holds the partials (and the unfused path keeps the row
 * statistics in one of 4 x rows floats); both are allocated per call and
 * released when the launches finish.
 *
 * Statuses: as the forward norms (OCLF_INVALID_ARGUMENT for a NULL handle,
 * cols == 0, a stride below cols, a buffer smaller than its range, eps < 0
 * or not finite, the overlaps above; OCLF_UNSUPPORTED for an unknown dtype,
 * cols above UINT_MAX or a shape beyond the launch range). A refused call
 * writes nothing.                                                          */

/* RMSNorm's backward, with r = 1 / sqrt(mean(x^2) + eps) and g = dy * w:
 *   dx = r * g - (r^3 / cols) * <g, x> * x   [+ dres]
 *   dw = sum over rows of dy * x * r.
 * `dres` (NULL: none) is a rows x cols gradient of `dtype` added to dx:
 * for oclf_add_rms_norm, whose outputs are y = rms_norm(z) (in `input`)
 * and z = input + residual (in `residual`), pass x = z, dy = dL/dy and
 * dres = dL/dz from z's later uses; dx is then dL/dinput, which is also
 * dL/dresidual (the sum's gradient goes to both). */
OCLF_API oclf_status oclf_rms_norm_backward(oclf_context *ctx, cl_command_queue queue,
                                            oclf_dtype dtype, size_t rows, size_t cols,
                                            oclf_buf x, oclf_buf dy, const oclf_buf *weight,
                                            const oclf_buf *dres, oclf_buf dx,
                                            const oclf_buf *dw, float eps,
                                            const oclf_choice *choice, cl_uint num_events,
                                            const cl_event *wait_list, cl_event *event);

/* LayerNorm's backward, with mean and rstd = 1 / sqrt(biased var + eps) of
 * each row, xhat = (x - mean) * rstd and g = dy * w:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   dw = sum over rows of dy * xhat,  db = sum over rows of dy.
 * The bias does not enter the gradient: pass db where the forward had one. */
OCLF_API oclf_status oclf_layer_norm_backward(oclf_context *ctx, cl_command_queue queue,
                                              oclf_dtype dtype, size_t rows, size_t cols,
                                              oclf_buf x, oclf_buf dy, const oclf_buf *weight,
                                              oclf_buf dx, const oclf_buf *dw, const oclf_buf *db,
                                              float eps, const oclf_choice *choice,
                                              cl_uint num_events, const cl_event *wait_list,
                                              cl_event *event);

/* ------------------------------------------------------------------------ */
/* Activation-and-multiply: the gated MLP's elementwise step
 * (docs/ops/act.md).                                                        */

typedef enum oclf_act {
    /* x / (1 + exp(-x)) */
    OCLF_ACT_SILU = 0,
    /* exact GELU: 0.5 x (1 + erf(x / sqrt(2))) */
    OCLF_ACT_GELU = 1,
    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    OCLF_ACT_GELU_TANH = 2,
    /* vLLM's fatrelu: x if x > threshold, else 0 */
    OCLF_ACT_FATRELU = 3,
    /* gpt-oss / vLLM swigluoai_and_mul, on an INTERLEAVED row: for output i
     * the gate is g = in[2i] and the up projection u = in[2i+1];
     * g' = min(g, limit) (no lower clamp), u' = clamp(u, -limit, limit),
     * out = (u' + 1) * g' * sigmoid(alpha * g'). The clamps let NaN through
     * (written as comparisons, like vLLM's), so a NaN input gives NaN. */
    OCLF_ACT_SWIGLU_OAI = 4,
    OCLF_ACT_COUNT_ = 5
} oclf_act;

typedef struct oclf_activation {
    /* sizeof(oclf_activation) as the caller was compiled (the _INIT macro
     * and oclf_activation_init set it); 0: the first layout. */
    size_t size;
    oclf_act kind;
    /* 0: out = act(x) * y (vLLM's silu_and_mul and friends);
     * 1: out = x * act(y) (vLLM's mul_and_silu). Not allowed with
     * SWIGLU_OAI, whose roles come from the interleaving. */
    int act_on_second;
    float threshold;   /* FATRELU; ignored otherwise */
    float alpha;       /* SWIGLU_OAI (gpt-oss uses 1.702); ignored otherwise */
    float limit;       /* SWIGLU_OAI (gpt-oss uses 7.0), >= 0; ignored otherwise */
} oclf_activation;

/* SILU on the first half, no threshold, alpha or limit, with `size` set. */
#define OCLF_ACTIVATION_INIT {.size = sizeof(oclf_activation)}
OCLF_API void oclf_activation_init(oclf_activation *act);

/* out[t, i] = act(x) * y for t < rows, i < d, where x = in[t, i] and
 * y = in[t, d + i] (SWIGLU_OAI: the interleaved pairs above). `in` is
 * rows x 2d with row stride in.stride (0: 2d), `out` rows x d with row stride
 * out.stride (0: d); both of `dtype`. Computed in fp32, rounded once.
 * `out` must not overlap `in` (the call would read what it already wrote).
 * The unfused path runs an activation kernel into an fp32 temporary
 * [rows, d] and a multiply kernel, so both paths round once.
 * Statuses: OCLF_INVALID_ARGUMENT for NULL handles or `act`, d == 0, a stride
 * below the row width, a buffer smaller than the rows described, overlapping
 * in/out, an unknown activation, act_on_second with SWIGLU_OAI, a threshold,
 * alpha or limit that is not finite (limit < 0); OCLF_UNSUPPORTED for an
 * unknown dtype or d >= 2^31. */
OCLF_API oclf_status oclf_act_and_mul(oclf_context *ctx, cl_command_queue queue,
                                      oclf_dtype dtype, size_t rows, size_t d, oclf_buf in,
                                      oclf_buf out, const oclf_activation *act,
                                      const oclf_choice *choice, cl_uint num_events,
                                      const cl_event *wait_list, cl_event *event);

/* The gradient of oclf_act_and_mul. `in` is the forward's input (rows x 2d,
 * row stride in.stride, 0: 2d), `dout` the gradient of its output (rows x d,
 * stride 0: d), `din` receives the gradient of `in` (rows x 2d, stride 0:
 * 2d, the same layout as `in`); all of `dtype`. With x the activated half
 * and y the multiplied one (act_on_second swaps them, as in the forward):
 *   dx = dout * y * act'(x),   dy = dout * act(x),
 * act(x) recomputed in fp32 from `in` (nothing of the forward is kept), the
 * results rounded once. act' is
 *   SILU        s + silu(x) (1 - s), s = sigmoid(x)
 *   GELU        Phi(x) + x phi(x) (standard normal cdf and density)
 *   GELU_TANH   the derivative of 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))
 *   FATRELU     1 where x > threshold, else 0
 * SWIGLU_OAI (interleaved rows, din interleaved the same way): with
 * g' = min(g, limit), u' = clamp(u, -limit, limit) and
 * glu = g' sigmoid(alpha g'), dg = dout (u' + 1) glu'(g') where g <= limit
 * and 0 above it, du = dout glu where -limit <= u <= limit and 0 outside
 * (a clamp passes the gradient at its bounds); a NaN gate or up gives NaN
 * in both gradients of its pair, as it gives NaN in the forward's output.
 * Accuracy: within TOL(dtype).
 * `din` may be exactly `in` (same buffer, offset and stride): the gradient
 * then replaces the saved input, as training frameworks do to save memory.
 * Any other overlap of din and in, and any overlap of dout with either, is
 * refused. The fused path is one kernel that reads in and dout once and
 * writes din once; the unfused path writes act(x) and act'(x) to two fp32
 * temporaries [rows, d], then runs a kernel for dx and one for dy.
 * Statuses: those of oclf_act_and_mul, with dout and din checked as `out`
 * is there (a stride below the row width, a buffer smaller than the rows
 * described), plus OCLF_INVALID_ARGUMENT for the overlaps above. */
OCLF_API oclf_status oclf_act_and_mul_backward(oclf_context *ctx, cl_command_queue queue,
                                               oclf_dtype dtype, size_t rows, size_t d,
                                               oclf_buf in, oclf_buf dout, oclf_buf din,
                                               const oclf_activation *act,
                                               const oclf_choice *choice, cl_uint num_events,
                                               const cl_event *wait_list, cl_event *event);

/* ------------------------------------------------------------------------ */
/* Rotary embedding and fused QK-norm + RoPE (docs/ops/rope.md).            */

typedef enum oclf_rope_style {
    OCLF_ROPE_NEOX = 0, /* pairs (j, j + R/2): rotate-half, Llama/NeoX */
    OCLF_ROPE_GPTJ = 1  /* pairs (2j, 2j + 1): interleaved, GPT-J */
} oclf_rope_style;

typedef enum oclf_index_type { OCLF_INT32 = 0, OCLF_INT64 = 1 } oclf_index_type;

/* Everything the rotation needs besides the heads. For each pair (x, y) of
 * dims j < R/2 of a head of token t, with p = positions[t], c = cache[p, j]
 * and s = cache[p, R/2 + j]: x' = x c - y s, y' = y c + x s. Dims >= R are
 * not rotated (partial rotary).
 * A token whose position lies outside [0, max_pos) is left entirely
 * unchanged (its heads are neither rotated nor, in oclf_qk_norm_rope,
 * normalized) and the cache is never read outside its rows; with the
 * context's `validate` option the call instead reads the positions first
 * (blocking, after the wait list) and fails with OCLF_INVALID_ARGUMENT
 * naming the first bad token. */
typedef struct oclf_rope {
    /* sizeof(oclf_rope) as the caller was compiled (the _INIT macro and
     * oclf_rope_init set it); 0: the first layout. */
    size_t size;
    oclf_rope_style style;
    size_t head_dim;           /* hd: elements per head */
    size_t rot_dim;            /* R: even, 2 <= R <= hd */
    oclf_buf positions;        /* `tokens` indices of pos_type; stride ignored */
    oclf_index_type pos_type;
    /* [max_pos, R] of cache_dtype (which may differ from the heads' dtype):
     * row p = [cos(p f_0) .. cos(p f_{R/2-1}) | sin(p f_0) .. sin(p f_{R/2-1})].
     * cos_sin.stride is the row stride (0: R). */
    oclf_buf cos_sin;
    oclf_dtype cache_dtype;
    size_t max_pos;
} oclf_rope;

/* Every field zero (NEOX, int32 positions, an f32 cache; the dims, buffers
 * and max_pos still to set), with `size` set. */
#define OCLF_ROPE_INIT {.size = sizeof(oclf_rope)}
OCLF_API void oclf_rope_init(oclf_rope *rope);

/* A set of heads: token t, head h starts at element
 * buf.offset + t * buf.stride + h * head_stride. */
typedef struct oclf_heads {
    oclf_buf buf;       /* buf.stride: between tokens; 0: count * head_stride */
    size_t count;       /* heads per token */
    size_t head_stride; /* between heads of a token, >= head_dim; 0: head_dim */
} oclf_heads;

/* Rotates q (and k when not NULL) in place, `tokens` tokens of `dtype`.
 * q and k may live in one buffer (vLLM passes views of a packed qkv) as long
 * as no element belongs to both: the check compares heads, so column blocks
 * of one packed tensor and heads interleaved as q0 k0 q1 k1 ... (q at
 * offset o, k at o + head_dim, both with head stride 2 * head_dim) qualify
 * when the two share the token stride. Positions and the cache must not
 * overlap them. Statuses: OCLF_INVALID_ARGUMENT for NULL handles or `rope`, a head
 * count of 0, head_dim 0, an odd rot_dim, rot_dim 0 or > head_dim, max_pos 0,
 * a head stride below head_dim, a token stride below the heads' extent, a
 * buffer (heads, positions, cache) smaller than described, overlapping
 * operands, a position out of range under `validate`; OCLF_UNSUPPORTED for an
 * unknown dtype, cache dtype or position type. */
OCLF_API oclf_status oclf_rotary_embedding(oclf_context *ctx, cl_command_queue queue,
                                           oclf_dtype dtype, size_t tokens,
                                           const oclf_rope *rope, oclf_heads q,
                                           const oclf_heads *k, const oclf_choice *choice,
                                           cl_uint num_events, const cl_event *wait_list,
                                           cl_event *event);

/* The gradient of oclf_rotary_embedding, in place: dq (and dk when not
 * NULL) hold the gradients of the rotated q and k on entry and those of
 * the unrotated q and k on return. The rotation is orthogonal, so its
 * gradient is its transpose, the inverse rotation: for each pair (x, y)
 * of dims j < R/2, x' = x c + y s, y' = y c - x s (c, s as in the
 * forward). Everything else is the forward's: the arguments and their
 * layouts (NeoX and GPT-J styles, partial rotary leaving dims >= R
 * untouched), a token whose position is outside [0, max_pos) left
 * unchanged (the forward left it unrotated, so its gradient passes
 * through), `validate`, the statuses and the tuning space (the op has its
 * own records, rotary_embedding_backward). It is the forward's kernel
 * built with the sines negated. As the forward, it has one path: the
 * rotation is a single elementwise pass over the heads, with nothing to
 * fuse, so OCLF_PATH_UNFUSED runs the same kernel. Accuracy: within
 * TOL(dtype). */
OCLF_API oclf_status oclf_rotary_embedding_backward(oclf_context *ctx, cl_command_queue queue,
                                                    oclf_dtype dtype, size_t tokens,
                                                    const oclf_rope *rope, oclf_heads dq,
                                                    const oclf_heads *dk,
                                                    const oclf_choice *choice, cl_uint num_events,
                                                    const cl_event *wait_list, cl_event *event);

/* Fused per-head RMSNorm + RoPE, in place on a packed qkv of `dtype`: token t
 * holds nq Q heads, then nk K heads, then nv V heads, each rope->head_dim
 * elements, at qkv.offset + t * qkv.stride (0: (nq + nk + nv) * head_dim).
 * Every Q head becomes rope(h * rsqrt(mean(h^2) + eps) * q_weight) and every
 * K head the same with k_weight (weights: head_dim elements of `dtype`, NULL
 * for 1); the normalized values stay in fp32 for the rotation and are rounded
 * once. V heads are not touched. The unfused path (per-head RMSNorm kernel,
 * then the rotary_embedding kernel) rounds the normalized heads to storage
 * in between, as separate calls would, so it agrees within the dtype's
 * tolerances rather than bit for bit in f16/bf16.
 * Statuses: those of oclf_rotary_embedding, plus eps < 0 or not finite and a
 * weight that overlaps qkv; nq == 0 is invalid, nk and nv may be 0. */
OCLF_API oclf_status oclf_qk_norm_rope(oclf_context *ctx, cl_command_queue queue,
                                       oclf_dtype dtype, size_t tokens, size_t nq, size_t nk,
                                       size_t nv, const oclf_rope *rope, oclf_buf qkv,
                                       const oclf_buf *q_weight, const oclf_buf *k_weight,
                                       float eps, const oclf_choice *choice, cl_uint num_events,
                                       const cl_event *wait_list, cl_event *event);

/* ------------------------------------------------------------------------ */
/* L2 distance + top-k: exact nearest-neighbour search (docs/ops/l2topk.md). */

/* Which distance formulas a call may use.
 *  OCLF_L2_FAST (default): either. The expansion |q|^2 + |x|^2 - 2 q.x is
 *    picked unless the tuning database or FORMULA=0 says otherwise. Its
 *    absolute error is about 1e-6 * (|q|^2 + |x|^2) (fp32 cancellation), so
 *    neighbours closer together than that may swap; results are clamped at
 *    0. Both the fused and the unfused (GEMM) path compute it.
 *  OCLF_L2_EXACT: the direct sum of (q - x)^2 only, exact to fp32 rounding
 *    of the D terms (relative error about D * 6e-8 of the distance itself),
 *    with twice the arithmetic. Fused path only: asking for the unfused path
 *    or FORMULA=1 under EXACT is OCLF_INVALID_ARGUMENT. */
typedef enum oclf_l2_precision { OCLF_L2_FAST = 0, OCLF_L2_EXACT = 1 } oclf_l2_precision;

#define OCLF_L2_DEFAULT_MAX_TEMP ((size_t)256 << 20)

typedef struct oclf_l2_topk_options {
    /* sizeof(oclf_l2_topk_options) as the caller was compiled (the _INIT
     * macro and oclf_l2_topk_options_init set it); 0: the first layout. */
    size_t size;
    oclf_l2_precision precision;
    /* Bound on the device temporaries the call allocates, in bytes; 0 means
     * OCLF_L2_DEFAULT_MAX_TEMP (256 MiB). It covers the per-(query, slice)
     * candidate heaps (12 bytes per entry), the query and database norms,
     * and on the unfused path the distance tile (nq x tile floats) and the
     * f32 copy of an f16/bf16 database tile, each GEMM operand counted twice
     * to leave room for the GEMM library's own padded copies. The database
     * is processed in tiles and the queries in chunks so the bound holds for
     * any N; nq x N distances are never stored. A bound too small for one
     * query's k candidates is OCLF_OUT_OF_RESOURCES. */
    size_t max_temp_bytes;
    /* Optional precomputed |x_i|^2, f32 [N] (stride ignored), used by the
     * expansion instead of computing norms on every call. NULL: computed. */
    const oclf_buf *x_norms;
    /* Optional bitmask of the database rows that may be returned: row i is
     * allowed when bit i % 8 of byte i / 8 is set; `offset` in bytes, at
     * least ceil(N / 8) bytes, stride ignored. The mask is applied inside
     * the selection, so k allowed rows come back whatever the mask rejects;
     * fewer than k allowed rows leave padding (-1, FLT_MAX). NULL: all. */
    const oclf_buf *allowed;
} oclf_l2_topk_options;

/* FAST, 256 MiB, no norms, no mask, with `size` set (or, in C,
 * oclf_l2_topk_options o = OCLF_L2_TOPK_OPTIONS_INIT;). */
#define OCLF_L2_TOPK_OPTIONS_INIT {.size = sizeof(oclf_l2_topk_options)}
OCLF_API void oclf_l2_topk_options_init(oclf_l2_topk_options *options);

/* For each of nq queries (f32 rows of D in `q`) the k database rows of `x`
 * (N rows of D in `x_dtype`) nearest in squared L2 distance (no square
 * root): dist [nq, k] f32 ascending and idx [nq, k] int64 (cl_long) row
 * numbers. Order is total on (distance, index): equal distances go to the
 * smaller index and a NaN distance (a NaN in a row) ranks after every
 * number, so results never depend on scheduling. k > N: entries N.. are
 * idx -1 and dist FLT_MAX (FAISS's convention). N = 0 gives padding only.
 * `options` may be NULL (defaults).
 *
 * Kernel parameters (oclf_choice.params): fused FORMULA, QB, RB, VEC, QG,
 * WGS, SLICES, QLOCAL, XNORM, XSTAGE, TOPK; unfused SLICES, TILE. Their
 * meanings and ranges: docs/ops/l2topk.md#paths-and-parameters. Every
 * parameter set returns the same bits.
 *
 * Statuses: OCLF_INVALID_ARGUMENT for NULL handles, D == 0, k == 0,
 * k > 2^31, row strides below D, buffers (inputs, norms, mask or outputs) smaller
 * than the ranges described, outputs that overlap each other or an input,
 * a bad precision, options.size or kernel parameter; OCLF_UNSUPPORTED for an unknown
 * dtype; OCLF_OUT_OF_RESOURCES when max_temp_bytes cannot hold the
 * candidates of one query. */
OCLF_API oclf_status oclf_l2_topk(oclf_context *ctx, cl_command_queue queue, oclf_dtype x_dtype,
                                  size_t nq, size_t n, size_t d, size_t k, oclf_buf q, oclf_buf x,
                                  oclf_buf dist, oclf_buf idx,
                                  const oclf_l2_topk_options *options, const oclf_choice *choice,
                                  cl_uint num_events, const cl_event *wait_list, cl_event *event);

/* ------------------------------------------------------------------------ */
/* Sharded L2 top-k (docs/ops/l2topk.md#sharded-search): one database split across
 * buffers, devices and platforms, searched as if it were one.              */

/* A piece of the database: `n` rows of D elements of `dtype` in `x` (offset
 * and row stride as everywhere), searched with `ctx` on `queue` (the queue
 * must belong to ctx's context and device). Row i of the shard has global id
 * first_id + i; the shards' id ranges must not overlap, and need not be
 * contiguous. `x_norms` and `allowed` are the shard's own |x|^2 and allowed
 * mask (indexed by the shard's row, as in oclf_l2_topk_options), NULL for
 * none. `choice` is this shard's oclf_l2_topk choice, NULL for automatic. */
typedef struct oclf_l2_shard {
    oclf_context *ctx;
    cl_command_queue queue;
    oclf_buf x;
    size_t n;
    oclf_dtype dtype;
    int64_t first_id;
    const oclf_buf *x_norms;
    const oclf_buf *allowed;
    const oclf_choice *choice;
} oclf_l2_shard;

/* Searches nq host queries (f32, row i at q + i * q_stride, q_stride >= d)
 * against every shard and writes the k nearest rows of all shards together
 * to the host arrays dist [nq, k] and idx [nq, k] (global ids), in the total
 * order of oclf_l2_topk: ties between shards go to the smaller global id,
 * NaN distances come last, and k beyond the rows allowed in all shards is
 * padded with -1 / FLT_MAX. The result equals one oclf_l2_topk over the
 * concatenated database whenever every shard computes distances with the
 * same formula and parameters (same device kind, or an explicit choice).
 *
 * Every shard is enqueued on its own queue before the call waits for any,
 * so shards on different devices run concurrently; the call blocks until
 * all are done and merges on the host (oclf_l2_topk_merge). Empty shards
 * (n = 0) contribute nothing. `options` (precision, max_temp_bytes per
 * shard) may be NULL; its x_norms and allowed must be NULL (they are per
 * shard here).
 *
 * Errors are recorded for oclf_last_error(NULL), naming the shard
 * ("oclf_l2_topk_sharded: shard 2: ..."). Statuses: OCLF_INVALID_ARGUMENT
 * for NULL pointers, num_shards == 0, d == 0, k == 0, q_stride < d, a shard
 * without context, queue or buffer, a queue of another context or device, a
 * negative first_id or overlapping id ranges, options with a bad size or
 * with x_norms or allowed; any status of oclf_l2_topk for a shard it rejects. On failure
 * dist and idx are not written. */
OCLF_API oclf_status oclf_l2_topk_sharded(const oclf_l2_shard *shards, size_t num_shards,
                                          size_t nq, size_t d, size_t k, const float *q,
                                          size_t q_stride, float *dist, int64_t *idx,
                                          const oclf_l2_topk_options *options);

/* The host merge behind oclf_l2_topk_sharded, for callers that gather
 * per-shard lists themselves (one per MPI rank, say): `lists` candidate
 * lists, list j holding nq rows of list_k[j] entries at dists[j] and ids[j]
 * (row i at i * list_k[j]), each row sorted in the total order with padding
 * (id -1) last, ids already global. Writes the k first of their union to
 * dist/idx [nq, k], padded with -1 / FLT_MAX. OCLF_INVALID_ARGUMENT for NULL
 * pointers (a list with list_k[j] = 0 may have NULL arrays) or k == 0;
 * OCLF_OUT_OF_RESOURCES when host memory runs out. Errors go to
 * oclf_last_error(NULL). */
OCLF_API oclf_status oclf_l2_topk_merge(size_t nq, size_t k, size_t lists,
                                        const float *const *dists, const int64_t *const *ids,
                                        const size_t *list_k, float *dist, int64_t *idx);

/* ------------------------------------------------------------------------ */
/* Linear layer with fused prologue and epilogue, a GEMM (docs/ops/linear.md). */

/* The activations a linear layer applies before (to x) or after the product. */
typedef enum oclf_linear_act {
    OCLF_LINEAR_NONE = 0,
    OCLF_LINEAR_RELU = 1,      /* t < 0 ? 0 : t (NaN stays NaN) */
    OCLF_LINEAR_GELU = 2,      /* exact GELU: 0.5 t (1 + erf(t / sqrt(2))) */
    OCLF_LINEAR_GELU_TANH = 3, /* 0.5 t (1 + tanh(sqrt(2/pi) (t + 0.044715 t^3))) */
    OCLF_LINEAR_SILU = 4,      /* t / (1 + exp(-t)) */
    OCLF_LINEAR_ACT_COUNT_ = 5
} oclf_linear_act;

/* How the weight is stored. */
typedef enum oclf_weight_layout {
    OCLF_WEIGHT_NK = 0, /* W [N, K] row-major (PyTorch's nn.Linear.weight): y = x W^T */
    OCLF_WEIGHT_KN = 1, /* W [K, N] row-major: y = x W */
    OCLF_WEIGHT_LAYOUT_COUNT_ = 2
} oclf_weight_layout;

/* What happens to each accumulated product acc = sum_k p(x)[m, k] w[n, k]
 * before it is stored, in this order:
 *   t = alpha * acc;  t += bias[n] (when bias);
 *   residual_before_act: t += beta * residual[m, n]; t = act(t);
 *   else:                t = act(t); t += beta * residual[m, n] (when residual).
 * ResNet's relu(x W^T + b + r) is residual_before_act = 1 with RELU; a
 * transformer's output projection r + x W^T + b is residual_before_act = 0
 * with NONE. */
typedef struct oclf_linear_epilogue {
    /* sizeof(oclf_linear_epilogue) as the caller was compiled (the _INIT
     * macro and oclf_linear_epilogue_init set it); 0: the first layout. */
    size_t size;
    float alpha;              /* finite; 1 after oclf_linear_epilogue_init */
    const oclf_buf *bias;     /* N elements of the call's dtype (stride ignored), or NULL */
    const oclf_buf *residual; /* [M, N] with its own offset and row stride, or NULL */
    float beta;               /* finite; 1 after oclf_linear_epilogue_init */
    int residual_before_act;  /* 0 or 1 */
    oclf_linear_act act;
} oclf_linear_epilogue;

/* alpha = beta = 1, no bias, no residual, no activation, with `size` set. */
#define OCLF_LINEAR_EPILOGUE_INIT                                                            \
    {.size = sizeof(oclf_linear_epilogue), .alpha = 1.0f, .beta = 1.0f}
OCLF_API void oclf_linear_epilogue_init(oclf_linear_epilogue *epilogue);

/* y [M, N] = epilogue(prologue(x) . W^T) (layout NK; x . W for KN), with
 * x [M, K] and y [M, N] at their offsets and row strides (0: packed), W at
 * its offset with row stride >= K (NK) or >= N (KN). x, W, bias, residual
 * and y share `dtype`; products accumulate in fp32 and each y element is
 * rounded once. `prologue` is applied to every element of x as it is
 * loaded. `epilogue` may be NULL (alpha 1, nothing else). M = 0 enqueues a
 * marker; K = 0 gives y = epilogue(0). y may be exactly the residual's
 * range (same buffer, offset and row stride: computed in place); any other
 * overlap of y with x, W, bias or residual is rejected.
 *
 * Paths: fused, one tiled GEMM kernel with the prologue where x is loaded
 * and the epilogue where y is stored; unfused, the prologue (and for f16 /
 * bf16 a conversion of x and W to f32) as a kernel, the GEMM library's f32
 * GEMM (alpha passed to it), then one kernel per epilogue step.
 * Kernel parameters (fused): MB, NB, VEC, WGM, WGN, STAGE, KC, MV; their
 * meanings, ranges and rules: docs/ops/linear.md#parameters.
 *
 * Statuses: OCLF_INVALID_ARGUMENT for NULL handles, N = 0, a row stride
 * below its width, a buffer smaller than the range described, y
 * overlapping an input other than exactly the residual, alpha or beta not
 * finite, an unknown activation, layout or residual_before_act not 0/1, a
 * bad kernel parameter; OCLF_UNSUPPORTED for an unknown dtype, M, N or K
 * of 2^31 or more, or a launch of 2^32 work-items or more (the fused
 * kernel's groups; the unfused path's M x N, M x K or N x K elements);
 * OCLF_OUT_OF_RESOURCES when a temporary of the unfused path exceeds the
 * device's largest allocation.
 *
 * Accuracy: y within tol (|r| + S) of the fp64 reference r, where S =
 * |alpha| sum_k |p(x)_k w_k| + |bias| + |beta residual| bounds the sum's
 * cancellation, tol = 1e-5 (f32), 2e-3 (f16), 1.6e-2 (bf16). */
OCLF_API oclf_status oclf_linear(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                 size_t m, size_t n, size_t k, oclf_buf x, oclf_buf w, oclf_buf y,
                                 oclf_weight_layout layout, oclf_linear_act prologue,
                                 const oclf_linear_epilogue *epilogue, const oclf_choice *choice,
                                 cl_uint num_events, const cl_event *wait_list, cl_event *event);

/* ---- Quantized weights (docs/ops/linear_q.md) ---------------------------
 * oclf_linear_q is oclf_linear with W [N, K] (layout NK) in a quantized
 * format, dequantized where the kernel loads it (in registers, never into a
 * full-size temporary). x, bias, residual and y keep the call's dtype;
 * products accumulate in fp32. The formats: OCLF_QFORMAT_INT8 (an int8 a
 * weight, symmetric, a scale per output channel or per group of 32, 64 or
 * 128 along K), OCLF_QFORMAT_INT4 (two weights a byte, groups of 32, 64 or
 * 128, optional uint8 zero points, else 8), OCLF_QFORMAT_Q8_0 and
 * OCLF_QFORMAT_Q4_0 (ggml's blocks of 32, bit-exact with GGUF tensors).
 * Their byte layouts, nibble order and dequantization formulas w(q, s, z):
 * docs/ops/linear_q.md#formats.
 * ggml's quantizer writes a negative d where a block's largest-magnitude
 * weight is positive, and -0.0 for an all-zero block: any sign is taken.
 * K must be a multiple of the group (32 for Q8_0 and Q4_0). Scales are
 * read as stored: a NaN scale makes the outputs that read its group NaN,
 * an infinite one makes them infinite or NaN (the formula gives NaN where
 * q = z meets the infinite scale; a kernel that applies the scale once to
 * a group's partial sum, QSCALE 1 below, gives the sum's infinity there).
 *
 * Buffers: `q` in bytes (offset and row stride in bytes; stride 0: packed,
 * K, K/2, K/32 x 34 or K/32 x 18). `scale` in elements of scale_dtype
 * (offset and row stride in scales; stride 0: packed): OCLF_F32 or
 * OCLF_F16 for INT8 group 0, whose scales are a vector [N] read packed
 * from the offset (its stride is ignored), OCLF_F16 for every grouped
 * format, [N, K/group] with the row stride; the GGUF
 * formats carry their scales inside q and take scale.mem = NULL. `zero`
 * (INT4 only; bytes) may be NULL. Q8_0 and Q4_0 rows hold f16 values at
 * even byte offsets: q's offset and row stride must be even. */
typedef enum oclf_qformat {
    OCLF_QFORMAT_INT8 = 1,
    OCLF_QFORMAT_INT4 = 2,
    OCLF_QFORMAT_Q8_0 = 3,
    OCLF_QFORMAT_Q4_0 = 4,
    OCLF_QFORMAT_COUNT_ = 5
} oclf_qformat;

typedef struct oclf_qweight {
    /* sizeof(oclf_qweight) as the caller was compiled (the _INIT macro and
     * oclf_qweight_init set it); 0: the first layout. */
    size_t size;
    oclf_qformat format;
    unsigned group;         /* see above; Q8_0/Q4_0: 0 or 32 */
    oclf_buf q;             /* the quantized weights (bytes) */
    oclf_buf scale;         /* scales; mem NULL for Q8_0/Q4_0 */
    oclf_dtype scale_dtype; /* OCLF_F32 or OCLF_F16 (ignored for Q8_0/Q4_0) */
    const oclf_buf *zero;   /* INT4 zero points (bytes), or NULL */
} oclf_qweight;

/* Every field zero (the format, buffers and scale dtype still to set),
 * with `size` set. */
#define OCLF_QWEIGHT_INIT {.size = sizeof(oclf_qweight)}
OCLF_API void oclf_qweight_init(oclf_qweight *w);

/* y [M, N] = epilogue(prologue(x) . dequant(W)^T), everything else as
 * oclf_linear (strides, in-place residual, epilogue, M = 0 a marker).
 *
 * Paths: fused, the GEMM kernels of oclf_linear (the same parameters) with
 * the weight dequantized at its load, and one parameter more: QSCALE (0 or
 * 1) for the unstaged tiled kernel of a grouped format, 1 to sum each
 * group's products with the bare integers and apply the group's scale and
 * zero point once to that sum (s (sum x q - z sum x)), 0 to dequantize
 * every weight, (q - z) s, before its products. The staged tiles and the
 * matrix-vector shape (MV, few rows) dequantize every weight. PRE (0 or 1)
 * is a strategy of the fused path rather than a kernel parameter: 1
 * dequantizes W a tile of rows at a time (at most 64 MiB) into an f32
 * temporary, then runs the dense tiled kernel, built to read an f32 W,
 * over it, so many rows share one dequantization; the weights reach the
 * fp32 products exactly as the kernels that dequantize at the load give
 * them, in every dtype (no weight is rounded to f16 or bf16). The CPU
 * default takes PRE 1 from 128 rows. Unfused: a dequantize kernel writes
 * W into an f32 temporary, tiled over N so that the temporary stays within
 * 64 MiB, and each tile runs oclf_linear's unfused path.
 * Accuracy: as oclf_linear, against the fp64 product with the weights
 * dequantized in fp64.
 *
 * Statuses: those of oclf_linear, and OCLF_INVALID_ARGUMENT for a NULL w,
 * an unknown format, a group the format does not take, K not a multiple of
 * the group, a scale dtype the format does not take, a scale, q or zero
 * buffer smaller than the range described, zero points with a format other
 * than INT4, a scale buffer given to Q8_0/Q4_0, an odd q offset or row
 * stride for Q8_0/Q4_0, and y overlapping any part of the weight. */
OCLF_API oclf_status oclf_linear_q(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                   size_t m, size_t n, size_t k, oclf_buf x,
                                   const oclf_qweight *w, oclf_buf y, oclf_linear_act prologue,
                                   const oclf_linear_epilogue *epilogue,
                                   const oclf_choice *choice, cl_uint num_events,
                                   const cl_event *wait_list, cl_event *event);

/* Rewrites a GGUF weight once into the library's separate-array form:
 * Q8_0 into INT8 with group 32 (q int8 [N, K], scale f16 [N, K/32]) and
 * Q4_0 into INT4 with group 32 and no zero points (the nibbles repacked to
 * INT4's order), the same values bit for bit. `dst` describes the caller's
 * buffers in that form (format, group 32, scale_dtype OCLF_F16, zero NULL);
 * the separate arrays keep every quant vector at an aligned address, which
 * 34- and 18-byte blocks do not. Whether it pays depends on the device: the
 * tuner measures both forms (docs/ops/linear_q.md).
 * One kernel with no parameters: `choice` (NULL: the default) is checked
 * as every op checks it (a known path, at most OCLF_MAX_PARAMS
 * parameters), every path runs that kernel, and parameter names are
 * ignored, so a later version may add parameters without a new signature.
 * OCLF_INVALID_ARGUMENT for a src that is not Q8_0/Q4_0, a dst of another
 * form, a bad size of src or dst, an unknown path, buffers too small or
 * overlapping; nothing is written then. */
OCLF_API oclf_status oclf_qweight_convert(oclf_context *ctx, cl_command_queue queue, size_t n,
                                          size_t k, const oclf_qweight *src,
                                          const oclf_qweight *dst, const oclf_choice *choice,
                                          cl_uint num_events, const cl_event *wait_list,
                                          cl_event *event);

/* ------------------------------------------------------------------------ */
/* Attention (FlashAttention-style): softmax(scale . Q K^T + mask) V over a
 * batch of sequences packed along tokens (docs/ops/attention.md).          */

typedef struct oclf_attention_options {
    /* sizeof(oclf_attention_options) as the caller was compiled (the _INIT
     * macro and oclf_attention_options_init set it); 0: the first layout. */
    size_t size;
    /* Multiplies q.k; 0 means 1/sqrt(head_dim). Finite. */
    float scale;
    /* 0 or 1: query i of a sequence of Sq queries and Sk keys sees the keys
     * j <= i + Sk - Sq (aligned bottom-right, as FlashAttention 2.1 and
     * KV-cache engines; PyTorch's is_causal is top-left and agrees only
     * when Sq = Sk). With Sq > Sk the first Sq - Sk rows see no key. */
    int causal;
    /* 0 or 1: a sliding window. Query i keeps the keys j with
     * i + Sk - Sq - window_left <= j <= i + Sk - Sq + window_right, where
     * -1 leaves that side unbounded (values below -1 are rejected). With
     * `causal` the mask is the intersection of both. */
    int window;
    int64_t window_left, window_right;
    /* > 0: each score s becomes softcap . tanh(s / softcap) (after the
     * scale, before ALiBi and the mask); <= 0: no softcap. Finite. */
    float softcap;
    /* Optional ALiBi slopes, [Hq] f32 (stride ignored): query head h adds
     * -slope[h] . |i + Sk - Sq - j| to each score (the absolute distance,
     * FlashAttention's convention). NULL: none. */
    const oclf_buf *alibi_slopes;
    /* Optional attention sinks, [Hq] f32 (stride ignored): one logit per
     * query head that joins each row's softmax denominator and adds no
     * value; no scale, softcap or ALiBi applies to it. NULL: none. */
    const oclf_buf *sinks;
    /* Optional output, [Hq, Tq] f32: the natural-log logsumexp of each
     * row's final scores (the sink included), element (h, t) at
     * offset + h * stride + t (stride 0: Tq). NULL: not written. */
    const oclf_buf *lse;
    /* Dropout on the probabilities: 0 <= dropout_p < 1 (0: none). A kept
     * probability is scaled by 1 / (1 - p); the mask is Philox4x32-10 of the
     * seed, dropout_offset and (query token, query head, key), the same on
     * every path, structure and device (its counter layout:
     * docs/ops/attention.md). The LSE is taken before dropout. */
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;
} oclf_attention_options;

/* No scale (1/sqrt(head_dim)), no mask, window, softcap, ALiBi, sinks,
 * LSE or dropout, with `size` set (or, in C, OCLF_ATTENTION_OPTIONS_INIT). */
#define OCLF_ATTENTION_OPTIONS_INIT {.size = sizeof(oclf_attention_options)}
OCLF_API void oclf_attention_options_init(oclf_attention_options *options);

/* Attention over `batch` sequences packed along tokens, with contiguous K
 * and V (prefill). Sequence b holds the query tokens [cu_seqlens_q[b],
 * cu_seqlens_q[b + 1]) of q and o and the key tokens [cu_seqlens_k[b],
 * cu_seqlens_k[b + 1]) of k and v: cu_seqlens_* are device int32 arrays of
 * batch + 1 non-decreasing offsets from 0 (FlashAttention's varlen
 * convention), ending at total_q and total_k. Every sequence has at most
 * max_seqlen_q queries; empty sequences are allowed.
 *
 * q and o have q.count = o.count = Hq heads per token, k and v Hk heads
 * (k.count = v.count), each head `head_dim` (1..256) elements of `dtype`:
 * token t, head h at buf.offset + t * buf.stride + h * head_stride, as in
 * oclf_heads, so q, k and v may be views of one packed qkv. Hq % Hk == 0:
 * query head h reads KV head h / (Hq / Hk) (GQA; MQA when Hk = 1).
 *
 * For query i and key j of a sequence: s = scale . q.k, then the softcap,
 * then ALiBi, then the mask of `options` (NULL: none of them). Each output
 * row is sum_j softmax(s)_j v_j, computed in fp32 and rounded once; a row
 * that sees no key gets 0 (and LSE -inf, or the sink's logit with sinks),
 * never NaN.
 *
 * Aliasing: q, k and v may overlap each other (they are only read). o must
 * share no element with q, k, v, cu_seqlens_*, the slopes, sinks or lse
 * (views of one packed buffer qualify when their heads interleave without
 * meeting, checked as oclf_rotary_embedding does); lse must share no byte
 * with any other operand.
 *
 * Offsets are not read on the host by the fused path: an offset array that
 * breaks the rules above is the caller's error, and the kernels then clamp
 * each sequence to [0, total_q) and [0, total_k) and to max_seqlen_q
 * queries, so nothing outside the checked ranges is read or written. With
 * the context's `validate` option the call reads the offsets first
 * (blocking, after the wait list) and rejects such arrays with
 * OCLF_INVALID_ARGUMENT naming the sequence. The unfused path always reads
 * them (it sizes its GEMMs on the host) and always rejects them.
 *
 * Paths: fused, one flash kernel (online softmax, fp32 accumulator; the
 * score matrix never reaches global memory), parameters WGS, BK, VEC, ACC
 * and STAGE; unfused, widening copies, Sgemm for the scores, a
 * masked-softmax kernel and Sgemm for P V, a score tile of at most 2^22
 * floats. Both, and every parameter's meaning and range:
 * docs/ops/attention.md#paths-and-parameters.
 *
 * Statuses: OCLF_INVALID_ARGUMENT for NULL handles, head_dim 0 or above
 * 256, a head count of 0, Hq not a multiple of Hk, k and v head counts that
 * differ, q and o head counts that differ, a head stride below head_dim, a
 * token stride below the heads' extent, a buffer (q, k, v, o, offsets,
 * slopes, sinks, lse) smaller than the range described, outputs that overlap
 * as forbidden above, a scale or softcap that is not finite, causal or
 * window not 0/1, a window side below -1, a bad options.size or kernel
 * parameter, offsets rejected as above; OCLF_UNSUPPORTED for an unknown
 * dtype, a token count or head count of 2^31 or more, or a launch of 2^32
 * work-items or more; OCLF_OUT_OF_RESOURCES when a temporary of the unfused
 * path exceeds the device's largest allocation; a dropout_p outside [0, 1)
 * is OCLF_INVALID_ARGUMENT. batch, total_q or
 * max_seqlen_q of 0 enqueues a marker (no query is computed).
 *
 * Accuracy: each output row o within tol (1 + max_j |v_j|) of the fp64
 * reference, the max over the values of the keys the row sees, and the LSE
 * within tol (absolute), tol = 2e-5 (f32), 2e-3 (f16), 1.6e-2 (bf16); with
 * dropout the kept set is the reference's own (the same Philox mask). */
OCLF_API oclf_status oclf_attention(oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype,
                                    size_t batch, size_t head_dim, size_t total_q,
                                    size_t total_k, size_t max_seqlen_q, oclf_buf cu_seqlens_q,
                                    oclf_buf cu_seqlens_k, oclf_heads q, oclf_heads k,
                                    oclf_heads v, oclf_heads o,
                                    const oclf_attention_options *options,
                                    const oclf_choice *choice, cl_uint num_events,
                                    const cl_event *wait_list, cl_event *event);

/* ------------------------------------------------------------------------ */
/* Paged KV cache: decode, chunked prefill and mixed batches, and the cache
 * write (docs/ops/attention.md#paged-attention, #kv-cache).                 */

/* A paged KV cache: K and V each [num_blocks, block_size, heads, head_dim]
 * of the call's dtype, packed (the layout of FlashAttention's paged KV and
 * vLLM's reshape_and_cache_flash): the element (block, slot, head, e) of K
 * is at k_offset + ((block * block_size + slot) * heads + head) * head_dim
 * + e of `k`, and the same for V. K and V may share one buffer (at
 * different offsets) but must not overlap. */
typedef struct oclf_kv_cache {
    /* sizeof(oclf_kv_cache) as the caller was compiled (the _INIT macro and
     * oclf_kv_cache_init set it); 0: the first layout. */
    size_t size;
    cl_mem k, v;
    size_t k_offset, v_offset; /* elements */
    size_t num_blocks;         /* >= 1 */
    size_t block_size;         /* tokens a block, >= 1 */
    size_t heads;              /* Hk */
    size_t head_dim;           /* 1..256 */
} oclf_kv_cache;

/* Every field zero (the buffers and sizes still to set), with `size` set. */
#define OCLF_KV_CACHE_INIT {.size = sizeof(oclf_kv_cache)}
OCLF_API void oclf_kv_cache_init(oclf_kv_cache *cache);

/* Attention of `total_q` query tokens over a paged KV cache, for `batch`
 * sequences. Sequence b's queries are the tokens [cu_seqlens_q[b],
 * cu_seqlens_q[b + 1]) of q and o (device int32, batch + 1 offsets from 0
 * ending at total_q, each sequence at most max_seqlen_q queries: 1 a
 * sequence for decode, more for chunked prefill, mixed in one call); its
 * keys are the first seq_lens[b] (device int32 [batch]) slots of the blocks
 * block_tables[b][0..] (device int32, row b at block_tables.offset + b *
 * block_tables.stride, stride 0: max_blocks), which already include the
 * new tokens: the Sq queries are the last Sq of the Sk = seq_lens[b] keys,
 * so `causal` aligns them bottom-right as in oclf_attention. Every option
 * of oclf_attention_options applies as there (scale, causal, window,
 * softcap, ALiBi, sinks, LSE). q and o are oclf_heads of cache->head_dim
 * elements with Hq heads, Hq % cache->heads == 0.
 *
 * A sequence may hold at most max_blocks * block_size keys; seq_lens above
 * that are clamped to it. With the context's `validate` option (and always
 * on the unfused path, which sizes its work on the host) the call first
 * reads the offsets, lengths and the blocks they use (blocking, after the
 * wait list) and rejects a length above the table's reach or a block id out
 * of range with OCLF_INVALID_ARGUMENT naming the sequence and the table
 * entry ("sequence 1: block_tables[1][0] is -1 ..."), writing nothing.
 * Without `validate` the fused path reads no data on the host: a block id
 * outside [0, num_blocks) is then never read, and its keys take no part in
 * the softmax, as if masked (a row whose every key lies in such blocks gets
 * o = 0 and LSE -inf, or the sink's logit with sinks, as a row that sees no
 * key).
 *
 * Paths: fused, oclf_attention's kernel reading its keys through the block
 * table, with split KV (parameter PART, keys a partition, 0: no split) for
 * decode: the partitions' fp32 partial outputs go to a temporary of at
 * most 64 MiB and a second kernel merges them; unfused, the paged K and V
 * gathered into contiguous f32 temporaries, then oclf_attention's unfused
 * path. Parameters: oclf_attention's and PART. The split, its temporary
 * and the default: docs/ops/attention.md#paged-attention.
 *
 * Aliasing: o must not overlap q, the cache, the offsets, lengths, block
 * table, slopes, sinks or lse; lse must share no byte with any operand.
 * Statuses: those of oclf_attention, plus a NULL cache, num_blocks,
 * block_size or heads of 0, max_blocks of 0, a cache buffer smaller than
 * its blocks, K and V overlapping, a block table smaller than batch rows of
 * max_blocks or with a stride below it, and a head_dim that is not the
 * cache's (cache->head_dim is the call's head dim). batch, total_q or
 * max_seqlen_q of 0 enqueues a marker. Accuracy: as oclf_attention. */
OCLF_API oclf_status oclf_attention_paged(oclf_context *ctx, cl_command_queue queue,
                                          oclf_dtype dtype, size_t batch, size_t total_q,
                                          size_t max_seqlen_q, size_t max_blocks,
                                          oclf_buf cu_seqlens_q, oclf_buf seq_lens,
                                          oclf_buf block_tables, oclf_heads q,
                                          const oclf_kv_cache *cache, oclf_heads o,
                                          const oclf_attention_options *options,
                                          const oclf_choice *choice, cl_uint num_events,
                                          const cl_event *wait_list, cl_event *event);

/* Writes `tokens` new K and V heads (k.count = v.count = cache->heads heads
 * of cache->head_dim elements each, as oclf_heads views) into the cache:
 * token t goes to slot s = slot_mapping[t] (device int64 [tokens]), block
 * s / block_size, position s % block_size; a token with s < 0 is skipped
 * (padding). A slot at or beyond num_blocks * block_size is never written;
 * with the context's `validate` option the call reads the slots first
 * (blocking) and rejects it with OCLF_INVALID_ARGUMENT naming the token.
 * Two tokens with the same slot are the caller's error (one of them wins).
 * One kernel, with no unfused form (either path runs it): the copy runs in
 * the row structure qk_norm_rope takes for these heads, from its records,
 * or from the choice's LAYOUT, WGS and VEC (NULL: the default). The heads
 * are copied bit for bit.
 * Statuses: OCLF_INVALID_ARGUMENT for NULL handles or cache, head counts
 * other than cache->heads, a head stride below head_dim, buffers smaller
 * than described, k or v overlapping the cache or the slots, K and V of
 * the cache overlapping; OCLF_UNSUPPORTED for an unknown dtype. tokens 0
 * enqueues a marker. */
OCLF_API oclf_status oclf_kv_cache_write(oclf_context *ctx, cl_command_queue queue,
                                         oclf_dtype dtype, size_t tokens, oclf_heads k,
                                         oclf_heads v, oclf_buf slot_mapping,
                                         const oclf_kv_cache *cache, const oclf_choice *choice,
                                         cl_uint num_events, const cl_event *wait_list,
                                         cl_event *event);

/* oclf_qk_norm_rope that also writes its rotated K heads and the V heads
 * into a paged cache at slot_mapping (device int64 [tokens], as
 * oclf_kv_cache_write: s < 0 skipped, slots beyond the cache never
 * written), so the new keys are written once: fused, in the same kernel
 * (the qkv keeps its rotated K heads too); unfused, oclf_qk_norm_rope's
 * unfused path and then the cache-write kernel. A token whose position is
 * outside [0, max_pos) is left in the qkv as oclf_qk_norm_rope leaves it
 * (neither normalized nor rotated) and goes into the cache as it stands,
 * on both paths. Requires nk = nv = cache->heads and cache->head_dim =
 * rope->head_dim. Statuses: those of oclf_qk_norm_rope and
 * oclf_kv_cache_write, and a cache overlapping qkv. */
OCLF_API oclf_status oclf_qk_norm_rope_cache(oclf_context *ctx, cl_command_queue queue,
                                             oclf_dtype dtype, size_t tokens, size_t nq,
                                             size_t nk, size_t nv, const oclf_rope *rope,
                                             oclf_buf qkv, const oclf_buf *q_weight,
                                             const oclf_buf *k_weight, oclf_buf slot_mapping,
                                             const oclf_kv_cache *cache, float eps,
                                             const oclf_choice *choice, cl_uint num_events,
                                             const cl_event *wait_list, cl_event *event);

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy (PyTorch's F.cross_entropy), with its gradient
 * written in place over the logits, and linear + cross-entropy
 * (docs/ops/cross_entropy.md).                                             */

typedef enum oclf_reduction {
    OCLF_REDUCTION_NONE = 0, /* loss: [tokens] f32, one loss per row */
    OCLF_REDUCTION_SUM = 1,  /* loss: one f32, the sum over the rows */
    OCLF_REDUCTION_MEAN = 2  /* loss: one f32, the sum over the rows not ignored, divided by their count */
} oclf_reduction;

/* What an oclf_linear_cross_entropy call did with its temporaries, written
 * where options->info points. */
typedef struct oclf_linear_cross_entropy_info {
    /* sizeof(oclf_linear_cross_entropy_info) as the caller was compiled (the
     * _INIT macro sets it; 0: the first layout): the call writes the fields
     * that fit and checks it as the option structs' size. */
    size_t size;
    size_t chunk_tokens; /* tokens per chunk (the last may hold fewer) */
    size_t chunks;       /* chunks the tokens were split into */
    size_t temp_bytes;   /* device temporaries the call held at once */
} oclf_linear_cross_entropy_info;

#define OCLF_LINEAR_CROSS_ENTROPY_INFO_INIT {.size = sizeof(oclf_linear_cross_entropy_info)}

typedef struct oclf_cross_entropy_options {
    /* sizeof(oclf_cross_entropy_options) as the caller was compiled (the
     * _INIT macro and oclf_cross_entropy_options_init set it); 0: the first
     * layout. */
    size_t size;
    /* Rows whose target equals it contribute no loss, no z-loss and a zero
     * gradient (their LSE is still written). The _INIT macro, the _init
     * function and NULL options give -100, PyTorch's default; a struct
     * zeroed by hand has 0 (a real class), so set it. */
    int64_t ignore_index;
    /* OCLF_REDUCTION_NONE, _SUM or _MEAN (the _INIT macro: MEAN, PyTorch's
     * default; 0 is NONE). */
    oclf_reduction reduction;
    /* eps in [0, 1]: loss = (1 - eps) nll + (eps / V) sum_c -log p_c. */
    float label_smoothing;
    /* > 0: every logit x becomes softcap * tanh(x / softcap) before the
     * softmax (the LSE and the z-loss are of the capped logits; the
     * gradient is with respect to the logits as given); <= 0: none.
     * Finite. */
    float softcap;
    /* lambda >= 0, finite: each row not ignored adds lambda * lse^2 (with
     * MEAN divided by the same count as the loss). */
    float z_loss;
    /* Optional output, [tokens] f32 (stride ignored): each row's natural-log
     * logsumexp of its (capped) logits, ignored rows included. NULL: not
     * written. */
    const oclf_buf *lse;
    /* 0 or 1: write d(loss)/d(logits), times the upstream gradient, over the
     * logits, in their dtype (rounded once). Ignored rows get zeros; with
     * MEAN and every row ignored, every element is zero. */
    int compute_grad;
    /* Optional upstream gradient, f32 (stride ignored): for NONE [tokens]
     * (row t's gradient is scaled by element t), for SUM and MEAN one
     * element (the gradient of the reduced loss is scaled by it). NULL: 1.
     * Read on the device, only with compute_grad. */
    const oclf_buf *grad_output;
    /* oclf_linear_cross_entropy only (ignored by oclf_cross_entropy): the
     * most bytes of device temporaries the call may hold (0: no bound),
     * and where it reports what it used (NULL: nothing reported). */
    size_t max_temp_bytes;
    oclf_linear_cross_entropy_info *info;
} oclf_cross_entropy_options;

/* ignore_index -100, reduction MEAN, no smoothing, softcap, z-loss, LSE,
 * gradient, temporary bound or report, with `size` set. */
#define OCLF_CROSS_ENTROPY_OPTIONS_INIT                                                     \
    {.size = sizeof(oclf_cross_entropy_options), .ignore_index = -100,                      \
     .reduction = OCLF_REDUCTION_MEAN}
OCLF_API void oclf_cross_entropy_options_init(oclf_cross_entropy_options *options);

/* Softmax cross-entropy of `tokens` rows of `vocab` logits (`logits`,
 * dtype, row stride may exceed vocab) against `targets` (device int64
 * [tokens], stride ignored), as PyTorch's F.cross_entropy with the options
 * above: per row, with z the (capped) logits, lse = logsumexp(z), t the
 * target and eps the label smoothing,
 *   loss = (1 - eps) (lse - z_t) + eps (lse - mean(z)) + z_loss lse^2,
 * 0 for an ignored row. `loss` (f32, stride ignored) receives [tokens]
 * per-row losses for NONE, one value for SUM and MEAN; MEAN over zero rows
 * not ignored (all ignored, or tokens 0 with a loss written) is NaN, as in
 * PyTorch. Arithmetic in fp32; SUM and MEAN add the per-row losses in a
 * fixed order (one work-group, no atomics), so a call gives the same bits
 * every time on a device.
 *
 * The gradient (compute_grad) replaces the logits: one pass computes the
 * row's statistics, a second writes the gradient, so the logits are read
 * twice and written once and no probabilities are stored. choice: path
 * FUSED (that one kernel) or UNFUSED (softmax into an f32 [tokens, vocab]
 * temporary, a loss kernel and a gradient kernel); parameters LAYOUT (0 a
 * row per work-item, 1 a work-group per row), WGS and VEC as the norms.
 *
 * Targets are checked on the device, not read by the host: a first kernel
 * records the smallest row whose target is outside [0, vocab) and is not
 * ignore_index, and every later kernel writes nothing when there is one.
 * The call then waits for that check (a blocking read of one int, after
 * the caller's wait list and the check kernel, while the other kernels are
 * already queued) and returns OCLF_INVALID_ARGUMENT naming the row ("row 5:
 * target 32000 is outside [0, 32000)"), with every buffer untouched.
 * So the call does not return before its wait list (and, on an in-order
 * queue, everything enqueued before it) has completed: a wait list or a
 * queue held by a user event that the calling thread would complete only
 * after the call returns deadlocks.
 *
 * Statuses: OCLF_INVALID_ARGUMENT for NULL handles, vocab == 0, a stride
 * below vocab, buffers smaller than described, a bad options size,
 * reduction not one of the three, label_smoothing outside [0, 1], a
 * softcap or z_loss not finite (z_loss < 0), compute_grad not 0 or 1, loss,
 * lse, grad_output or targets overlapping the logits or each other, a bad
 * target (above); OCLF_UNSUPPORTED for an unknown dtype, vocab or tokens
 * of 2^32 - 1 or more. tokens 0 enqueues a marker (nothing written, even
 * for MEAN).
 *
 * Logits of -inf (a padded vocabulary, constrained decoding) take no
 * probability and get a zero gradient. Without smoothing the loss stays
 * finite (the smoothing term is left out when eps is 0, not multiplied by
 * 0); with eps > 0 the mean of such a row's logits is -inf and its loss
 * +inf, as PyTorch gives, and so are SUM and MEAN over it.
 * Accuracy: losses and LSE within 1e-4 + 1e-5 |r| (fp32 whatever the
 * dtype); the gradient within TOL(dtype) of the reference computed from
 * the stored logits. */
OCLF_API oclf_status oclf_cross_entropy(oclf_context *ctx, cl_command_queue queue,
                                        oclf_dtype dtype, size_t tokens, size_t vocab,
                                        oclf_buf logits, oclf_buf targets, oclf_buf loss,
                                        const oclf_cross_entropy_options *options,
                                        const oclf_choice *choice, cl_uint num_events,
                                        const cl_event *wait_list, cl_event *event);

/* Linear + cross-entropy without the logits: loss = CE(x W^T, targets) for
 * x [tokens, hidden] and W [vocab, hidden] (nn.Linear's weight: a language
 * model's head) of `dtype`, with the options and semantics of
 * oclf_cross_entropy (ignore_index, smoothing, reduction, softcap, z-loss,
 * LSE, grad_output), and when asked the gradients
 *   grad_x [tokens, hidden] of `dtype`   = dZ W
 *   grad_w [vocab, hidden] f32           = dZ^T x (accumulated in fp32)
 * where dZ is d(loss)/d(x W^T) times the upstream gradient. Each may be
 * NULL (not computed); grad_output is read when either is given.
 * options->compute_grad must be 0: the gradients are asked for with grad_x
 * and grad_w (there are no logits to write them over).
 *
 * The [tokens, vocab] logits are never held whole. Path FUSED: the tokens
 * go in chunks of CHUNK; per chunk, oclf_linear's fused GEMM writes the
 * chunk's logits into a temporary, cross-entropy's fused kernel turns them
 * into their gradient in place, a GEMM adds dZ W into grad_x's rows, and
 * (for grad_w) the chunk's dZ is transposed into f32 and a GEMM adds dZ^T x
 * into grad_w. The GEMMs are oclf_linear's tuned kernels (their own tuning
 * records for their shapes apply). Path UNFUSED: one chunk of every token,
 * the cross-entropy's unfused composition (softmax into an f32 temporary),
 * then the same GEMMs: what a framework does without fusion.
 *
 * Temporary memory per chunk of c tokens: c x vocab of `dtype` (logits),
 * with grad_w c x vocab f32 (dZ^T) and, for f16/bf16, c x hidden f32 (x
 * widened); UNFUSED adds c x vocab f32 probabilities; SUM and MEAN add
 * tokens f32 per-row losses. options->max_temp_bytes (0: no bound) caps
 * that total: the chunk shrinks to fit, and a call that cannot fit one token is
 * OCLF_INVALID_ARGUMENT (OCLF_OUT_OF_RESOURCES for UNFUSED, which cannot
 * shrink). CHUNK (a parameter, 1..2^31) comes from the choice or the
 * tuning database; without either, about tokens / ceil(vocab / hidden)
 * rounded up to a power of two (the chunk's logits about the size of x),
 * at least 256 (fewer rows starve the products); every token in one
 * chunk where that would make fewer than four chunks (two or three save
 * too little memory for the second pass over W and grad_w they cost).
 * LAYOUT, WGS and VEC in the choice's parameters choose cross-entropy's
 * row structure (as oclf_cross_entropy's);
 * without them its own tuning records and defaults for the chunk's shape
 * apply. options->info (may be NULL) receives what the call used.
 *
 * Targets are checked on the device first and the call waits for that
 * check before it queues anything else (one blocking read of one int after
 * the caller's wait list: the deadlock note of oclf_cross_entropy
 * applies); a bad target is OCLF_INVALID_ARGUMENT naming the row, with
 * nothing written. Strides: x, grad_x and grad_w rows at their own strides
 * (0: hidden), W's at its stride (0: hidden).
 * Statuses: those of oclf_cross_entropy, and OCLF_INVALID_ARGUMENT for
 * hidden == 0, compute_grad set, grad_x or grad_w smaller than described
 * or overlapping any other operand, loss or lse overlapping x or W;
 * OCLF_UNSUPPORTED for hidden of 2^31 or more. tokens 0 enqueues a marker
 * (nothing written).
 * Accuracy: the loss within 1e-4 + 1e-4 |r| and the LSE within 1e-4 +
 * 1e-5 |r| of the fp64 reference (which rounds the logits and their
 * gradient as the device stores them); each element of grad_x and grad_w
 * within g max |r| over its matrix, g = 2e-5 (f32), 4e-3 (f16), 3e-2
 * (bf16): the gradients' sums cancel. */
OCLF_API oclf_status oclf_linear_cross_entropy(
    oclf_context *ctx, cl_command_queue queue, oclf_dtype dtype, size_t tokens, size_t hidden,
    size_t vocab, oclf_buf x, oclf_buf w, oclf_buf targets, oclf_buf loss,
    const oclf_buf *grad_x, const oclf_buf *grad_w, const oclf_cross_entropy_options *options,
    const oclf_choice *choice, cl_uint num_events, const cl_event *wait_list, cl_event *event);

/* ------------------------------------------------------------------------ */
/* Generated elementwise kernels (docs/ops/expr.md).
 *
 * Source: statements `name = expr;` over declared names; `#` starts a
 * comment that runs to the end of its line (a `#define` or `#pragma` line
 * is a comment too: nothing of the source is handed to the OpenCL
 * compiler). Operators + - * /,
 * unary -, comparisons < <= > >= == != (1 or 0), c ? a : b; functions exp
 * log log1p expm1 sqrt rsqrt abs tanh erf sigmoid relu gelu gelu_tanh silu
 * (one argument), min max pow (two), clamp(x, lo, hi), dropout(e, p) with p
 * a literal or a scalar input. Literals: decimal or C99 hex floats. All
 * arithmetic in fp32; each output rounded once to its dtype. exp and log
 * are within 3 ulp, erf within 1e-7 (absolute; relative below |x| = 1).
 * The fused kernel computes softplus, log(exp(x) + 1) (either order of the
 * sum), as max(x, 0) + log1p(exp(-|x|)): within 4 ulp, and finite where
 * exp(x) overflows (x above 88.7 gives x, as the exact value does; the
 * unfused path, which materializes exp(x), gives infinity there). Statements may
 * come in any order; an intermediate used twice is computed once.
 *
 * dropout(e, p): e / (1 - p) where kept, else 0; the mask is Philox4x32-10
 * of the run's seed, offset and the element's index, the same on both paths
 * and every structure (its counter layout: docs/ops/expr.md#dropout).
 *
 * Limits: source 16384 bytes, 64 statements, 256 nodes after sharing, 16
 * inputs, 8 outputs, names of 31 characters, nesting 64 deep. Bad source is
 * OCLF_INVALID_ARGUMENT with "line:column: what" in oclf_last_error. */
typedef enum oclf_expr_kind {
    OCLF_EXPR_MATRIX = 0, /* [rows, cols]: own dtype, offset and row stride */
    OCLF_EXPR_ROW = 1,    /* [cols], the same for every row (a bias) */
    OCLF_EXPR_COL = 2,    /* [rows], the same for every column (a row scale) */
    OCLF_EXPR_SCALAR = 3, /* one float per call; changing it never recompiles */
    OCLF_EXPR_BITS = 4    /* [rows, cols] of 1-bit values packed in uint32 words */
} oclf_expr_kind;

/* Bit matrices (OCLF_EXPR_BITS): element (r, c) is bit c mod 32 (least
 * significant first) of the uint32 word r * stride + c / 32, counted from
 * the buffer's offset; the oclf_buf's offset and stride are in 32-bit words
 * (stride 0: packed, ceil(cols / 32) words a row; any larger stride leaves
 * the words between rows untouched). A bits input reads as 1.0 or 0.0, so
 * `dx = m ? dy : 0` or `dx = dy * m` apply a stored mask. A bits output's
 * bit is set where its expression is nonzero (NaN included) and cleared
 * where it is zero; the bits of a row's last word past cols are written 0,
 * so whole words are written. `y = relu(x); m = x > 0;` writes ReLU and its
 * mask (1/32 of an f32 matrix) in one kernel. A bit matrix is never a row,
 * column or scalar operand, nor a dropout p; its dtype field is ignored. A
 * bits output may be in place on a bits input with exactly the same words;
 * it overlaps nothing else.
 * How bit matrices are written without races: docs/ops/expr.md#bit-masks.
 *
 * Dropout's backward: `dx = dropout(dy, p);` run with the forward's seed,
 * offset, rows, cols and p, its dropout drawn as the same index, regenerates
 * the forward's mask bit for bit instead of storing it (how to draw the same
 * index, and how to store the mask anyway:
 * docs/ops/expr.md#dropouts-backward). */

/* An input (any kind) or an output (kind OCLF_EXPR_MATRIX or
 * OCLF_EXPR_BITS). */
typedef struct oclf_expr_decl {
    const char *name;
    oclf_expr_kind kind;
    oclf_dtype dtype; /* ignored for scalars and bit matrices */
} oclf_expr_decl;

typedef struct oclf_expr oclf_expr;

/* Parses and checks `source`, then builds its program (cached in memory and
 * on disk, keyed by the expression's canonical form and dtypes, never by the
 * caller's spelling). The object is immutable: any thread may run it until
 * oclf_expr_release. */
OCLF_API oclf_status oclf_expr_compile(oclf_context *ctx, const char *source,
                                       const oclf_expr_decl *inputs, unsigned n_inputs,
                                       const oclf_expr_decl *outputs, unsigned n_outputs,
                                       oclf_expr **out);
/* Canonical form (for logs). */
OCLF_API const char *oclf_expr_canonical(const oclf_expr *expr);
/* The key tuning records use for an expression (op "expr", shape dims
 * rows, cols and form): a 52-bit hash of its canonical form with the
 * dtypes left out (the record's dtype is the first output's). Parses
 * `source` against the declarations without a context; bad source is
 * OCLF_INVALID_ARGUMENT as in oclf_expr_compile. */
OCLF_API oclf_status oclf_expr_form_id(const char *source, const oclf_expr_decl *inputs,
                                       unsigned n_inputs, const oclf_expr_decl *outputs,
                                       unsigned n_outputs, uint64_t *form);
OCLF_API void oclf_expr_release(oclf_expr *expr);

/* One input's value in a run: `buf` for arrays, `scalar` for scalars. */
typedef struct oclf_expr_arg {
    oclf_buf buf;
    float scalar;
} oclf_expr_arg;

/* Computes every output over rows x cols. inputs[i] matches the i-th
 * declared input, outputs[j] the j-th output. An output may be exactly the
 * elements of a matrix input of its dtype (in place) on either path; any
 * other overlap is rejected. choice: path FUSED (one kernel) or UNFUSED (a
 * kernel per operation, fp32 temporaries); parameters VEC (1, 2, 4, 8, 16:
 * elements per work-item), WGS (work-group size, a power of two up to the
 * device's limit) and ROWS (fused: rows per work-item, 1 to 65536; row
 * vectors are loaded once for them). Without a choice, a tuning
 * record for the expression's form and shape decides (see
 * oclf_expr_form_id), else fused with the device's defaults. A failure is
 * reported under the expression's context (oclf_last_error of the ctx
 * given to oclf_expr_compile); with a NULL expr, under NULL. */
OCLF_API oclf_status oclf_expr_run(const oclf_expr *expr, cl_command_queue queue, size_t rows,
                                   size_t cols, const oclf_expr_arg *inputs,
                                   const oclf_buf *outputs, uint64_t seed, uint64_t offset,
                                   const oclf_choice *choice, cl_uint num_events,
                                   const cl_event *wait_list, cl_event *event);

#ifdef __cplusplus
}
#endif
#endif /* OCLFUSE_H */
