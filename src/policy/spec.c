/* SPEC text: parsing (`ALG[:LEVEL][/BLOCK]`, auto modes, kdb+ triples),
 * block sizes, and canonical formatting. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "squeezefs/policy.h"
#include "policy_impl.h"

#define SPEC_MAX 200 /* longest accepted spec text after trimming */

#define BLOCK_HELP                                                          \
    "expected a power of two from 4K to 1M (4K, 8K, 16K, 32K, 64K, 128K, "  \
    "256K, 512K, 1M), a byte count such as 65536, or a log2 12..20"
/* after "valid: " + the codec layer's sqz_alg_names() */
#define AUTO_HELP ", auto, auto:ratio, auto:speed"
#define FORM_HELP                                                           \
    "expected ALG[:LEVEL][/BLOCK] (e.g. zstd:3/128K) or a kdb+ triple "     \
    "'LBS ALG LEVEL' (e.g. \"17 2 6\")"

/* Strict decimal integer with optional sign; 0 on success. */
static int parse_int(const char *s, int *out)
{
    const char *p = s;
    int neg = 0;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (*p < '0' || *p > '9')
        return -1;
    long long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > (long long)INT_MAX + 1)
            return -1;
    }
    if (*p)
        return -1;
    if (neg)
        v = -v;
    if (v < INT_MIN || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

int sqz_parse_block(const char *text, int *log2bs, char *err, size_t errlen)
{
    const char *p = text ? text : "";
    unsigned long long v = 0;
    const char *d = p;
    while (*d >= '0' && *d <= '9') {
        if (v < (1ull << 40))
            v = v * 10 + (unsigned)(*d - '0');
        d++;
    }
    unsigned long long mult = 1;
    int bare = 0;
    if (d == p) {
        goto bad;
    } else if (*d == 0) {
        bare = 1;
    } else if (strcasecmp(d, "k") == 0 || strcasecmp(d, "kb") == 0 ||
               strcasecmp(d, "kib") == 0) {
        mult = 1024;
    } else if (strcasecmp(d, "m") == 0 || strcasecmp(d, "mb") == 0 ||
               strcasecmp(d, "mib") == 0) {
        mult = 1024 * 1024;
    } else {
        goto bad;
    }
    if (bare && v >= 12 && v <= 20) {
        if (log2bs)
            *log2bs = (int)v;
        return 0;
    }
    if (v >= (1ull << 40))
        goto bad;
    unsigned long long bytes = v * mult;
    for (int l = 12; l <= 20; l++) {
        if (bytes == (1ull << l)) {
            if (log2bs)
                *log2bs = l;
            return 0;
        }
    }
bad:
    sqz_errf(err, errlen, "invalid block size '%.32s': " BLOCK_HELP, p);
    return -EINVAL;
}

/* kdb+ triple "LBS ALG LEVEL" in buf (whitespace separated). */
static int parse_triple(char *buf, const char *orig, sqz_spec *out, char *err,
                        size_t errlen)
{
    char *tok[4] = {0};
    int nt = 0;
    char *p = buf;
    while (*p) {
        while (*p && sqz_policy_space((unsigned char)*p))
            *p++ = 0;
        if (!*p)
            break;
        if (nt == 4)
            break;
        tok[nt++] = p;
        while (*p && !sqz_policy_space((unsigned char)*p))
            p++;
    }
    if (nt != 3) {
        sqz_errf(err, errlen, "invalid spec '%.64s': " FORM_HELP, orig);
        return -EINVAL;
    }
    int lbs, kdb, level;
    if (parse_int(tok[0], &lbs) != 0 || lbs < 12 || lbs > 20) {
        sqz_errf(err, errlen,
                       "kdb+ logical block size '%.16s' is out of range "
                       "12..20 (4K..1M)", tok[0]);
        return -EINVAL;
    }
    if (parse_int(tok[1], &kdb) != 0) {
        sqz_errf(err, errlen, "kdb+ algorithm '%.16s' is not a number; use %s",
                 tok[1], sqz_alg_kdb_names());
        return -EINVAL;
    }
    sqz_alg alg;
    if (sqz_alg_from_kdb(kdb, &alg, err, errlen) != 0)
        return -EINVAL;
    if (parse_int(tok[2], &level) != 0) {
        sqz_errf(err, errlen,
                       "invalid %s level '%.16s': expected an integer in %d..%d",
                       sqz_alg_name(alg), tok[2], sqz_level_min(alg),
                       sqz_level_max(alg));
        return -EINVAL;
    }
    if (sqz_level_check(alg, level, err, errlen) != 0)
        return -EINVAL;
    out->alg = alg;
    out->level = level;
    out->log2bs = lbs;
    out->auto_mode = SQZ_AUTO_NONE;
    return 0;
}

/* ALG[:LEVEL][/BLOCK] in buf. */
static int parse_form(char *buf, sqz_spec *out, char *err, size_t errlen)
{
    char *block = strchr(buf, '/');
    if (block) {
        *block++ = 0;
        if (sqz_parse_block(block, &out->log2bs, err, errlen) != 0)
            return -EINVAL;
    }
    char *level = strchr(buf, ':');
    if (level)
        *level++ = 0;
    if (strcasecmp(buf, "auto") == 0) {
        if (!level || strcasecmp(level, "balanced") == 0)
            out->auto_mode = SQZ_AUTO_BALANCED;
        else if (strcasecmp(level, "ratio") == 0)
            out->auto_mode = SQZ_AUTO_RATIO;
        else if (strcasecmp(level, "speed") == 0)
            out->auto_mode = SQZ_AUTO_SPEED;
        else {
            sqz_errf(err, errlen,
                           "unknown auto mode '%.32s'; use auto, auto:ratio "
                           "or auto:speed", level);
            return -EINVAL;
        }
        out->alg = SQZ_ALG_ZSTD;
        out->level = sqz_level_default(SQZ_ALG_ZSTD);
        return 0;
    }
    if (sqz_alg_from_name(buf, &out->alg, NULL, 0) != 0) {
        if (!*buf)
            sqz_errf(err, errlen, "missing algorithm; valid: %s" AUTO_HELP,
                     sqz_alg_names());
        else
            sqz_errf(err, errlen, "unknown algorithm '%.32s'; valid: %s" AUTO_HELP,
                     buf, sqz_alg_names());
        return -EINVAL;
    }
    out->auto_mode = SQZ_AUTO_NONE;
    out->level = sqz_level_default(out->alg);
    if (level) {
        if (parse_int(level, &out->level) != 0) {
            sqz_errf(err, errlen,
                           "invalid %s level '%.32s': expected an integer in "
                           "%d..%d", sqz_alg_name(out->alg), level,
                           sqz_level_min(out->alg), sqz_level_max(out->alg));
            return -EINVAL;
        }
        if (sqz_level_check(out->alg, out->level, err, errlen) != 0)
            return -EINVAL;
    }
    return 0;
}

int sqz_spec_parse(const char *text, sqz_spec *out, char *err, size_t errlen)
{
    if (!text) {
        sqz_errf(err, errlen, "missing spec; " FORM_HELP);
        return -EINVAL;
    }
    const char *b = text, *e = text + strlen(text);
    while (b < e && sqz_policy_space((unsigned char)*b))
        b++;
    while (e > b && sqz_policy_space((unsigned char)e[-1]))
        e--;
    /* one pair of surrounding quotes, as kdb+ triples are often written */
    if (e - b >= 2 && (*b == '"' || *b == '\'') && e[-1] == *b) {
        b++;
        e--;
        while (b < e && sqz_policy_space((unsigned char)*b))
            b++;
        while (e > b && sqz_policy_space((unsigned char)e[-1]))
            e--;
    }
    size_t len = (size_t)(e - b);
    if (len == 0) {
        sqz_errf(err, errlen, "empty spec; " FORM_HELP);
        return -EINVAL;
    }
    if (len > SPEC_MAX) {
        sqz_errf(err, errlen, "spec is too long (%zu characters, at most %d)",
                       len, SPEC_MAX);
        return -EINVAL;
    }
    char buf[SPEC_MAX + 1], orig[SPEC_MAX + 1];
    memcpy(buf, b, len);
    buf[len] = 0;
    memcpy(orig, buf, len + 1);

    sqz_spec s = {.alg = SQZ_ALG_NONE, .level = 0, .log2bs = 0,
                  .auto_mode = SQZ_AUTO_NONE};
    int has_space = 0;
    for (size_t i = 0; i < len; i++)
        if (sqz_policy_space((unsigned char)buf[i]))
            has_space = 1;
    int r = has_space ? parse_triple(buf, orig, &s, err, errlen)
                      : parse_form(buf, &s, err, errlen);
    if (r != 0)
        return r;
    if (out)
        *out = s;
    return 0;
}

int sqz_spec_format(const sqz_spec *s, char *buf, size_t n)
{
    if (!s || (!buf && n))
        return -EINVAL;
    if (s->log2bs != 0 && (s->log2bs < 12 || s->log2bs > 20))
        return -EINVAL;
    char head[32];
    switch (s->auto_mode) {
    case SQZ_AUTO_NONE:
        if (sqz_level_check(s->alg, s->level, NULL, 0) != 0)
            return -EINVAL;
        if (sqz_level_min(s->alg) == sqz_level_max(s->alg))
            snprintf(head, sizeof head, "%s", sqz_alg_name(s->alg));
        else
            snprintf(head, sizeof head, "%s:%d", sqz_alg_name(s->alg),
                     s->level);
        break;
    case SQZ_AUTO_BALANCED: snprintf(head, sizeof head, "auto"); break;
    case SQZ_AUTO_RATIO: snprintf(head, sizeof head, "auto:ratio"); break;
    case SQZ_AUTO_SPEED: snprintf(head, sizeof head, "auto:speed"); break;
    default: return -EINVAL;
    }
    int len;
    if (s->log2bs == 0)
        len = snprintf(buf, n, "%s", head);
    else if (s->log2bs >= 20)
        len = snprintf(buf, n, "%s/%dM", head, 1 << (s->log2bs - 20));
    else
        len = snprintf(buf, n, "%s/%dK", head, 1 << (s->log2bs - 10));
    if (len < 0)
        return -EINVAL;
    if ((size_t)len >= n)
        return -ENOSPC;
    return len;
}
