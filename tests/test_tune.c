/*
 * oclfuse-tune end to end, as a child process on a tiny shape: it writes a
 * valid record and a journal, and --resume takes measurements from the
 * journal instead of repeating them. Every run is bounded by a count of
 * candidates (--max-candidates), never by seconds, so what each test
 * asserts is the same on an idle machine and on a loaded one with a cold
 * program cache.
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
static int journal_candidates(json_t **lines, int max);

static int tune_op(const char *op, const char *shape, const char *extra)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s --ops %s --dtypes f32 --shapes %s --max-candidates 4 --min-time 0.002 "
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

/* The first record of the database: is its choice the heuristic default
 * (the fused path, no parameters)? */
static int record_is_default(void)
{
    json_error_t err;
    json_t *root = json_load_file(db, 0, &err);
    ck_assert_ptr_nonnull(root);
    json_t *choice = json_object_get(json_array_get(json_object_get(root, "records"), 0), "choice");
    const char *path = json_string_value(json_object_get(choice, "path"));
    ck_assert_ptr_nonnull(path);
    const int dflt =
        strcmp(path, "fused") == 0 && json_object_size(json_object_get(choice, "params")) == 0;
    json_decref(root);
    return dflt;
}

/* A confirmation line: which test decided and why, and the rule held: a
 * candidate kept only on p < 0.01, a median more than 3% below the
 * default's and the two medians' 95% intervals apart, and then the record
 * names it; otherwise the record is the heuristic default, whatever path
 * the candidate was on (screening samples never override the heuristic). */
static void check_confirmation(json_t *e)
{
    ck_assert_str_eq(json_string_value(json_object_get(e, "test")), "Mann-Whitney U, one-sided");
    ck_assert_ptr_nonnull(json_string_value(json_object_get(e, "why")));
    const char *kept = json_string_value(json_object_get(e, "kept"));
    ck_assert_ptr_nonnull(kept);
    if (strcmp(kept, "candidate") == 0) {
        ck_assert(json_real_value(json_object_get(e, "p")) < 0.01);
        ck_assert(json_real_value(json_object_get(e, "candidate_ns")) <
                  0.97 * json_real_value(json_object_get(e, "default_ns")));
        ck_assert(json_real_value(json_array_get(json_object_get(e, "candidate_ci95"), 1)) <
                  json_real_value(json_array_get(json_object_get(e, "default_ci95"), 0)));
        ck_assert(!record_is_default());
    } else {
        ck_assert_str_eq(kept, "default");
        ck_assert(record_is_default());
    }
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
    /* without a confirmation the default won the screening */
    if (last_confirm)
        check_confirmation(last_confirm);
    else if (access(db, F_OK) == 0)
        ck_assert(record_is_default());
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
    int unique = 0;
    const int first = journal_lines(&unique);
    ck_assert_int_eq(first, 4);
    ck_assert(unique);

    /* Resumed with room for two more: the four journaled ones are taken
     * from the journal, two new ones measured, and the record is
     * replaced, not duplicated. */
    ck_assert_int_eq(tune("--resume --max-candidates 6"), 0);
    const int second = journal_lines(&unique);
    ck_assert_int_eq(second, 6);
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
    ck_assert_int_eq(tune("--resume --max-candidates 6"), 0);
    /* The six are all the job may take, all rejected: nothing written. */
    ck_assert_int_ne(access(db, F_OK), 0);
    json_t *lines[16];
    const int lines_n = journal_candidates(lines, 16);
    ck_assert_int_eq(lines_n, 6);
    for (int i = 0; i < lines_n; i++)
        json_decref(lines[i]);
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
 * whatever its share of the budget (with room for two, those two alone), so its record
 * says which path won; a later job measures the choice of the nearest
 * record in the database right after those two, even a point outside its
 * pruned space (a 1 x 1 block of VEC = 4 is in no device's linear space). */
/* Tunes op at shape into a fresh database with room for two candidates: the journal
 * holds the fused default, then an unfused point, and nothing else; that
 * unfused point into *unfused (the caller releases it). */
static void tune_defaults_only(const char *op, const char *shape, json_t **unfused)
{
    unlink(db);
    unlink(journal);
    ck_assert_int_eq(tune_op(op, shape, "--max-candidates 2"), 0);
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
    ck_assert_int_eq(tune_op("linear", "5x16x16", "--max-candidates 3"), 0);
    json_t *lines[64];
    const int n = journal_candidates(lines, 64);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(json_string_value(json_object_get(lines[1], "path")), "unfused");
    ck_assert_msg(param_of(lines[2], "MB") == 1 && param_of(lines[2], "NB") == 1 &&
                      param_of(lines[2], "VEC") == 4 && param_of(lines[2], "WGM") == 2,
                  "the third candidate is not the nearby record's choice: %s",
                  json_string_value(json_object_get(lines[2], "key")));
    for (int i = 0; i < n; i++)
        json_decref(lines[i]);
}
END_TEST

/* A candidate that leaves the device unusable (a fault on a GPU ends the
 * context; simulated here by OCLF_TUNE_LOSE_DEVICE at the fifth candidate
 * verified, the first past both jobs' two defaults) ends its job alone:
 * the journal names it as failed, the device is opened again, and the
 * other job still gets its record. */
START_TEST(lost_device_reopened)
{
    ck_assert_ptr_nonnull(getenv("OCLF_TUNE_BIN"));
    make_dir();
    unlink(db);
    unlink(journal);
    setenv("OCLF_TUNE_LOSE_DEVICE", "5", 1);
    const int rc = tune_op("rms_norm", "3x64,4x64", "--strategy exhaustive");
    unsetenv("OCLF_TUNE_LOSE_DEVICE");
    ck_assert_int_eq(rc, 0);
    char path[400], text[8192] = "";
    snprintf(path, sizeof path, "%s/out.txt", dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    const size_t got = fread(text, 1, sizeof text - 1, f);
    text[got] = '\0';
    fclose(f);
    ck_assert_msg(strstr(text, "left the device unusable") != NULL, "no report of the loss:\n%s",
                  text);
    json_t *lines[64];
    const int n = journal_candidates(lines, 64);
    int lost = 0;
    for (int i = 0; i < n; i++) {
        const char *e = json_string_value(json_object_get(lines[i], "error"));
        lost += e && strstr(e, "left the device unusable") != NULL;
        json_decref(lines[i]);
    }
    ck_assert_int_eq(lost, 1);
    json_error_t err;
    json_t *root = json_load_file(db, 0, &err);
    ck_assert_ptr_nonnull(root);
    ck_assert_int_eq(json_array_size(json_object_get(root, "records")), 1);
    json_decref(root);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tune");
    TCase *tc = tcase_create("tune");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, tune_and_resume);
    tcase_add_test(tc, tune_rope_record);
    tcase_add_test(tc, both_paths_then_seeds);
    tcase_add_test(tc, lost_device_reopened);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
