/* The tuner's journal (tune/journal.h). */
#include "journal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

json_t *params_json(const oclf_params *p)
{
    json_t *o = json_object();
    for (unsigned i = 0; i < p->count; i++)
        json_object_set_new(o, p->item[i].name, json_integer(p->item[i].value));
    return o;
}

const char *path_name(oclf_path p)
{
    return p == OCLF_PATH_UNFUSED ? "unfused" : "fused";
}

/* mkdir -p of the folder holding `path`, so the journal can start before
 * the first database write creates it. */
static void make_parent(const char *path)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(dir, 0755);
        *p = '/';
    }
}

void journal_open(journal *j, const char *path, int resume)
{
    j->done = json_object();
    make_parent(path);
    if (resume) {
        FILE *f = fopen(path, "r");
        char line[4096];
        while (f && fgets(line, sizeof line, f)) {
            json_t *e = json_loads(line, 0, NULL); /* a torn last line is skipped */
            /* confirmation lines have no "key" and are not reused */
            const char *k = json_string_value(json_object_get(e, "key"));
            if (k)
                json_object_set(j->done, k, e);
            json_decref(e);
        }
        if (f)
            fclose(f);
    }
    j->f = fopen(path, resume ? "a" : "w");
    if (!j->f)
        fprintf(stderr, "oclfuse-tune: cannot write journal %s; measurements are not saved\n",
                path);
}

void journal_close(journal *j)
{
    if (j->f)
        fclose(j->f);
    json_decref(j->done);
    memset(j, 0, sizeof *j);
}

/* One line, flushed and synced, so a crash loses at most it. */
static void write_line(journal *j, json_t *e)
{
    char *s = json_dumps(e, JSON_COMPACT);
    if (s) {
        fprintf(j->f, "%s\n", s);
        fflush(j->f);
        fsync(fileno(j->f));
    }
    free(s);
    json_decref(e);
}

void journal_add(journal *j, const char *key, oclf_path path, const oclf_params *params, int ok,
                 double time_ns, const char *error)
{
    json_t *e = json_pack("{s:s, s:s, s:o, s:b, s:f}", "key", key, "path", path_name(path),
                          "params", params_json(params), "ok", ok, "time_ns", time_ns);
    if (error)
        json_object_set_new(e, "error", json_string(error));
    /* Kept for the rest of the run too: the tuner's second pass over a job
     * takes the defaults its first pass measured from here. */
    json_object_set(j->done, key, e);
    if (j->f)
        write_line(j, e);
    else
        json_decref(e);
}

void journal_confirm(journal *j, const char *win_key, const char *def_key,
                     const confirmation *cf)
{
    if (!j->f)
        return;
    json_t *e = json_pack("{s:s, s:s, s:s, s:s, s:s}", "confirm", win_key, "against", def_key,
                          "test", "Mann-Whitney U, one-sided", "kept",
                          cf->replaced ? "candidate" : "default", "why", cf->why);
    if (cf->samples > 0) {
        json_object_set_new(e, "samples", json_integer(cf->samples));
        json_object_set_new(e, "candidate_ns", json_real(cf->win_ns));
        json_object_set_new(e, "default_ns", json_real(cf->def_ns));
        json_object_set_new(e, "p", json_real(cf->p));
        json_object_set_new(e, "ratio_ci95", json_pack("[f, f]", cf->ratio_lo, cf->ratio_hi));
        json_object_set_new(e, "candidate_ci95", json_pack("[f, f]", cf->win_lo, cf->win_hi));
        json_object_set_new(e, "default_ci95", json_pack("[f, f]", cf->def_lo, cf->def_hi));
    }
    write_line(j, e);
}
