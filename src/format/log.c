/* The process-wide log sink of the container library (sqz_set_log) and the
 * formatting front end sqz_logf. */
#include <stdarg.h>
#include <stdio.h>

#include "squeezefs/container.h"

/* The one documented process-wide setting (container.h). */
static sqz_log_fn log_fn;
static void *log_user;

void sqz_set_log(sqz_log_fn fn, void *user)
{
    log_fn = fn;
    log_user = user;
}

void sqz_logf(int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log_fn) {
        log_fn(log_user, level, msg);
        return;
    }
    const char *name = level == SQZ_LOG_ERR    ? "error"
                       : level == SQZ_LOG_WARN ? "warning"
                       : level == SQZ_LOG_INFO ? "info"
                                               : "log";
    fprintf(stderr, "squeezefs: %s: %s\n", name, msg);
}
