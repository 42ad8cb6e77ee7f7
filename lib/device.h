/*
 * Device facts and quirks (device.c), the only file that knows vendors.
 */
#ifndef OCLF_DEVICE_H
#define OCLF_DEVICE_H

#include "error.h"

#include <stdbool.h>

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
    bool nv_attributes; /* cl_nv_device_attribute_query */
    bool local_is_global; /* no dedicated local memory (CPUs) */
    /* The device compiler miscomputes a work-group kernel whose lanes run
     * vector loops over a head split at a width VEC does not divide, after
     * a global barrier (the fused item-structure qk_norm_rope with LAYOUT
     * 1, VEC >= 4 and R/2 not a multiple of VEC: wrong heads and stores
     * outside the buffer, while a simulator runs the same kernel right and
     * race-free). Ops keep that combination off such a device. Seen on
     * POCL 3.1 (wrong heads) and on NVIDIA's driver 580 (a fault that ends
     * the context) alike; every device but the simulator (oclgrind) is
     * taken to have it, since the two compilers tried both fail. */
    /* (The head norm of both qk_norm_rope paths likewise with LAYOUT 1,
     * VEC >= 2 and a head_dim VEC does not divide.) */
    bool split_tail_miscompile;
    /* The compiler takes _Float16 vectors and converts float vectors to
     * them in hardware (clang for a CPU with F16C), so f16 stores need not
     * go through vstore_halfN_rte (cl/common.h, OCLF_HAS_FLOAT16). */
    bool float16;
    /* f32 division and sqrt can be built correctly rounded
     * (CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT); every program then is */
    bool div_rounded;
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
    /* The matrix-unit instruction form the kernels may use (cl/mma.h's
     * OCLF_MMA): 0 none, only the emulation (slow: a structure that needs
     * it runs only when a caller forces it); 1 m16n8k16 mma.sync as inline
     * PTX (compute capability 8.0 or newer, from
     * cl_nv_device_attribute_query). OCLF_MATRIX_UNITS=0 clears it. */
    int mma;
    /* The wavefront's 16x16x16 matrix instruction of cl/mma.h
     * (OCLF_MFMA 1, clang's builtin): a CDNA 2 or 3 GPU (gfx90a, gfx94x)
     * that reports a wavefront of 64. OCLF_MATRIX_UNITS=0 clears it. */
    bool mfma;
    /* The register-tiled GEMM (linear's STAGE 3) builds worse than the
     * staged one: Intel's compiler (a GPU with cl_intel_subgroups) left no
     * FMA-dense loop in it, 8-10% of FP32 peak by the GPU report against
     * the staged structure's 12-25% (docs/notes/2026-11-28-gemm-fp32.md),
     * so linear's heuristic keeps the staged tiles there. */
    bool gemm_staged;
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
#endif
