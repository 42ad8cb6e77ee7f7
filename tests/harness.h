/*
 * Test support: one OpenCL device per process, buffers, random data.
 *
 * The device is the first one of the platform whose name contains
 * $OCLF_TEST_PLATFORM (default: any platform). Device suites run with
 * CK_FORK=no (set by meson) so the OpenCL objects made here live in the one
 * process that uses them.
 */
#ifndef OCLF_TEST_HARNESS_H
#define OCLF_TEST_HARNESS_H

#include "oclfuse.h"
#include "ref.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct th_env {
    cl_platform_id platform;
    cl_device_id device;
    cl_context cl;
    cl_command_queue queue;
    oclf_context *ctx;
} th_env;

/* Sets up (once) and returns the shared environment; exits 77 (skip) only
 * when $OCLF_TEST_DEVICE_OPTIONAL is set and no device exists. */
th_env *th_get(void);
void th_teardown(void);

/* 1 when the test platform's version string names `what`
 * (case-insensitive): for checks that depend on a known compiler defect. */
int th_platform_is(const char *what);

/* Deterministic pseudo-random floats in [lo, hi). */
void th_seed(uint64_t seed);
float th_uniform(float lo, float hi);

/* Host array of n elements of dtype filled with uniform values, rounded to
 * storage. Free with free(). */
void *th_random(oclf_dtype dtype, size_t n, float lo, float hi);
cl_mem th_upload(const void *host, size_t bytes);
void th_download(cl_mem mem, void *host, size_t bytes);
cl_mem th_alloc(size_t bytes);

/* A second library context on the test device with the `validate` option
 * (the host checks the data it is given); the caller destroys it. */
oclf_context *th_validate_context(void);

/* 1 when OCLF_TEST_QUICK is set and not "0": a suite's quick form (fewer
 * or smaller cases, the same ops, dtypes and paths), which the GPU-defaults
 * runs, the oclgrind device runs and `tools/test.sh --quick` ask for. */
int th_quick(void);

/* A context on the test device whose log keeps the launches it reports
 * ("launch <kernel> of <source>, options '<options>', device options '<quirks>'", one a line), to
 * tell which build of a source a call ran: th_builds() is the text since
 * the last th_builds_clear(). One such context at a time; the caller
 * destroys it. */
oclf_context *th_build_log_context(void);
const char *th_builds(void);
void th_builds_clear(void);
/* 1 when a launch from a build of `source` whose options contain `defines`
 * was reported since the last clear, and that was the aligned build
 * (OCLF_ALIGNED=1) when `aligned` is 1, the plain one when 0. */
int th_built(const char *source, const char *defines, int aligned);

/* The aligned-build tests' cases: placements of the operands' rows (an
 * offset and a pad past the row's width; whether the rows then start on
 * vector boundaries at VEC 4 and 8) and row structures (fused or unfused;
 * LAYOUT 0 at VEC 8 or LAYOUT 1 at VEC 4; WGS 64). */
typedef struct th_place {
    size_t offset, pad;
    int aligned;
} th_place;
#define TH_PLACES 4
#define TH_STRUCTS 4
extern const th_place th_places[TH_PLACES];
oclf_choice th_struct_choice(int s);
/* Asserts that a launch from `source` built with structure s ran the
 * aligned build (aligned 1) or the plain one (0) since the last clear;
 * `what` names the case in the message. */
void th_expect_build(const char *source, int s, int aligned, const char *what);

/* Runs a runner over `s` and returns the number of failures (for main). */
int th_run_suite(Suite *s);

#define TH_OK(call)                                                                  \
    do {                                                                             \
        oclf_status st_ = (call);                                                    \
        ck_assert_msg(st_ == OCLF_SUCCESS, "%s -> %s: %s", #call, oclf_status_string(st_), \
                      oclf_last_error(th_get()->ctx));                               \
    } while (0)

/* { path, no parameters }: the choice most tests pass. */
oclf_choice th_choice(oclf_path path);
/* `path` with the row structure given in full (LAYOUT, WGS, VEC, STAGE,
 * ROWS), so no default of the device class fills a gap. */
oclf_choice th_row_choice(oclf_path path, int layout, int wgs, int vec, int stage, int rows);

/* A call that must be rejected: the status, a message on this thread that
 * mentions `word`, then `untouched` (a statement that checks the buffers
 * the call could have written are as they were). */
#define TH_EXPECT_FAIL(call, status, word, untouched)                                      \
    do {                                                                                    \
        oclf_status st_ = (call);                                                           \
        ck_assert_msg(st_ == (status), "%s: got %s, expected %s", #call,                    \
                      oclf_status_string(st_), oclf_status_string(status));                 \
        const char *msg_ = oclf_last_error(th_get()->ctx);                                  \
        ck_assert_msg(strstr(msg_, (word)) != NULL, "%s: error '%s' does not mention '%s'", \
                      #call, msg_, (word));                                                 \
        untouched;                                                                          \
    } while (0)

#endif
