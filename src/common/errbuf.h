/* Error-message buffers: functions that fail with -EINVAL etc. may also
 * write a human-readable reason into a caller-supplied (err, errlen)
 * buffer. Header-only so every layer can use it without a dependency. */
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
