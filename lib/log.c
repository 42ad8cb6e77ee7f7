/* The context's log callback: diagnostics that are not errors. Apart from
 * context.c, which makes and destroys a context (and so calls the files
 * that log), so that the layers below it can log. */
#include "internal.h"

#include <stdio.h>

void oclf_log(const oclf_context *ctx, oclf_log_level level, const char *fmt, ...)
{
    if (!ctx || !ctx->log)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* The callback may call the library: the running call keeps its name. */
    const char *fn = oclf_entered();
    ctx->log(ctx->log_user, level, msg);
    oclf_enter(fn);
}
