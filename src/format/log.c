/* The process-wide log sink of the container library (sqz_set_log), the
 * formatting front end sqz_logf, and the labels made from a descriptor's
 * path (SQZ_LABEL_FROM_FD, sqz_set_label_root). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fdpath.h"
#include "format/format_int.h"

/* The two documented process-wide settings (container.h). */
static sqz_log_fn log_fn;
static void *log_user;
static char *label_root;

const char SQZ_LABEL_FROM_FD[] = "(container)";

int sqz_set_label_root(const char *dir)
{
    char *d = dir ? strdup(dir) : NULL;
    if (dir && !d)
        return -ENOMEM;
    free(label_root);
    label_root = d;
    return 0;
}

/* label as stored for a container on fd: SQZ_LABEL_FROM_FD becomes
 * "\001" + the descriptor (lazy, 32 bytes), resolved by sqz_label_text */
static const char *stored(const char *label, int fd, char *lazy)
{
    if (label != SQZ_LABEL_FROM_FD)
        return label;
    snprintf(lazy, 32, "\001%d", fd);
    return lazy;
}

char *sqz_label_dup(const char *label, int fd)
{
    char lazy[32];
    label = stored(label, fd, lazy);
    return strdup(label ? label : "(container)");
}

const char *sqz_label_text_fd(const char *label, int fd, char *buf, size_t n)
{
    char lazy[32];
    return sqz_label_text(stored(label, fd, lazy), buf, n);
}

const char *sqz_label_text(const char *label, char *buf, size_t n)
{
    if (!label)
        return "(container)";
    if (label[0] != '\001')
        return label;
    if (sqz_fd_path(atoi(label + 1), buf, n) != 0 || !buf[0]) {
        snprintf(buf, n, "(container, descriptor %s)", label + 1);
        return buf;
    }
    const char *rel = label_root ? sqz_path_below(buf, label_root,
                                                  strlen(label_root))
                                 : NULL;
    if (rel && rel[0] && rel != buf)
        memmove(buf, rel, strlen(rel) + 1);
    return buf;
}

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
