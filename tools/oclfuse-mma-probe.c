/*
 * oclfuse-mma-probe: runs the matrix-unit and sub-group wrappers of
 * cl/mma.h on one OpenCL device, in each form the device can build, and
 * checks every lane's result against a host product in double precision.
 *
 * Inputs come in two kinds: "exact", small multiples of 1/64 whose
 * products and partial sums are exact in f32, so every form must give the
 * reference's bits (a wrong fragment layout cannot hide); and "random",
 * values of both signs over [-2, 2], where the forms may differ from the
 * reference by their accumulation order (the bound printed beside).
 *
 *   oclfuse-mma-probe [--cl DIR] [--form emulated|native|all] [--cpu]
 *
 * Two instruction families: the warp's m16n8k16 (its native form inline
 * PTX, built where the device reports compute capability 8.0 or newer
 * through cl_nv_device_attribute_query) and the wavefront's 16x16x16
 * (its native form clang's builtin, built where the device's name is a
 * CDNA 2 or 3 target: gfx90a, gfx94x, gfx95x) and the sub-group's m8n16k16
 * (its native form cl_intel_subgroup_matrix_multiply_accumulate's DPAS,
 * built where the device offers the extension and sub-groups of 16).
 * --form native builds every native form whatever the device says. Exit status 0 when every form built was
 * checked and matched, 1 when one did not, 2 on a usage or OpenCL error.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef OCLF_PROBE_CL_DIR
#define OCLF_PROBE_CL_DIR "cl"
#endif
#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
#endif

static const char probe_kernel[] =
    "__kernel void mma_probe(__global const ushort *A, __global const ushort *B,\n"
    "                        __global const float *C, __global float *D,\n"
    "                        __global float *shfl_out)\n"
    "{\n"
    "    __local uint scratch[OCLF_MMA_SCRATCH_WORDS];\n"
    "    __local float sscratch[32];\n"
    "    const uint lane = get_local_id(0) & 31u;\n"
    "    const uint g = lane >> 2, t = lane & 3u;\n"
    "    uint a[4], b[2];\n"
    "    float c[4], d[4];\n"
    "    for (int i = 0; i < 4; i++) {\n"
    "        const uint row = g + 8u * (uint)(i & 1), col = 2u * t + 8u * (uint)(i >> 1);\n"
    "        a[i] = (uint)A[row * 16 + col] | ((uint)A[row * 16 + col + 1] << 16);\n"
    "        c[i] = C[(g + 8u * (uint)(i >> 1)) * 8 + 2u * t + (uint)(i & 1)];\n"
    "    }\n"
    "    for (int j = 0; j < 2; j++) {\n"
    "        const uint k = 2u * t + 8u * (uint)j;\n"
    "        b[j] = (uint)B[k * 8 + g] | ((uint)B[(k + 1) * 8 + g] << 16);\n"
    "    }\n"
    "#if PROBE_BF16\n"
    "    oclf_mma_m16n8k16_bf16(d, a, b, c, lane, scratch);\n"
    "#else\n"
    "    oclf_mma_m16n8k16_f16(d, a, b, c, lane, scratch);\n"
    "#endif\n"
    "    for (int i = 0; i < 4; i++)\n"
    "        D[(g + 8u * (uint)(i >> 1)) * 8 + 2u * t + (uint)(i & 1)] = d[i];\n"
    "    float v = (float)(lane + 1);\n"
    "    for (uint m = 16; m > 0; m >>= 1)\n"
    "        v += oclf_shfl_xor32(v, m, lane, sscratch);\n"
    "    shfl_out[lane] = v;\n"
    "    shfl_out[32 + lane] = oclf_shfl_xor32((float)lane, 5u, lane, sscratch);\n"
    "}\n";

/* The warp family's conversions: each of 64 work-items packs its pair of
 * inputs into f16 and bf16 words and raises 2 to its first input. */
static const char conv_kernel[] =
    "__kernel void conv_probe(__global const float *in, __global uint *pk,\n"
    "                         __global float *ex)\n"
    "{\n"
    "    const uint i = get_global_id(0);\n"
    "    const float lo = in[2 * i], hi = in[2 * i + 1];\n"
    "    pk[2 * i] = oclf_pack2_16(lo, hi, 0);\n"
    "    pk[2 * i + 1] = oclf_pack2_16(lo, hi, 1);\n"
    "    ex[i] = oclf_exp2(lo);\n"
    "}\n";

/* The wavefront's 16x16x16: A row-major 16x16, B row-major 16x16 (k by
 * column), C and D row-major 16x16; one group of 64 work-items. */
static const char mfma_kernel[] =
    "__kernel void mma_probe(__global const ushort *A, __global const ushort *B,\n"
    "                        __global const float *C, __global float *D,\n"
    "                        __global float *unused)\n"
    "{\n"
    "    __local uint scratch[OCLF_MFMA_SCRATCH_WORDS];\n"
    "    const uint lane = get_local_id(0) & 63u;\n"
    "    const uint i = lane & 15u, q = lane >> 4;\n"
    "    uint a[2], b[2];\n"
    "    float c[4], d[4];\n"
    "    (void)unused;\n"
    "    for (uint j = 0; j < 2; j++) {\n"
    "        const uint k = 4u * q + 2u * j;\n"
    "        a[j] = (uint)A[i * 16 + k] | ((uint)A[i * 16 + k + 1] << 16);\n"
    "        b[j] = (uint)B[k * 16 + i] | ((uint)B[(k + 1) * 16 + i] << 16);\n"
    "    }\n"
    "    for (uint r = 0; r < 4; r++)\n"
    "        c[r] = C[(4u * q + r) * 16 + i];\n"
    "#if PROBE_BF16\n"
    "    oclf_mfma_16x16x16_bf16(d, a, b, c, lane, scratch);\n"
    "#else\n"
    "    oclf_mfma_16x16x16_f16(d, a, b, c, lane, scratch);\n"
    "#endif\n"
    "    for (uint r = 0; r < 4; r++)\n"
    "        D[(4u * q + r) * 16 + i] = d[r];\n"
    "}\n";

/* The sub-group's m8n16k16: A row-major 8x16, B row-major 16x16, C and D
 * row-major 8x16; one group of 16 work-items, one sub-group natively. */
static const char dpas_kernel[] =
    "#if OCLF_DPAS\n"
    "__attribute__((intel_reqd_sub_group_size(16)))\n"
    "#endif\n"
    "__kernel void mma_probe(__global const ushort *A, __global const ushort *B,\n"
    "                        __global const float *C, __global float *D,\n"
    "                        __global float *unused)\n"
    "{\n"
    "    __local uint scratch[OCLF_DPAS_SCRATCH_WORDS];\n"
    "    const uint j = get_local_id(0) & 15u;\n"
    "    ushort a[8];\n"
    "    uint b[8];\n"
    "    float c[8], d[8];\n"
    "    (void)unused;\n"
    "    for (uint r = 0; r < 8; r++) {\n"
    "        a[r] = A[r * 16 + j];\n"
    "        c[r] = C[r * 16 + j];\n"
    "        b[r] = (uint)B[2 * r * 16 + j] | ((uint)B[(2 * r + 1) * 16 + j] << 16);\n"
    "    }\n"
    "#if PROBE_BF16\n"
    "    oclf_dpas_m8n16k16_bf16(d, a, b, c, j, scratch);\n"
    "#else\n"
    "    oclf_dpas_m8n16k16_f16(d, a, b, c, j, scratch);\n"
    "#endif\n"
    "    for (uint r = 0; r < 8; r++)\n"
    "        D[r * 16 + j] = d[r];\n"
    "}\n";

/* One instruction family: its kernel, the define that picks its form, the
 * product's shape (M x K times K x N) and work-group size. */
typedef struct {
    const char *name;
    const char *kernel;
    const char *form_define;
    int m, n, k, lanes;
} probe_family;

enum { NFAMILIES = 3 };
static const probe_family families[NFAMILIES] = {
    {"m16n8k16", NULL, "OCLF_MMA", 16, 8, 16, 32},
    {"16x16x16", mfma_kernel, "OCLF_MFMA", 16, 16, 16, 64},
    {"m8n16k16", dpas_kernel, "OCLF_DPAS", 8, 16, 16, 16},
};

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = '\0';
    fclose(f);
    return s;
}

/* f32 -> f16 bits, round to nearest even; the inputs here are normal and
 * within f16's range (or zero). */
static uint16_t to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const int e = (int)((x >> 23) & 0xff) - 127 + 15;
    if (e <= 0)
        return sign;
    const uint32_t m = x & 0x7fffffu, rem = m & 0x1fffu;
    uint32_t h = ((uint32_t)e << 10) | (m >> 13);
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

static float from_f16(uint16_t h)
{
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000u) ? -v : v;
}

static uint16_t to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint32_t rng_state = 12345u;
static uint32_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

typedef struct {
    cl_context ctx;
    cl_command_queue q;
    cl_device_id dev;
} probe_dev;

/* Builds the probe with OCLF_MMA=form; returns NULL and prints the log on
 * failure. */
static cl_program build(probe_dev *p, const char *mma_src, const probe_family *fam, int form,
                        int bf, int gnu_asm)
{
    const char *srcs[2] = {mma_src, fam->kernel ? fam->kernel : probe_kernel};
    cl_int err;
    cl_program prog = clCreateProgramWithSource(p->ctx, 2, srcs, NULL, &err);
    if (err != CL_SUCCESS)
        return NULL;
    char opts[128];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2 -D%s=%d -DPROBE_BF16=%d -DOCLF_ASM_GNU=%d",
             fam->form_define, form, bf, gnu_asm);
    err = clBuildProgram(prog, 1, &p->dev, opts, NULL, NULL);
    if (err != CL_SUCCESS) {
        size_t n = 0;
        clGetProgramBuildInfo(prog, p->dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
        char *log = malloc(n + 1);
        if (log) {
            clGetProgramBuildInfo(prog, p->dev, CL_PROGRAM_BUILD_LOG, n, log, NULL);
            log[n] = '\0';
            printf("  build of %s form %d (OCLF_ASM_GNU=%d) failed (%d):\n%.3000s\n", fam->name,
                   form, gnu_asm, err, log);
            free(log);
        }
        clReleaseProgram(prog);
        return NULL;
    }
    return prog;
}

/* One product of kind `exact` in f16 (bf 0) or bf16 (bf 1) through `prog`
 * of family `fam`; prints a line and returns the number of failed checks.
 * A is M x K and B K x N, both row-major; C and D M x N. */
static int run_case(probe_dev *p, cl_program prog, const probe_family *fam,
                    const char *form_name, int bf, int exact)
{
    enum { MAXE = 256 };
    const int na = fam->m * fam->k, nb = fam->k * fam->n, nc = fam->m * fam->n;
    uint16_t A[MAXE], B[MAXE];
    float C[MAXE], D[MAXE], S[64];
    double ref[MAXE], bound[MAXE];
    float av[MAXE], bv[MAXE];
    for (int i = 0; i < na; i++) {
        float v = exact ? (float)((int)(rng() % 257) - 128) / 64.0f
                        : ((float)(rng() % 2000001u) / 1000000.0f - 1.0f) * 2.0f;
        A[i] = bf ? to_bf16(v) : to_f16(v);
        av[i] = bf ? from_bf16(A[i]) : from_f16(A[i]);
    }
    for (int i = 0; i < nb; i++) {
        float v = exact ? (float)((int)(rng() % 257) - 128) / 64.0f
                        : ((float)(rng() % 2000001u) / 1000000.0f - 1.0f) * 2.0f;
        B[i] = bf ? to_bf16(v) : to_f16(v);
        bv[i] = bf ? from_bf16(B[i]) : from_f16(B[i]);
    }
    for (int i = 0; i < nc; i++)
        C[i] = exact ? (float)((int)(rng() % 65) - 32) : (float)(rng() % 1000u) / 250.0f - 2.0f;
    for (int m = 0; m < fam->m; m++)
        for (int n = 0; n < fam->n; n++) {
            double s = C[m * fam->n + n], mag = fabs(C[m * fam->n + n]);
            for (int k = 0; k < fam->k; k++) {
                s += (double)av[m * fam->k + k] * bv[k * fam->n + n];
                mag += fabs((double)av[m * fam->k + k] * bv[k * fam->n + n]);
            }
            ref[m * fam->n + n] = s;
            bound[m * fam->n + n] = (fam->k + 1) * 0x1p-24 * mag; /* K + 1 roundings in f32 */
        }
    cl_int err;
    const size_t sa = (size_t)na * 2, sb = (size_t)nb * 2, sc = (size_t)nc * 4;
    cl_mem mA = clCreateBuffer(p->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sa, A, &err);
    cl_mem mB = clCreateBuffer(p->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sb, B, &err);
    cl_mem mC = clCreateBuffer(p->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sc, C, &err);
    cl_mem mD = clCreateBuffer(p->ctx, CL_MEM_WRITE_ONLY, sc, NULL, &err);
    cl_mem mS = clCreateBuffer(p->ctx, CL_MEM_WRITE_ONLY, sizeof S, NULL, &err);
    cl_kernel k = clCreateKernel(prog, "mma_probe", &err);
    int failed = 0;
    if (!mA || !mB || !mC || !mD || !mS || !k) {
        printf("  %s: could not set up the buffers or kernel\n", form_name);
        failed = 1;
        goto out;
    }
    clSetKernelArg(k, 0, sizeof mA, &mA);
    clSetKernelArg(k, 1, sizeof mB, &mB);
    clSetKernelArg(k, 2, sizeof mC, &mC);
    clSetKernelArg(k, 3, sizeof mD, &mD);
    clSetKernelArg(k, 4, sizeof mS, &mS);
    size_t gws = (size_t)fam->lanes, lws = (size_t)fam->lanes;
    err = clEnqueueNDRangeKernel(p->q, k, 1, NULL, &gws, &lws, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(p->q, mD, CL_TRUE, 0, sc, D, 0, NULL, NULL);
    if (err == CL_SUCCESS && !fam->kernel)
        err = clEnqueueReadBuffer(p->q, mS, CL_TRUE, 0, sizeof S, S, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        printf("  %s: launch or read failed (%d)\n", form_name, err);
        failed = 1;
        goto out;
    }
    int bad = 0, first = -1;
    double worst = 0.0;
    for (int i = 0; i < nc; i++) {
        const double e = fabs(D[i] - ref[i]);
        const int ok = exact ? (D[i] == (float)ref[i]) : (e <= bound[i]);
        if (!ok && first < 0)
            first = i;
        bad += !ok;
        if (bound[i] > 0 && e / bound[i] > worst)
            worst = e / bound[i];
    }
    printf("  %-9s %-4s %-8s %-6s %3d/%d %s", form_name, bf ? "bf16" : "f16", fam->name,
           exact ? "exact" : "random", nc - bad, nc, exact ? "bit-equal" : "within the bound");
    if (!exact)
        printf(" (worst error %.3f of the bound)", worst);
    if (first >= 0)
        printf("; first miss D[%d][%d] = %.9g, expected %.9g", first / fam->n, first % fam->n,
               D[first], ref[first]);
    printf("\n");
    failed += bad > 0;
    if (!fam->kernel) { /* the warp's kernel also checks the butterfly shuffle */
        int sbad = 0;
        for (int l = 0; l < 32; l++)
            sbad += S[l] != 528.0f || S[32 + l] != (float)(l ^ 5);
        if (bf && exact) /* the same for every case: printed once */
            printf("  %-9s shfl xor (butterfly sum, lane ^ 5): %d/32 lanes right\n", form_name,
                   32 - sbad);
        failed += sbad > 0;
    }
out:
    if (k)
        clReleaseKernel(k);
    cl_mem ms[5] = {mA, mB, mC, mD, mS};
    for (int i = 0; i < 5; i++)
        if (ms[i])
            clReleaseMemObject(ms[i]);
    return failed;
}

/* The warp family's conversion wrappers through `prog` (built from
 * conv_kernel): pairs packed into f16 and bf16 words must be the host's
 * round-to-nearest-even bits exactly (both halves, in order); 2^x within 4
 * ulp (the native form is an approximation). Inputs are finite and inside
 * f16's normal range. Returns the number of failed checks. */
static int run_conv(probe_dev *p, cl_program prog, const char *form_name)
{
    enum { N = 64 };
    float in[2 * N], ex[N];
    uint32_t pk[2 * N];
    for (int i = 0; i < 2 * N; i++) {
        /* random mantissa bits, so both roundings are exercised */
        const float v = ((float)(rng() % 2000001u) / 1000000.0f - 1.0f) * 12.0f;
        in[i] = (i % 7 == 3) ? v * 1.0009765625f : v;
    }
    cl_int err;
    cl_mem mi = clCreateBuffer(p->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof in, in, &err);
    cl_mem mp = clCreateBuffer(p->ctx, CL_MEM_WRITE_ONLY, sizeof pk, NULL, &err);
    cl_mem me = clCreateBuffer(p->ctx, CL_MEM_WRITE_ONLY, sizeof ex, NULL, &err);
    cl_kernel k = clCreateKernel(prog, "conv_probe", &err);
    int failed = 0;
    if (!mi || !mp || !me || !k) {
        printf("  %s: could not set up the conversion check\n", form_name);
        failed = 1;
        goto out;
    }
    clSetKernelArg(k, 0, sizeof mi, &mi);
    clSetKernelArg(k, 1, sizeof mp, &mp);
    clSetKernelArg(k, 2, sizeof me, &me);
    size_t gws = N;
    err = clEnqueueNDRangeKernel(p->q, k, 1, NULL, &gws, NULL, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(p->q, mp, CL_TRUE, 0, sizeof pk, pk, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(p->q, me, CL_TRUE, 0, sizeof ex, ex, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        printf("  %s: conversion check launch or read failed (%d)\n", form_name, err);
        failed = 1;
        goto out;
    }
    int bad16 = 0, badbf = 0, badex = 0;
    for (int i = 0; i < N; i++) {
        const uint32_t want16 = to_f16(in[2 * i]) | ((uint32_t)to_f16(in[2 * i + 1]) << 16);
        const uint32_t wantbf = to_bf16(in[2 * i]) | ((uint32_t)to_bf16(in[2 * i + 1]) << 16);
        bad16 += pk[2 * i] != want16;
        badbf += pk[2 * i + 1] != wantbf;
        const double e = exp2((double)in[2 * i]);
        badex += !(fabs(ex[i] - e) <= 4.0 * 0x1p-23 * e);
    }
    printf("  %-9s pack f16x2 %d/%d, pack bf16x2 %d/%d bit-equal; exp2 %d/%d within 4 ulp\n",
           form_name, N - bad16, N, N - badbf, N, N - badex, N);
    failed = (bad16 > 0) + (badbf > 0) + (badex > 0);
out:
    if (k)
        clReleaseKernel(k);
    cl_mem ms[3] = {mi, mp, me};
    for (int i = 0; i < 3; i++)
        if (ms[i])
            clReleaseMemObject(ms[i]);
    return failed;
}

/* Whether the device offers sub-groups of 16 (cl_intel_required_subgroup_size's
 * list; the DPAS form for 16-wide sub-groups needs that width). */
static int has_subgroup16(cl_device_id dev)
{
    size_t sizes[16], n = 0;
    if (clGetDeviceInfo(dev, 0x4108 /* CL_DEVICE_SUB_GROUP_SIZES_INTEL */, sizeof sizes, sizes,
                        &n) != CL_SUCCESS)
        return 0;
    for (size_t i = 0; i < n / sizeof sizes[0]; i++)
        if (sizes[i] == 16)
            return 1;
    return 0;
}

/* A CDNA 2 or 3 device, by the target name AMD's OpenCL reports as the
 * device name ("gfx90a:sramecc+:xnack-", "gfx942"). */
static int is_cdna23(const char *name)
{
    return strncmp(name, "gfx90a", 6) == 0 || strncmp(name, "gfx94", 5) == 0 ||
           strncmp(name, "gfx95", 5) == 0;
}

int main(int argc, char **argv)
{
    const char *cl_dir = getenv("OCLF_SOURCE_CL_DIR");
    const char *form_arg = "all";
    cl_device_type want = CL_DEVICE_TYPE_GPU;
    if (!cl_dir)
        cl_dir = OCLF_PROBE_CL_DIR;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--cl") == 0 && i + 1 < argc)
            cl_dir = argv[++i];
        else if (strcmp(argv[i], "--form") == 0 && i + 1 < argc)
            form_arg = argv[++i];
        else if (strcmp(argv[i], "--cpu") == 0)
            want = CL_DEVICE_TYPE_CPU;
        else {
            fprintf(stderr, "usage: %s [--cl DIR] [--form emulated|native|all] [--cpu]\n", argv[0]);
            return 2;
        }
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/mma.h", cl_dir);
    char *mma_src = read_file(path);
    if (!mma_src) {
        fprintf(stderr, "oclfuse-mma-probe: cannot read %s\n", path);
        return 2;
    }
    /* the first device of the wanted type on any platform, else any device */
    cl_platform_id plats[16];
    cl_uint np = 0;
    probe_dev p = {0};
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS)
        np = 0;
    for (int pass = 0; pass < 2 && !p.dev; pass++)
        for (cl_uint i = 0; i < np && !p.dev; i++) {
            cl_uint nd = 0;
            clGetDeviceIDs(plats[i], pass ? CL_DEVICE_TYPE_ALL : want, 1, &p.dev, &nd);
            if (nd == 0)
                p.dev = NULL;
        }
    if (!p.dev) {
        fprintf(stderr, "oclfuse-mma-probe: no OpenCL device\n");
        free(mma_src);
        return 2;
    }
    char name[256] = "", ext[8192] = "";
    clGetDeviceInfo(p.dev, CL_DEVICE_NAME, sizeof name, name, NULL);
    clGetDeviceInfo(p.dev, CL_DEVICE_EXTENSIONS, sizeof ext, ext, NULL);
    cl_uint ccmaj = 0, ccmin = 0;
    if (strstr(ext, "cl_nv_device_attribute_query")) {
        clGetDeviceInfo(p.dev, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof ccmaj, &ccmaj, NULL);
        clGetDeviceInfo(p.dev, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof ccmin, &ccmin, NULL);
    }
    printf("device: %s", name);
    if (ccmaj)
        printf(", compute capability %u.%u", ccmaj, ccmin);
    printf("\n");
    cl_int err;
    p.ctx = clCreateContext(NULL, 1, &p.dev, NULL, NULL, &err);
    p.q = p.ctx ? clCreateCommandQueue(p.ctx, p.dev, 0, &err) : NULL;
    if (!p.q) {
        fprintf(stderr, "oclfuse-mma-probe: no context or queue (%d)\n", err);
        free(mma_src);
        return 2;
    }
    const int do_emul = strcmp(form_arg, "native") != 0;
    const int force_native = strcmp(form_arg, "native") == 0;
    const int all = strcmp(form_arg, "all") == 0;
    const int native_ok[NFAMILIES] = {
        force_native || (all && ccmaj >= 8), force_native || (all && is_cdna23(name)),
        force_native || (all && strstr(ext, "cl_intel_subgroup_matrix_multiply_accumulate") &&
                         has_subgroup16(p.dev))};
    int failed = 0, built = 0;
    for (int f = 0; f < NFAMILIES; f++) {
        const probe_family *fam = &families[f];
        for (int form = 0; form < 2; form++) {
            if ((form == 0 && !do_emul) || (form == 1 && !native_ok[f]))
                continue;
            const char *form_name = form ? "native" : "emulated";
            int ok = 1;
            for (int bf = 0; bf < 2; bf++) {
                /* the warp's native form in both spellings of inline assembly */
                cl_program prog = build(&p, mma_src, fam, form, bf, 1);
                if (!prog && form == 1 && f == 0) {
                    prog = build(&p, mma_src, fam, form, bf, 0);
                    if (prog)
                        printf("  native: built with asm (OCLF_ASM_GNU=0), not __asm__\n");
                }
                if (!prog) {
                    failed++;
                    ok = 0;
                    continue;
                }
                for (int exact = 1; exact >= 0; exact--)
                    failed += run_case(&p, prog, fam, form_name, bf, exact);
                clReleaseProgram(prog);
            }
            if (f == 0) { /* the warp family's conversion wrappers */
                const probe_family conv = {"conversions", conv_kernel, "OCLF_MMA", 0, 0, 0, 0};
                cl_program prog = build(&p, mma_src, &conv, form, 0, 1);
                if (!prog && form == 1)
                    prog = build(&p, mma_src, &conv, form, 0, 0);
                if (!prog) {
                    failed++;
                    ok = 0;
                } else {
                    failed += run_conv(&p, prog, form_name);
                    clReleaseProgram(prog);
                }
            }
            built += ok;
        }
    }
    if (!native_ok[0])
        printf("  native m16n8k16: not built (no compute capability 8.0 or newer reported)\n");
    if (!native_ok[1])
        printf("  native 16x16x16: not built (not a gfx90a, gfx94x or gfx95x device)\n");
    if (!native_ok[2])
        printf("  native m8n16k16: not built (no cl_intel_subgroup_matrix_multiply_accumulate "
               "with sub-groups of 16)\n");
    printf("%s: %d form(s) built, %d check(s) failed\n", failed ? "FAIL" : "ok", built, failed);
    clReleaseCommandQueue(p.q);
    clReleaseContext(p.ctx);
    free(mma_src);
    return failed ? 1 : 0;
}
