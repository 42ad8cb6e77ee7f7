/*
 * Internal interfaces of liboclfuse. The layers, bottom up:
 *
 *   error.c      statuses, the per-thread last error
 *   params.c     parameter sets (a choice's parameters by name)
 *   device.c     device facts, fingerprint, quirk defines (the only file that
 *                knows vendors)
 *   log.c        the context's log callback
 *   context.c    oclf_context: options, stats; creation and destruction
 *                (the only file that calls upward, to free what the layers
 *                above keep in the context)
 *   program.c    source assembly, build, in-memory and on-disk program
 *                caches, pooled kernels
 *   oplist.c     the op list as data (names, database dims) from ops.def
 *   tunedb_parse.c  tuning-database text -> records (pure)
 *   tunedb.c     the per-context chain of databases, record matching, check
 *   tunedb_write.c  the locked, atomic merge-write
 *   dispatch.c   (op, hooks, dtype, shape, choice) -> path + parameters +
 *                the op's config: the decision cache and the one decision
 *                function; calls the hooks the op hands in, never an op
 *   tuning.c     explain / resolve / parameter check for tools, by op name:
 *                the table of every family's hooks
 *   launch.c     argument checks shared by every op, kernel enqueue helpers
 *   ops/<op>.c   one file per operation family
 */
#ifndef OCLF_INTERNAL_H
#define OCLF_INTERNAL_H

#define OCLF_BUILDING_LIBRARY 1
#include "oclfuse.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

#define OCLF_HIDDEN __attribute__((visibility("hidden")))

/* ---- errors --------------------------------------------------------------*/

/* Every public entry point that can fail names itself first (oclf_check_call
 * does it for the ops): oclf_fail then starts each message with that name. */
OCLF_HIDDEN void oclf_enter(const char *fn);
/* The name oclf_enter last recorded on this thread (NULL: none). */
OCLF_HIDDEN const char *oclf_entered(void);
/* Records "oclf_<entry>: " + `fmt` as this thread's last error for ctx and
 * returns status (a message that already names a public function is kept
 * as it is; an op's bare name in front becomes the public name). */
OCLF_HIDDEN oclf_status oclf_fail(const oclf_context *ctx, oclf_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Reads a caller's growable options struct (its first member `size_t
 * size`) into dst, this library's layout of dst_size bytes and alignment
 * `align`: size 0 means the first layout (first_size bytes), fields past a
 * smaller size take their defaults (zero), and a larger size is accepted
 * only when the bytes past dst_size are zero; a size that is not a multiple
 * of `align` is no layout's. src NULL: all defaults. dst->size = dst_size.
 * `what` names the argument in the error. */
OCLF_HIDDEN oclf_status oclf_options_read(const oclf_context *ctx, const char *what,
                                          const void *src, size_t first_size, void *dst,
                                          size_t dst_size, size_t align);
/* The first published layouts: these sizes never change. */
#define OCLF_CONTEXT_OPTIONS_FIRST_SIZE (offsetof(oclf_context_options, log_user) + sizeof(void *))
#define OCLF_L2_TOPK_OPTIONS_FIRST_SIZE                                                       \
    (offsetof(oclf_l2_topk_options, allowed) + sizeof(const oclf_buf *))
static inline oclf_status oclf_context_options_read(const oclf_context_options *src,
                                                    oclf_context_options *dst)
{
    return oclf_options_read(NULL, "options", src, OCLF_CONTEXT_OPTIONS_FIRST_SIZE, dst,
                             sizeof *dst, _Alignof(oclf_context_options));
}
static inline oclf_status oclf_l2_topk_options_read(const oclf_context *ctx,
                                                   const oclf_l2_topk_options *src,
                                                   oclf_l2_topk_options *dst)
{
    return oclf_options_read(ctx, "options", src, OCLF_L2_TOPK_OPTIONS_FIRST_SIZE, dst,
                             sizeof *dst, _Alignof(oclf_l2_topk_options));
}
/* Maps an OpenCL error to a status and records "what: CL_NAME". */
OCLF_HIDDEN oclf_status oclf_fail_cl(const oclf_context *ctx, cl_int err, const char *what);
OCLF_HIDDEN const char *oclf_cl_error_name(cl_int err);

/* ---- device facts (device.c) ----------------------------------------------*/

typedef struct oclf_device_info {
    char vendor[128];
    char name[256];
    char driver[128];
    char platform_version[256];
    char device_version[128];
    cl_device_type type;
    cl_uint compute_units;
    size_t max_wgs;
    /* A lower bound on every kernel's own work-group limit than the driver
     * reports (0: none); a test override (OCLF_KERNEL_WGS_CAP). */
    size_t kernel_wgs_cap;
    cl_ulong local_mem;
    cl_ulong global_mem;
    cl_ulong max_alloc;
    cl_uint opencl_c_major, opencl_c_minor;
    bool fp16, fp64, subgroups, subgroup_shuffle;
    bool local_is_global; /* no dedicated local memory (CPUs) */
    /* The device compiler miscomputes a work-group kernel whose lanes run
     * vector loops over a head split at a width VEC does not divide, after
     * a global barrier (the fused item-structure qk_norm_rope with LAYOUT
     * 1, VEC >= 4 and R/2 not a multiple of VEC: wrong heads and stores
     * outside the buffer, while a simulator runs the same kernel right and
     * race-free). Ops keep that combination off such a device. */
    /* (The head norm of both qk_norm_rope paths likewise with LAYOUT 1,
     * VEC >= 2 and a head_dim VEC does not divide.) */
    bool split_tail_miscompile;
    /* The compiler takes _Float16 vectors and converts float vectors to
     * them in hardware (clang for a CPU with F16C), so f16 stores need not
     * go through vstore_halfN_rte (cl/common.h, OCLF_HAS_FLOAT16). */
    bool float16;
    /* Vector lanes multiply 32 x 32 -> 64 bits in one SIMD instruction per
     * several lanes (CPUs: x86 vpmuludq, Arm umull), so generated kernels
     * keep Philox words in 64-bit lanes; a GPU computes the high half with
     * its own mul_hi and would spend twice the registers on 64-bit lanes
     * (AMD's compiler spilled them at VEC 8). OCLF_LANE_MUL64 in expr
     * programs. Off where the device is also a GPU (oclgrind). */
    bool lane_mul64;
    /* cl_khr_device_uuid: some vendors version their compiler apart from
     * CL_DRIVER_VERSION, so the program cache keys on these too. */
    /* Work-items that execute in lockstep (a warp or wavefront) where the
     * driver says so, else 32: a GPU work-group narrower than this leaves
     * lanes idle. */
    cl_uint simd_width;
    /* How a kernel reduces across the work-items of a sub-group
     * (OCLF_SUBGROUP_FORM): 0 local memory and barriers (any device), 1
     * the sub-group shuffle functions of cl_khr_subgroup_shuffle or
     * cl_intel_subgroups (subgroup_intel), 2 warp shuffles in inline PTX
     * (compute capability 8.0 or newer, cl/mma.h), 3 the wavefront's
     * permute instruction (a device that reports its wavefront width). */
    int subgroup_form;
    bool subgroup_intel;
    /* The sub-group width the form guarantees (OCLF_SUBGROUP_WIDTH): the
     * most work-items one reduction may span; with form 0 the lockstep
     * width, since local memory spans any. */
    cl_uint subgroup_width;
    bool has_uuid;
    unsigned char device_uuid[16], driver_uuid[16];
} oclf_device_info;

OCLF_HIDDEN oclf_status oclf_device_query(const oclf_context *ctx, cl_device_id dev,
                                          oclf_device_info *out);
/* "vendor|name|driver|type" */
OCLF_HIDDEN void oclf_device_fingerprint(const oclf_device_info *info, char *buf, size_t len);
/* -D options naming this device's quirks, prepended to every build. */
OCLF_HIDDEN void oclf_device_quirk_options(const oclf_device_info *info, char *buf, size_t len);
OCLF_HIDDEN const char *oclf_device_type_name(cl_device_type type);

/* ---- context ---------------------------------------------------------------*/

typedef struct oclf_program oclf_program;
struct oclf_tunedb;
struct oclf_decisions;
/* source: a cl/ file name, or a generated program's key with its text in
 * `generated` (NULL for files). */
typedef void (*oclf_program_sink_fn)(void *user, const char *source, const char *generated,
                                     const char *options);

struct oclf_context {
    cl_context cl;
    cl_device_id device;
    oclf_device_info info;
    char fingerprint[600];
    char quirk_options[256];

    char *kernel_dir; /* NULL: embedded sources */
    char *cache_dir;  /* NULL: no disk cache */
    char *tuning_db;  /* NULL: none given */
    int no_tuning_db;
    int validate;
    oclf_log_fn log;
    void *log_user;

    oclf_program_sink_fn program_sink; /* see oclf_context_set_program_sink */
    void *program_sink_user;

    pthread_mutex_t lock; /* guards programs, tunedb, decisions */
    pthread_cond_t built; /* a program finished building */
    oclf_program *programs;
    struct oclf_tunedb *tunedb;       /* the loaded chain (tunedb.c) */
    struct oclf_decisions *decisions; /* the decision cache (dispatch.c) */

    atomic_uint_fast64_t n_compiled, n_from_disk, n_hits, n_rejected, n_enqueued;
    atomic_uint_fast64_t n_tune_lookups, n_tune_hits, n_db_errors;
};

/* Sends a line to the context's log callback, if any (log.c). */
OCLF_HIDDEN void oclf_log(const oclf_context *ctx, oclf_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- programs and kernels (program.c) --------------------------------------*/

/* The program built from cl/<source> (after common.h) with `options`
 * (-D parameters). Cached in memory for the context's life and on disk. */
OCLF_HIDDEN oclf_status oclf_program_get(oclf_context *ctx, const char *source,
                                         const char *options, oclf_program **out);
/* A program from generated text (after common.h). `key` stands for the
 * text in the in-memory cache: equal keys must mean equal text. The disk
 * cache hashes the text itself. */
OCLF_HIDDEN oclf_status oclf_program_get_generated(oclf_context *ctx, const char *key,
                                                   const char *text, const char *options,
                                                   oclf_program **out);
/* For the cross-compile suite (tests/gpu_variants.c): while a sink is set,
 * oclf_program_get hands each (source, options) it is asked for to the sink
 * and builds nothing (OCLF_UNSUPPORTED; oclf_expr_compile succeeds without
 * its eager build, so a listing can go on to oclf_expr_run), so an op's deep validation lists
 * the exact programs a parameter set needs without a device compiler. */
OCLF_HIDDEN void oclf_context_set_program_sink(oclf_context *ctx, oclf_program_sink_fn fn,
                                               void *user);
/* A kernel object from the program's pool; give it back with
 * oclf_kernel_put once enqueued (OpenCL copies arguments at enqueue, so the
 * object can be reused at once; pooling keeps clSetKernelArg races away from
 * concurrent callers and allocation out of steady-state dispatch). */
/* A debug-level log line naming the kernel a launch runs and its
 * program's source and options (which build of a source ran). */
OCLF_HIDDEN void oclf_program_log_launch(const oclf_context *ctx, const oclf_program *prog,
                                         const char *kernel);
OCLF_HIDDEN oclf_status oclf_kernel_get(oclf_context *ctx, oclf_program *prog, const char *name,
                                        cl_kernel *out);
OCLF_HIDDEN void oclf_kernel_put(oclf_program *prog, const char *name, cl_kernel kernel);
OCLF_HIDDEN void oclf_programs_release(oclf_context *ctx);
/* Source text of cl/<name>, embedded or from the kernel folder (malloc'd). */
OCLF_HIDDEN oclf_status oclf_source_load(oclf_context *ctx, const char *name, char **text,
                                         size_t *len);

/* Embedded sources (generated by tools/embed_cl.py). */
typedef struct oclf_embedded_source {
    const char *name;
    const unsigned char *data;
    size_t size;
} oclf_embedded_source;
extern const oclf_embedded_source oclf_embedded_sources[];
extern const size_t oclf_embedded_source_count;

/* 128-bit hash for cache keys (two independent 64-bit lanes). */
typedef struct oclf_hash {
    uint64_t a, b;
} oclf_hash;
/* Program cache files (lib/cache_format.c): header, then the payload. */
/* Bump when the file layout or anything that feeds the key changes. */
#define OCLF_CACHE_FORMAT 1u
#define OCLF_CACHE_MAX_BYTES (512u << 20)
typedef struct oclf_cache_header {
    char magic[8];
    uint32_t format, reserved;
    uint64_t key_a, key_b;
    uint64_t size;
    uint64_t sum_a, sum_b;
} oclf_cache_header;
OCLF_HIDDEN extern const char oclf_cache_magic[8];
/* Checks a whole cache file held in memory; NULL when valid (then *payload
 * points into bytes), else why not. Pure: no I/O, no allocation. */
OCLF_HIDDEN const char *oclf_cache_parse(const unsigned char *bytes, size_t len,
                                         const oclf_hash *key, const unsigned char **payload,
                                         size_t *payload_size);
OCLF_HIDDEN void oclf_hash_init(oclf_hash *h);
OCLF_HIDDEN void oclf_hash_update(oclf_hash *h, const void *data, size_t len);
/* Adds a string and its terminator, so ("ab","c") != ("a","bc"). */
OCLF_HIDDEN void oclf_hash_str(oclf_hash *h, const char *s);

/* ---- the op list (oplist.c) --------------------------------------------------*/

/* Op identifiers shared by dispatch, the tuning database, bench and tuner. */
typedef enum oclf_op {
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) OCLF_OP_##ID,
#include "ops.def"
#undef OCLF_OP
    OCLF_OP_COUNT_
} oclf_op;

/* An op's name and the dims the tuning database keys its shape by. */
typedef struct oclf_op_key {
    const char *name;
    unsigned ndims;
    const char *dims[4];
} oclf_op_key;
/* NULL when op is not one. */
OCLF_HIDDEN const oclf_op_key *oclf_op_key_get(oclf_op op);
OCLF_HIDDEN const char *oclf_op_name(oclf_op op);
/* OCLF_OP_COUNT_ when unknown. */
OCLF_HIDDEN oclf_op oclf_op_from_name(const char *name);

/* A shape as the database keys it: up to 4 named extents. */
typedef struct oclf_shape {
    uint64_t dim[4];
} oclf_shape;

/* ---- tuning database (tunedb_parse.c, tunedb.c, tunedb_write.c) ----------------*/

/* A candidate record for one call, with where it came from. */
typedef struct oclf_tune_candidate {
    oclf_path path;     /* FUSED or UNFUSED */
    oclf_params params; /* the record's, to lay over the heuristic's */
    uint64_t dim[4];    /* the shape it was tuned for */
    int source;         /* index in the context's chain */
    int record;         /* index in that source's records */
    int level;          /* device match: 0 exact .. 3 type only */
    double distance;    /* shape distance (log2 units) */
} oclf_tune_candidate;

/* Loads the chain once per context (reporting damaged files), then writes
 * up to `max` matching records for (op, dtype, shape, path) in order of
 * preference. `path` AUTO takes each record's choice; FUSED or UNFUSED takes
 * the record's choice or alternative for that path. */
OCLF_HIDDEN int oclf_tune_candidates(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                     const oclf_shape *shape, oclf_path path,
                                     oclf_tune_candidate *out, int max);
/* "per-machine database /x/tuning.json" for a candidate's source. */
OCLF_HIDDEN const char *oclf_tune_source_name(const oclf_context *ctx, int source);
/* Drops the loaded chain. */
OCLF_HIDDEN void oclf_tunedb_free(oclf_context *ctx);

/* Parses a tuning-database document held in memory (the fuzzing entry). */
OCLF_HIDDEN oclf_status oclf_tunedb_parse_text(const char *text, size_t len, size_t *records);

/* ---- dispatch (dispatch.c) --------------------------------------------------*/

/* An op's typed configuration (its own struct, parsed from the parameters
 * by its validate hook), kept beside the parameters so that a call served
 * by the decision cache parses nothing. Each op checks that its struct
 * fits. */
typedef union oclf_op_cfg {
    int64_t align;
    unsigned char bytes[256];
} oclf_op_cfg;
#define OCLF_CFG_FITS(type) \
    _Static_assert(sizeof(type) <= sizeof(oclf_op_cfg), #type " fits oclf_op_cfg")

typedef struct oclf_resolved {
    oclf_path path; /* FUSED or UNFUSED, never AUTO */
    oclf_params params;
    int has_cfg;     /* cfg is the op's config for exactly (path, params) */
    /* WGS is the heuristic's (no record, no caller named it): an op whose
     * built kernel takes fewer work-items may lower it instead of failing. */
    int wgs_default;
    oclf_op_cfg cfg;
} oclf_resolved;

/* Fills the heuristic parameters for (op, path) on this device and shape. */
typedef void (*oclf_heuristic_fn)(const oclf_context *ctx, oclf_dtype dtype,
                                  const oclf_shape *shape, oclf_path path, oclf_params *out);
/* Checks that `r` can launch for this shape on this device (recording why
 * not with oclf_fail) and, on success, writes the op's typed config into
 * *cfg (may be NULL). `deep`: also build the program and compare the
 * kernels' CL_KERNEL_WORK_GROUP_SIZE with the work-group size; dispatch asks
 * for it once per tuning record it takes, never in steady state. A config
 * checked here holds for every call of the shape: where a call's own
 * arguments matter (norm weights), the check assumes the most demanding. */
typedef oclf_status (*oclf_validate_fn)(oclf_context *ctx, oclf_op op, oclf_dtype dtype,
                                        const oclf_shape *shape, const oclf_resolved *r,
                                        int deep, oclf_op_cfg *cfg);

/* What dispatch calls of an op, handed in by the op with each call. */
typedef struct oclf_op_hooks {
    oclf_heuristic_fn heuristic;
    oclf_validate_fn validate;
} oclf_op_hooks;
/* Each family's hooks (lib/ops/<family>.c), named by ops.def's column. */
#define OCLF_OP(ID, name, family, ndims, d0, d1, d2, d3) \
    OCLF_HIDDEN extern const oclf_op_hooks oclf_##family##_hooks;
#include "ops.def"
#undef OCLF_OP
/* Any op's hooks (tuning.c, the table of every family); NULL when op is
 * not one. */
OCLF_HIDDEN const oclf_op_hooks *oclf_op_hooks_get(oclf_op op);

/* Decides the path and parameters of one call. Candidates, in order: the
 * tuning records that match (context, per-machine, built-in database; by
 * device match level, then shape distance), each validated by the op and
 * skipped when it cannot launch, then the heuristic. The caller's explicit
 * parameters are laid over the winner. The result per (op, dtype, shape,
 * path) is cached in the context with the op's typed config, so steady
 * state is one hash probe: out->has_cfg says the config came with it (never
 * when the caller passed parameters, which the op then parses). */
OCLF_HIDDEN oclf_status oclf_dispatch_resolve(oclf_context *ctx, oclf_op op,
                                              const oclf_op_hooks *hooks, oclf_dtype dtype,
                                              const oclf_shape *shape, const oclf_choice *choice,
                                              oclf_resolved *out);
/* Text a decision writes when asked to explain itself (truncated to len). */
typedef struct oclf_trace {
    char *buf;
    size_t len, used;
} oclf_trace;
/* The one decision (a cache miss): the first record that validates, else
 * the heuristic; *record is 1 when a record won. With `t`, says what it
 * takes and what it skips and why. */
OCLF_HIDDEN void oclf_dispatch_decide(oclf_context *ctx, oclf_op op, const oclf_op_hooks *hooks,
                                      oclf_dtype dtype, const oclf_shape *shape, oclf_path path,
                                      oclf_resolved *out, int *record, oclf_trace *t);
/* The heuristic's answer for `path` (AUTO: fused). */
OCLF_HIDDEN void oclf_dispatch_heuristic(oclf_context *ctx, const oclf_op_hooks *hooks,
                                         oclf_dtype dtype, const oclf_shape *shape,
                                         oclf_path path, oclf_resolved *out);
/* A parameter set as dispatch takes a tuning record: laid over the
 * heuristic for `path` (FUSED or UNFUSED; `point` may be NULL), then
 * validated by the op, with `deep` as the validate hook takes it. */
OCLF_HIDDEN oclf_status oclf_dispatch_check(oclf_context *ctx, oclf_op op,
                                            const oclf_op_hooks *hooks, oclf_dtype dtype,
                                            const oclf_shape *shape, oclf_path path,
                                            const oclf_params *point, int deep,
                                            oclf_resolved *r);
/* Drops the decision cache. */
OCLF_HIDDEN void oclf_dispatch_free(oclf_context *ctx);

/* ---- argument checks and launches (launch.c) --------------------------------*/

/* A checked 2-D operand: stride resolved, byte range known. */
typedef struct oclf_operand {
    cl_mem mem;
    size_t offset, stride;
    size_t lo, hi; /* byte range [lo, hi); lo == hi when empty */
} oclf_operand;

OCLF_HIDDEN oclf_status oclf_check_dtype(const oclf_context *ctx, oclf_dtype dtype);
/* Checks handle, stride >= cols, and that rows x cols at offset/stride fits
 * the buffer (CL_MEM_SIZE); `what` names the argument in the error. */
OCLF_HIDDEN oclf_status oclf_check_2d(const oclf_context *ctx, const char *what, oclf_buf buf,
                                      size_t rows, size_t cols, size_t elem, oclf_operand *out);
/* A vector of n elements: its stride is ignored, as the header promises. */
OCLF_HIDDEN oclf_status oclf_check_vector(const oclf_context *ctx, const char *what, oclf_buf buf,
                                          size_t n, size_t elem, oclf_operand *out);
/* 1 when the two ranges share bytes of the same buffer. */
OCLF_HIDDEN int oclf_overlap(const oclf_operand *a, const oclf_operand *b);
/* Elements an operand touches in each row (or token) of `stride`
 * elements: `count` blocks of `width` elements, `step` apart (the heads of
 * a token; one block of a row's columns). */
typedef struct oclf_blocks {
    size_t count, step, width;
} oclf_blocks;
/* 1 when two operands that share a cl_mem and a row stride can never share
 * an element: within each period of `stride` elements their blocks never
 * meet (column blocks of one packed tensor, such as the q and k views of a
 * qkv buffer, or q and k heads interleaved, overlap as byte ranges but not
 * as elements). 0 when this cannot be shown; callers then use
 * oclf_overlap. */
OCLF_HIDDEN int oclf_blocks_disjoint(const oclf_operand *a, oclf_blocks ab, const oclf_operand *b,
                                     oclf_blocks bb);
/* 1 when the two are exactly the same elements. */
OCLF_HIDDEN int oclf_same_range(const oclf_operand *a, const oclf_operand *b);
/* What every entry point checks first: a context (else the message goes to
 * oclf_last_error(NULL)), *event cleared, the queue and wait list, the
 * dtype. `op` names the entry point in the message. */
OCLF_HIDDEN oclf_status oclf_check_call(const oclf_context *ctx, const char *op,
                                        cl_command_queue queue, cl_uint num_events,
                                        const cl_event *wait_list, oclf_dtype dtype,
                                        cl_event *event);
OCLF_HIDDEN oclf_status oclf_check_queue(const oclf_context *ctx, cl_command_queue queue,
                                         cl_uint num_events, const cl_event *wait_list);

/* Deep validation: CL_DEVICE_MAX_WORK_GROUP_SIZE is an upper bound; a
 * kernel's register or local-memory use can lower its own limit, which only
 * the built kernel reports. OCLF_OUT_OF_RESOURCES when `wgs` exceeds the
 * limit of any of the n kernels. */
OCLF_HIDDEN oclf_status oclf_check_kernel_wgs(oclf_context *ctx, oclf_program *prog,
                                              const char *const *names, int n, size_t wgs);
/* As oclf_check_kernel_wgs, but with `lower` set a *wgs above a kernel's
 * limit is halved until it fits (a power of two stays one). */
OCLF_HIDDEN oclf_status oclf_fit_kernel_wgs(oclf_context *ctx, oclf_program *prog,
                                            const char *const *names, int n, size_t *wgs,
                                            int lower);
/* A built kernel's CL_KERNEL_WORK_GROUP_SIZE and
 * CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE (its lockstep width as the
 * driver sees it). */
OCLF_HIDDEN oclf_status oclf_kernel_group_info(oclf_context *ctx, oclf_program *prog,
                                               const char *name, size_t *max_wgs,
                                               size_t *multiple);
/* ---- kernel parameters (launch.c) ---------------------------------------------
 *
 * Each op declares its parameters once, as a table of specs: the name (as
 * in oclf_params and the tuning database), the range, whether only powers
 * of two are allowed, and whether the value is compiled into the program
 * (-DOCLF_<NAME>: each value its own program) or passed at run time (a
 * kernel argument or the launch shape). One reader checks a parameter set
 * against the table, one builder makes the program's -D options from it;
 * the op adds only the rules that relate parameters to each other and to
 * the shape. The tuner asks the op's validation through dispatch
 * (oclf_tuning_params_valid), so no rule is written twice. */
typedef enum oclf_param_use {
    OCLF_PARAM_DEFINE, /* -DOCLF_<NAME>=value in the program's options */
    OCLF_PARAM_ARG     /* a run-time argument or the launch shape */
} oclf_param_use;
/* `hi` of a work-group size: the device's limit as the context plans with
 * it (oclf_device_info.max_wgs). */
#define OCLF_PARAM_MAX_WGS (-1)
typedef struct oclf_param_spec {
    const char *name;
    int64_t lo, hi;
    int pow2; /* only powers of two in [lo, hi] */
    oclf_param_use use;
} oclf_param_spec;
/* The row structure every row-wise kernel shares (cl/common.h): LAYOUT (0 a
 * row per work-item, 1 a work-group per row), WGS (a power of two up to the
 * device limit) and VEC (1, 2, 4, 8 or 16), all compiled in. */
#define OCLF_ROW_PARAM_SPECS                                                               \
    {"LAYOUT", 0, 1, 0, OCLF_PARAM_DEFINE}, {"WGS", 1, OCLF_PARAM_MAX_WGS, 1, OCLF_PARAM_DEFINE}, \
        {"VEC", 1, 16, 1, OCLF_PARAM_DEFINE}
/* The row structure with a staged form: STAGE (0 or 1; compiled in or a
 * kernel argument, as the op's kernels take it) and ROWS (rows, or tokens,
 * per work-group: 1..1024, a kernel argument), indexed by the enum below. */
#define OCLF_STAGED_ROW_PARAM_SPECS(stage_use) \
    OCLF_ROW_PARAM_SPECS, {"STAGE", 0, 1, 0, stage_use}, {"ROWS", 1, 1024, 0, OCLF_PARAM_ARG}
enum { OCLF_P_LAYOUT, OCLF_P_WGS, OCLF_P_VEC, OCLF_P_STAGE, OCLF_P_ROWS, OCLF_STAGED_ROW_NPARAMS };
/* Reads the n parameters of `spec` from p into v (in spec order): each
 * present and within its range, then each power of two where the spec says
 * so; the first that is not is recorded with oclf_fail. */
OCLF_HIDDEN oclf_status oclf_params_read(const oclf_context *ctx, const oclf_param_spec *spec,
                                         unsigned n, const oclf_params *p, int64_t *v);
/* Room for a program's parameter options (oclf_param_defines). */
#define OCLF_DEFINES_MAX 160
/* "-DOCLF_<NAME>=<v> ..." for the specs compiled into the program, in spec
 * order. */
OCLF_HIDDEN void oclf_param_defines(char *buf, size_t len, const oclf_param_spec *spec,
                                    unsigned n, const int64_t *v);
/* A program's whole options: "-DOCLF_DTYPE=<dtype>", then
 * "-DOCLF_CDTYPE=<cdtype>" when cdtype >= 0, then `defines`. */
OCLF_HIDDEN void oclf_program_options(char *buf, size_t len, oclf_dtype dtype, int cdtype,
                                      const char *defines);
#define OCLF_OPTIONS_MAX 224
/* 1 when vec > 1 and every operand's element offset and row stride are
 * multiples of vec: each row starts on a naturally aligned vector, and a
 * program whose vector positions within a row are multiples of vec may be
 * built with OCLF_ALIGNED (cl/common.h: one wide access per vector on GPUs
 * rather than element-sized pieces). Absent operands (offset and stride 0)
 * qualify. The buffers themselves start at CL_DEVICE_MEM_BASE_ADDR_ALIGN,
 * which is at least 128 bytes. */
OCLF_HIDDEN int oclf_rows_aligned(int vec, const oclf_operand *ops, unsigned n);
/* oclf_program_options with " -DOCLF_ALIGNED=1" added when `aligned`. */
OCLF_HIDDEN void oclf_program_options_aligned(char *buf, size_t len, oclf_dtype dtype, int cdtype,
                                              const char *defines, int aligned);
/* For deep validation, before the plain build: while a program sink is set
 * (the cross-compile suite's list) and vec > 1, names the aligned build of
 * the program to it. Otherwise nothing: a call compiles the aligned build
 * only where its operands take it, and it shares the plain build's limits. */
OCLF_HIDDEN void oclf_list_aligned_variant(oclf_context *ctx, const char *source,
                                           oclf_dtype dtype, int cdtype, const char *defines,
                                           int vec);

/* Default row structure for rows of `width` elements: on a CPU a row per
 * work-item, cpu_wgs of them per group, 16-wide vectors; on a GPU a
 * work-group per row of gpu_min_wgs (at least the device's lockstep width)
 * up to 256 work-items covering the row with
 * 16-byte vectors. Writes LAYOUT, WGS and VEC; returns the WGS chosen. */
OCLF_HIDDEN size_t oclf_row_heuristic(const oclf_context *ctx, oclf_dtype dtype, uint64_t width,
                                      size_t cpu_wgs, size_t gpu_min_wgs, oclf_params *out);
/* The row structure read from params against `spec` (n specs, the row
 * specs OCLF_ROW_PARAM_SPECS first: LAYOUT, WGS, VEC), with every
 * compiled-in parameter's -D options, for the ops whose whole config it is. */
typedef struct oclf_row_cfg {
    int layout, wgs, vec;
    char defines[OCLF_DEFINES_MAX];
} oclf_row_cfg;
OCLF_HIDDEN oclf_status oclf_row_config(const oclf_context *ctx, const oclf_param_spec *spec,
                                        unsigned n, const oclf_params *p, oclf_row_cfg *cfg);
/* The same for a resolved choice: its cached config when dispatch has one,
 * else read from its parameters. */
OCLF_HIDDEN oclf_status oclf_row_config_resolved(const oclf_context *ctx,
                                                 const oclf_param_spec *spec, unsigned n,
                                                 const oclf_resolved *r, oclf_row_cfg *cfg);
/* A normalized row: cols above 0 and within the kernels' 32-bit count, eps
 * finite and >= 0 (the forward norms and their backward). */
OCLF_HIDDEN oclf_status oclf_check_norm_row(const oclf_context *ctx, const char *op, size_t cols,
                                            float eps);
/* The validate hook of an op whose whole config is a row structure: the
 * config read from r's parameters into *out (may be NULL) and, when `deep`,
 * `source` built with it and the n kernels the path launches checked
 * against the work-group size. */
OCLF_HIDDEN oclf_status oclf_row_validate(oclf_context *ctx, const oclf_param_spec *spec,
                                          unsigned nspec, oclf_dtype dtype,
                                          const oclf_resolved *r, int deep, const char *source,
                                          const char *const *kernels, int n, oclf_op_cfg *out);


/* Kernel argument list, set in order by oclf_enqueue. */
typedef struct oclf_arg {
    size_t size;
    const void *value; /* NULL with size > 0: dynamic local memory */
} oclf_arg;
#define OCLF_ARG(x) ((oclf_arg){sizeof(x), &(x)})
/* The length of an argument array, so a list and its count cannot part. */
#define OCLF_NARGS(a) ((unsigned)(sizeof(a) / sizeof((a)[0])))
#define OCLF_ARG_LOCAL(bytes) ((oclf_arg){(bytes), NULL})

/* One launch of `name` from `prog` over a 1-D range. The wait list applies
 * to this launch; `event` (may be NULL) receives its completion. */
OCLF_HIDDEN oclf_status oclf_enqueue(oclf_context *ctx, cl_command_queue queue, oclf_program *prog,
                                     const char *name, const oclf_arg *args, unsigned nargs,
                                     size_t global, size_t local, cl_uint num_events,
                                     const cl_event *wait_list, cl_event *event);

/* A chain of launches in one call: each waits on the previous one (the
 * caller's queue may be out of order), the first on the caller's wait list,
 * and the last produces the caller's event. */
typedef struct oclf_chain {
    oclf_context *ctx;
    cl_command_queue queue;
    cl_uint num_events;
    const cl_event *wait_list;
    cl_event prev;
} oclf_chain;
OCLF_HIDDEN void oclf_chain_begin(oclf_chain *c, oclf_context *ctx, cl_command_queue queue,
                                  cl_uint num_events, const cl_event *wait_list);
OCLF_HIDDEN oclf_status oclf_chain_launch(oclf_chain *c, oclf_program *prog, const char *name,
                                          const oclf_arg *args, unsigned nargs, size_t global,
                                          size_t local);
/* Hands the last event to *event (or releases it). Always call once. */
OCLF_HIDDEN void oclf_chain_end(oclf_chain *c, cl_event *event);

/* The GEMM library's row-major C = alpha A op(B) (op: B^T when trans_b)
 * + 0 C at the given element offsets and leading dimensions, as the next
 * link of a chain: ordered after the chain so far by a barrier (the
 * library takes no wait list), its event the chain's next. `op` names the
 * caller in an error. */
OCLF_HIDDEN oclf_status oclf_chain_sgemm(oclf_chain *c, const char *op, int trans_b, size_t m,
                                         size_t n, size_t k, float alpha, cl_mem a, size_t ao,
                                         size_t lda, cl_mem b, size_t bo, size_t ldb, cl_mem cm,
                                         size_t co, size_t ldc);

/* A set of heads (oclf_heads) of head_dim elements over `tokens` tokens,
 * checked as a tokens x extent operand (extent: from the first head's
 * start to the last head's end); *blocks: its heads in each token, for
 * oclf_blocks_disjoint; *head_stride: the stride resolved. */
OCLF_HIDDEN oclf_status oclf_check_heads(const oclf_context *ctx, const char *what, oclf_heads h,
                                         size_t tokens, size_t hd, size_t elem,
                                         oclf_operand *out, oclf_blocks *blocks,
                                         size_t *head_stride);

/* A paged KV cache (oclf_kv_cache) checked: handles, sizes, head_dim
 * 1..256, both buffers large enough for num_blocks x block_size x heads x
 * head_dim elements of `elem` bytes, K and V disjoint. *k and *v: the two
 * ranges (a token stride of heads x head_dim). `what` names the caller:
 * "attention_paged: cache". */
OCLF_HIDDEN oclf_status oclf_check_kv_cache(const oclf_context *ctx, const char *what,
                                            const oclf_kv_cache *cache, size_t elem,
                                            oclf_operand *k, oclf_operand *v);

/* Zero rows: nothing to do, but the caller's event must still exist. */
OCLF_HIDDEN oclf_status oclf_enqueue_marker(oclf_context *ctx, cl_command_queue queue,
                                            cl_uint num_events, const cl_event *wait_list,
                                            cl_event *event);

/* A device temporary that lives until the commands using it complete
 * (OpenCL defers the release of a buffer still in use). */
OCLF_HIDDEN oclf_status oclf_temp_buffer(oclf_context *ctx, size_t bytes, cl_mem *out);

/* The most work-items one launch asks for: some runtimes take the global
 * size as 32 bits and reject 2^32 or more (ROCm). Row kernels whose
 * work-groups loop over rows fit larger shapes by giving each group more
 * rows; the others refuse the call. */
#define OCLF_MAX_LAUNCH_ITEMS ((size_t)UINT32_MAX)

static inline size_t oclf_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

#endif /* OCLF_INTERNAL_H */
