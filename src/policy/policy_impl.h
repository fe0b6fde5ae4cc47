/* Internal helpers shared by the policy sources. Not installed. */
#ifndef SQUEEZEFS_POLICY_IMPL_H
#define SQUEEZEFS_POLICY_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* snprintf into an optional caller buffer (err may be NULL / errlen 0). */
static inline void sqz_policy_err(char *err, size_t errlen, const char *fmt,
                                  ...) __attribute__((format(printf, 3, 4)));
static inline void sqz_policy_err(char *err, size_t errlen, const char *fmt,
                                  ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Whitespace as the spec and rule syntaxes see it: space, tab, CR, LF,
 * VT, FF (locale independent). */
static inline int sqz_policy_space(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' ||
           c == '\f';
}

#endif
