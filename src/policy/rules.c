/* Rule files: parsing `PATTERN SPEC [after AGE SPEC2]` lines, loading from disk, first-match
 * lookup. A loaded sqz_rules is immutable. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "squeezefs/policy.h"
#include "policy_impl.h"

#define RULES_FILE_MAX (16u << 20) /* refuse absurdly large rule files */

typedef struct sqz_rule {
    char *pattern;
    sqz_policy pol;
    int line;
} sqz_rule;

struct sqz_rules {
    sqz_rule *v;
    size_t n, cap;
};

void sqz_rules_free(sqz_rules *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        free(r->v[i].pattern);
    free(r->v);
    free(r);
}

size_t sqz_rules_count(const sqz_rules *r)
{
    return r ? r->n : 0;
}

size_t sqz_rules_count_aged(const sqz_rules *r)
{
    size_t n = 0;
    for (size_t i = 0; r && i < r->n; i++)
        n += r->v[i].pol.after_s >= 0;
    return n;
}

int sqz_rules_get(const sqz_rules *r, size_t i, const char **pattern,
                  sqz_policy *pol, int *line)
{
    if (!r || i >= r->n)
        return -ERANGE;
    if (pattern)
        *pattern = r->v[i].pattern;
    if (pol)
        *pol = r->v[i].pol;
    if (line)
        *line = r->v[i].line;
    return 0;
}

int sqz_rules_match_policy(const sqz_rules *r, const char *relpath,
                           sqz_policy *out)
{
    if (!r || !relpath)
        return 0;
    for (size_t i = 0; i < r->n; i++) {
        if (sqz_glob_match(r->v[i].pattern, relpath)) {
            if (out)
                *out = r->v[i].pol;
            return r->v[i].line;
        }
    }
    return 0;
}

int sqz_rules_match(const sqz_rules *r, const char *relpath, sqz_spec *out)
{
    sqz_policy p;
    int line = sqz_rules_match_policy(r, relpath, &p);
    if (line && out)
        *out = p.spec;
    return line;
}

static int rules_add(sqz_rules *r, const char *pat, size_t patlen,
                     const sqz_policy *pol, int line)
{
    if (r->n == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 16;
        sqz_rule *v = realloc(r->v, ncap * sizeof *v);
        if (!v)
            return -ENOMEM;
        r->v = v;
        r->cap = ncap;
    }
    char *p = malloc(patlen + 1);
    if (!p)
        return -ENOMEM;
    memcpy(p, pat, patlen);
    p[patlen] = 0;
    r->v[r->n].pattern = p;
    r->v[r->n].pol = *pol;
    r->v[r->n].line = line;
    r->n++;
    return 0;
}

/* End of the meaningful part of line [b, e): stops at a '#' that starts the
 * line or follows whitespace, outside quotes. */
static const char *strip_comment(const char *b, const char *e)
{
    char quote = 0;
    for (const char *p = b; p < e; p++) {
        if (quote) {
            if (*p == quote)
                quote = 0;
        } else if (*p == '"' || *p == '\'') {
            quote = *p;
        } else if (*p == '#' &&
                   (p == b || sqz_policy_space((unsigned char)p[-1]))) {
            return p;
        }
    }
    return e;
}

/* One line [b, e): 0 (rule added or nothing to add) or -errno. */
static int parse_line(sqz_rules *r, const char *b, const char *e, int line,
                      const char *src, char *err, size_t errlen)
{
    e = strip_comment(b, e);
    while (b < e && sqz_policy_space((unsigned char)*b))
        b++;
    while (e > b && sqz_policy_space((unsigned char)e[-1]))
        e--;
    if (b == e)
        return 0;
    const char *pe = b;
    while (pe < e && !sqz_policy_space((unsigned char)*pe))
        pe++;
    const char *sb = pe;
    while (sb < e && sqz_policy_space((unsigned char)*sb))
        sb++;
    size_t plen = (size_t)(pe - b), slen = (size_t)(e - sb);
    if (slen == 0) {
        sqz_errf(err, errlen,
                       "%s:%d: missing SPEC after pattern '%.*s' (expected "
                       "'PATTERN SPEC', e.g. '*.csv zstd:9/128K')",
                       src, line, plen > 64 ? 64 : (int)plen, b);
        return -EINVAL;
    }
    /* SPEC, or SPEC after AGE SPEC2: each SPEC one token (a triple quoted) */
    sqz_ptoken tok[5];
    int nt = sqz_policy_tokens(sb, e, tok, 5);
    int shape_ok = nt == 1 ||
                   (nt == 4 && tok[1].e - tok[1].b == 5 &&
                    strncasecmp(tok[1].b, "after", 5) == 0);
    if (!shape_ok) {
        sqz_errf(err, errlen,
                 "%s:%d: unexpected text after the spec; expected 'PATTERN SPEC' "
                 "or 'PATTERN SPEC after AGE SPEC2' (e.g. '/hdb/*/trade/** lz4/128K "
                 "after 30d zstd:19/1M'); a SPEC with spaces must be a quoted kdb+ "
                 "triple such as \"17 2 6\"", src, line);
        return -EINVAL;
    }
    char *text = malloc(slen + 1);
    if (!text) {
        sqz_errf(err, errlen, "%s:%d: out of memory", src, line);
        return -ENOMEM;
    }
    memcpy(text, sb, slen);
    text[slen] = 0;
    sqz_policy pol;
    char msg[256];
    msg[0] = 0;
    int rc = sqz_policy_parse(text, &pol, msg, sizeof msg);
    free(text);
    if (rc != 0) {
        sqz_errf(err, errlen, "%s:%d: %s", src, line, msg);
        return rc;
    }
    if (rules_add(r, b, plen, &pol, line) != 0) {
        sqz_errf(err, errlen, "%s:%d: out of memory", src, line);
        return -ENOMEM;
    }
    return 0;
}

int sqz_rules_parse(const char *text, const char *source_name,
                    sqz_rules **out, char *err, size_t errlen)
{
    const char *src = source_name ? source_name : "rules";
    if (!text || !out) {
        sqz_errf(err, errlen, "%s: no rule text", src);
        return -EINVAL;
    }
    *out = NULL;
    sqz_rules *r = calloc(1, sizeof *r);
    if (!r) {
        sqz_errf(err, errlen, "%s: out of memory", src);
        return -ENOMEM;
    }
    int line = 0;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        const char *e = nl ? nl : p + strlen(p);
        line++;
        int rc = parse_line(r, p, e, line, src, err, errlen);
        if (rc != 0) {
            sqz_rules_free(r);
            return rc;
        }
        p = nl ? nl + 1 : e;
    }
    *out = r;
    return 0;
}

int sqz_rules_load(const char *path, sqz_rules **out, char *err,
                   size_t errlen)
{
    if (!path || !out) {
        sqz_errf(err, errlen, "no rule file given");
        return -EINVAL;
    }
    *out = NULL;
    char ebuf[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        sqz_errf(err, errlen, "%s: %s", path,
                       strerror_r(e, ebuf, sizeof ebuf));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        sqz_errf(err, errlen, "%s: %s", path,
                       strerror_r(e, ebuf, sizeof ebuf));
        return -e;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > (off_t)RULES_FILE_MAX) {
        close(fd);
        sqz_errf(err, errlen, "%s: not a regular file of at most %u bytes",
                       path, RULES_FILE_MAX);
        return S_ISREG(st.st_mode) ? -EFBIG : -EINVAL;
    }
    size_t cap = (size_t)st.st_size + 1, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        sqz_errf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    for (;;) {
        if (len + 1 == cap) { /* the file grew; read what fits */
            break;
        }
        ssize_t got = read(fd, buf + len, cap - 1 - len);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(buf);
            close(fd);
            sqz_errf(err, errlen, "%s: %s", path,
                           strerror_r(e, ebuf, sizeof ebuf));
            return -e;
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    buf[len] = 0;
    if (memchr(buf, 0, len)) {
        free(buf);
        sqz_errf(err, errlen, "%s: contains a NUL byte (not a text file)",
                       path);
        return -EINVAL;
    }
    int rc = sqz_rules_parse(buf, path, out, err, errlen);
    free(buf);
    return rc;
}
