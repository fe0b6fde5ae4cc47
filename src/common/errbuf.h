/* The error convention of src/, in every layer:
 *  - A function that can fail returns 0 (or a count) on success and a
 *    negative errno on failure: never -1 with errno set, never a bare
 *    error code of its own.
 *  - When a human needs the reason (bad input, a damaged file), the
 *    function also writes it into a caller-supplied (char *err, size_t
 *    errlen) buffer with sqz_errf: NUL-terminated, truncated to errlen,
 *    skipped when err is NULL or errlen 0. The caller decides whether to
 *    print, log or report it (or passes NULL, 0 when it does not care).
 *  - What happens without a caller waiting for a reason (damage met while
 *    reading, a background commit failing) is logged with
 *    sqz_logf(SQZ_LOG_ERR / SQZ_LOG_WARN / SQZ_LOG_INFO, "LABEL: what")
 *    (squeezefs/container.h).
 * Header-only so every layer can use it without a dependency. */
#ifndef SQZ_COMMON_ERRBUF_H
#define SQZ_COMMON_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* printf into err (NUL-terminated, truncated to errlen); no-op if err is
 * NULL or errlen is 0. */
static inline void sqz_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void sqz_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

#endif
