/* Statuses, the per-thread last error, versions, dtypes and parameter sets. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* The last error is per thread, so concurrent callers on one context never
 * see each other's messages; it remembers which context it belongs to. */
static _Thread_local const oclf_context *last_ctx;
static _Thread_local char last_msg[8192];
/* The public function running on this thread, with or without its "oclf_"
 * (op names such as "rms_norm" come from oclf_check_call). */
static _Thread_local const char *entry;

void oclf_enter(const char *fn) { entry = fn; }
const char *oclf_entered(void) { return entry; }

/* Appends s to last_msg at *at, truncated to fit. */
static void append(size_t *at, const char *s)
{
    size_t n = strlen(s);
    if (n > sizeof last_msg - 1 - *at)
        n = sizeof last_msg - 1 - *at;
    memcpy(last_msg + *at, s, n);
    *at += n;
    last_msg[*at] = '\0';
}

oclf_status oclf_fail(const oclf_context *ctx, oclf_status status, const char *fmt, ...)
{
    /* Formatted apart from last_msg: an argument may be the last error. */
    char msg[sizeof last_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Every message starts with the public function's name: kept when the
     * message already names a public function ("oclf_l2_topk_sharded:
     * shard 2: ..."), put in place of the op's bare name ("rms_norm: ..."),
     * else put in front. */
    const char *name = entry;
    if (name && strncmp(name, "oclf_", 5) == 0)
        name += 5;
    size_t at = 0;
    const char *body = msg;
    if (name && strncmp(msg, "oclf_", 5) != 0) {
        const size_t n = strlen(name);
        if (strncmp(msg, name, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
            body += n + 2;
        append(&at, "oclf_");
        append(&at, name);
        append(&at, ": ");
    }
    append(&at, body);
    last_ctx = ctx;
    return status;
}

oclf_status oclf_options_read(const oclf_context *ctx, const char *what, const void *src,
                              size_t first_size, void *dst, size_t dst_size, size_t align)
{
    memset(dst, 0, dst_size);
    size_t size = first_size;
    if (src) {
        memcpy(&size, src, sizeof size);
        if (size == 0)
            size = first_size;
    }
    /* Every layout's sizeof is a multiple of its alignment, so a size that
     * is not could end inside a field. */
    if (size < sizeof size || size % align)
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "%s.size %zu is not the size of a layout of this struct (a multiple of "
                         "%zu, at least %zu)",
                         what, size, align, sizeof size);
    if (size > dst_size) {
        /* A newer caller's layout: fine while it sets none of the fields
         * this library does not know. */
        const unsigned char *tail = (const unsigned char *)src + dst_size;
        for (size_t i = 0; i < size - dst_size; i++)
            if (tail[i])
                return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                                 "%s.size is %zu bytes, beyond this library's %zu, and byte %zu "
                                 "is set: a field of a newer version that this one cannot honour",
                                 what, size, dst_size, dst_size + i);
        size = dst_size;
    }
    if (src)
        memcpy(dst, src, size);
    memcpy(dst, &dst_size, sizeof dst_size);
    return OCLF_SUCCESS;
}

const char *oclf_last_error(const oclf_context *ctx)
{
    return last_ctx == ctx ? last_msg : "";
}

const char *oclf_cl_error_name(cl_int err)
{
    switch (err) {
#define E(x) case x: return #x;
        E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE)
        E(CL_COMPILER_NOT_AVAILABLE) E(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY) E(CL_PROFILING_INFO_NOT_AVAILABLE)
        E(CL_MEM_COPY_OVERLAP) E(CL_IMAGE_FORMAT_MISMATCH) E(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE) E(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) E(CL_COMPILE_PROGRAM_FAILURE)
        E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE) E(CL_DEVICE_PARTITION_FAILED)
        E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) E(CL_INVALID_VALUE) E(CL_INVALID_DEVICE_TYPE)
        E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
        E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
        E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) E(CL_INVALID_IMAGE_SIZE)
        E(CL_INVALID_SAMPLER) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS)
        E(CL_INVALID_PROGRAM) E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME)
        E(CL_INVALID_KERNEL_DEFINITION) E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX)
        E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE) E(CL_INVALID_KERNEL_ARGS)
        E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE) E(CL_INVALID_WORK_ITEM_SIZE)
        E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST) E(CL_INVALID_EVENT)
        E(CL_INVALID_OPERATION) E(CL_INVALID_GL_OBJECT) E(CL_INVALID_BUFFER_SIZE)
        E(CL_INVALID_MIP_LEVEL) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
        E(CL_INVALID_IMAGE_DESCRIPTOR) E(CL_INVALID_COMPILER_OPTIONS) E(CL_INVALID_LINKER_OPTIONS)
        E(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef E
    default: return "unknown OpenCL error";
    }
}

oclf_status oclf_fail_cl(const oclf_context *ctx, cl_int err, const char *what)
{
    oclf_status st = OCLF_OPENCL_ERROR;
    if (err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY ||
        err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_INVALID_BUFFER_SIZE)
        st = OCLF_OUT_OF_RESOURCES;
    return oclf_fail(ctx, st, "%s failed: %s (%d)", what, oclf_cl_error_name(err), (int)err);
}

const char *oclf_status_string(oclf_status status)
{
    switch (status) {
    case OCLF_SUCCESS: return "OCLF_SUCCESS";
    case OCLF_INVALID_ARGUMENT: return "OCLF_INVALID_ARGUMENT";
    case OCLF_UNSUPPORTED: return "OCLF_UNSUPPORTED";
    case OCLF_BUILD_FAILED: return "OCLF_BUILD_FAILED";
    case OCLF_OUT_OF_RESOURCES: return "OCLF_OUT_OF_RESOURCES";
    case OCLF_OPENCL_ERROR: return "OCLF_OPENCL_ERROR";
    case OCLF_DB_ERROR: return "OCLF_DB_ERROR";
    case OCLF_IO_ERROR: return "OCLF_IO_ERROR";
    }
    return "unknown oclf_status";
}

const char *oclf_status_message(oclf_status status)
{
    switch (status) {
    case OCLF_SUCCESS: return "The call succeeded.";
    case OCLF_INVALID_ARGUMENT:
        return "An argument is invalid: a NULL handle, a size, stride or parameter out of "
               "range, or operands that overlap.";
    case OCLF_UNSUPPORTED: return "The request is valid, but this device or build cannot do it.";
    case OCLF_BUILD_FAILED: return "The OpenCL compiler rejected a kernel.";
    case OCLF_OUT_OF_RESOURCES:
        return "Device or host memory, or a work-group limit, is too small for the request.";
    case OCLF_OPENCL_ERROR: return "An OpenCL call failed.";
    case OCLF_DB_ERROR: return "A tuning database is damaged or of an unknown format.";
    case OCLF_IO_ERROR: return "A file could not be read or written.";
    }
    return "Unknown status.";
}

unsigned oclf_version(void) { return OCLF_VERSION_HEX; }

const char *oclf_version_string(void) { return OCLF_VERSION_STRING; }

const char *oclf_dtype_name(oclf_dtype dtype)
{
    switch (dtype) {
    case OCLF_F32: return "f32";
    case OCLF_F16: return "f16";
    case OCLF_BF16: return "bf16";
    default: return NULL;
    }
}

size_t oclf_dtype_size(oclf_dtype dtype)
{
    switch (dtype) {
    case OCLF_F32: return 4;
    case OCLF_F16:
    case OCLF_BF16: return 2;
    default: return 0;
    }
}
