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

char *sqz_label_dup(const char *label, int fd)
{
    char buf[32];
    if (label == SQZ_LABEL_FROM_FD) {
        /* "\001" + the descriptor: resolved by sqz_label_text */
        snprintf(buf, sizeof buf, "\001%d", fd);
        label = buf;
    }
    return strdup(label ? label : "(container)");
}

const char *sqz_label_text_fd(const char *label, int fd, char *buf, size_t n)
{
    char lazy[32];
    if (label == SQZ_LABEL_FROM_FD) {
        snprintf(lazy, sizeof lazy, "\001%d", fd);
        return sqz_label_text(lazy, buf, n);
    }
    return sqz_label_text(label, buf, n);
}

const char *sqz_label_text(const char *label, char *buf, size_t n)
{
    if (!label)
        return "(container)";
    if (label[0] != '\001')
        return label;
    char pp[48];
    snprintf(pp, sizeof pp, "/proc/self/fd/%s", label + 1);
    ssize_t r = readlink(pp, buf, n - 1);
    if (r <= 0 || (size_t)r >= n - 1) {
        snprintf(buf, n, "(container, descriptor %s)", label + 1);
        return buf;
    }
    buf[r] = '\0';
    static const char del[] = " (deleted)";
    size_t dl = sizeof del - 1;
    if ((size_t)r > dl && strcmp(buf + r - dl, del) == 0)
        buf[r - dl] = '\0';
    size_t rl = label_root ? strlen(label_root) : 0;
    if (rl == 1 && label_root[0] == '/')
        rl = 0; /* the root is "/": every path is under it */
    if (label_root && strncmp(buf, label_root, rl) == 0 && buf[rl] == '/')
        memmove(buf, buf + rl + 1, strlen(buf + rl + 1) + 1);
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
