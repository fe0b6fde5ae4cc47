/* Internal helpers shared by the policy sources. Not installed. */
#ifndef SQUEEZEFS_POLICY_IMPL_H
#define SQUEEZEFS_POLICY_IMPL_H

#include "common/errbuf.h"

/* Whitespace as the spec and rule syntaxes see it: space, tab, CR, LF,
 * VT, FF (locale independent). */
static inline int sqz_policy_space(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' ||
           c == '\f';
}

/* A whitespace-separated token [b, e) of policy text; a quoted token
 * ("17 2 6" or '17 2 6') includes its quotes. */
typedef struct sqz_ptoken {
    const char *b, *e;
} sqz_ptoken;

/* Split [b, e) into at most max tokens. Returns the count, -EINVAL for an
 * unterminated quote or text glued to a closing quote, -E2BIG for more
 * than max tokens. */
int sqz_policy_tokens(const char *b, const char *e, sqz_ptoken *tok,
                      int max);

#endif
