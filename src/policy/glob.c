/* Glob matching of rule patterns against mount-relative paths.
 *
 * Within a component: '*' any run of characters, '?' one character,
 * '[...]' a class ('!' or '^' negates, ranges a-z, a leading ']' is
 * literal), '\' escapes the next character. None of them matches '/'.
 * A component that is exactly ** (two stars) matches zero or more whole
 * components, so a leading **-component matches at any depth including the
 * top level. A trailing **-component after other components needs at least
 * one path component: "a" followed by ** matches everything under a, not a
 * itself. A trailing '/' means the same ("logs/" = everything under logs).
 * A pattern without '/' matches the basename (any depth); otherwise the
 * pattern is matched against the whole path (a leading '/' is allowed and
 * only makes the anchoring explicit). Empty components ("a//b") are
 * ignored on both sides.
 *
 * Both levels use the greedy wildcard algorithm with a single backtrack
 * point, so matching takes O(len(pattern) * len(path)) at worst; no
 * recursion, no allocation. */
#include <stddef.h>
#include <string.h>

#include "squeezefs/policy.h"

/* Class at p[0] == '['; pe = end of component. Sets *next past the class
 * and returns 1/0 for c; returns -1 if the class is unterminated. */
static int match_class(const char *p, const char *pe, unsigned char c,
                       const char **next)
{
    const char *q = p + 1;
    int neg = 0, hit = 0;
    if (q < pe && (*q == '!' || *q == '^')) {
        neg = 1;
        q++;
    }
    int first = 1;
    while (q < pe && (first || *q != ']')) {
        first = 0;
        unsigned char lo = (unsigned char)*q;
        if (lo == '\\' && q + 1 < pe)
            lo = (unsigned char)*++q;
        q++;
        unsigned char hi = lo;
        if (q + 1 < pe && *q == '-' && q[1] != ']') {
            hi = (unsigned char)q[1];
            q += 2;
            if (hi == '\\' && q < pe)
                hi = (unsigned char)*q++;
        }
        if (c >= lo && c <= hi)
            hit = 1;
    }
    if (q >= pe)
        return -1;
    *next = q + 1;
    return hit != neg;
}

/* Does the single-character element at *pp match c? Advances *pp. */
static int match_one(const char **pp, const char *pe, unsigned char c)
{
    const char *p = *pp;
    if (*p == '?') {
        *pp = p + 1;
        return 1;
    }
    if (*p == '[') {
        const char *next;
        int r = match_class(p, pe, c, &next);
        if (r >= 0) {
            *pp = next;
            return r;
        }
        /* unterminated: a literal '[' */
    }
    if (*p == '\\' && p + 1 < pe)
        p++;
    *pp = p + 1;
    return (unsigned char)*p == c;
}

/* Glob [p, pe) against one component [s, se). */
static int match_component(const char *p, const char *pe, const char *s,
                           const char *se)
{
    const char *star_p = NULL, *star_s = NULL;
    while (s < se) {
        if (p < pe && *p == '*') {
            while (p < pe && *p == '*')
                p++;
            star_p = p;
            star_s = s;
            continue;
        }
        if (p < pe) {
            const char *np = p;
            if (match_one(&np, pe, (unsigned char)*s)) {
                p = np;
                s++;
                continue;
            }
        }
        if (!star_p)
            return 0;
        p = star_p;
        s = ++star_s;
    }
    while (p < pe && *p == '*')
        p++;
    return p == pe;
}

/* Next non-empty component of [*cur, end): sets [*b, *e), advances *cur. */
static int next_comp(const char **cur, const char *end, const char **b,
                     const char **e)
{
    const char *c = *cur;
    while (c < end && *c == '/')
        c++;
    if (c == end) {
        *cur = c;
        return 0;
    }
    *b = c;
    while (c < end && *c != '/')
        c++;
    *e = c;
    *cur = c;
    return 1;
}

static int is_dstar(const char *b, const char *e)
{
    return e - b == 2 && b[0] == '*' && b[1] == '*';
}

/* Only "**" components (or nothing) in [p, pe)? */
static int only_dstars(const char *p, const char *pe)
{
    const char *b, *e;
    while (next_comp(&p, pe, &b, &e))
        if (!is_dstar(b, e))
            return 0;
    return 1;
}

/* Component-level match of pattern [p, pe) against path [s, se).
 * tail: the pattern ends in a "**" that needs at least one component. */
static int match_path(const char *p, const char *pe, const char *s,
                      const char *se, int tail)
{
    const char *star_p = NULL, *star_s = NULL;
    for (;;) {
        const char *sb, *se_, *s_next = s;
        if (!next_comp(&s_next, se, &sb, &se_))
            break;
        const char *pb, *pe_, *p_next = p;
        int have = next_comp(&p_next, pe, &pb, &pe_);
        if (have && is_dstar(pb, pe_)) {
            if (only_dstars(p_next, pe))
                return 1; /* the rest of the path, which is non-empty */
            star_p = p = p_next;
            star_s = s;
            continue;
        }
        if (!have && tail)
            return 1;
        if (have && match_component(pb, pe_, sb, se_)) {
            p = p_next;
            s = s_next;
            continue;
        }
        if (!star_p)
            return 0;
        /* let the last "**" absorb one more component */
        const char *xb, *xe;
        next_comp(&star_s, se, &xb, &xe);
        s = star_s;
        p = star_p;
    }
    /* path exhausted: only "**" may remain, and they match nothing */
    return only_dstars(p, pe) && !tail;
}

int sqz_glob_match(const char *pattern, const char *relpath)
{
    if (!pattern || !relpath)
        return 0;
    const char *s = relpath, *se = relpath + strlen(relpath);
    if (!strchr(pattern, '/')) {
        const char *base = strrchr(relpath, '/');
        base = base ? base + 1 : relpath;
        return match_component(pattern, pattern + strlen(pattern), base, se);
    }
    const char *p = pattern, *pe = pattern + strlen(pattern);
    while (p < pe && *p == '/')
        p++;
    int tail = 0;
    if (pe > p && pe[-1] == '/') {
        tail = 1; /* "dir/": everything under dir */
        while (pe > p && pe[-1] == '/')
            pe--;
    }
    /* a trailing "**" after some other component needs one component */
    const char *b, *e, *cur = p, *lastb = NULL, *laste = NULL;
    int others = 0;
    while (next_comp(&cur, pe, &b, &e)) {
        if (!is_dstar(b, e))
            others = 1;
        lastb = b;
        laste = e;
    }
    if (lastb && is_dstar(lastb, laste) && others)
        tail = 1;
    return match_path(p, pe, s, se, tail);
}
