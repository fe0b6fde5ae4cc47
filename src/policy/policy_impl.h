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

#endif
