/* Bench results: CSV, table, --where filtering and --recommend. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

/* ---- output ---- */

static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

int bench_write_csv(const char *path, const bench_row *rows, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    fprintf(f, "%s\n", BENCH_CSV_HEADER);
    for (size_t i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        csv_field(f, r->input);
        fprintf(f, ",%llu,%d,%s,%d,%.4f,%.3f,%.3f,%.1f,%.1f\n",
                (unsigned long long)r->size, r->lbs, sqz_alg_name(r->alg), r->lvl,
                r->comp_factor, r->write_ms, r->read_ms, r->write_mbps, r->read_mbps);
    }
    if (fclose(f) != 0)
        return -errno;
    return 0;
}

void bench_print_table(FILE *out, const bench_row *rows, size_t n)
{
    int w = 5;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(rows[i].input) > w)
            w = (int)strlen(rows[i].input);
    fprintf(out, "%-*s %10s %3s %-6s %4s %10s %10s %10s %9s %9s\n", w, "input", "size",
            "lbs", "alg", "lvl", "compFactor", "writeTime", "readTime", "writeMBps",
            "readMBps");
    for (size_t i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        fprintf(out, "%-*s %10llu %3d %-6s %4d %10.3f %10.3f %10.3f %9.1f %9.1f\n", w,
                r->input, (unsigned long long)r->size, r->lbs, sqz_alg_name(r->alg),
                r->lvl, r->comp_factor, r->write_ms, r->read_ms, r->write_mbps,
                r->read_mbps);
    }
}

/* ---- --where: FIELD OP VALUE joined by and/or (and binds tighter),
 * parentheses and `not`. ---- */

typedef enum field {
    F_INPUT, F_SIZE, F_LBS, F_ALG, F_LVL, F_CF, F_WT, F_RT, F_WMB, F_RMB
} field;
static const char *const field_names[] = {
    "input", "size", "lbs", "alg", "lvl", "compFactor", "writeTime", "readTime",
    "writeMBps", "readMBps",
};
#define NFIELDS (sizeof field_names / sizeof field_names[0])

typedef enum op { OP_LT, OP_LE, OP_GT, OP_GE, OP_EQ, OP_NE } op;

typedef enum node_kind { N_CMP, N_AND, N_OR, N_NOT } node_kind;
typedef struct node {
    node_kind kind;
    int a, b;         /* children (indices) */
    field f;
    op o;
    bool is_num;
    double num;
    char str[128];
} node;

typedef struct wparser {
    const char *p;
    node nodes[256];
    int n;
    char *err;
    size_t errlen;
} wparser;

static int werr(wparser *w, const char *msg)
{
    snprintf(w->err, w->errlen, "--where: %s at '%.20s'", msg, w->p);
    return -EINVAL;
}

static void skip(wparser *w)
{
    while (isspace((unsigned char)*w->p))
        w->p++;
}

static bool word(wparser *w, const char *kw)
{
    skip(w);
    size_t n = strlen(kw);
    if (!strncasecmp(w->p, kw, n) && !isalnum((unsigned char)w->p[n]) && w->p[n] != '_') {
        w->p += n;
        return true;
    }
    return false;
}

static int new_node(wparser *w)
{
    if (w->n >= (int)(sizeof w->nodes / sizeof w->nodes[0]))
        return werr(w, "expression too long");
    memset(&w->nodes[w->n], 0, sizeof w->nodes[0]);
    return w->n++;
}

static int parse_or(wparser *w);

static int parse_cmp(wparser *w)
{
    skip(w);
    if (*w->p == '(') {
        w->p++;
        int e = parse_or(w);
        if (e < 0)
            return e;
        skip(w);
        if (*w->p != ')')
            return werr(w, "expected ')'");
        w->p++;
        return e;
    }
    if (word(w, "not")) {
        int a = parse_cmp(w);
        if (a < 0)
            return a;
        int k = new_node(w);
        if (k < 0)
            return k;
        w->nodes[k].kind = N_NOT;
        w->nodes[k].a = a;
        return k;
    }
    const char *s = w->p;
    while (isalnum((unsigned char)*w->p) || *w->p == '_')
        w->p++;
    size_t len = (size_t)(w->p - s);
    int f = -1;
    for (size_t i = 0; i < NFIELDS; i++)
        if (strlen(field_names[i]) == len && !strncmp(s, field_names[i], len))
            f = (int)i;
    if (f < 0) {
        w->p = s;
        return werr(w, "expected a field (input size lbs alg lvl compFactor writeTime "
                       "readTime writeMBps readMBps)");
    }
    skip(w);
    op o;
    if (!strncmp(w->p, "<=", 2)) o = OP_LE, w->p += 2;
    else if (!strncmp(w->p, ">=", 2)) o = OP_GE, w->p += 2;
    else if (!strncmp(w->p, "==", 2)) o = OP_EQ, w->p += 2;
    else if (!strncmp(w->p, "!=", 2)) o = OP_NE, w->p += 2;
    else if (*w->p == '<') o = OP_LT, w->p++;
    else if (*w->p == '>') o = OP_GT, w->p++;
    else if (*w->p == '=') o = OP_EQ, w->p++;
    else return werr(w, "expected an operator (< <= > >= == !=)");
    skip(w);
    int k = new_node(w);
    if (k < 0)
        return k;
    node *nd = &w->nodes[k];
    nd->kind = N_CMP;
    nd->f = (field)f;
    nd->o = o;
    if (*w->p == '\'' || *w->p == '"') {
        char q = *w->p++;
        const char *e = strchr(w->p, q);
        if (!e)
            return werr(w, "unterminated string");
        snprintf(nd->str, sizeof nd->str, "%.*s", (int)(e - w->p), w->p);
        w->p = e + 1;
    } else {
        char *end;
        nd->num = strtod(w->p, &end);
        if (end != w->p && !isalpha((unsigned char)*end)) {
            nd->is_num = true;
            w->p = end;
        } else {
            const char *b = w->p;
            while (*w->p && !isspace((unsigned char)*w->p) && *w->p != ')')
                w->p++;
            if (w->p == b)
                return werr(w, "expected a value");
            snprintf(nd->str, sizeof nd->str, "%.*s", (int)(w->p - b), b);
        }
    }
    if (nd->f == F_ALG && !nd->is_num) {
        sqz_alg a;
        if (sqz_alg_from_name(nd->str, &a, NULL, 0) < 0)
            return werr(w, "unknown algorithm");
    } else if (nd->f != F_INPUT && nd->f != F_ALG && !nd->is_num) {
        return werr(w, "expected a number");
    }
    return k;
}

static int parse_and(wparser *w)
{
    int a = parse_cmp(w);
    while (a >= 0 && word(w, "and")) {
        int b = parse_cmp(w);
        if (b < 0)
            return b;
        int k = new_node(w);
        if (k < 0)
            return k;
        w->nodes[k] = (node){.kind = N_AND, .a = a, .b = b};
        a = k;
    }
    return a;
}

static int parse_or(wparser *w)
{
    int a = parse_and(w);
    while (a >= 0 && word(w, "or")) {
        int b = parse_and(w);
        if (b < 0)
            return b;
        int k = new_node(w);
        if (k < 0)
            return k;
        w->nodes[k] = (node){.kind = N_OR, .a = a, .b = b};
        a = k;
    }
    return a;
}

static bool compare(op o, int c)
{
    switch (o) {
    case OP_LT: return c < 0;
    case OP_LE: return c <= 0;
    case OP_GT: return c > 0;
    case OP_GE: return c >= 0;
    case OP_EQ: return c == 0;
    case OP_NE: return c != 0;
    }
    return false;
}

static bool eval(const wparser *w, int k, const bench_row *r)
{
    const node *nd = &w->nodes[k];
    switch (nd->kind) {
    case N_AND: return eval(w, nd->a, r) && eval(w, nd->b, r);
    case N_OR: return eval(w, nd->a, r) || eval(w, nd->b, r);
    case N_NOT: return !eval(w, nd->a, r);
    case N_CMP: break;
    }
    if (nd->f == F_INPUT) {
        char num[32];
        const char *rhs = nd->str;
        if (nd->is_num) {
            snprintf(num, sizeof num, "%g", nd->num);
            rhs = num;
        }
        return compare(nd->o, strcmp(r->input, rhs));
    }
    if (nd->f == F_ALG && !nd->is_num) {
        sqz_alg a = SQZ_ALG_NONE;
        sqz_alg_from_name(nd->str, &a, NULL, 0);
        return compare(nd->o, strcmp(sqz_alg_name(r->alg), sqz_alg_name(a)));
    }
    double v = 0;
    switch (nd->f) {
    case F_SIZE: v = (double)r->size; break;
    case F_LBS: v = r->lbs; break;
    case F_ALG: v = sqz_alg_kdb_number(r->alg); break; /* kdb+ number */
    case F_LVL: v = r->lvl; break;
    case F_CF: v = r->comp_factor; break;
    case F_WT: v = r->write_ms; break;
    case F_RT: v = r->read_ms; break;
    case F_WMB: v = r->write_mbps; break;
    case F_RMB: v = r->read_mbps; break;
    case F_INPUT: break;
    }
    return compare(nd->o, v < nd->num ? -1 : v > nd->num);
}

static int cmp_cf_desc(const void *a, const void *b)
{
    const bench_row *x = a, *y = b;
    if (x->comp_factor != y->comp_factor)
        return x->comp_factor > y->comp_factor ? -1 : 1;
    return x->write_ms < y->write_ms ? -1 : x->write_ms > y->write_ms;
}

int bench_where(const char *expr, bench_row *rows, size_t *n, char *err, size_t errlen)
{
    wparser *w = malloc(sizeof *w);
    if (!w)
        return -ENOMEM;
    w->p = expr;
    w->n = 0;
    w->err = err;
    w->errlen = errlen;
    int root = parse_or(w);
    skip(w);
    if (root >= 0 && *w->p)
        root = werr(w, "unexpected text");
    if (root < 0) {
        free(w);
        return -EINVAL;
    }
    size_t k = 0;
    for (size_t i = 0; i < *n; i++)
        if (eval(w, root, &rows[i]))
            rows[k++] = rows[i];
    *n = k;
    if (k > 1)
        qsort(rows, k, sizeof *rows, cmp_cf_desc);
    free(w);
    return 0;
}

/* ---- --recommend ---- */

typedef struct agg {
    int lbs;
    sqz_alg alg;
    int lvl;
    double size, stored, write_ms, read_ms;
} agg;

static double agg_cf(const agg *a) { return a->stored > 0 ? a->size / a->stored : 0; }

/* Sum the rows of each (lbs, alg, lvl) over the inputs. */
static agg *aggregate(const bench_row *rows, size_t n, size_t *na)
{
    agg *v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        size_t j;
        for (j = 0; j < k; j++)
            if (v[j].lbs == r->lbs && v[j].alg == r->alg && v[j].lvl == r->lvl)
                break;
        if (j == k)
            v[k++] = (agg){.lbs = r->lbs, .alg = r->alg, .lvl = r->lvl};
        v[j].size += (double)r->size;
        v[j].stored += r->comp_factor > 0 ? (double)r->size / r->comp_factor : 0;
        v[j].write_ms += r->write_ms;
        v[j].read_ms += r->read_ms;
    }
    *na = k;
    return v;
}

int bench_recommend(FILE *out, const char *goal, const bench_row *rows, size_t n)
{
    enum { G_RATIO, G_WRITE, G_READ, G_BALANCED } g;
    if (!strcmp(goal, "ratio")) g = G_RATIO;
    else if (!strcmp(goal, "write")) g = G_WRITE;
    else if (!strcmp(goal, "read")) g = G_READ;
    else if (!strcmp(goal, "balanced")) g = G_BALANCED;
    else {
        cli_err("--recommend wants ratio, write, read or balanced, not '%s'", goal);
        return -EINVAL;
    }
    size_t na;
    agg *v = aggregate(rows, n, &na);
    if (!v)
        return -ENOMEM;
    if (na == 0) {
        cli_err("--recommend: no results to choose from");
        free(v);
        return -EINVAL;
    }
    double best_cf = 0, min_w = INFINITY, min_r = INFINITY;
    for (size_t i = 0; i < na; i++) {
        best_cf = fmax(best_cf, agg_cf(&v[i]));
        min_r = fmin(min_r, v[i].read_ms);
        if (v[i].alg != SQZ_ALG_NONE)
            min_w = fmin(min_w, v[i].write_ms);
    }
    if (!isfinite(min_w)) /* only `none` was measured */
        for (size_t i = 0; i < na; i++)
            min_w = fmin(min_w, v[i].write_ms);
    const double slack = 3.0;
    const agg *best = NULL;
    for (size_t i = 0; i < na; i++) {
        const agg *a = &v[i];
        double cf = agg_cf(a);
        bool better = false;
        if (!best) {
            better = g != G_BALANCED || (a->write_ms <= slack * min_w &&
                                         a->read_ms <= slack * min_r);
        } else if (g == G_RATIO) {
            double bc = agg_cf(best);
            better = cf > bc * 1.005 || (cf >= bc / 1.005 && a->write_ms < best->write_ms);
        } else if (g == G_WRITE) {
            better = a->write_ms < best->write_ms * 0.98 ||
                     (a->write_ms <= best->write_ms * 1.02 && cf > agg_cf(best));
        } else if (g == G_READ) {
            better = a->read_ms < best->read_ms * 0.98 ||
                     (a->read_ms <= best->read_ms * 1.02 && cf > agg_cf(best));
        } else {
            bool ok = a->write_ms <= slack * min_w && a->read_ms <= slack * min_r;
            double bc = agg_cf(best);
            better = ok && (cf > bc * 1.005 || (cf >= bc / 1.005 && a->write_ms < best->write_ms));
        }
        if (better)
            best = a;
    }
    if (!best) { /* nothing within the slack: fall back to the best ratio */
        best = &v[0];
        for (size_t i = 1; i < na; i++)
            if (agg_cf(&v[i]) > agg_cf(best))
                best = &v[i];
    }
    sqz_params p = {.alg = best->alg, .level = best->lvl, .log2bs = best->lbs};
    char spec[64];
    cli_params_spec(&p, spec, sizeof spec);
    fprintf(out, "recommended (%s): %s\n", goal, spec);
    double cf = agg_cf(best);
    const char *why =
        g == G_RATIO ? "the highest compFactor measured (ties: the faster write)"
        : g == G_WRITE ? "the fastest write (ties: the better compFactor)"
        : g == G_READ ? "the fastest read (ties: the better compFactor)"
        : "the highest compFactor among combinations whose write and read are within "
          "3x of the fastest";
    fprintf(out, "why: %s; compFactor %.3f (best %.3f), writeTime %.3f ms, readTime %.3f ms "
                 "over %.0f bytes\n",
            why, cf, best_cf, best->write_ms, best->read_ms, best->size);
    free(v);
    return 0;
}
