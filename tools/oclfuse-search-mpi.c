/*
 * oclfuse-search-mpi: exact k-nearest-neighbour search of a database split
 * over MPI ranks. Each rank reads (or generates) only its own contiguous
 * rows, searches them on its own OpenCL device with oclf_l2_topk_sharded
 * (its rows split again into buffers the device can allocate), and sends its
 * k candidates per query to rank 0, which merges them with
 * oclf_l2_topk_merge, the library's own merge: the result equals one search
 * over the whole database, bit for bit, when the ranks' devices compute
 * distances alike.
 *
 * Files are the SIFT/GIST benchmark formats: .fvecs (per vector an int32
 * dimension, then that many float32), .bvecs (int32 dimension, then bytes),
 * .ivecs (int32 count, then int32 ids).
 */
#include "oclfuse.h"
#include "ref.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MSG 512

typedef struct opts {
    const char *base, *queries, *gt, *out, *out_dist, *platform;
    size_t syn_n, syn_d, nq, k;
    uint64_t seed;
    oclf_dtype dtype;
    int exact;
} opts;

static int rank, nranks;
static char err_msg[MSG];

/* Records this rank's first error; later ones add nothing. */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    if (err_msg[0])
        return 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    return 0;
}

/* Every rank learns whether every rank is fine; rank 0 reports each failed
 * rank by number. Returns 1 when all are fine. */
static int all_ok(void)
{
    char *all = malloc((size_t)nranks * MSG);
    if (!all) {
        fprintf(stderr, "oclfuse-search-mpi: rank %d: out of host memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Allgather(err_msg, MSG, MPI_CHAR, all, MSG, MPI_CHAR, MPI_COMM_WORLD);
    int ok = 1;
    for (int r = 0; r < nranks; r++)
        if (all[(size_t)r * MSG]) {
            ok = 0;
            if (rank == 0)
                fprintf(stderr, "oclfuse-search-mpi: rank %d: %.*s\n", r, MSG,
                        all + (size_t)r * MSG);
        }
    free(all);
    return ok;
}

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Element (row, col) of the seeded synthetic set `stream`, uniform in
 * [-1, 1): a function of its position only, so each rank makes its rows
 * without the others'. */
static float synth(uint64_t seed, uint64_t stream, uint64_t row, uint64_t col, uint64_t d)
{
    uint64_t h = mix(seed ^ mix(stream ^ mix(row * d + col)));
    return (float)((double)(h >> 40) / (double)(1ull << 23) - 1.0);
}

/* A .fvecs/.bvecs file: its vector count and dimension, checked whole
 * (size a multiple of the record) before any row is read. */
typedef struct vecs {
    FILE *f;
    const char *path;
    int bytes; /* 1: .bvecs */
    size_t d, n, rec;
} vecs;

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static int vecs_open(vecs *v, const char *path)
{
    memset(v, 0, sizeof *v);
    v->path = path;
    v->bytes = ends_with(path, ".bvecs");
    if (!v->bytes && !ends_with(path, ".fvecs"))
        return fail("%s: not a .fvecs or .bvecs file", path);
    v->f = fopen(path, "rb");
    if (!v->f)
        return fail("%s: %s", path, strerror(errno));
    struct stat st;
    int32_t d = 0;
    if (fstat(fileno(v->f), &st) != 0 || fread(&d, 4, 1, v->f) != 1)
        return fail("%s: empty or unreadable", path);
    if (d <= 0 || d > (1 << 20))
        return fail("%s: record 0 has dimension %d", path, (int)d);
    v->d = (size_t)d;
    v->rec = 4 + v->d * (v->bytes ? 1 : 4);
    if ((size_t)st.st_size % v->rec)
        return fail("%s: truncated: %lld bytes are not a whole number of %zu-byte records of "
                    "dimension %zu (record %zu is cut short)",
                    path, (long long)st.st_size, v->rec, v->d, (size_t)st.st_size / v->rec);
    v->n = (size_t)st.st_size / v->rec;
    return 1;
}

/* Rows [first, first + n) as floats into out (n x d). */
static int vecs_read(vecs *v, size_t first, size_t n, float *out)
{
    unsigned char *rec = malloc(v->rec);
    if (!rec)
        return fail("out of host memory");
    int ok = fseeko(v->f, (off_t)(first * v->rec), SEEK_SET) == 0;
    for (size_t r = 0; ok && r < n; r++) {
        if (fread(rec, v->rec, 1, v->f) != 1) {
            ok = fail("%s: record %zu: short read", v->path, first + r);
            break;
        }
        int32_t d;
        memcpy(&d, rec, 4);
        if ((size_t)d != v->d) {
            ok = fail("%s: record %zu has dimension %d, record 0 has %zu", v->path, first + r,
                      (int)d, v->d);
            break;
        }
        for (size_t c = 0; c < v->d; c++) {
            if (v->bytes)
                out[r * v->d + c] = rec[4 + c];
            else
                memcpy(&out[r * v->d + c], rec + 4 + 4 * c, 4);
        }
    }
    free(rec);
    return ok;
}

static void vecs_close(vecs *v)
{
    if (v->f)
        fclose(v->f);
    v->f = NULL;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: mpirun -np P oclfuse-search-mpi (--base FILE | --synthetic N,D)\n"
            "         [--queries FILE | --nq N] [-k K] [--seed S] [--dtype f32|f16|bf16]\n"
            "         [--exact] [--platform NAME] [--gt FILE.ivecs] [--out FILE.ivecs]\n"
            "         [--out-dist FILE.fvecs]\n"
            "  --base      .fvecs or .bvecs database; each rank reads its rows only\n"
            "  --synthetic seeded database of N rows of D floats in [-1, 1)\n"
            "  --queries   .fvecs or .bvecs queries (default: --nq seeded queries, 100)\n"
            "  --gt        ground-truth ids (.ivecs) to score recall against\n"
            "  --out       result ids, one k-vector per query (.ivecs)\n"
            "  --out-dist  result squared distances (.fvecs)\n"
            "Rank r uses device r modulo the devices of the platform (first platform\n"
            "with a device, or the first whose name contains NAME).\n");
}

static int parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->k = 10;
    o->nq = 100;
    o->seed = 1;
    o->dtype = OCLF_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(a, "--exact")) {
            o->exact = 1;
            takes = 0;
        } else if (!v) {
            return fail("%s needs a value", a);
        } else if (!strcmp(a, "--base")) {
            o->base = v;
        } else if (!strcmp(a, "--queries")) {
            o->queries = v;
        } else if (!strcmp(a, "--gt")) {
            o->gt = v;
        } else if (!strcmp(a, "--out")) {
            o->out = v;
        } else if (!strcmp(a, "--out-dist")) {
            o->out_dist = v;
        } else if (!strcmp(a, "--platform")) {
            o->platform = v;
        } else if (!strcmp(a, "--synthetic")) {
            if (sscanf(v, "%zu,%zu", &o->syn_n, &o->syn_d) != 2 || !o->syn_d)
                return fail("--synthetic wants N,D with D > 0, not '%s'", v);
        } else if (!strcmp(a, "--nq")) {
            o->nq = strtoull(v, NULL, 10);
        } else if (!strcmp(a, "-k")) {
            o->k = strtoull(v, NULL, 10);
        } else if (!strcmp(a, "--seed")) {
            o->seed = strtoull(v, NULL, 10);
        } else if (!strcmp(a, "--dtype")) {
            o->dtype = !strcmp(v, "f16") ? OCLF_F16 : !strcmp(v, "bf16") ? OCLF_BF16 : OCLF_F32;
            if (o->dtype == OCLF_F32 && strcmp(v, "f32"))
                return fail("--dtype is f32, f16 or bf16, not '%s'", v);
        } else {
            return fail("unknown option %s (--help lists them)", a);
        }
        i += takes;
    }
    if (!o->base == !o->syn_d)
        return fail("give one of --base FILE and --synthetic N,D");
    if (o->k == 0 || o->k > INT32_MAX)
        return fail("-k must be 1..2^31-1");
    return 1;
}

/* This rank's device: rank modulo the devices of the chosen platform. */
typedef struct gpu {
    cl_context cl;
    cl_command_queue queue;
    oclf_context *ctx;
    cl_ulong max_alloc;
    char name[256];
} gpu;

static int gpu_open(gpu *g, const char *want)
{
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS || !np)
        return fail("no OpenCL platform");
    for (cl_uint i = 0; i < np; i++) {
        char pname[256] = "";
        clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
        if (want && !strstr(pname, want))
            continue;
        cl_device_id ds[64];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 64, ds, &nd) != CL_SUCCESS || !nd)
            continue;
        cl_device_id d = ds[rank % (int)nd];
        clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof g->name, g->name, NULL);
        clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof g->max_alloc, &g->max_alloc,
                        NULL);
        cl_int err;
        g->cl = clCreateContext(NULL, 1, &d, NULL, NULL, &err);
        if (err == CL_SUCCESS)
            g->queue = clCreateCommandQueue(g->cl, d, 0, &err);
        if (err != CL_SUCCESS)
            return fail("device %s: context or queue: OpenCL error %d", g->name, (int)err);
        if (oclf_context_create(g->cl, d, NULL, &g->ctx) != OCLF_SUCCESS)
            return fail("device %s: %s", g->name, oclf_last_error(NULL));
        return 1;
    }
    return fail(want ? "no platform named like '%s' with a device" : "no OpenCL device%s",
                want ? want : "");
}

static void gpu_close(gpu *g)
{
    oclf_context_destroy(g->ctx);
    if (g->queue)
        clReleaseCommandQueue(g->queue);
    if (g->cl)
        clReleaseContext(g->cl);
}

/* Searches this rank's rows [first, first + n) (host floats, n x d) on its
 * device: the rows go into buffers no larger than the device allows, one
 * shard each, searched together by oclf_l2_topk_sharded. */
static int search_local(gpu *g, const opts *o, const float *x, size_t first, size_t n, size_t d,
                        const float *q, size_t nq, float *dist, int64_t *idx, int *nshards)
{
    const size_t es = oclf_dtype_size(o->dtype);
    size_t per = g->max_alloc / (d * es);
    if (per == 0)
        return fail("device %s: one row of %zu elements exceeds its largest buffer", g->name, d);
    size_t ns = n ? (n + per - 1) / per : 1;
    per = n ? (n + ns - 1) / ns : 0;
    oclf_l2_shard *sh = calloc(ns, sizeof *sh);
    unsigned char *host = malloc((per ? per : 1) * d * es);
    int ok = sh && host ? 1 : fail("out of host memory");
    for (size_t s = 0; ok && s < ns; s++) {
        size_t a = s * per, rows = a + per <= n ? per : n - a;
        for (size_t i = 0; i < rows * d; i++)
            oclf_ref_set(o->dtype, host, i, x[a * d + i]);
        cl_int err = CL_SUCCESS;
        if (rows)
            sh[s].x.mem = clCreateBuffer(g->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                         rows * d * es, host, &err);
        if (err != CL_SUCCESS)
            ok = fail("device %s: %zu rows: OpenCL error %d", g->name, rows, (int)err);
        sh[s].ctx = g->ctx;
        sh[s].queue = g->queue;
        sh[s].n = rows;
        sh[s].dtype = o->dtype;
        sh[s].first_id = (int64_t)(first + a);
    }
    oclf_l2_topk_options opt;
    oclf_l2_topk_options_init(&opt);
    opt.precision = o->exact ? OCLF_L2_EXACT : OCLF_L2_FAST;
    if (ok && oclf_l2_topk_sharded(sh, ns, nq, d, o->k, q, d, dist, idx, &opt) != OCLF_SUCCESS)
        ok = fail("device %s: %s", g->name, oclf_last_error(NULL));
    for (size_t s = 0; sh && s < ns; s++)
        if (sh[s].x.mem)
            clReleaseMemObject(sh[s].x.mem);
    free(sh);
    free(host);
    *nshards = (int)ns;
    return ok;
}

static int write_vecs(const char *path, const void *data, size_t rows, size_t k)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return fail("%s: %s", path, strerror(errno));
    int32_t kk = (int32_t)k;
    int ok = 1;
    for (size_t r = 0; ok && r < rows; r++)
        ok = fwrite(&kk, 4, 1, f) == 1 &&
             fwrite((const char *)data + r * k * 4, 4, k, f) == k;
    if (fclose(f) != 0 || !ok)
        return fail("%s: write failed", path);
    return 1;
}

/* 1-recall@k (the true nearest among the k found) and k-recall@k. */
static int recall(const char *path, const int64_t *idx, size_t nq, size_t k)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail("%s: %s", path, strerror(errno));
    double r1 = 0, rk = 0;
    size_t kg = 0;
    int ok = 1;
    for (size_t qi = 0; ok && qi < nq; qi++) {
        int32_t n;
        if (fread(&n, 4, 1, f) != 1 || n <= 0 || n > (1 << 20)) {
            ok = fail("%s: record %zu missing or malformed (%zu queries)", path, qi, nq);
            break;
        }
        int32_t *g = malloc((size_t)n * 4);
        if (!g || fread(g, 4, (size_t)n, f) != (size_t)n) {
            free(g);
            ok = fail("%s: record %zu is cut short", path, qi);
            break;
        }
        kg = (size_t)n < k ? (size_t)n : k;
        for (size_t e = 0; e < k; e++)
            if (idx[qi * k + e] == g[0])
                r1 += 1;
        for (size_t a = 0; a < kg; a++)
            for (size_t e = 0; e < kg; e++)
                if (idx[qi * k + e] == g[a])
                    rk += 1;
        free(g);
    }
    fclose(f);
    if (ok && nq)
        printf("recall: 1-recall@%zu %.4f, %zu-recall@%zu %.4f\n", k, r1 / (double)nq, kg, kg,
               rk / (double)(nq * kg));
    return ok;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (rank == 0)
                usage();
            MPI_Finalize();
            return 0;
        }
    opts o;
    gpu g;
    memset(&g, 0, sizeof g);
    vecs base;
    memset(&base, 0, sizeof base);
    float *x = NULL, *q = NULL, *dist = NULL, *all_d = NULL;
    int64_t *idx = NULL, *all_i = NULL;
    size_t n = 0, d = 0, nq = 0, qd = 0;
    int status = 1;

    /* 1. Options, the database's size and this rank's rows. */
    if (parse(argc, argv, &o)) {
        if (o.base && vecs_open(&base, o.base)) {
            n = base.n;
            d = base.d;
        } else if (!o.base) {
            n = o.syn_n;
            d = o.syn_d;
        }
    }
    const size_t first = n * (size_t)rank / (size_t)nranks;
    const size_t mine = n * (size_t)(rank + 1) / (size_t)nranks - first;
    if (!err_msg[0]) {
        x = malloc((mine ? mine : 1) * d * sizeof *x);
        if (!x)
            fail("out of host memory for %zu rows", mine);
        else if (o.base)
            vecs_read(&base, first, mine, x);
        else
            for (size_t r = 0; r < mine; r++)
                for (size_t c = 0; c < d; c++)
                    x[r * d + c] = synth(o.seed, 0, first + r, c, d);
    }
    vecs_close(&base);
    /* 2. Queries: rank 0 reads or makes them and sends them to all. */
    if (rank == 0 && !err_msg[0]) {
        if (o.queries) {
            vecs qv;
            if (vecs_open(&qv, o.queries)) {
                nq = qv.n;
                qd = qv.d;
                q = malloc((nq ? nq : 1) * qd * sizeof *q);
                if (q)
                    vecs_read(&qv, 0, nq, q);
                else
                    fail("out of host memory");
            }
            vecs_close(&qv);
            if (!err_msg[0] && qd != d)
                fail("%s: queries of dimension %zu, the database's is %zu", o.queries, qd, d);
        } else {
            nq = o.nq;
            q = malloc((nq ? nq : 1) * d * sizeof *q);
            if (!q)
                fail("out of host memory");
            for (size_t r = 0; q && r < nq; r++)
                for (size_t c = 0; c < d; c++)
                    q[r * d + c] = synth(o.seed, 1, r, c, d);
        }
    }
    if (!all_ok())
        goto out;
    unsigned long long sz[2] = {nq, d};
    MPI_Bcast(sz, 2, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    nq = (size_t)sz[0];
    if (rank != 0) {
        q = malloc((nq ? nq : 1) * d * sizeof *q);
        if (!q)
            fail("out of host memory");
    }
    if (nq * d > INT32_MAX || nq * o.k > INT32_MAX)
        fail("%zu queries are more than one MPI message can carry", nq);
    if (!all_ok())
        goto out;
    MPI_Bcast(q, (int)(nq * d), MPI_FLOAT, 0, MPI_COMM_WORLD);

    /* 3. Each rank on its device. */
    dist = malloc((nq ? nq : 1) * o.k * sizeof *dist);
    idx = malloc((nq ? nq : 1) * o.k * sizeof *idx);
    if (!dist || !idx)
        fail("out of host memory");
    else
        gpu_open(&g, o.platform);
    int nshards = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (!err_msg[0])
        search_local(&g, &o, x, first, mine, d, q, nq, dist, idx, &nshards);
    double t_search = MPI_Wtime() - t0;
    if (!all_ok())
        goto out;

    /* 4. Rank 0 gathers k candidates per query per rank and merges. */
    char line[MSG];
    snprintf(line, sizeof line, "rank %d: %s, rows %zu..%zu, %d buffer%s, search %.3f s", rank,
             g.name, first, first + mine, nshards, nshards == 1 ? "" : "s", t_search);
    char *lines = rank == 0 ? malloc((size_t)nranks * MSG) : NULL;
    MPI_Gather(line, MSG, MPI_CHAR, lines, MSG, MPI_CHAR, 0, MPI_COMM_WORLD);
    const size_t per = nq * o.k;
    if (rank == 0) {
        all_d = malloc((per ? per : 1) * (size_t)nranks * sizeof *all_d);
        all_i = malloc((per ? per : 1) * (size_t)nranks * sizeof *all_i);
        if (!all_d || !all_i || !lines)
            fail("out of host memory for %d ranks' candidates", nranks);
    }
    if (!all_ok()) {
        free(lines);
        goto out;
    }
    MPI_Gather(dist, (int)per, MPI_FLOAT, all_d, (int)per, MPI_FLOAT, 0, MPI_COMM_WORLD);
    MPI_Gather(idx, (int)per, MPI_INT64_T, all_i, (int)per, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 0; r < nranks; r++)
            printf("%.*s\n", MSG, lines + (size_t)r * MSG);
        const float **ld = malloc((size_t)nranks * sizeof *ld);
        const int64_t **li = malloc((size_t)nranks * sizeof *li);
        size_t *lk = malloc((size_t)nranks * sizeof *lk);
        if (!ld || !li || !lk) {
            fail("out of host memory");
        } else {
            for (int r = 0; r < nranks; r++) {
                ld[r] = all_d + (size_t)r * per;
                li[r] = all_i + (size_t)r * per;
                lk[r] = o.k;
            }
            t0 = MPI_Wtime();
            if (oclf_l2_topk_merge(nq, o.k, (size_t)nranks, ld, li, lk, dist, idx) !=
                OCLF_SUCCESS)
                fail("merge: %s", oclf_last_error(NULL));
            double t_merge = MPI_Wtime() - t0;
            printf("%zu queries x %zu rows x %zu, k = %zu, %d rank%s: merge %.6f s\n", nq, n, d,
                   o.k, nranks, nranks == 1 ? "" : "s", t_merge);
        }
        free(ld);
        free(li);
        free(lk);
        /* Ids as int32 for .ivecs; the distances as they are. */
        int32_t *ids32 = malloc((per ? per : 1) * sizeof *ids32);
        if (!err_msg[0] && !ids32)
            fail("out of host memory");
        for (size_t e = 0; ids32 && e < per; e++) {
            if (idx[e] > INT32_MAX) {
                fail("id %" PRId64 " does not fit an .ivecs entry", idx[e]);
                break;
            }
            ids32[e] = (int32_t)idx[e];
        }
        /* Scored first: a bad ground-truth file fails before any result
         * file is written, so no partial result looks complete. */
        if (!err_msg[0] && o.gt)
            recall(o.gt, idx, nq, o.k);
        if (!err_msg[0] && o.out)
            write_vecs(o.out, ids32, nq, o.k);
        if (!err_msg[0] && o.out_dist)
            write_vecs(o.out_dist, dist, nq, o.k);
        free(ids32);
    }
    free(lines);
    status = all_ok() ? 0 : 1;
out:
    gpu_close(&g);
    free(x);
    free(q);
    free(dist);
    free(idx);
    free(all_d);
    free(all_i);
    MPI_Finalize();
    return status;
}
