/*
 * L2 distance + top-k against the CPU reference.
 *
 * Most cases use small-integer data: every distance, norm and dot product is
 * then an exact integer in fp32 on both formulas and both paths, so the
 * results must equal the reference bit for bit, and the many exact ties test
 * the (distance, index) order itself. Random-float cases compare with
 * tolerances scaled to the expansion's rounding error, and demand the exact
 * index only where the reference's neighbouring distances are further apart
 * than that error.
 */
#include "harness.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const oclf_dtype dtypes[] = {OCLF_F32, OCLF_F16, OCLF_BF16};

enum { DATA_INT, DATA_FLOAT, DATA_SAME };

typedef struct l2_case {
    oclf_dtype dt;
    size_t nq, n, d, k;
    int data;
    size_t dups;     /* rows copied from earlier rows (exact duplicates) */
    size_t nan_rows; /* rows holding a NaN */
    size_t pad;      /* extra elements per row of q, x and the outputs */
    size_t off;      /* leading elements of every buffer */
    int norms;       /* pass precomputed |x|^2 */
    oclf_path path;
    const oclf_params *params;
    oclf_l2_precision precision;
    size_t max_temp;
    int mask; /* allowed rows: 0 all (no mask), else a MASK_* pattern */
} l2_case;

enum { MASK_HALF = 1, MASK_NONE, MASK_FEW };

/* Whether row r is allowed under the pattern: about half the rows, in runs
 * and singles; none; one row in 97. */
static int mask_bit(int mask, size_t r)
{
    switch (mask) {
    case MASK_HALF: return (r * 2654435761u >> 7) % 2 == 0;
    case MASK_NONE: return 0;
    default: return r % 97 == 3;
    }
}

#define L2C(...) ((l2_case){__VA_ARGS__, OCLF_PATH_AUTO, NULL, OCLF_L2_FAST, 0, 0})

static const char *path_name(oclf_path p)
{
    return p == OCLF_PATH_FUSED ? "fused" : p == OCLF_PATH_UNFUSED ? "unfused" : "auto";
}

/* Runs one case and checks it; returns the number of queries checked. */
static void run_case(const l2_case *c)
{
    th_env *e = th_get();
    const oclf_dtype dt = c->dt;
    const size_t es = oclf_dtype_size(dt);
    const size_t qs = c->d + c->pad, xs = c->d + c->pad, os = c->k + c->pad;
    const size_t qn_el = c->off + c->nq * qs + 1, xn_el = c->off + c->n * xs + 1;
    const size_t on_el = c->off + c->nq * os + 1;
    th_seed(c->nq * 7919 + c->n * 31 + c->d * 3 + c->k + (size_t)dt);

    float *q = malloc(qn_el * 4);
    void *x = malloc(xn_el * es);
    for (size_t i = 0; i < qn_el; i++)
        q[i] = c->data != DATA_FLOAT ? floorf(th_uniform(-4.0f, 5.0f)) : th_uniform(-1.0f, 1.0f);
    for (size_t i = 0; i < xn_el; i++) {
        float v = c->data == DATA_INT ? floorf(th_uniform(-4.0f, 5.0f)) : th_uniform(-1.0f, 1.0f);
        if (c->data == DATA_SAME)
            v = (float)((i % xs) % 5) - 2.0f; /* every row the same */
        oclf_ref_set(dt, x, i, v);
    }
    char *xr = (char *)x + c->off * es;
    for (size_t r = 0; r < c->dups && c->n > 1; r++) {
        size_t dst = (r * 7919 + 13) % c->n, src = (r * 104729 + 5) % c->n;
        memcpy(xr + dst * xs * es, xr + src * xs * es, c->d * es);
    }
    for (size_t r = 0; r < c->nan_rows && c->n; r++)
        oclf_ref_set(dt, xr, ((r * 37) % c->n) * xs + (r % c->d), NAN);

    /* the mask with c->off leading bytes and one spare byte */
    const size_t mask_bytes = c->off + (c->n + 7) / 8 + 1;
    uint8_t *mask = calloc(mask_bytes, 1);
    for (size_t r = 0; c->mask && r < c->n; r++)
        if (mask_bit(c->mask, r))
            mask[c->off + r / 8] |= (uint8_t)(1u << (r % 8));

    float *norms = malloc((c->off + c->n + 1) * 4);
    for (size_t r = 0; r < c->n; r++) {
        double s = 0;
        for (size_t j = 0; j < c->d; j++) {
            double v = oclf_ref_get(dt, xr, r * xs + j);
            s += v * v;
        }
        norms[c->off + r] = (float)s;
    }

    /* sentinels in the outputs: padding and offsets must stay as they are */
    float *dist0 = malloc(on_el * 4);
    int64_t *idx0 = malloc(on_el * 8);
    for (size_t i = 0; i < on_el; i++)
        dist0[i] = -7.0f, idx0[i] = -77;

    cl_mem mq = th_upload(q, qn_el * 4), mx = th_upload(x, xn_el * es);
    cl_mem mn = th_upload(norms, (c->off + c->n + 1) * 4);
    cl_mem mm = th_upload(mask, mask_bytes);
    oclf_buf bm = {mm, c->off, 0};
    cl_mem md = th_upload(dist0, on_el * 4), mi = th_upload(idx0, on_el * 8);
    oclf_buf bq = {mq, c->off, c->pad ? qs : 0}, bx = {mx, c->off, c->pad ? xs : 0};
    oclf_buf bd = {md, c->off, os}, bi = {mi, c->off, os}, bn = {mn, c->off, 0};
    oclf_l2_topk_options opt;
    oclf_l2_topk_options_init(&opt);
    opt.precision = c->precision;
    opt.max_temp_bytes = c->max_temp;
    opt.x_norms = c->norms ? &bn : NULL;
    opt.allowed = c->mask ? &bm : NULL;
    oclf_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.path = c->path;
    if (c->params)
        ch.params = *c->params;
    cl_event ev = NULL;
    TH_OK(oclf_l2_topk(e->ctx, e->queue, dt, c->nq, c->n, c->d, c->k, bq, bx, bd, bi, &opt, &ch,
                       0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);

    float *gd = malloc(on_el * 4);
    int64_t *gi = malloc(on_el * 8);
    th_download(md, gd, on_el * 4);
    th_download(mi, gi, on_el * 8);

    double *rd = malloc((c->nq * c->k + 1) * sizeof *rd);
    int64_t *ri = malloc((c->nq * c->k + 1) * sizeof *ri);
    double *all = malloc((c->n + 1) * sizeof *all);
    oclf_ref_l2_topk_allowed(dt, c->nq, c->n, c->d, c->k, q + c->off, qs, xr, xs,
                             c->mask ? mask + c->off : NULL, rd, ri);

    char tag[160];
    snprintf(tag, sizeof tag, "%s %s nq %zu N %zu D %zu k %zu data %d mask %d",
             path_name(c->path), oclf_dtype_name(dt), c->nq, c->n, c->d, c->k, c->data, c->mask);
    for (size_t i = 0; i < on_el; i++) {
        size_t rel = i - c->off;
        int inside = i >= c->off && rel / os < c->nq && rel % os < c->k;
        if (!inside) {
            ck_assert_msg(gd[i] == -7.0f && gi[i] == -77, "%s: output element %zu outside the "
                          "rows was written", tag, i);
        }
    }
    for (size_t qi = 0; qi < c->nq; qi++) {
        const float *gdq = gd + c->off + qi * os;
        const int64_t *giq = gi + c->off + qi * os;
        const double *rdq = rd + qi * c->k;
        const int64_t *riq = ri + qi * c->k;
        if (c->data != DATA_FLOAT) {
            /* exact arithmetic: the same list, bit for bit */
            for (size_t j = 0; j < c->k; j++) {
                int same_d = isnan(rdq[j]) ? isnan(gdq[j]) : (double)gdq[j] == rdq[j];
                ck_assert_msg(giq[j] == riq[j] && same_d,
                              "%s: query %zu rank %zu: got (%g, %lld), want (%g, %lld)", tag, qi,
                              j, (double)gdq[j], (long long)giq[j], rdq[j], (long long)riq[j]);
            }
            continue;
        }
        /* float data: distances within the formula's error, each returned
         * index really at its distance, exact indices where gaps allow */
        oclf_ref_l2_dists(dt, c->n, c->d, q + c->off + qi * qs, xr, xs, all);
        double qq = 0, xmax = 0;
        for (size_t j = 0; j < c->d; j++)
            qq += (double)q[c->off + qi * qs + j] * q[c->off + qi * qs + j];
        for (size_t r = 0; r < c->n; r++)
            xmax = fmax(xmax, (double)norms[c->off + r]);
        const double tol = 4e-6 * (qq + xmax) + 1e-5 * fabs(rdq[c->k - 1]);
        for (size_t j = 0; j < c->k; j++) {
            if (riq[j] < 0) {
                ck_assert_msg(giq[j] == -1 && gdq[j] == FLT_MAX, "%s: padding at %zu", tag, j);
                continue;
            }
            ck_assert_msg(fabs(gdq[j] - rdq[j]) <= tol,
                          "%s: query %zu rank %zu: distance %g, want %g (tol %g)", tag, qi, j,
                          (double)gdq[j], rdq[j], tol);
            ck_assert_msg(giq[j] >= 0 && (size_t)giq[j] < c->n, "%s: index %lld", tag,
                          (long long)giq[j]);
            ck_assert_msg(fabs(all[giq[j]] - gdq[j]) <= tol,
                          "%s: query %zu rank %zu: row %lld is at %g, not %g", tag, qi, j,
                          (long long)giq[j], all[giq[j]], (double)gdq[j]);
            if (j)
                ck_assert_msg(gdq[j] >= gdq[j - 1], "%s: not ascending at %zu", tag, j);
            for (size_t m = 0; m < j; m++)
                ck_assert_msg(giq[m] != giq[j], "%s: index %lld twice", tag, (long long)giq[j]);
            double lo = j ? rdq[j] - rdq[j - 1] : INFINITY;
            double hi = j + 1 < c->k ? rdq[j + 1] - rdq[j] : INFINITY;
            if (lo > 2 * tol && hi > 2 * tol)
                ck_assert_msg(giq[j] == riq[j], "%s: query %zu rank %zu: index %lld, want %lld",
                              tag, qi, j, (long long)giq[j], (long long)riq[j]);
        }
    }
    free(rd), free(ri), free(all), free(gd), free(gi);
    free(q), free(x), free(norms), free(dist0), free(idx0), free(mask);
    clReleaseMemObject(mq), clReleaseMemObject(mx), clReleaseMemObject(mn);
    clReleaseMemObject(mm);
    clReleaseMemObject(md), clReleaseMemObject(mi);
}

static void both_paths(l2_case c)
{
    c.path = OCLF_PATH_FUSED;
    run_case(&c);
    c.path = OCLF_PATH_UNFUSED;
    run_case(&c);
}

/* Every dtype, both paths, the shape list of the spec's check suite as a
 * covering subset: D in {1, 3, 128, 768, 1000}, N in {1, 5, 1000, 100003},
 * k in {1, 10, 100, 1024, 2048, N, N + 5}, nq in {0, 1, 7, 100}. */
START_TEST(test_matrix)
{
    const oclf_dtype dt = dtypes[_i];
    const l2_case cases[] = {
        /* dt, nq, n, d, k, data, dups, nans, pad, off, norms */
        L2C(dt, 7, 1000, 128, 10, DATA_INT, 50, 0, 3, 5, 0),
        L2C(dt, 1, 100003, 3, 100, DATA_INT, 0, 0, 0, 0, 0),
        L2C(dt, 100, 5, 768, 10, DATA_INT, 2, 0, 0, 0, _i == 0),
        L2C(dt, 7, 1000, 1000, 1024, DATA_INT, 10, 0, 1, 2, 0),
        L2C(dt, 1, 5, 1, 5, DATA_INT, 0, 0, 0, 0, 0),
        L2C(dt, 1, 1, 3, 1, DATA_INT, 0, 0, 0, 0, 0),
        L2C(dt, 4, 5000, 1, 2048, DATA_INT, 0, 0, 0, 0, _i == 1),
        L2C(dt, 0, 1000, 128, 10, DATA_INT, 0, 0, 0, 0, 0),
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        both_paths(cases[i]);
}
END_TEST

/* Ties: every row equal (the answer is rows 0..k-1), exact duplicates, and
 * NaN rows ranked after every number but before the padding. */
START_TEST(test_ties_nan)
{
    const oclf_dtype dt = dtypes[_i];
    l2_case same = L2C(dt, 7, 1000, 64, 100, DATA_SAME, 0, 0, 0, 0, 0);
    both_paths(same);
    l2_case nan = L2C(dt, 7, 200, 17, 205, DATA_INT, 20, 9, 0, 0, 0);
    both_paths(nan);
    l2_case nan_small_k = L2C(dt, 1, 1000, 128, 10, DATA_INT, 0, 200, 0, 0, 0);
    both_paths(nan_small_k);
}
END_TEST

/* Random floats: tolerances for the expansion, both paths, with and without
 * precomputed norms; the direct formula through precision EXACT. */
START_TEST(test_float_data)
{
    l2_case c = L2C(OCLF_F32, 7, 1000, 128, 100, DATA_FLOAT, 0, 0, 0, 0, 0);
    both_paths(c);
    c.norms = 1;
    both_paths(c);
    c.norms = 0;
    c.path = OCLF_PATH_FUSED;
    c.precision = OCLF_L2_EXACT;
    run_case(&c);
    l2_case big = L2C(OCLF_F32, 1, 100003, 128, 10, DATA_FLOAT, 0, 0, 0, 0, 0);
    both_paths(big);
    l2_case h = L2C(OCLF_F16, 7, 1000, 768, 100, DATA_FLOAT, 0, 0, 0, 0, 0);
    both_paths(h);
}
END_TEST

/* The direct formula on exact data: same lists as the reference. */
START_TEST(test_exact_precision)
{
    l2_case c = L2C(OCLF_F32, 7, 1000, 128, 10, DATA_INT, 30, 3, 0, 0, 0);
    c.precision = OCLF_L2_EXACT;
    c.path = OCLF_PATH_AUTO;
    run_case(&c);
    c.nq = 100;
    c.k = 1024;
    run_case(&c);
}
END_TEST

/* Tuner parameters: a GPU-sized configuration (work-group 256, k = 2048),
 * other register blocks, explicit slice counts, small GEMM tiles, and a
 * temporary bound that forces query chunks on both paths. */
START_TEST(test_structures)
{
    oclf_params gpu = {0};
    oclf_params_set(&gpu, "QB", 4);
    oclf_params_set(&gpu, "RB", 2);
    oclf_params_set(&gpu, "VEC", 4);
    oclf_params_set(&gpu, "QG", 16);
    oclf_params_set(&gpu, "WGS", 256);
    oclf_params_set(&gpu, "SLICES", 37);
    l2_case c = L2C(OCLF_F32, 20, 3000, 100, 2048, DATA_INT, 40, 2, 0, 0, 0);
    c.path = OCLF_PATH_FUSED;
    c.params = &gpu;
    run_case(&c);

    oclf_params other = {0};
    oclf_params_set(&other, "QB", 2);
    oclf_params_set(&other, "RB", 8);
    oclf_params_set(&other, "VEC", 16);
    oclf_params_set(&other, "QG", 6);
    oclf_params_set(&other, "WGS", 9);
    oclf_params_set(&other, "SLICES", 1);
    oclf_params_set(&other, "FORMULA", 0);
    l2_case o = L2C(OCLF_BF16, 13, 1000, 77, 100, DATA_INT, 40, 0, 0, 0, 0);
    o.path = OCLF_PATH_FUSED;
    o.params = &other;
    run_case(&o);

    oclf_params tiles = {0};
    oclf_params_set(&tiles, "TILE", 97);
    oclf_params_set(&tiles, "SLICES", 3);
    l2_case u = L2C(OCLF_F16, 7, 1000, 128, 100, DATA_INT, 40, 2, 0, 0, 0);
    u.path = OCLF_PATH_UNFUSED;
    u.params = &tiles;
    run_case(&u);

    /* bounds: three queries' heaps (fused, two slices), one query and a
     * narrow tile (unfused) */
    oclf_params two = {0};
    oclf_params_set(&two, "SLICES", 2);
    l2_case b = L2C(OCLF_F32, 20, 1000, 128, 100, DATA_INT, 0, 0, 0, 0, 0);
    b.path = OCLF_PATH_FUSED;
    b.params = &two;
    b.max_temp = 3 * 2 * 100 * 12 + 100;
    run_case(&b);
    b.path = OCLF_PATH_UNFUSED;
    b.params = NULL;
    b.max_temp = 64 << 10;
    run_case(&b);
    /* the same bound with the slices a 132-unit GPU's default takes (two a
     * unit): 264 lists of 100 would not fit, fewer slices do */
    oclf_params many = {0};
    oclf_params_set(&many, "SLICES", 264);
    b.params = &many;
    run_case(&b);
}
END_TEST

/* The explicit structure the QLOCAL, XNORM and XSTAGE cases share: two
 * queries x four rows of float4, three slices. */
static oclf_params qlocal_params(int qlocal, int xnorm, int qg, int wgs, int formula, int xstage,
                                 int topk)
{
    oclf_params p = {0};
    oclf_params_set(&p, "QB", 2);
    oclf_params_set(&p, "RB", 4);
    oclf_params_set(&p, "VEC", 4);
    oclf_params_set(&p, "QG", qg);
    oclf_params_set(&p, "WGS", wgs);
    oclf_params_set(&p, "SLICES", 3);
    oclf_params_set(&p, "FORMULA", formula);
    oclf_params_set(&p, "QLOCAL", qlocal);
    oclf_params_set(&p, "XNORM", xnorm);
    oclf_params_set(&p, "XSTAGE", xstage);
    oclf_params_set(&p, "TOPK", topk);
    return p;
}

/* QLOCAL = 1 (the group's queries copied to local memory) against the
 * reference: three query blocks per group with a padded last group and
 * strided, offset queries; one block per group (the traffic configuration);
 * row norms from every work-item (XNORM = 0); precomputed norms; the direct
 * formula; random floats. QLOCAL = 0 on the same structure. D = 77 leaves a
 * scalar tail after the float4 chunks. */
START_TEST(test_qlocal)
{
    static const struct {
        oclf_dtype dt;
        int qlocal, xnorm, qg, wgs, formula, norms, pad, xstage;
    } v[] = {
        {OCLF_F32, 1, 1, 6, 12, 1, 0, 3, 0},   {OCLF_F32, 1, 1, 2, 16, 1, 0, 0, 0},
        {OCLF_F32, 0, 1, 6, 12, 1, 0, 3, 0},   {OCLF_F32, 1, 0, 6, 12, 1, 0, 0, 0},
        {OCLF_F16, 1, 1, 6, 12, 1, 1, 0, 0},   {OCLF_BF16, 1, 1, 6, 12, 0, 0, 0, 0},
        /* rows staged in chunks of 16 (a short last chunk of 12, then the
         * scalar tail) and of 64, each dtype, both formulas and XNORM 2 */
        {OCLF_F32, 1, 0, 6, 12, 1, 0, 3, 16},  {OCLF_F32, 0, 2, 6, 12, 1, 0, 0, 64},
        {OCLF_F16, 1, 0, 6, 12, 1, 1, 0, 16},  {OCLF_BF16, 0, 0, 6, 12, 0, 0, 3, 64},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        oclf_params p = qlocal_params(v[i].qlocal, v[i].xnorm, v[i].qg, v[i].wgs, v[i].formula,
                                      v[i].xstage, 0);
        l2_case c = L2C(v[i].dt, 7, 1000, 77, 10, DATA_INT, 40, 2, (size_t)v[i].pad,
                        (size_t)v[i].pad ? 5 : 0, v[i].norms);
        c.path = OCLF_PATH_FUSED;
        c.params = &p;
        run_case(&c);
    }
    oclf_params p = qlocal_params(1, 1, 6, 12, 1, 0, 0);
    l2_case f = L2C(OCLF_F32, 7, 1000, 77, 20, DATA_FLOAT, 0, 0, 0, 0, 0);
    f.path = OCLF_PATH_FUSED;
    f.params = &p;
    run_case(&f);
}
END_TEST

/* |x|^2 in x_norm's order on the host, for VEC = 4: lane-wise fma over the
 * whole chunks, the kernels' VSUM tree, then a scalar fma tail. */
static float norm_in_kernel_order(oclf_dtype dt, const void *x, size_t row, size_t d)
{
    float a[4] = {0, 0, 0, 0};
    size_t c = 0;
    for (; c + 4 <= d; c += 4)
        for (int l = 0; l < 4; l++) {
            const float v = oclf_ref_get(dt, x, row * d + c + (size_t)l);
            a[l] = fmaf(v, v, a[l]);
        }
    float s = (a[0] + a[1]) + (a[2] + a[3]);
    for (; c < d; c++) {
        const float v = oclf_ref_get(dt, x, row * d + c);
        s = fmaf(v, v, s);
    }
    return s;
}

/* One fused call with the shared structure, six queries a group; results
 * to gd, gi. */
static void fused_raw(oclf_dtype dt, size_t nq, size_t n, size_t d, size_t k, const float *q,
                      const void *x, const float *norms, int qlocal, int xnorm, int xstage,
                      int topk, float *gd, int64_t *gi)
{
    th_env *e = th_get();
    cl_mem mq = th_upload(q, nq * d * 4), mx = th_upload(x, n * d * oclf_dtype_size(dt));
    cl_mem mn = th_upload(norms ? norms : q, norms ? n * 4 : 4);
    cl_mem md = th_alloc(nq * k * 4), mi = th_alloc(nq * k * 8);
    oclf_buf bq = {mq, 0, 0}, bx = {mx, 0, 0}, bn = {mn, 0, 0}, bd = {md, 0, 0}, bi = {mi, 0, 0};
    oclf_l2_topk_options opt;
    oclf_l2_topk_options_init(&opt);
    opt.x_norms = norms ? &bn : NULL;
    oclf_choice ch = th_choice(OCLF_PATH_FUSED);
    ch.params = qlocal_params(qlocal, xnorm, 6, 12, 1, xstage, topk);
    TH_OK(oclf_l2_topk(e->ctx, e->queue, dt, nq, n, d, k, bq, bx, bd, bi, &opt, &ch, 0, NULL,
                       NULL));
    th_download(md, gd, nq * k * 4);
    th_download(mi, gi, nq * k * 8);
    clReleaseMemObject(mq), clReleaseMemObject(mx), clReleaseMemObject(mn);
    clReleaseMemObject(md), clReleaseMemObject(mi);
}

/* The scan computes |x|^2 from the vectors of its register block: on random
 * floats, the lists must equal bit for bit those computed from norms passed
 * in x_norm's order (so the distances are what a separate norm pass gave),
 * and must not depend on where the queries are read from (QLOCAL) or on
 * which work-items compute the norms (XNORM). f16 checks the conversion on
 * load against x_norm's order. */
START_TEST(test_scan_norms)
{
    enum { NQ = 7, N = 1000, D = 77, K = 20 };
    static const struct {
        oclf_dtype dt;
        int qlocal, xnorm, norms, xstage, topk;
    } runs[] = {
        {OCLF_F32, 1, 1, 0, 0, 0},  {OCLF_F32, 0, 1, 0, 0, 0},  {OCLF_F32, 1, 0, 0, 0, 0},
        {OCLF_F32, 1, 1, 1, 0, 0},  {OCLF_F32, 0, 2, 0, 0, 0},  {OCLF_F32, 1, 0, 0, 16, 0},
        {OCLF_F32, 0, 1, 1, 64, 0}, {OCLF_F32, 0, 2, 0, 32, 0}, {OCLF_F32, 1, 0, 0, 16, 1},
        {OCLF_F32, 0, 2, 0, 0, 1},  {OCLF_F16, 1, 1, 0, 0, 0},  {OCLF_F16, 1, 1, 1, 0, 0},
        {OCLF_F16, 0, 2, 0, 0, 0},  {OCLF_F16, 1, 0, 0, 16, 0}, {OCLF_F16, 1, 0, 0, 16, 1},
        {OCLF_BF16, 0, 1, 0, 0, 0}, {OCLF_BF16, 1, 0, 0, 32, 1},
    };
    static float gd[2][NQ * K];
    static int64_t gi[2][NQ * K];
    float *q = NULL, *norms = NULL;
    void *x = NULL;
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        const oclf_dtype dt = runs[r].dt;
        const int first = r == 0 || runs[r - 1].dt != dt;
        if (first) {
            free(q), free(x), free(norms);
            th_seed(4242 + (uint64_t)dt);
            q = th_random(OCLF_F32, NQ * D, -1, 1);
            x = th_random(dt, N * D, -1, 1);
            norms = malloc(N * 4);
            for (size_t i = 0; i < N; i++)
                norms[i] = norm_in_kernel_order(dt, x, i, D);
        }
        fused_raw(dt, NQ, N, D, K, q, x, runs[r].norms ? norms : NULL, runs[r].qlocal,
                  runs[r].xnorm, runs[r].xstage, runs[r].topk, gd[!first], gi[!first]);
        if (!first)
            ck_assert_msg(memcmp(gd[0], gd[1], sizeof gd[0]) == 0 &&
                              memcmp(gi[0], gi[1], sizeof gi[0]) == 0,
                          "%s: QLOCAL = %d, XNORM = %d, norms passed %d, XSTAGE = %d, TOPK = %d: "
                          "the lists differ from the first run's",
                          oclf_dtype_name(dt), runs[r].qlocal, runs[r].xnorm, runs[r].norms,
                          runs[r].xstage, runs[r].topk);
    }
    free(q), free(x), free(norms);
}
END_TEST

/* TOPK = 1 (each list in local memory, offered to and sorted by the whole
 * work-group; a work-group per query merging the slices' sorted lists)
 * against the reference on every dtype: k = 1, odd k, k > N (padding), all
 * rows tied, duplicates, NaN rows, a mask, one query and none, a k that
 * overflows the buffers many times per slice, several slices and query
 * groups with a short last one, the direct formula, staged rows, and the
 * default slice count. */
START_TEST(test_onchip_lists)
{
    const oclf_dtype dt = dtypes[_i];
    static const struct {
        size_t nq, n, d, k;
        int data, nans, mask, formula, qlocal, xstage, slices;
    } v[] = {
        {5, 1000, 7, 1, DATA_INT, 0, 0, 1, 0, 0, 3},
        {7, 2000, 5, 37, DATA_INT, 3, 0, 1, 0, 0, 3},
        {4, 37, 3, 40, DATA_INT, 0, 0, 1, 0, 0, 2},
        {3, 300, 4, 10, DATA_SAME, 0, 0, 1, 0, 0, 3},
        {1, 5000, 16, 301, DATA_INT, 2, 0, 1, 0, 0, 2},
        {6, 1000, 9, 25, DATA_INT, 0, MASK_HALF, 1, 0, 0, 3},
        {2, 5000, 3, 20, DATA_INT, 0, MASK_FEW, 1, 0, 0, 0},
        /* the direct formula, the queries' local copy, staged rows */
        {7, 1000, 20, 50, DATA_INT, 4, 0, 0, 1, 16, 3},
        {0, 1000, 8, 10, DATA_INT, 0, 0, 1, 0, 0, 3},
        {7, 1000, 33, 100, DATA_FLOAT, 0, 0, 1, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        oclf_params p = qlocal_params(v[i].qlocal, 0, 6, 12, v[i].formula, v[i].xstage, 1);
        oclf_params_set(&p, "SLICES", v[i].slices);
        l2_case c = L2C(dt, v[i].nq, v[i].n, v[i].d, v[i].k, v[i].data, 30, (size_t)v[i].nans,
                        i % 2 ? 2 : 0, i % 2 ? 3 : 0, 0);
        c.mask = v[i].mask;
        c.path = OCLF_PATH_FUSED;
        c.params = &p;
        run_case(&c);
    }
}
END_TEST

/* ---- bad arguments: specific status, a sentence, buffers untouched ------ */

/* The outputs a rejected call must leave as they were. */
#define OUTPUTS_UNTOUCHED(call)                                                             \
    do {                                                                                    \
        clFinish(e->queue);                                                                 \
        th_download(md, gd, sizeof gd);                                                     \
        th_download(mi, gi, sizeof gi);                                                     \
        ck_assert_msg(memcmp(gd, d0, sizeof gd) == 0 && memcmp(gi, i0, sizeof gi) == 0,     \
                      "%s: a failing call wrote an output", #call);                         \
    } while (0)
#define EXPECT(call, status, word) TH_EXPECT_FAIL(call, status, word, OUTPUTS_UNTOUCHED(call))

/* A bitmask of allowed rows, on both paths and every dtype: about half
 * the rows (with a byte offset and padded rows), a few (fewer than k for a
 * small N: padding), none (all padding), several slices and tiles. */
START_TEST(test_allowed)
{
    const oclf_dtype dt = dtypes[_i];
    l2_case c = L2C(dt, 3, 1000, 5, 10, DATA_INT, 0, 0, 0, 0, 0);
    c.mask = MASK_HALF;
    both_paths(c);
    c = L2C(dt, 2, 100003, 3, 100, DATA_INT, 0, 0, 2, 5, 1);
    c.mask = MASK_FEW;
    both_paths(c);
    c = L2C(dt, 4, 37, 7, 10, DATA_INT, 3, 0, 0, 0, 0);
    c.mask = MASK_FEW; /* row 3 only */
    both_paths(c);
    c = L2C(dt, 2, 50, 4, 5, DATA_INT, 0, 0, 0, 0, 0);
    c.mask = MASK_NONE;
    both_paths(c);
    c = L2C(dt, 7, 5000, 16, 20, DATA_FLOAT, 0, 0, 0, 0, 0);
    c.mask = MASK_HALF;
    both_paths(c);
}
END_TEST

START_TEST(test_bad_arguments)
{
    th_env *e = th_get();
    enum { NQ = 3, N = 50, D = 8, K = 4 };
    float *hq = th_random(OCLF_F32, NQ * D, -1, 1), *hx = th_random(OCLF_F32, N * D, -1, 1);
    float d0[NQ * K];
    int64_t i0[NQ * K];
    float gd[NQ * K];
    int64_t gi[NQ * K];
    for (int i = 0; i < NQ * K; i++)
        d0[i] = 3.0f, i0[i] = 33;
    cl_mem mq = th_upload(hq, NQ * D * 4), mx = th_upload(hx, N * D * 4);
    cl_mem md = th_upload(d0, sizeof d0), mi = th_upload(i0, sizeof i0);
    cl_mem small = th_upload(hx, 16);
    oclf_buf Q = {mq, 0, 0}, X = {mx, 0, 0}, Dd = {md, 0, 0}, I = {mi, 0, 0};
    oclf_buf S = {small, 0, 0}, Nul = {NULL, 0, 0};
    oclf_buf Dover = {mi, 0, 0}; /* dist inside idx's buffer */
    oclf_buf Qs = {mq, 0, D - 1};
    cl_command_queue qu = e->queue;
    oclf_context *cx = e->ctx;

    ck_assert_int_eq(oclf_l2_topk(NULL, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, NULL, NULL, 0,
                                  NULL, NULL),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(oclf_last_error(NULL), "ctx"));
    EXPECT(oclf_l2_topk(cx, NULL, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "queue");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, 0, Q, X, Dd, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "k is 0");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, 0, K, Q, X, Dd, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "D is 0");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Nul, X, Dd, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "q: cl_mem is NULL");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, Nul, Dd, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "x: cl_mem is NULL");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Nul, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "dist");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, Nul, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "idx");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ + 1, N, D, K, Q, X, Dd, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "do not fit");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N + 1, D, K, Q, X, Dd, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "x:");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K + 1, Q, X, Dd, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "dist:");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, S, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "idx:");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Qs, X, Dd, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "stride");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K / 2, Q, X, Dover, I, NULL, NULL, 0, NULL,
                        NULL),
           OCLF_INVALID_ARGUMENT, "overlap");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, 1, N, D, K, Q, X, Q, I, NULL, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "overlaps an input");
    EXPECT(oclf_l2_topk(cx, qu, (oclf_dtype)5, NQ, N, D, K, Q, X, Dd, I, NULL, NULL, 0, NULL, NULL),
           OCLF_UNSUPPORTED, "dtype");
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, NULL, NULL, 1, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "num_events");

    oclf_l2_topk_options opt;
    oclf_l2_topk_options_init(&opt);
    opt.x_norms = &S;
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, &opt, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "x_norms");
    oclf_l2_topk_options_init(&opt);
    oclf_buf tiny = {small, 10, 0}; /* 6 bytes: fewer than N = 50 bits */
    opt.allowed = &tiny;
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, &opt, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "allowed");
    opt.allowed = &I; /* the mask inside an output */
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, &opt, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "overlaps an input");
    oclf_l2_topk_options_init(&opt);
    opt.precision = (oclf_l2_precision)4;
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, &opt, NULL, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "precision");
    oclf_l2_topk_options_init(&opt);
    opt.max_temp_bytes = 20; /* less than one query's K x 8 bytes (lists on chip) or 12 */
    oclf_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.path = OCLF_PATH_FUSED;
    oclf_params_set(&ch.params, "SLICES", 3);
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, &opt, &ch, 0, NULL, NULL),
           OCLF_OUT_OF_RESOURCES, "max_temp_bytes");
    ch.path = OCLF_PATH_UNFUSED;
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, &opt, &ch, 0, NULL, NULL),
           OCLF_OUT_OF_RESOURCES, "max_temp_bytes");
    oclf_l2_topk_options_init(&opt);
    opt.precision = OCLF_L2_EXACT;
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, &opt, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "EXACT");
    memset(&ch, 0, sizeof ch);
    oclf_params_set(&ch.params, "FORMULA", 1);
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, &opt, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "EXACT");
    /* One parameter out of its range each (3 is not among the
     * register-block sizes the header lists). */
    static const struct {
        const char *name;
        int64_t value;
        const char *word;
    } bad_params[] = {{"RB", 5, "RB"}, {"RB", 3, "RB = 3"}, {"QLOCAL", 2, "QLOCAL"},
                      {"XNORM", 3, "XNORM"}};
    for (size_t i = 0; i < sizeof bad_params / sizeof *bad_params; i++) {
        ch = th_choice(OCLF_PATH_FUSED);
        oclf_params_set(&ch.params, bad_params[i].name, bad_params[i].value);
        EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, NULL, &ch, 0, NULL, NULL),
               OCLF_INVALID_ARGUMENT, bad_params[i].word);
    }
    memset(&ch, 0, sizeof ch);
    ch.path = OCLF_PATH_FUSED;
    oclf_params_set(&ch.params, "QB", 3);
    oclf_params_set(&ch.params, "QG", 3);
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, NULL, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "QB = 3");
    memset(&ch, 0, sizeof ch);
    ch.path = OCLF_PATH_FUSED;
    oclf_params_set(&ch.params, "QB", 4);
    oclf_params_set(&ch.params, "QG", 8);
    oclf_params_set(&ch.params, "WGS", 7);
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, NULL, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "WGS");
    memset(&ch, 0, sizeof ch);
    ch.path = OCLF_PATH_UNFUSED;
    oclf_params_set(&ch.params, "FORMULA", 0);
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, NULL, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "FORMULA");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "VEC", 16);
    oclf_params_set(&ch.params, "XSTAGE", 8); /* not a multiple of VEC */
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, NULL, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "XSTAGE");
    ch = th_choice(OCLF_PATH_FUSED);
    oclf_params_set(&ch.params, "XSTAGE", 512);
    EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, D, K, Q, X, Dd, I, NULL, &ch, 0, NULL, NULL),
           OCLF_INVALID_ARGUMENT, "XSTAGE");
    /* QLOCAL = 1 where QG x D floats exceed the device's local memory (the
     * tile itself fits): refused with a sentence, before any launch. */
    cl_ulong local_mem = 0;
    clGetDeviceInfo(e->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL);
    const size_t big_d = (size_t)(local_mem / (4 * 32)) + 1;
    if (big_d <= (1u << 20)) {
        float *bq = calloc(NQ * big_d, 4), *bx = calloc(N * big_d, 4);
        cl_mem mbq = th_upload(bq, NQ * big_d * 4), mbx = th_upload(bx, N * big_d * 4);
        oclf_buf BQ = {mbq, 0, 0}, BX = {mbx, 0, 0};
        memset(&ch, 0, sizeof ch);
        ch.path = OCLF_PATH_FUSED;
        ch.params = qlocal_params(1, 1, 32, 32, 1, 0, 0);
        EXPECT(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, big_d, K, BQ, BX, Dd, I, NULL, &ch, 0, NULL,
                            NULL),
               OCLF_INVALID_ARGUMENT, "QLOCAL = 1");
        /* the same structure without the copy runs */
        oclf_params_set(&ch.params, "QLOCAL", 0);
        TH_OK(oclf_l2_topk(cx, qu, OCLF_F32, NQ, N, big_d, K, BQ, BX, Dd, I, NULL, &ch, 0, NULL,
                           NULL));
        clFinish(qu);
        th_download(md, gd, sizeof gd);
        th_download(mi, gi, sizeof gi);
        for (int i = 0; i < NQ * K; i++)
            ck_assert(gd[i] == 0.0f && gi[i] == i % K); /* all rows at 0: ties by index */
        ck_assert_int_eq(clEnqueueWriteBuffer(qu, md, CL_TRUE, 0, sizeof d0, d0, 0, NULL, NULL),
                         CL_SUCCESS);
        ck_assert_int_eq(clEnqueueWriteBuffer(qu, mi, CL_TRUE, 0, sizeof i0, i0, 0, NULL, NULL),
                         CL_SUCCESS);
        clReleaseMemObject(mbq), clReleaseMemObject(mbx);
        free(bq), free(bx);
    }

    /* nq = 0 still gives an event */
    cl_event ev = NULL;
    TH_OK(oclf_l2_topk(cx, qu, OCLF_F32, 0, N, D, K, Q, X, Dd, I, NULL, NULL, 0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    clWaitForEvents(1, &ev);
    clReleaseEvent(ev);

    clReleaseMemObject(mq), clReleaseMemObject(mx), clReleaseMemObject(md);
    clReleaseMemObject(mi), clReleaseMemObject(small);
    free(hq), free(hx);
}
END_TEST

static Suite *l2_suite(void)
{
    Suite *s = suite_create("l2topk");
    TCase *t = tcase_create("reference");
    tcase_set_timeout(t, 0);
    tcase_add_loop_test(t, test_matrix, 0, 3);
    tcase_add_loop_test(t, test_ties_nan, 0, 3);
    tcase_add_test(t, test_float_data);
    tcase_add_test(t, test_exact_precision);
    tcase_add_test(t, test_structures);
    tcase_add_test(t, test_qlocal);
    tcase_add_test(t, test_scan_norms);
    tcase_add_loop_test(t, test_onchip_lists, 0, 3);
    tcase_add_loop_test(t, test_allowed, 0, 3);
    suite_add_tcase(s, t);
    TCase *b = tcase_create("arguments");
    tcase_add_test(b, test_bad_arguments);
    suite_add_tcase(s, b);
    return s;
}

int main(void) { return th_run_suite(l2_suite()); }
