/*
 * Tuning database: chain order, device fallbacks, nearest shape, invalid
 * records skipped, damaged files, concurrent writers, the lookup cache.
 *
 * Each test writes its databases into a fresh folder and makes its own
 * oclf_context on the harness's device, so options and $XDG_DATA_HOME are
 * read afresh; oclf_tuning_explain says which record dispatch would take.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];
static char vendor[128], name[256], driver[128], type[16];

static void setup(void)
{
    static int n;
    snprintf(dir, sizeof dir, "/tmp/oclf-tunedb-%ld-%d", (long)getpid(), n++);
    mkdir(dir, 0755);
    /* The per-machine database lives here unless a test says otherwise. */
    char data[300];
    snprintf(data, sizeof data, "%s/data", dir);
    setenv("XDG_DATA_HOME", data, 1);
    th_env *e = th_get();
    char fp[700];
    snprintf(fp, sizeof fp, "%s", oclf_context_fingerprint(e->ctx));
    char *s = fp, *f[4] = {0};
    for (int i = 0; i < 4; i++) {
        f[i] = s;
        s = strchr(s, '|');
        if (s)
            *s++ = '\0';
        else
            break;
    }
    snprintf(vendor, sizeof vendor, "%s", f[0]);
    snprintf(name, sizeof name, "%s", f[1] ? f[1] : "");
    snprintf(driver, sizeof driver, "%s", f[2] ? f[2] : "");
    snprintf(type, sizeof type, "%s", f[3] ? f[3] : "");
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* One record as JSON text: the device, then `members`. */
static char *dev_rec(char *buf, size_t len, const char *v, const char *n, const char *d,
                     const char *t, const char *members)
{
    const int used = snprintf(buf, len,
                              "{\"device\": {\"vendor\": \"%s\", \"name\": \"%s\", "
                              "\"driver\": \"%s\", \"type\": \"%s\"}, %s}",
                              v, n, d, t, members);
    ck_assert_msg(used > 0 && (size_t)used < len, "a test record does not fit its buffer");
    return buf;
}

/* One rms_norm f32 record as JSON text. */
static char *rec(char *buf, size_t len, const char *v, const char *n, const char *d,
                 const char *t, unsigned rows, unsigned cols, const char *path, int layout,
                 int wgs, int stage)
{
    char members[512];
    snprintf(members, sizeof members,
             "\"op\": \"rms_norm\", \"dtype\": \"f32\", "
             "\"shape\": {\"rows\": %u, \"cols\": %u}, \"choice\": {\"path\": \"%s\", "
             "\"params\": {\"LAYOUT\": %d, \"WGS\": %d, \"VEC\": 4, \"STAGE\": %d}}, "
             "\"time_ns\": 1000",
             rows, cols, path, layout, wgs, stage);
    return dev_rec(buf, len, v, n, d, t, members);
}

/* A database of one record for this device: `members` follow "device". */
static void write_own_record(const char *path, const char *members)
{
    char doc[4096], one[3500];
    snprintf(doc, sizeof doc, "{\"format\": 1, \"records\": [%s]}",
             dev_rec(one, sizeof one, vendor, name, driver, type, members));
    write_file(path, doc);
}

static void write_db(const char *path, const char *r1, const char *r2)
{
    char text[8192];
    snprintf(text, sizeof text, "{\"format\": 1, \"records\": [%s%s%s]}\n", r1 ? r1 : "",
             r1 && r2 ? "," : "", r2 ? r2 : "");
    write_file(path, text);
}

typedef struct logbuf {
    char text[4096];
    int warnings;
} logbuf;

static void on_log(void *user, oclf_log_level level, const char *msg)
{
    logbuf *l = user;
    if (level == OCLF_LOG_WARN)
        l->warnings++;
    strncat(l->text, msg, sizeof l->text - strlen(l->text) - 2);
    strcat(l->text, "\n");
}

static oclf_context *make_ctx(const char *db, logbuf *log)
{
    th_env *e = th_get();
    oclf_context_options o;
    oclf_context_options_init(&o);
    o.tuning_db = db;
    o.log = log ? on_log : NULL;
    o.log_user = log;
    oclf_context *ctx = NULL;
    ck_assert_int_eq(oclf_context_create(e->cl, e->device, &o, &ctx), OCLF_SUCCESS);
    return ctx;
}

static void explain(oclf_context *ctx, unsigned rows, unsigned cols, oclf_path path, char *out,
                    size_t len)
{
    uint64_t dims[2] = {rows, cols};
    ck_assert_int_eq(oclf_tuning_explain(ctx, "rms_norm", OCLF_F32, dims, 2, path, out, len),
                     OCLF_SUCCESS);
}

/* The last line of an explanation is the decision. */
static const char *decision(const char *text)
{
    const char *p = strstr(text, "uses: ");
    return p ? p : "";
}

/* Runs rms_norm on rows x cols and checks one row against the reference. */
static void run_rms(oclf_context *ctx, size_t rows, size_t cols)
{
    th_env *e = th_get();
    float *x = th_random(OCLF_F32, rows * cols, -1, 1);
    cl_mem mx = th_upload(x, rows * cols * 4), my = th_alloc(rows * cols * 4);
    oclf_buf bx = {mx, 0, 0}, by = {my, 0, 0};
    oclf_status st = oclf_rms_norm(ctx, e->queue, OCLF_F32, rows, cols, bx, NULL, by, 1e-6f, NULL,
                                   0, NULL, NULL);
    ck_assert_msg(st == OCLF_SUCCESS, "rms_norm: %s", oclf_last_error(ctx));
    float *y = malloc(rows * cols * 4);
    th_download(my, y, rows * cols * 4);
    double want[4096];
    oclf_ref_rms_norm(OCLF_F32, 1, cols, x, cols, NULL, 1e-6f, want);
    for (size_t i = 0; i < cols; i++)
        ck_assert_msg(fabs(y[i] - want[i]) < 1e-4 * (1 + fabs(want[i])), "y[%zu] %g want %g", i,
                      y[i], want[i]);
    free(x), free(y);
    clReleaseMemObject(mx), clReleaseMemObject(my);
}

START_TEST(chain_order)
{
    setup();
    char r[1024], ctxdb[300], machine[300], text[4096];
    snprintf(ctxdb, sizeof ctxdb, "%s/ctx.json", dir);
    write_db(ctxdb, rec(r, sizeof r, vendor, name, driver, type, 8, 64, "fused", 0, 2, 0), NULL);
    snprintf(machine, sizeof machine, "%s/data", dir);
    mkdir(machine, 0755);
    strcat(machine, "/oclfuse");
    mkdir(machine, 0755);
    strcat(machine, "/tuning.json");
    write_db(machine, rec(r, sizeof r, vendor, name, driver, type, 8, 64, "unfused", 0, 8, 0),
             NULL);
    char def[300];
    ck_assert_int_eq(oclf_tuning_db_default_path(def, sizeof def), OCLF_SUCCESS);
    ck_assert_str_eq(def, machine);

    /* Context database first. */
    oclf_context *ctx = make_ctx(ctxdb, NULL);
    explain(ctx, 8, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "context database") && strstr(text, "WGS=2"), "%s", text);
    run_rms(ctx, 8, 64);
    oclf_context_destroy(ctx);

    /* Without it, the per-machine one. */
    ctx = make_ctx(NULL, NULL);
    explain(ctx, 8, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "per-machine database") && strstr(text, "unfused") &&
                      strstr(text, "WGS=8"),
                  "%s", text);
    run_rms(ctx, 8, 64);
    oclf_context_destroy(ctx);

    /* Neither: the heuristic. */
    unlink(machine);
    ctx = make_ctx(NULL, NULL);
    explain(ctx, 8, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "heuristic"), "%s", text);
    oclf_context_destroy(ctx);
}
END_TEST

START_TEST(device_fallbacks)
{
    setup();
    char r1[1024], r2[1024], db[300], text[4096];
    snprintf(db, sizeof db, "%s/db.json", dir);
    /* vendor + name with another driver beats type only. */
    write_db(db, rec(r1, sizeof r1, "Nobody", "Nothing", "0", type, 8, 64, "fused", 0, 16, 0),
             rec(r2, sizeof r2, vendor, name, "other-driver", type, 8, 64, "fused", 0, 8, 0));
    oclf_context *ctx = make_ctx(db, NULL);
    explain(ctx, 8, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "vendor+name") && strstr(decision(text), "WGS=8"), "%s",
                  text);
    oclf_context_destroy(ctx);

    /* vendor + type */
    write_db(db, rec(r1, sizeof r1, "Nobody", "Nothing", "0", type, 8, 64, "fused", 0, 16, 0),
             rec(r2, sizeof r2, vendor, "another model", "x", type, 8, 64, "fused", 0, 4, 0));
    ctx = make_ctx(db, NULL);
    explain(ctx, 8, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "vendor+type") && strstr(decision(text), "WGS=4"), "%s",
                  text);
    oclf_context_destroy(ctx);

    /* type only; another type never matches. */
    write_db(db, rec(r1, sizeof r1, "Nobody", "Nothing", "0", type, 8, 64, "fused", 0, 16, 0),
             rec(r2, sizeof r2, "Other", "x", "y", strcmp(type, "GPU") ? "GPU" : "CPU", 8, 64,
                 "fused", 0, 2, 0));
    ctx = make_ctx(db, NULL);
    explain(ctx, 8, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "device type") && strstr(decision(text), "WGS=16"), "%s",
                  text);
    oclf_context_destroy(ctx);
}
END_TEST

START_TEST(nearest_shape)
{
    setup();
    char r1[1024], r2[1024], db[300], text[4096];
    snprintf(db, sizeof db, "%s/db.json", dir);
    write_db(db, rec(r1, sizeof r1, vendor, name, driver, type, 8, 64, "fused", 0, 2, 0),
             rec(r2, sizeof r2, vendor, name, driver, type, 4096, 4096, "fused", 0, 32, 0));
    oclf_context *ctx = make_ctx(db, NULL);
    explain(ctx, 16, 128, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "rows=8 cols=64"), "%s", text);
    explain(ctx, 2048, 2048, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "rows=4096 cols=4096"), "%s", text);
    /* Same bucket wins over a closer shape in another bucket. */
    explain(ctx, 5, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "rows=8 cols=64"), "%s", text);
    run_rms(ctx, 16, 128);
    oclf_context_destroy(ctx);
}
END_TEST

/* One linear f32 record for this device: shape m x n x k in `layout`,
 * fused with the register block MB x NB. */
static char *lin_rec(char *buf, size_t len, unsigned m, unsigned n, unsigned k, int layout,
                     int mb, int nb)
{
    char members[512];
    snprintf(members, sizeof members,
             "\"op\": \"linear\", \"dtype\": \"f32\", "
             "\"shape\": {\"m\": %u, \"n\": %u, \"k\": %u, \"layout\": %d}, "
             "\"choice\": {\"path\": \"fused\", \"params\": {\"MB\": %d, \"NB\": %d}}, "
             "\"time_ns\": 1000",
             m, n, k, layout, mb, nb);
    return dev_rec(buf, len, vendor, name, driver, type, members);
}

static void explain_linear(oclf_context *ctx, unsigned m, unsigned n, unsigned k, int layout,
                           char *out, size_t len)
{
    uint64_t dims[4] = {m, n, k, (uint64_t)layout};
    ck_assert_int_eq(oclf_tuning_explain(ctx, "linear", OCLF_F32, dims, 4, OCLF_PATH_AUTO, out,
                                         len),
                     OCLF_SUCCESS);
}

/* The weight layout is a kind, not a size: a record of the call's own
 * layout wins over one of the other layout, even at the call's very shape
 * (both layouts were the same point on the log scale, so the other one
 * won when it came first in the file or lay nearer); with no record of its
 * own layout, a call still takes the other's. */
START_TEST(linear_layout_first)
{
    setup();
    char r1[1024], r2[1024], db[300], text[4096];
    snprintf(db, sizeof db, "%s/db.json", dir);
    write_db(db, lin_rec(r1, sizeof r1, 64, 64, 64, OCLF_WEIGHT_KN, 1, 1),
             lin_rec(r2, sizeof r2, 256, 256, 256, OCLF_WEIGHT_NK, 2, 4));
    oclf_context *ctx = make_ctx(db, NULL);
    explain_linear(ctx, 64, 64, 64, OCLF_WEIGHT_NK, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "m=256") && strstr(decision(text), "NB=4"), "%s", text);
    explain_linear(ctx, 64, 64, 64, OCLF_WEIGHT_KN, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "m=64") && strstr(decision(text), "NB=1"), "%s", text);
    explain_linear(ctx, 300, 300, 300, OCLF_WEIGHT_KN, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "m=64") && strstr(decision(text), "layout=1"), "%s",
                  text);
    oclf_context_destroy(ctx);
    /* the same shape in both layouts, the other layout first in the file */
    write_db(db, lin_rec(r1, sizeof r1, 64, 64, 64, OCLF_WEIGHT_KN, 1, 1),
             lin_rec(r2, sizeof r2, 64, 64, 64, OCLF_WEIGHT_NK, 2, 4));
    ctx = make_ctx(db, NULL);
    explain_linear(ctx, 64, 64, 64, OCLF_WEIGHT_NK, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "layout=0") && strstr(decision(text), "NB=4"), "%s",
                  text);
    oclf_context_destroy(ctx);
}
END_TEST

START_TEST(invalid_records_skipped)
{
    setup();
    char r1[1024], r2[1024], db[300], text[4096];
    snprintf(db, sizeof db, "%s/db.json", dir);
    size_t max_wgs = 0;
    clGetDeviceInfo(th_get()->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wgs, &max_wgs,
                    NULL);
    /* WGS beyond the device; a WGS that is not a power of two. */
    write_db(db, rec(r1, sizeof r1, vendor, name, driver, type, 8, 64, "fused", 1,
                     (int)max_wgs * 2, 0),
             rec(r2, sizeof r2, vendor, name, driver, type, 8, 64, "fused", 0, 3, 0));
    logbuf log = {"", 0};
    oclf_context *ctx = make_ctx(db, &log);
    explain(ctx, 8, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(text, "skips") && strstr(text, "WGS = 3 is not a power of two") &&
                      strstr(decision(text), "heuristic"),
                  "%s", text);
    run_rms(ctx, 8, 64);
    ck_assert_msg(strstr(log.text, "skipped"), "%s", log.text);
    oclf_context_destroy(ctx);
}
END_TEST

START_TEST(explicit_path_alternative)
{
    setup();
    char db[300], text[4096], doc[4096];
    snprintf(db, sizeof db, "%s/db.json", dir);
    snprintf(doc, sizeof doc,
             "{\"format\": 1, \"records\": [{\"device\": {\"vendor\": \"%s\", \"name\": \"%s\", "
             "\"driver\": \"%s\", \"type\": \"%s\"}, \"op\": \"rms_norm\", \"dtype\": \"f32\", "
             "\"shape\": {\"rows\": 8, \"cols\": 64}, \"choice\": {\"path\": \"unfused\", "
             "\"params\": {\"WGS\": 8}}, \"alternatives\": [{\"path\": \"fused\", \"params\": "
             "{\"WGS\": 2}, \"time_ns\": 5}], \"time_ns\": 4}]}",
             vendor, name, driver, type);
    write_file(db, doc);
    oclf_context *ctx = make_ctx(db, NULL);
    explain(ctx, 8, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "unfused") && strstr(decision(text), "WGS=8"), "%s", text);
    explain(ctx, 8, 64, OCLF_PATH_FUSED, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "uses: context") && strstr(decision(text), "WGS=2"), "%s",
                  text);
    oclf_context_destroy(ctx);
}
END_TEST

/* Explain, the structured resolve and the call itself make one decision.
 * A record whose parameters cannot all be laid over the heuristic's (eight
 * names beside the heuristic's five pass the limit of 12) must be skipped
 * by all three; a valid record behind it must be taken by all three. */
START_TEST(explain_matches_dispatch)
{
    setup();
    char db[300], text[4096], doc[4096], crowded[1024], r2[1024];
    snprintf(db, sizeof db, "%s/db.json", dir);
    snprintf(crowded, sizeof crowded,
             "{\"device\": {\"vendor\": \"%s\", \"name\": \"%s\", \"driver\": \"%s\", "
             "\"type\": \"%s\"}, \"op\": \"rms_norm\", \"dtype\": \"f32\", "
             "\"shape\": {\"rows\": 8, \"cols\": 64}, \"choice\": {\"path\": \"fused\", "
             "\"params\": {\"LAYOUT\": 0, \"WGS\": 2, \"X1\": 1, \"X2\": 1, \"X3\": 1, "
             "\"X4\": 1, \"X5\": 1, \"X6\": 1, \"X7\": 1, \"X8\": 1}}}",
             vendor, name, driver, type);
    snprintf(doc, sizeof doc, "{\"format\": 1, \"records\": [%s]}", crowded);
    write_file(db, doc);
    logbuf log = {"", 0};
    oclf_context *ctx = make_ctx(db, &log);
    explain(ctx, 8, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(text, "skips") && strstr(text, "too many kernel parameters") &&
                      strstr(decision(text), "heuristic"),
                  "%s", text);
    uint64_t dims[2] = {8, 64};
    oclf_tuning_decision d;
    ck_assert_int_eq(oclf_tuning_resolve(ctx, "rms_norm", OCLF_F32, dims, 2, OCLF_PATH_AUTO, &d),
                     OCLF_SUCCESS);
    ck_assert_int_eq(d.from_record, 0);
    ck_assert_int_eq(d.decision.path, d.heuristic.path);
    ck_assert_int_eq(d.decision.params.count, d.heuristic.params.count);
    ck_assert_int_eq(memcmp(&d.decision.params, &d.heuristic.params, sizeof d.heuristic.params),
                     0);
    run_rms(ctx, 8, 64);
    ck_assert_msg(strstr(log.text, "tuning record 0") && strstr(log.text, "skipped"), "%s",
                  log.text);
    oclf_context_destroy(ctx);

    /* A usable record after it: taken by all three, with its WGS. */
    snprintf(doc, sizeof doc, "{\"format\": 1, \"records\": [%s, %s]}", crowded,
             rec(r2, sizeof r2, vendor, name, driver, type, 8, 64, "unfused", 0, 8, 0));
    write_file(db, doc);
    memset(&log, 0, sizeof log);
    ctx = make_ctx(db, &log);
    explain(ctx, 8, 64, OCLF_PATH_AUTO, text, sizeof text);
    ck_assert_msg(strstr(decision(text), "record 1") && strstr(decision(text), "unfused") &&
                      strstr(decision(text), "WGS=8"),
                  "%s", text);
    ck_assert_int_eq(oclf_tuning_resolve(ctx, "rms_norm", OCLF_F32, dims, 2, OCLF_PATH_AUTO, &d),
                     OCLF_SUCCESS);
    int64_t wgs = 0;
    ck_assert_int_eq(d.from_record, 1);
    ck_assert_int_eq(d.decision.path, OCLF_PATH_UNFUSED);
    ck_assert(oclf_params_get(&d.decision.params, "WGS", &wgs) && wgs == 8);
    ck_assert_int_eq(d.heuristic.path, OCLF_PATH_FUSED);
    run_rms(ctx, 8, 64);
    /* The call skipped record 0 and took record 1 (nothing more skipped). */
    ck_assert_msg(strstr(log.text, "tuning record 0") && !strstr(log.text, "tuning record 1"),
                  "%s", log.text);
    ck_assert_int_eq(oclf_tuning_resolve(ctx, "rms_norm", OCLF_F32, dims, 3, OCLF_PATH_AUTO, &d),
                     OCLF_INVALID_ARGUMENT);
    ck_assert_msg(strstr(oclf_last_error(ctx), "oclf_tuning_resolve: rms_norm takes 2 dims"),
                  "%s", oclf_last_error(ctx));
    oclf_context_destroy(ctx);
}
END_TEST

/* precision EXACT needs the fused path: with a record that picks the
 * unfused one, dispatch is asked once, for the fused path (it used to be
 * asked for any path first, then again for the fused one). */
START_TEST(l2_exact_resolves_once)
{
    setup();
    char db[300];
    snprintf(db, sizeof db, "%s/db.json", dir);
    write_own_record(db, "\"op\": \"l2_topk\", \"dtype\": \"f32\", \"shape\": {\"nq\": 3, "
                         "\"n\": 70, \"d\": 9, \"k\": 4}, \"choice\": {\"path\": \"unfused\", "
                         "\"params\": {\"SLICES\": 2}}");
    oclf_context *ctx = make_ctx(db, NULL);
    th_env *e = th_get();
    const size_t nq = 3, n = 70, d = 9, k = 4;
    float *q = th_random(OCLF_F32, nq * d, -1, 1), *x = th_random(OCLF_F32, n * d, -1, 1);
    cl_mem mq = th_upload(q, nq * d * 4), mx = th_upload(x, n * d * 4);
    cl_mem md = th_alloc(nq * k * 4), mi = th_alloc(nq * k * 8);
    oclf_buf bq = {mq, 0, 0}, bx = {mx, 0, 0}, bd = {md, 0, 0}, bi = {mi, 0, 0};
    oclf_l2_topk_options opt;
    oclf_l2_topk_options_init(&opt);
    opt.precision = OCLF_L2_EXACT;
    oclf_context_stats st0 = OCLF_CONTEXT_STATS_INIT, st1 = OCLF_CONTEXT_STATS_INIT;
    ck_assert_int_eq(oclf_context_get_stats(ctx, &st0), OCLF_SUCCESS);
    oclf_status st = oclf_l2_topk(ctx, e->queue, OCLF_F32, nq, n, d, k, bq, bx, bd, bi, &opt,
                                  NULL, 0, NULL, NULL);
    ck_assert_msg(st == OCLF_SUCCESS, "%s", oclf_last_error(ctx));
    ck_assert_int_eq(oclf_context_get_stats(ctx, &st1), OCLF_SUCCESS);
    ck_assert_uint_eq(st1.tuning_lookups - st0.tuning_lookups, 1);
    float got_d[12];
    int64_t got_i[12], want_i[12];
    double want_d[12];
    th_download(md, got_d, sizeof got_d);
    th_download(mi, got_i, sizeof got_i);
    oclf_ref_l2_topk(OCLF_F32, nq, n, d, k, q, d, x, d, want_d, want_i);
    for (size_t i = 0; i < nq * k; i++)
        ck_assert_msg(got_i[i] == want_i[i] && fabs(got_d[i] - want_d[i]) <= 1e-5 * (1 + want_d[i]),
                      "entry %zu: (%g, %lld), reference (%g, %lld)", i, got_d[i],
                      (long long)got_i[i], want_d[i], (long long)want_i[i]);
    free(q), free(x);
    clReleaseMemObject(mq), clReleaseMemObject(mx), clReleaseMemObject(md),
        clReleaseMemObject(mi);
    oclf_context_destroy(ctx);
}
END_TEST

/* The tuner's check of a point (oclf_tuning_params_valid) is the op's own
 * validation: for each parameter set, the check and a call with the set
 * agree, with the same sentence when they refuse it. */
START_TEST(params_valid_is_the_ops_rule)
{
    setup();
    static const struct {
        const char *names[3];
        int64_t values[3];
        const char *why; /* NULL: valid */
    } sets[] = {
        {{"LAYOUT", "WGS", "VEC"}, {0, 4, 4}, NULL},
        {{"LAYOUT", "STAGE", NULL}, {0, 1, 0}, NULL}, /* a row staged per work-item */
        {{"WGS", NULL, NULL}, {3, 0, 0}, "WGS = 3 is not a power of two"},
        {{"VEC", NULL, NULL}, {32, 0, 0}, "VEC = 32 is outside [1, 16]"},
        {{"VEC", NULL, NULL}, {3, 0, 0}, "VEC = 3 is not 1, 2, 4, 8 or 16"},
        {{"ROWS", "LAYOUT", NULL}, {4, 0, 0}, "ROWS > 1 needs LAYOUT = 1"},
    };
    th_env *e = th_get();
    oclf_context *ctx = make_ctx(NULL, NULL);
    const size_t rows = 8, cols = 64;
    uint64_t dims[2] = {rows, cols};
    cl_mem mx = th_alloc(rows * cols * 4), my = th_alloc(rows * cols * 4);
    oclf_buf bx = {mx, 0, 0}, by = {my, 0, 0};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        oclf_choice ch;
        memset(&ch, 0, sizeof ch);
        ch.path = OCLF_PATH_FUSED;
        for (int k = 0; k < 3 && sets[i].names[k]; k++)
            oclf_params_set(&ch.params, sets[i].names[k], sets[i].values[k]);
        const int valid = oclf_tuning_params_valid(ctx, "rms_norm", OCLF_F32, dims, 2,
                                                   OCLF_PATH_FUSED, &ch.params);
        char why[512];
        snprintf(why, sizeof why, "%s", oclf_last_error(ctx));
        oclf_status st = oclf_rms_norm(ctx, e->queue, OCLF_F32, rows, cols, bx, NULL, by, 1e-6f,
                                       &ch, 0, NULL, NULL);
        ck_assert_msg(valid == (sets[i].why == NULL), "set %zu: valid %d (%s)", i, valid, why);
        ck_assert_msg(valid == (st == OCLF_SUCCESS), "set %zu: call %s: %s", i,
                      oclf_status_string(st), oclf_last_error(ctx));
        if (!valid) {
            ck_assert_msg(strstr(why, sets[i].why), "set %zu: check says %s", i, why);
            ck_assert_msg(strstr(oclf_last_error(ctx), sets[i].why), "set %zu: call says %s", i,
                          oclf_last_error(ctx));
        }
    }
    ck_assert_int_eq(clFinish(e->queue), CL_SUCCESS);
    /* Outside the op's questions: AUTO is not a point of a search space. */
    ck_assert_int_eq(oclf_tuning_params_valid(ctx, "rms_norm", OCLF_F32, dims, 2, OCLF_PATH_AUTO,
                                              NULL),
                     0);
    ck_assert_int_eq(oclf_tuning_params_valid(ctx, "no_such_op", OCLF_F32, dims, 2,
                                              OCLF_PATH_FUSED, NULL),
                     0);
    clReleaseMemObject(mx), clReleaseMemObject(my);
    oclf_context_destroy(ctx);
}
END_TEST

START_TEST(bad_files)
{
    setup();
    static const struct {
        const char *text, *where;
    } cases[] = {
        {"{\"format\": 1, \"records\": [\n {\"op\": \"rms", ":2:"},   /* truncated */
        {"this is not JSON\n", ":1:"},                                 /* not JSON */
        {"{\n  \"format\": 2,\n  \"records\": []\n}\n", ":2:3"},       /* unknown format */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char db[300];
        snprintf(db, sizeof db, "%s/bad%zu.json", dir, i);
        write_file(db, cases[i].text);
        ck_assert_int_eq(oclf_tuning_db_check(db, NULL), OCLF_DB_ERROR);
        const char *msg = oclf_last_error(NULL);
        ck_assert_msg(strstr(msg, db) && strstr(msg, cases[i].where), "case %zu: %s", i, msg);

        /* A context on the damaged file still runs ops, and says why. */
        logbuf log = {"", 0};
        oclf_context *ctx = make_ctx(db, &log);
        run_rms(ctx, 4, 64);
        oclf_context_stats s = OCLF_CONTEXT_STATS_INIT;
        oclf_context_get_stats(ctx, &s);
        ck_assert_int_eq(s.tuning_db_errors, 1);
        ck_assert_int_eq(log.warnings, 1);
        ck_assert_msg(strstr(log.text, db) && strstr(log.text, cases[i].where), "%s", log.text);
        oclf_context_destroy(ctx);
    }
    char good[300];
    size_t n = 99;
    snprintf(good, sizeof good, "%s/good.json", dir);
    write_db(good, NULL, NULL);
    ck_assert_int_eq(oclf_tuning_db_check(good, &n), OCLF_SUCCESS);
    ck_assert_int_eq(n, 0);
}
END_TEST

START_TEST(lookup_cache)
{
    setup();
    char r1[1024], db[300];
    snprintf(db, sizeof db, "%s/db.json", dir);
    write_db(db, rec(r1, sizeof r1, vendor, name, driver, type, 8, 64, "fused", 0, 2, 0), NULL);
    oclf_context *ctx = make_ctx(db, NULL);
    for (int i = 0; i < 5; i++)
        run_rms(ctx, 8, 64);
    oclf_context_stats s = OCLF_CONTEXT_STATS_INIT;
    oclf_context_get_stats(ctx, &s);
    /* One search (and JSON parse) for the first call, hash hits after. */
    ck_assert_int_eq(s.tuning_lookups, 1);
    ck_assert_int_eq(s.tuning_cache_hits, 4);
    run_rms(ctx, 9, 64); /* another shape: one more search, no reparse */
    oclf_context_get_stats(ctx, &s);
    ck_assert_int_eq(s.tuning_lookups, 2);
    oclf_context_destroy(ctx);
}
END_TEST

START_TEST(concurrent_writers)
{
    setup();
    char db[300];
    snprintf(db, sizeof db, "%s/sub/dir/tuning.json", dir);
    enum { PER = 25 };
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        ck_assert_int_ge(kids[k], 0);
        if (kids[k] == 0) {
            /* No OpenCL in the children: merge needs none when records
             * carry their device. */
            int bad = 0;
            for (int i = 0; i < PER; i++) {
                char r[1024], arr[1100];
                rec(r, sizeof r, "V", "N", "D", "CPU", (unsigned)(k * 1000 + i + 1), 64,
                    "fused", 0, 2, 0);
                snprintf(arr, sizeof arr, "[%s]", r);
                bad |= oclf_tuning_db_merge(NULL, db, arr) != OCLF_SUCCESS;
            }
            _exit(bad);
        }
    }
    for (int k = 0; k < 2; k++) {
        int status = 0;
        waitpid(kids[k], &status, 0);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    size_t n = 0;
    ck_assert_msg(oclf_tuning_db_check(db, &n) == OCLF_SUCCESS, "%s", oclf_last_error(NULL));
    ck_assert_int_eq(n, 2 * PER);
    /* Same identity replaces rather than duplicates. */
    char r[1024], arr[1100];
    rec(r, sizeof r, "V", "N", "D", "CPU", 1, 64, "unfused", 0, 4, 0);
    snprintf(arr, sizeof arr, "[%s]", r);
    ck_assert_int_eq(oclf_tuning_db_merge(NULL, db, arr), OCLF_SUCCESS);
    ck_assert_int_eq(oclf_tuning_db_check(db, &n), OCLF_SUCCESS);
    ck_assert_int_eq(n, 2 * PER);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tunedb");
    TCase *tc = tcase_create("tunedb");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, chain_order);
    tcase_add_test(tc, device_fallbacks);
    tcase_add_test(tc, nearest_shape);
    tcase_add_test(tc, linear_layout_first);
    tcase_add_test(tc, invalid_records_skipped);
    tcase_add_test(tc, explicit_path_alternative);
    tcase_add_test(tc, explain_matches_dispatch);
    tcase_add_test(tc, l2_exact_resolves_once);
    tcase_add_test(tc, params_valid_is_the_ops_rule);
    tcase_add_test(tc, bad_files);
    tcase_add_test(tc, lookup_cache);
    tcase_add_test(tc, concurrent_writers);
    suite_add_tcase(s, tc);
    return th_run_suite(s) ? 1 : 0;
}
