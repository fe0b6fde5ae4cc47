/* Policy text with an aged policy: `SPEC [after AGE SPEC2]`, ages (Nd, Nh,
 * Nm), canonical formatting, and which of the two applies at an age. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "squeezefs/policy.h"
#include "policy_impl.h"

#define POLICY_MAX 512 /* longest accepted policy text */
#define AGE_HELP "expected a number and a unit d, h or m (days, hours, " \
                 "minutes), e.g. 30d, 12h, 90m"

int sqz_policy_tokens(const char *b, const char *e, sqz_ptoken *tok,
                      int max)
{
    int n = 0;
    const char *p = b;
    for (;;) {
        while (p < e && sqz_policy_space((unsigned char)*p))
            p++;
        if (p == e)
            return n;
        const char *s = p;
        if (*p == '"' || *p == '\'') {
            const char *q = memchr(p + 1, *p, (size_t)(e - p - 1));
            if (!q)
                return -EINVAL; /* unterminated quote */
            p = q + 1;
            if (p < e && !sqz_policy_space((unsigned char)*p))
                return -EINVAL; /* text glued to a closing quote */
        } else {
            while (p < e && !sqz_policy_space((unsigned char)*p))
                p++;
        }
        if (n == max)
            return -E2BIG;
        tok[n].b = s;
        tok[n].e = p;
        n++;
    }
}

int sqz_age_parse(const char *text, long long *secs, char *err,
                  size_t errlen)
{
    const char *p = text ? text : "";
    long long v = 0;
    const char *d = p;
    while (*d >= '0' && *d <= '9') {
        if (v <= SQZ_AGE_MAX_S)
            v = v * 10 + (*d - '0');
        d++;
    }
    long long mult = 0;
    if (d != p && d[0] && !d[1]) {
        if (*d == 'd')
            mult = 86400;
        else if (*d == 'h')
            mult = 3600;
        else if (*d == 'm')
            mult = 60;
    }
    if (mult == 0) {
        sqz_errf(err, errlen, "invalid age '%.32s': " AGE_HELP, p);
        return -EINVAL;
    }
    if (v > SQZ_AGE_MAX_S / mult) {
        sqz_errf(err, errlen, "age '%.32s' is too large (at most 36500d)", p);
        return -EINVAL;
    }
    if (secs)
        *secs = v * mult;
    return 0;
}

int sqz_age_format(long long secs, char *buf, size_t n)
{
    if (secs < 0 || secs > SQZ_AGE_MAX_S || secs % 60 != 0 || (!buf && n))
        return -EINVAL;
    int len;
    if (secs % 86400 == 0)
        len = snprintf(buf, n, "%lldd", secs / 86400);
    else if (secs % 3600 == 0)
        len = snprintf(buf, n, "%lldh", secs / 3600);
    else
        len = snprintf(buf, n, "%lldm", secs / 60);
    if (len < 0)
        return -EINVAL;
    return (size_t)len >= n ? -ENOSPC : len;
}

/* sqz_spec_parse of [b, e). */
static int spec_of(const char *b, const char *e, sqz_spec *out, char *err,
                   size_t errlen)
{
    char buf[POLICY_MAX + 1];
    size_t len = (size_t)(e - b);
    if (len > POLICY_MAX)
        len = POLICY_MAX; /* sqz_spec_parse rejects it as too long */
    memcpy(buf, b, len);
    buf[len] = 0;
    return sqz_spec_parse(buf, out, err, errlen);
}

static int is_after(const sqz_ptoken *t)
{
    return t->e - t->b == 5 && strncasecmp(t->b, "after", 5) == 0;
}

int sqz_policy_parse(const char *text, sqz_policy *out, char *err,
                     size_t errlen)
{
    if (!text) {
        sqz_errf(err, errlen, "missing policy");
        return -EINVAL;
    }
    size_t tl = strlen(text);
    if (tl > POLICY_MAX) {
        sqz_errf(err, errlen, "policy is too long (%zu characters, at most %d)",
                 tl, POLICY_MAX);
        return -EINVAL;
    }
    const char *e = text + tl;
    sqz_ptoken tok[16];
    int n = sqz_policy_tokens(text, e, tok, 16);
    int at = -1;
    for (int i = 0; i < n; i++) {
        if (is_after(&tok[i])) {
            if (at >= 0) {
                sqz_errf(err, errlen, "only one 'after' clause is allowed "
                         "(SPEC after AGE SPEC2)");
                return -EINVAL;
            }
            at = i;
        }
    }
    sqz_policy p;
    memset(&p, 0, sizeof p);
    p.after_s = -1;
    if (at < 0) { /* a SPEC alone: as before (an unquoted triple too) */
        int r = sqz_spec_parse(text, &p.spec, err, errlen);
        if (r == 0 && out)
            *out = p;
        return r;
    }
    if (at == 0) {
        sqz_errf(err, errlen, "missing SPEC before 'after' (expected SPEC "
                 "after AGE SPEC2, e.g. lz4/128K after 30d zstd:19/1M)");
        return -EINVAL;
    }
    if (at + 1 >= n) {
        sqz_errf(err, errlen, "missing AGE after 'after': " AGE_HELP);
        return -EINVAL;
    }
    if (at + 2 >= n) {
        sqz_errf(err, errlen, "missing SPEC2 after 'after %.*s' (expected SPEC "
                 "after AGE SPEC2, e.g. lz4/128K after 30d zstd:19/1M)",
                 (int)(tok[at + 1].e - tok[at + 1].b > 32 ? 32
                       : tok[at + 1].e - tok[at + 1].b), tok[at + 1].b);
        return -EINVAL;
    }
    char msg[256] = "";
    if (spec_of(text, tok[at].b, &p.spec, msg, sizeof msg) != 0) {
        sqz_errf(err, errlen, "%s", msg);
        return -EINVAL;
    }
    char age[40];
    size_t al = (size_t)(tok[at + 1].e - tok[at + 1].b);
    if (al >= sizeof age)
        al = sizeof age - 1;
    memcpy(age, tok[at + 1].b, al);
    age[al] = 0;
    if (sqz_age_parse(age, &p.after_s, err, errlen) != 0)
        return -EINVAL;
    msg[0] = 0;
    if (spec_of(tok[at + 2].b, e, &p.aged, msg, sizeof msg) != 0) {
        sqz_errf(err, errlen, "after %s: %s", age, msg);
        return -EINVAL;
    }
    if (out)
        *out = p;
    return 0;
}

int sqz_policy_format(const sqz_policy *p, char *buf, size_t n)
{
    if (!p || (!buf && n))
        return -EINVAL;
    int a = sqz_spec_format(&p->spec, buf, n);
    if (a < 0 || p->after_s < 0)
        return a;
    char age[32], aged[64];
    int r = sqz_age_format(p->after_s, age, sizeof age);
    if (r < 0)
        return r;
    r = sqz_spec_format(&p->aged, aged, sizeof aged);
    if (r < 0)
        return r;
    /* a triple is never produced by sqz_spec_format: no quoting needed */
    int len = snprintf(buf + a, n - (size_t)a, " after %s %s", age, aged);
    if (len < 0)
        return -EINVAL;
    return (size_t)len >= n - (size_t)a ? -ENOSPC : a + len;
}

int sqz_policy_is_aged(const sqz_policy *p, long long age_s)
{
    if (!p || p->after_s < 0)
        return 0;
    return (age_s < 0 ? 0 : age_s) >= p->after_s;
}
