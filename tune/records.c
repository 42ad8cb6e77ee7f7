/* The tuner's records and closing table (tune/records.h). */
#include "records.h"

#include "journal.h"

#include <stdio.h>
#include <time.h>

void params_text(const oclf_params *p, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < p->count && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s=%lld", i ? " " : "",
                                 p->item[i].name, (long long)p->item[i].value);
}

/* The database record for a finished job. */
json_t *make_record(const result *r, const op_shape *shape, double copy_gbps)
{
    json_t *sh = json_object();
    uint64_t dims[OP_MAX_DIMS];
    const char *const *names;
    const int nd = op_lib_shape(r->op, shape, dims, &names);
    for (int k = 0; k < nd; k++)
        json_object_set_new(sh, names[k], json_integer((json_int_t)dims[k]));
    /* The default is recorded as an empty parameter set: "the heuristic",
     * which keeps tracking the device if the heuristic improves. */
    const oclf_params none = {0};
    const cand *b = &r->best;
    json_t *rec = json_pack("{s:s, s:s, s:o, s:{s:s, s:o}, s:f}", "op", op_lib_op(r->op), "dtype",
                            oclf_dtype_name(r->dtype), "shape", sh, "choice", "path",
                            path_name(b->ch.path), "params",
                            params_json(b->is_default ? &none : &b->ch.params), "time_ns",
                            b->time_ns);
    const cand *other = b->ch.path == OCLF_PATH_FUSED ? &r->unfused : &r->fused;
    if (other->state > 0) {
        json_t *alt = json_pack("{s:s, s:o, s:f}", "path", path_name(other->ch.path), "params",
                                params_json(other->is_default ? &none : &other->ch.params),
                                "time_ns", other->time_ns);
        json_object_set_new(rec, "alternatives", json_pack("[o]", alt));
    }
    if (r->unfused.state > 0)
        json_object_set_new(rec, "unfused_time_ns", json_real(r->unfused.time_ns));
    if (r->fused.state > 0)
        json_object_set_new(rec, "fused_time_ns", json_real(r->fused.time_ns));
    if (r->default_ns > 0)
        json_object_set_new(rec, "default_time_ns", json_real(r->default_ns));
    json_object_set_new(rec, "copy_gbps", json_real(copy_gbps));
    json_object_set_new(rec, "tuner", json_string(TUNER_NAME));
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d", &tm);
    json_object_set_new(rec, "date", json_string(date));
    return rec;
}

void closing_table(const result *res, int n, double copy_gbps)
{
    printf("\n%-15s %-5s %-16s %-36s %10s %10s %10s %7s %8s %6s\n", "op", "dtype", "shape",
           "choice", "fused ms", "unfused ms", "default ms", "gain", "GB/s", "%copy");
    for (int i = 0; i < n; i++) {
        const result *r = &res[i];
        if (!r->op)
            continue;
        char ch[128] = "(nothing measured)", fs[32] = "-", us[32] = "-", ds[32] = "-",
             gs[32] = "-", bw[32] = "-", pc[32] = "-";
        if (r->have) {
            char pt[96];
            params_text(&r->best.ch.params, pt, sizeof pt);
            snprintf(ch, sizeof ch, "%s %s", path_name(r->best.ch.path),
                     r->best.is_default ? "(default)" : pt);
            const double gbps = r->bytes / r->best.time_ns;
            snprintf(bw, sizeof bw, "%.1f", gbps);
            if (copy_gbps > 0)
                snprintf(pc, sizeof pc, "%.0f%%", 100 * gbps / copy_gbps);
            if (r->default_ns > 0)
                snprintf(gs, sizeof gs, "%.2fx", r->default_ns / r->best.time_ns);
        }
        if (r->fused.state > 0)
            snprintf(fs, sizeof fs, "%.3f", r->fused.time_ns / 1e6);
        if (r->unfused.state > 0)
            snprintf(us, sizeof us, "%.3f", r->unfused.time_ns / 1e6);
        if (r->default_ns > 0)
            snprintf(ds, sizeof ds, "%.3f", r->default_ns / 1e6);
        printf("%-15s %-5s %-16s %-36s %10s %10s %10s %7s %8s %6s\n", r->op->name,
               oclf_dtype_name(r->dtype), r->shape, ch, fs, us, ds, gs, bw, pc);
    }
}

