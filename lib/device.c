/*
 * Device facts and quirks: the one place that looks at what a device is.
 * Ops never test vendors; they read the facts gathered here (limits, type)
 * and the kernels see named defines (OCLF_HAS_*), never a vendor name.
 */
#include "internal.h"

#include <CL/cl_ext.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static cl_int get_str(cl_device_id dev, cl_device_info what, char *buf, size_t len)
{
    size_t got = 0;
    cl_int err = clGetDeviceInfo(dev, what, len - 1, buf, &got);
    if (err == CL_INVALID_VALUE) { /* longer than buf: keep the prefix */
        char *tmp = NULL;
        size_t need = 0;
        err = clGetDeviceInfo(dev, what, 0, NULL, &need);
        if (err == CL_SUCCESS && (tmp = malloc(need + 1)) != NULL) {
            err = clGetDeviceInfo(dev, what, need, tmp, NULL);
            if (err == CL_SUCCESS)
                snprintf(buf, len, "%s", tmp);
            free(tmp);
        }
        return err;
    }
    if (err == CL_SUCCESS)
        buf[got < len ? got : len - 1] = '\0';
    /* Drivers pad some strings with spaces; the fingerprint should not. */
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\n'))
        buf[--n] = '\0';
    return err;
}

const char *oclf_device_type_name(cl_device_type type)
{
    if (type & CL_DEVICE_TYPE_GPU)
        return "GPU";
    if (type & CL_DEVICE_TYPE_CPU)
        return "CPU";
    if (type & CL_DEVICE_TYPE_ACCELERATOR)
        return "ACCELERATOR";
    return "OTHER";
}

/* Whether the platform's version string names `what` (case-insensitive):
 * how a compiler is recognised for its quirks. */
static bool platform_is(const oclf_device_info *o, const char *what)
{
    const size_t n = strlen(what);
    for (const char *p = o->platform_version; *p; p++)
        if (strncasecmp(p, what, n) == 0)
            return true;
    return false;
}

/* OCLF_DEVICE_CLASS=gpu (or cpu) makes the library treat the device as that
 * class: every heuristic, staging decision and quirk define follows it. The
 * GPU class also lowers the limits to what GPUs commonly give (1024
 * work-items a group, 48 KiB of on-chip local memory), so the defaults a GPU
 * gets run, and are checked, on the CPU devices of a machine without one.
 * Lowering a limit is always safe on the real device underneath. */
static oclf_status apply_class_override(const oclf_context *ctx, oclf_device_info *o)
{
    const char *cls = getenv("OCLF_DEVICE_CLASS");
    if (!cls || !*cls)
        return OCLF_SUCCESS;
    if (strcmp(cls, "gpu") == 0) {
        o->type = CL_DEVICE_TYPE_GPU;
        o->local_is_global = false;
        o->lane_mul64 = false;
        if (o->max_wgs > 1024)
            o->max_wgs = 1024;
        if (o->local_mem > 48 * 1024)
            o->local_mem = 48 * 1024;
    } else if (strcmp(cls, "cpu") == 0) {
        o->type = CL_DEVICE_TYPE_CPU;
        o->local_is_global = true;
        o->lane_mul64 = true;
    } else {
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "OCLF_DEVICE_CLASS is \"%s\"; expected \"gpu\" or \"cpu\"", cls);
    }
    return OCLF_SUCCESS;
}

/* OCLF_KERNEL_WGS_CAP=N makes every built kernel's work-group limit read as
 * at most N, as drivers report for kernels that use many registers (Mesa's
 * CPU device reports 32 for the expression kernels), so the path that
 * lowers a default work-group size is exercised on any device. */
static oclf_status apply_kernel_wgs_cap(const oclf_context *ctx, oclf_device_info *o)
{
    const char *cap = getenv("OCLF_KERNEL_WGS_CAP");
    if (!cap || !*cap)
        return OCLF_SUCCESS;
    char *end = NULL;
    unsigned long long v = strtoull(cap, &end, 10);
    if (*end || v == 0 || cap[0] == '-')
        return oclf_fail(ctx, OCLF_INVALID_ARGUMENT,
                         "OCLF_KERNEL_WGS_CAP is \"%s\"; expected a positive integer", cap);
    o->kernel_wgs_cap = (size_t)v;
    return OCLF_SUCCESS;
}

/* How kernels reduce across a sub-group (see oclf_device_info): the
 * warp's shuffle where the compute capability says the inline PTX of
 * cl/mma.h runs (8.0: its other wrappers' floor too), the wavefront's
 * permute where the device reports a wavefront width, cl_intel_subgroups'
 * shuffle at a required width of 16, cl_khr_subgroup_shuffle's at the
 * smallest sub-group width there is, 8 (the compiler picks the width per
 * kernel), else local memory. */
static void subgroup_facts(oclf_device_info *o, cl_uint wave, cl_uint warp, cl_uint cc)
{
    const bool gpu = (o->type & CL_DEVICE_TYPE_GPU) != 0;
    o->subgroup_form = 0;
    o->subgroup_width = o->simd_width;
    if (gpu && warp == 32 && cc >= 8) {
        o->subgroup_form = 2;
        o->subgroup_width = 32;
    } else if (gpu && (wave == 32 || wave == 64)) {
        o->subgroup_form = 3;
        o->subgroup_width = wave;
    } else if (gpu && o->subgroup_intel) {
        /* (a kernel requires the width: OCLF_SUBGROUP_KERNEL, cl/mma.h) */
        o->subgroup_form = 1;
        o->subgroup_width = 16;
    } else if (gpu && o->subgroup_shuffle) {
        o->subgroup_form = 1;
        o->subgroup_width = 8;
    }
    if (o->subgroup_form != 1)
        o->subgroup_intel = false;
}

oclf_status oclf_device_query(const oclf_context *ctx, cl_device_id dev, oclf_device_info *o)
{
    memset(o, 0, sizeof *o);
    cl_platform_id platform = NULL;
    cl_int err = clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL);
    if (err != CL_SUCCESS)
        return oclf_fail_cl(ctx, err, "clGetDeviceInfo(CL_DEVICE_PLATFORM)");
    if ((err = get_str(dev, CL_DEVICE_VENDOR, o->vendor, sizeof o->vendor)) ||
        (err = get_str(dev, CL_DEVICE_NAME, o->name, sizeof o->name)) ||
        (err = get_str(dev, CL_DRIVER_VERSION, o->driver, sizeof o->driver)) ||
        (err = get_str(dev, CL_DEVICE_VERSION, o->device_version, sizeof o->device_version)))
        return oclf_fail_cl(ctx, err, "clGetDeviceInfo(strings)");
    size_t got = 0;
    err = clGetPlatformInfo(platform, CL_PLATFORM_VERSION, sizeof o->platform_version - 1,
                            o->platform_version, &got);
    if (err != CL_SUCCESS)
        snprintf(o->platform_version, sizeof o->platform_version, "unknown");
    cl_device_local_mem_type lmt = CL_LOCAL;
    if ((err = clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof o->type, &o->type, NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof o->compute_units,
                               &o->compute_units, NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof o->max_wgs, &o->max_wgs,
                               NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof o->local_mem, &o->local_mem,
                               NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_TYPE, sizeof lmt, &lmt, NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof o->global_mem,
                               &o->global_mem, NULL)) ||
        (err = clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof o->max_alloc,
                               &o->max_alloc, NULL)))
        return oclf_fail_cl(ctx, err, "clGetDeviceInfo(limits)");
    o->local_is_global = (lmt == CL_GLOBAL);
    /* OpenCL lets f32 division be 2.5 ulp off unless the program is built
     * with -cl-fp32-correctly-rounded-divide-sqrt; NVIDIA's compiler takes
     * that licence, which breaks the bit-exact results the expression
     * kernels promise (dropout's x / (1 - p)). A CPU divides correctly
     * rounded anyway, and POCL 3.1 ran rms_norm up to a quarter slower
     * with the option, so it goes to the other devices that offer it. */
    cl_device_fp_config fpc = 0;
    if (!(o->type & CL_DEVICE_TYPE_CPU) &&
        clGetDeviceInfo(dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fpc, &fpc, NULL) == CL_SUCCESS)
        o->div_rounded = (fpc & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;

    char cver[128] = "";
    if (get_str(dev, CL_DEVICE_OPENCL_C_VERSION, cver, sizeof cver) != CL_SUCCESS ||
        sscanf(cver, "OpenCL C %u.%u", &o->opencl_c_major, &o->opencl_c_minor) != 2) {
        o->opencl_c_major = 1;
        o->opencl_c_minor = 2;
    }

    size_t ext_len = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len) == CL_SUCCESS && ext_len) {
        char *ext = malloc(ext_len + 1);
        if (ext && clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL) == CL_SUCCESS) {
            ext[ext_len] = '\0';
            o->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
            o->fp64 = strstr(ext, "cl_khr_fp64") != NULL;
            o->subgroups = strstr(ext, "cl_khr_subgroups") != NULL;
            o->nv_attributes = strstr(ext, "cl_nv_device_attribute_query") != NULL;
            o->subgroup_shuffle = strstr(ext, "cl_khr_subgroup_shuffle") != NULL;
            o->subgroup_intel = strstr(ext, "cl_intel_subgroups") != NULL;
            o->has_uuid =
                strstr(ext, "cl_khr_device_uuid") != NULL &&
                clGetDeviceInfo(dev, CL_DEVICE_UUID_KHR, sizeof o->device_uuid, o->device_uuid,
                                NULL) == CL_SUCCESS &&
                clGetDeviceInfo(dev, CL_DRIVER_UUID_KHR, sizeof o->driver_uuid, o->driver_uuid,
                                NULL) == CL_SUCCESS;
        }
        free(ext);
    }
    o->split_tail_miscompile = !platform_is(o, "oclgrind");
    o->float16 = platform_is(o, "pocl") && (o->type & CL_DEVICE_TYPE_CPU);
    /* Not on a device that also calls itself a GPU (oclgrind, a simulator):
     * its uninitialized-value checker crashed on the swizzles of that form. */
    o->lane_mul64 = (o->type & CL_DEVICE_TYPE_CPU) && !(o->type & CL_DEVICE_TYPE_GPU);
    /* The lockstep width, from the vendors' attribute queries (an unknown
     * query fails harmlessly on other devices). */
    cl_uint width = 0, wave = 0, warp = 0, cc = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_WAVEFRONT_WIDTH_AMD, sizeof wave, &wave, NULL) ==
        CL_SUCCESS)
        width = wave;
    else if (clGetDeviceInfo(dev, CL_DEVICE_WARP_SIZE_NV, sizeof warp, &warp, NULL) ==
             CL_SUCCESS)
        width = warp;
    else
        width = 0;
    o->simd_width = width >= 8 && width <= 128 && !(width & (width - 1)) ? width : 32;
    /* Matrix units: NVIDIA's compute capability 8.0 and newer run the
     * m16n8k16 mma.sync of cl/mma.h (inline PTX, which its OpenCL compiler
     * accepts). OCLF_MATRIX_UNITS=0 leaves them unused: a structure that
     * needs one then runs its emulation, as on every other device. */
    cl_uint cc_major = 0;
    if (o->nv_attributes &&
        clGetDeviceInfo(dev, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof cc_major, &cc_major,
                        NULL) == CL_SUCCESS &&
        cc_major >= 8)
        o->mma = 1;
    /* AMD's OpenCL names the device by its ISA ("gfx942:sramecc+:xnack-"):
     * CDNA 2 (gfx90a) and CDNA 3 (gfx940-942) have the 16x16x16 MFMA in
     * f16 and in bf16 ("_1k"); CDNA 1 (gfx908) lacks that bf16 form. */
    o->mfma = (o->type & CL_DEVICE_TYPE_GPU) && wave == 64 &&
              (strncmp(o->name, "gfx90a", 6) == 0 || strncmp(o->name, "gfx94", 5) == 0);
    const char *mu = getenv("OCLF_MATRIX_UNITS");
    if (mu && strcmp(mu, "0") == 0) {
        o->mma = 0;
        o->mfma = false;
    }
    if (warp &&
        clGetDeviceInfo(dev, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof cc, &cc, NULL) !=
            CL_SUCCESS)
        cc = 0;
    subgroup_facts(o, wave, warp, cc);
    o->gemm_staged = (o->type & CL_DEVICE_TYPE_GPU) && o->subgroup_intel;
    oclf_status st = apply_class_override(ctx, o);
    return st != OCLF_SUCCESS ? st : apply_kernel_wgs_cap(ctx, o);
}

void oclf_device_fingerprint(const oclf_device_info *info, char *buf, size_t len)
{
    snprintf(buf, len, "%s|%s|%s|%s", info->vendor, info->name, info->driver,
             oclf_device_type_name(info->type));
}

/* The OpenCL C version every program is built as: the one the kernels are
 * written for and cross-compiled with (tests/gpu_compile.py passes the same
 * to clang and to Intel's compiler), never a driver's own default. A device
 * older than that gets its own version, on which the build reports what it
 * lacks. */
#define OCLF_CL_STD_MAJOR 1
#define OCLF_CL_STD_MINOR 2

void oclf_device_quirk_options(const oclf_device_info *info, char *buf, size_t len)
{
    const bool older = info->opencl_c_major < OCLF_CL_STD_MAJOR ||
                       (info->opencl_c_major == OCLF_CL_STD_MAJOR &&
                        info->opencl_c_minor < OCLF_CL_STD_MINOR);
    char std[32] = "";
    /* OpenCL C 1.0 has no -cl-std value: such a device builds with none. */
    if (!older)
        snprintf(std, sizeof std, " -cl-std=CL%d.%d", OCLF_CL_STD_MAJOR, OCLF_CL_STD_MINOR);
    else if (info->opencl_c_major == 1 && info->opencl_c_minor == 1)
        snprintf(std, sizeof std, " -cl-std=CL1.1");
    /* Quirks reach the kernels as named defines. OCLF_LOCAL_IS_GLOBAL tells
     * a kernel that "local" memory is ordinary cached memory (CPUs), where
     * staging a row buys nothing over re-reading it. */
    /* The sub-group form and width (cl/subgroup.h) only where not the
     * fallback, so that most devices' options stay as they were. */
    char sg[96] = "";
    if (info->subgroup_form)
        snprintf(sg, sizeof sg, " -DOCLF_SUBGROUP_FORM=%d -DOCLF_SUBGROUP_WIDTH=%u%s",
                 info->subgroup_form, info->subgroup_width,
                 info->subgroup_intel ? " -DOCLF_SUBGROUP_INTEL=1" : "");
    snprintf(buf, len, "%s%s%s%s%s%s%s", std,
             info->div_rounded ? " -cl-fp32-correctly-rounded-divide-sqrt" : "",
             info->fp64 ? " -DOCLF_HAS_FP64=1" : "",
             info->subgroups ? " -DOCLF_HAS_SUBGROUPS=1" : "",
             info->local_is_global ? " -DOCLF_LOCAL_IS_GLOBAL=1" : "",
             info->float16 ? " -DOCLF_HAS_FLOAT16=1" : "", sg);
}
