/*
 * The storage conversions of cl/common.h against the host reference
 * (lib/ref), bit for bit: every f16 pattern widened, and f32 values at every
 * rounding boundary of f16 narrowed (ties, one fp32 ulp either side,
 * subnormal results, the overflow threshold, infinities and NaNs), through
 * the macros the kernels use: scalar (LD/ST, row tails) and 16 wide
 * (LDV/STV, whole vectors), the latter at odd element offsets, since a vector path that
 * assumed vector alignment would fault or read the wrong elements there.
 */
#include "harness.h"
#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Conversions through the same macros the op kernels use, for the f16 and
 * the bf16 storage types (OCLF_DTYPE is set per program). */
static const char kernels[] =
    "kernel void widen_v(global const stor_t *h, ulong off, global float *f)\n"
    "{ const ulong i = off + get_global_id(0) * OCLF_VEC;\n"
    "  STV_F(f, i, LDV(h, i)); }\n"
    "kernel void widen_s(global const stor_t *h, ulong off, global float *f)\n"
    "{ const ulong i = off + get_global_id(0); f[i] = LD(h, i); }\n"
    "kernel void narrow_v(global const float *f, ulong off, global stor_t *h)\n"
    "{ const ulong i = off + get_global_id(0) * OCLF_VEC;\n"
    "  STV(h, i, LDV_F(f, i)); }\n"
    "kernel void narrow_s(global const float *f, ulong off, global stor_t *h)\n"
    "{ const ulong i = off + get_global_id(0); ST(h, i, f[i]); }\n";

static char *read_common(void)
{
    const char *dir = getenv("OCLF_SOURCE_CL_DIR");
    ck_assert_msg(dir != NULL, "meson sets OCLF_SOURCE_CL_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/common.h", dir);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    const long n = ftell(f);
    ck_assert_int_ge(n, 1);
    rewind(f);
    char *buf = malloc((size_t)n + sizeof kernels + 1);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    memcpy(buf + n, kernels, sizeof kernels);
    return buf;
}

static cl_program build(oclf_dtype dt)
{
    th_env *e = th_get();
    char *src = read_common();
    const char *csrc = src;
    cl_int err;
    cl_program p = clCreateProgramWithSource(e->cl, 1, &csrc, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    char opts[64];
    snprintf(opts, sizeof opts, "-DOCLF_DTYPE=%d -DOCLF_VEC=16", dt == OCLF_F16 ? 1 : 2);
    err = clBuildProgram(p, 1, &e->device, opts, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[8192] = "";
        clGetProgramBuildInfo(p, e->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        ck_abort_msg("conversion kernels do not build: %s", log);
    }
    free(src);
    return p;
}

/* Runs `name` over n elements from element `off` (n a multiple of 16 for
 * the vector kernels), from `in` to `out`, each buffer off + n long. */
static void run(cl_program p, const char *name, size_t off, size_t n, const void *in,
                size_t in_es, void *out, size_t out_es)
{
    th_env *e = th_get();
    cl_int err;
    cl_kernel k = clCreateKernel(p, name, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const size_t len = off + n;
    cl_mem mi = th_upload(in, len * in_es);
    void *init = calloc(len, out_es);
    cl_mem mo = th_upload(init, len * out_es);
    const cl_ulong o = off;
    ck_assert_int_eq(clSetKernelArg(k, 0, sizeof mi, &mi), CL_SUCCESS);
    ck_assert_int_eq(clSetKernelArg(k, 1, sizeof o, &o), CL_SUCCESS);
    ck_assert_int_eq(clSetKernelArg(k, 2, sizeof mo, &mo), CL_SUCCESS);
    const size_t global = strstr(name, "_v") ? n / 16 : n;
    ck_assert_int_eq(clEnqueueNDRangeKernel(e->queue, k, 1, NULL, &global, NULL, 0, NULL, NULL),
                     CL_SUCCESS);
    th_download(mo, out, len * out_es);
    /* elements before `off` stay as they were */
    ck_assert_msg(memcmp(out, init, off * out_es) == 0, "%s wrote before offset %zu", name, off);
    free(init);
    clReleaseMemObject(mi), clReleaseMemObject(mo);
    clReleaseKernel(k);
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Every 16-bit pattern widened; bit for bit (NaNs included). */
START_TEST(test_widen_all)
{
    const oclf_dtype dt = _i ? OCLF_BF16 : OCLF_F16;
    cl_program p = build(dt);
    const size_t n = 65536, offs[] = {0, 1, 3};
    for (size_t oi = 0; oi < 3; oi++) {
        const size_t off = offs[oi];
        uint16_t *h = calloc(off + n, 2);
        float *f = malloc((off + n) * 4);
        for (size_t i = 0; i < n; i++)
            h[off + i] = (uint16_t)i;
        for (int vec = 0; vec < 2; vec++) {
            run(p, vec ? "widen_v" : "widen_s", off, n, h, 2, f, 4);
            for (size_t i = 0; i < n; i++) {
                const float want = dt == OCLF_F16 ? oclf_f16_to_f32((uint16_t)i)
                                                  : oclf_bf16_to_f32((uint16_t)i);
                const int same = isnan(want) ? isnan(f[off + i]) != 0
                                             : to_bits(want) == to_bits(f[off + i]);
                ck_assert_msg(same, "%s %s offset %zu: 0x%04zx -> %a, want %a",
                              oclf_dtype_name(dt), vec ? "vector" : "scalar", off, i,
                              (double)f[off + i], (double)want);
            }
        }
        free(h), free(f);
    }
    clReleaseProgram(p);
}
END_TEST

/* fp32 values at and around every rounding boundary of the 16-bit type:
 * each value a 16-bit pattern stands for, the midpoints to the next (ties),
 * one fp32 ulp either side of those, and a spread of random bit patterns. */
START_TEST(test_narrow_boundaries)
{
    const oclf_dtype dt = _i ? OCLF_BF16 : OCLF_F16;
    cl_program p = build(dt);
    const size_t per = 6, n = 65536 * per + 65536;
    float *f = calloc(n + 3, 4);
    uint16_t *h = malloc((n + 3) * 2);
    th_seed(99);
    for (size_t off = 0; off < 4; off += 3) {
        size_t k = off;
        for (uint32_t i = 0; i < 65536; i++) {
            const float a = dt == OCLF_F16 ? oclf_f16_to_f32((uint16_t)i)
                                           : oclf_bf16_to_f32((uint16_t)i);
            const float b = dt == OCLF_F16 ? oclf_f16_to_f32((uint16_t)(i + 1))
                                           : oclf_bf16_to_f32((uint16_t)(i + 1));
            /* the midpoint is exact in fp32: 16-bit values have few digits */
            const float mid = isfinite(a) && isfinite(b) ? (a + b) / 2 : a;
            f[k++] = a;
            f[k++] = mid;
            f[k++] = from_bits(to_bits(mid) + 1);
            f[k++] = from_bits(to_bits(mid) - 1);
            f[k++] = a * 1.5f; /* past 65504 for f16: the overflow region */
            f[k++] = a * 0.75f;
        }
        for (size_t i = 0; i < 65536; i++)
            f[k++] = from_bits((uint32_t)(th_uniform(0.0f, 1.0f) * 4294967040.0f));
        for (int vec = 0; vec < 2; vec++) {
            run(p, vec ? "narrow_v" : "narrow_s", off, n, f, 4, h, 2);
            for (size_t i = off; i < off + n; i++) {
                const uint16_t want = dt == OCLF_F16 ? oclf_f32_to_f16(f[i]) : oclf_f32_to_bf16(f[i]);
                /* a NaN's payload is the device's choice; NaN it must stay */
                const int nan16 = dt == OCLF_F16 ? (h[i] & 0x7fffu) > 0x7c00u
                                                 : (h[i] & 0x7fffu) > 0x7f80u;
                ck_assert_msg(isnan(f[i]) ? nan16 : h[i] == want, "%s %s offset %zu: %a -> 0x%04x, want 0x%04x",
                              oclf_dtype_name(dt), vec ? "vector" : "scalar", off,
                              (double)f[i], h[i], want);
            }
        }
    }
    free(f), free(h);
    clReleaseProgram(p);
}
END_TEST

static Suite *dtype_suite(void)
{
    Suite *s = suite_create("dtype");
    TCase *t = tcase_create("conversions");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, test_widen_all, 0, 2);
    tcase_add_loop_test(t, test_narrow_boundaries, 0, 2);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return th_run_suite(dtype_suite()); }
