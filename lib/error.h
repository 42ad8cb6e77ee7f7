/*
 * Errors and options structs (error.c): the bottom layer every file
 * of the library includes, with the public header.
 */
#ifndef OCLF_ERROR_H
#define OCLF_ERROR_H

#define OCLF_BUILDING_LIBRARY 1
#include "oclfuse.h"

#include <stdarg.h>
#include <stddef.h>

#define OCLF_HIDDEN __attribute__((visibility("hidden")))

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
#endif
