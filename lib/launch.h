/*
 * What the ops share (launch.c): argument checks, kernel parameters and
 * the row structure, launches and chains, temporaries.
 */
#ifndef OCLF_LAUNCH_H
#define OCLF_LAUNCH_H

#include "dispatch.h"

/* ---- argument checks ------------------------------------------------------*/

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
/* A choice as dispatch checks it (a known path, at most OCLF_MAX_PARAMS
 * parameters; NULL: the default), for a call of one kernel and no
 * parameters that dispatches nothing: every path runs that kernel and
 * parameter names it does not use are ignored, as every op ignores them. */
OCLF_HIDDEN oclf_status oclf_check_choice(const oclf_context *ctx, const char *op,
                                          const oclf_choice *choice);

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
/* ---- kernel parameters ------------------------------------------------------
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

/* A paged KV cache (oclf_kv_cache) read into *out (its size checked as
 * every sized struct's; the caller goes on with *out) and checked:
 * handles, sizes, head_dim 1..256, both buffers large enough for num_blocks x block_size x heads x
 * head_dim elements of `elem` bytes, K and V disjoint. *k and *v: the two
 * ranges (a token stride of heads x head_dim). `what` names the caller:
 * "attention_paged: cache". */
OCLF_HIDDEN oclf_status oclf_check_kv_cache(const oclf_context *ctx, const char *what,
                                            const oclf_kv_cache *cache, size_t elem,
                                            oclf_operand *k, oclf_operand *v, oclf_kv_cache *out);

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
#endif
