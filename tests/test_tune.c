/*
 * oclfuse-tune end to end, as a child process on a tiny shape: it writes a
 * valid record and a journal, and --resume takes measurements from the
 * journal instead of repeating them.
 */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oclfuse.h"
#include "records.h"

static char dir[256], db[300], journal[320];

static int tune_op(const char *op, const char *shape, const char *extra)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s --ops %s --dtypes f32 --shapes %s --budget 6 --min-time 0.002 "
             "--quiet --db %s %s > %s/out.txt 2>&1",
             getenv("OCLF_TUNE_BIN"), op, shape, db, extra, dir);
    int rc = system(cmd);
    return rc;
}

static int tune(const char *extra)
{
    char more[256];
    snprintf(more, sizeof more, "--strategy exhaustive %s", extra);
    return tune_op("rms_norm", "3x64", more);
}

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/oclf-tune-%ld", (long)getpid());
    mkdir(dir, 0755);
    snprintf(db, sizeof db, "%s/tuning.json", dir);
    snprintf(journal, sizeof journal, "%s.journal", db);
}

/* A confirmation line: which test decided and why, and the rule held: a
 * candidate kept only on p < 0.01 and a median more than 3% below the
 * default's, and then the record names it (else the default, no params, or
 * an unfused candidate that beat a fused default). */
static void check_confirmation(json_t *e)
{
    ck_assert_str_eq(json_string_value(json_object_get(e, "test")), "Mann-Whitney U, one-sided");
    ck_assert_ptr_nonnull(json_string_value(json_object_get(e, "why")));
    const char *kept = json_string_value(json_object_get(e, "kept"));
    ck_assert_ptr_nonnull(kept);
    json_error_t err;
    json_t *root = json_load_file(db, 0, &err);
    ck_assert_ptr_nonnull(root);
    json_t *rec = json_array_get(json_object_get(root, "records"), 0);
    json_t *params = json_object_get(json_object_get(rec, "choice"), "params");
    if (strcmp(kept, "candidate") == 0) {
        ck_assert(json_real_value(json_object_get(e, "p")) < 0.01);
        ck_assert(json_real_value(json_object_get(e, "candidate_ns")) <
                  0.97 * json_real_value(json_object_get(e, "default_ns")));
        ck_assert_int_gt(json_object_size(params), 0);
    } else {
        ck_assert_str_eq(kept, "default");
        /* The default stands, unless it is fused and an unfused candidate
         * of the same job beat it: then that one is the record (a fused
         * choice never loses to unfused; check_no_losing_fused). */
        const char *path =
            json_string_value(json_object_get(json_object_get(rec, "choice"), "path"));
        if (!path || strcmp(path, "unfused") != 0)
            ck_assert_int_eq(json_object_size(params), 0);
    }
    json_decref(root);
}

/* Every record of the database: a fused choice is never slower than the
 * unfused time the same job measured. */
static void check_no_losing_fused(void)
{
    json_error_t err;
    json_t *root = json_load_file(db, 0, &err);
    ck_assert_ptr_nonnull(root);
    json_t *recs = json_object_get(root, "records");
    for (size_t i = 0; i < json_array_size(recs); i++) {
        json_t *rec = json_array_get(recs, i);
        const char *path = json_string_value(json_object_get(json_object_get(rec, "choice"), "path"));
        json_t *un = json_object_get(rec, "unfused_time_ns");
        if (path && strcmp(path, "fused") == 0 && un)
            ck_assert_msg(json_real_value(json_object_get(rec, "time_ns")) <= json_real_value(un),
                          "a fused record at %g ns beside an unfused %g ns",
                          json_real_value(json_object_get(rec, "time_ns")), json_real_value(un));
    }
    json_decref(root);
}

/* Journal lines, and whether every key is unique. */
static int journal_lines(int *unique)
{
    FILE *f = fopen(journal, "r");
    if (!f)
        return 0;
    json_t *seen = json_object();
    char line[4096];
    int n = 0;
    json_t *last_confirm = NULL;
    *unique = 1;
    while (fgets(line, sizeof line, f)) {
        json_t *e = json_loads(line, 0, NULL);
        ck_assert_ptr_nonnull(e);
        if (json_object_get(e, "confirm")) {
            /* the run that wrote the record confirmed last */
            json_decref(last_confirm);
            last_confirm = e;
            continue;
        }
        const char *k = json_string_value(json_object_get(e, "key"));
        ck_assert_ptr_nonnull(k);
        if (json_object_get(seen, k))
            *unique = 0;
        json_object_set_new(seen, k, json_true());
        json_decref(e);
        n++;
    }
    fclose(f);
    json_decref(seen);
    if (last_confirm)
        check_confirmation(last_confirm);
    json_decref(last_confirm);
    return n;
}

START_TEST(tune_and_resume)
{
    ck_assert_ptr_nonnull(getenv("OCLF_TUNE_BIN"));
    make_dir();

    ck_assert_int_eq(tune(""), 0);
    size_t n = 0;
    ck_assert_msg(oclf_tuning_db_check(db, &n) == OCLF_SUCCESS, "%s", oclf_last_error(NULL));
    ck_assert_int_eq(n, 1);
    check_no_losing_fused();
    int unique = 0;
    const int first = journal_lines(&unique);
    ck_assert_int_ge(first, 1);
    ck_assert(unique);

    /* Resumed: nothing measured twice, and the record is replaced, not
     * duplicated. */
    ck_assert_int_eq(tune("--resume"), 0);
    const int second = journal_lines(&unique);
    ck_assert_int_ge(second, first);
    ck_assert_msg(unique, "a journaled candidate was measured again");
    ck_assert_int_eq(oclf_tuning_db_check(db, &n), OCLF_SUCCESS);
    ck_assert_int_eq(n, 1);

    /* A journal whose every candidate is marked failing: the resumed run
     * measures nothing new for them and never chooses one. */
    FILE *f = fopen(journal, "r");
    char line[4096], *all = calloc(1, 1 << 20);
    size_t used = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *e = json_loads(line, 0, NULL);
        json_object_set_new(e, "ok", json_false());
        char *s = json_dumps(e, JSON_COMPACT);
        used += (size_t)snprintf(all + used, (1 << 20) - used, "%s\n", s);
        free(s);
        json_decref(e);
    }
    fclose(f);
    f = fopen(journal, "w");
    fputs(all, f);
    fclose(f);
    free(all);
    unlink(db);
    ck_assert_int_eq(tune("--resume"), 0);
    /* Either nothing is written (all rejected) or a newly measured one. */
    json_error_t err;
    json_t *root = json_load_file(db, 0, &err);
    if (root) {
        json_t *r = json_array_get(json_object_get(root, "records"), 0);
        ck_assert_ptr_nonnull(r);
        json_decref(root);
    }
}
END_TEST

/* The last step of the choice: a fused choice that an unfused candidate
 * beat gives way to it; a faster fused one, an equal one, or one with no
 * measured unfused candidate stands. */
START_TEST(fused_never_loses)
{
    cand fused = {.ch = {.path = OCLF_PATH_FUSED}, .state = 1, .time_ns = 100};
    cand unfused = {.ch = {.path = OCLF_PATH_UNFUSED}, .state = 1, .time_ns = 99};
    ck_assert_ptr_eq(no_losing_fused(&fused, &unfused), &unfused);
    unfused.time_ns = 100;
    ck_assert_ptr_eq(no_losing_fused(&fused, &unfused), &fused);
    unfused.time_ns = 101;
    ck_assert_ptr_eq(no_losing_fused(&fused, &unfused), &fused);
    /* an unfused candidate that failed or was never measured */
    unfused.time_ns = 1;
    unfused.state = -1;
    ck_assert_ptr_eq(no_losing_fused(&fused, &unfused), &fused);
    unfused.state = 0;
    ck_assert_ptr_eq(no_losing_fused(&fused, &unfused), &fused);
    ck_assert_ptr_eq(no_losing_fused(&fused, NULL), &fused);
    /* an unfused choice is never touched */
    unfused.state = 1;
    ck_assert_ptr_eq(no_losing_fused(&unfused, &fused), &unfused);
    ck_assert_ptr_null(no_losing_fused(NULL, &unfused));
}
END_TEST

/* An op whose tuner shape (the packed qkv: tokens, nq, nk, nv, head and
 * rotary dims) is not the library's key (tokens, heads rotated, head and
 * rotary dims): the record carries the library's key, so the library can
 * find it. */
START_TEST(tune_rope_record)
{
    ck_assert_ptr_nonnull(getenv("OCLF_TUNE_BIN"));
    make_dir();
    unlink(db);
    ck_assert_int_eq(tune_op("qk_norm_rope", "2x2x1x1x32x16", ""), 0);
    size_t n = 0;
    ck_assert_msg(oclf_tuning_db_check(db, &n) == OCLF_SUCCESS, "%s", oclf_last_error(NULL));
    ck_assert_int_eq(n, 1);
    json_error_t err;
    json_t *root = json_load_file(db, 0, &err);
    ck_assert_ptr_nonnull(root);
    json_t *shape = json_object_get(json_array_get(json_object_get(root, "records"), 0), "shape");
    ck_assert_int_eq(json_object_size(shape), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(shape, "tokens")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(shape, "heads")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(shape, "head_dim")), 32);
    ck_assert_int_eq(json_integer_value(json_object_get(shape, "rot_dim")), 16);
    /* the tuner names itself with meson's project version */
    const char *version = getenv("OCLF_PROJECT_VERSION");
    ck_assert_msg(version != NULL, "meson sets OCLF_PROJECT_VERSION");
    char tuner[64];
    snprintf(tuner, sizeof tuner, "oclfuse-tune %s", version);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(root, "records"), 0), "tuner")),
                     tuner);
    json_decref(root);
}
END_TEST

/* The candidate lines of the journal, in order, into lines[0..max) (each
 * a new reference); returns how many. */
static int journal_candidates(json_t **lines, int max)
{
    FILE *f = fopen(journal, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *e = json_loads(line, 0, NULL);
        ck_assert_ptr_nonnull(e);
        if (json_object_get(e, "confirm") || n >= max)
            json_decref(e);
        else
            lines[n++] = e;
    }
    fclose(f);
    return n;
}

static json_int_t param_of(json_t *line, const char *name)
{
    return json_integer_value(json_object_get(json_object_get(line, "params"), name));
}

/* A job measures the default and the other path's heuristic default
 * whatever its share of the budget (with none, those two alone), so its record
 * says which path won; a later job measures the choice of the nearest
 * record in the database right after those two, even a point outside its
 * pruned space (a 1 x 1 block of VEC = 4 is in no device's linear space). */
/* Tunes op at shape into a fresh database with no budget: the journal
 * holds the fused default, then an unfused point, and nothing else; that
 * unfused point into *unfused (the caller releases it). */
static void tune_defaults_only(const char *op, const char *shape, json_t **unfused)
{
    unlink(db);
    unlink(journal);
    ck_assert_int_eq(tune_op(op, shape, "--budget 0.001"), 0);
    json_t *lines[64];
    const int n = journal_candidates(lines, 64);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(json_string_value(json_object_get(lines[0], "path")), "fused");
    ck_assert_str_eq(json_string_value(json_object_get(lines[1], "path")), "unfused");
    json_decref(lines[0]);
    *unfused = lines[1];
}

START_TEST(both_paths_then_seeds)
{
    ck_assert_ptr_nonnull(getenv("OCLF_TUNE_BIN"));
    make_dir();
    /* The unfused point measured whatever the budget is that path's
     * heuristic default, not the first point of its space (rms_norm's
     * unfused space has many). */
    json_t *unfused;
    tune_defaults_only("rms_norm", "3x64", &unfused);
    ck_assert_int_eq(json_object_size(json_object_get(unfused, "params")), 0);
    json_decref(unfused);
    tune_defaults_only("linear", "4x16x16", &unfused);
    json_decref(unfused);
    json_error_t err;
    json_t *root = json_load_file(db, 0, &err);
    ck_assert_ptr_nonnull(root);
    json_t *rec = json_array_get(json_object_get(root, "records"), 0);
    ck_assert_ptr_nonnull(json_object_get(rec, "fused_time_ns"));
    ck_assert_ptr_nonnull(json_object_get(rec, "unfused_time_ns"));

    /* That record now names a point; the next job is at a nearby shape. */
    json_object_set_new(rec, "choice",
                        json_pack("{s:s, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}}", "path",
                                  "fused", "params", "MB", 1, "NB", 1, "VEC", 4, "WGM", 2, "WGN",
                                  1, "STAGE", 0, "KC", 16, "MV", 0));
    ck_assert_int_eq(json_dump_file(root, db, 0), 0);
    json_decref(root);
    unlink(journal);
    ck_assert_int_eq(tune_op("linear", "5x16x16", ""), 0);
    json_t *lines[64];
    const int n = journal_candidates(lines, 64);
    ck_assert_int_ge(n, 3);
    ck_assert_str_eq(json_string_value(json_object_get(lines[1], "path")), "unfused");
    ck_assert_msg(param_of(lines[2], "MB") == 1 && param_of(lines[2], "NB") == 1 &&
                      param_of(lines[2], "VEC") == 4 && param_of(lines[2], "WGM") == 2,
                  "the third candidate is not the nearby record's choice: %s",
                  json_string_value(json_object_get(lines[2], "key")));
    for (int i = 0; i < n; i++)
        json_decref(lines[i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tune");
    TCase *tc = tcase_create("tune");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fused_never_loses);
    tcase_add_test(tc, tune_and_resume);
    tcase_add_test(tc, tune_rope_record);
    tcase_add_test(tc, both_paths_then_seeds);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
