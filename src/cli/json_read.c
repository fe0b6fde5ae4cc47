/* Parser for the flat JSON objects the daemon returns in its virtual
 * xattrs: {"key": number | "string" | true | false | null, ...}. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct parser {
    const char *p;
    char *err;
    size_t errlen;
} parser;

static int fail(parser *ps, const char *what)
{
    if (ps->err && ps->errlen)
        snprintf(ps->err, ps->errlen, "bad JSON: %s near '%.16s'", what, ps->p);
    return -EBADMSG;
}

static void skip_ws(parser *ps)
{
    while (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\t' || *ps->p == '\r')
        ps->p++;
}

/* Parse a string into buf (truncated to n-1 bytes). */
static int parse_string(parser *ps, char *buf, size_t n)
{
    if (*ps->p != '"')
        return fail(ps, "expected a string");
    ps->p++;
    size_t k = 0;
    while (*ps->p && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\') {
            char e = *ps->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    char h = *ps->p++;
                    v <<= 4;
                    if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
                    else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
                    else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
                    else return fail(ps, "bad \\u escape");
                }
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            case '"': case '\\': case '/': c = e; break;
            default: return fail(ps, "bad escape");
            }
        }
        if (k + 1 < n)
            buf[k++] = c;
    }
    if (*ps->p != '"')
        return fail(ps, "unterminated string");
    ps->p++;
    if (n)
        buf[k] = '\0';
    return 0;
}

static int parse_value(parser *ps, json_field *f)
{
    skip_ws(ps);
    if (*ps->p == '"') {
        f->kind = JSON_STR;
        return parse_string(ps, f->str, sizeof f->str);
    }
    if (!strncmp(ps->p, "true", 4) || !strncmp(ps->p, "false", 5)) {
        f->kind = JSON_BOOL;
        f->b = ps->p[0] == 't';
        ps->p += f->b ? 4 : 5;
        return 0;
    }
    if (!strncmp(ps->p, "null", 4)) {
        f->kind = JSON_NULL;
        ps->p += 4;
        return 0;
    }
    char *end;
    f->num = strtod(ps->p, &end);
    if (end == ps->p)
        return fail(ps, "expected a value");
    size_t len = (size_t)(end - ps->p);
    if (len >= sizeof f->str)
        len = sizeof f->str - 1;
    memcpy(f->str, ps->p, len); /* keep the text: exact for big integers */
    f->str[len] = '\0';
    f->kind = JSON_NUM;
    ps->p = end;
    return 0;
}

int json_flat_parse(const char *text, json_flat *out, char *err, size_t errlen)
{
    parser ps = {.p = text, .err = err, .errlen = errlen};
    out->fields = NULL;
    out->n = 0;
    size_t cap = 0;
    int r;
    skip_ws(&ps);
    if (*ps.p != '{')
        return fail(&ps, "expected an object");
    ps.p++;
    skip_ws(&ps);
    if (*ps.p == '}') {
        ps.p++;
        goto tail;
    }
    for (;;) {
        if (out->n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            json_field *nf = realloc(out->fields, nc * sizeof *nf);
            if (!nf) {
                json_flat_free(out);
                return -ENOMEM;
            }
            out->fields = nf;
            cap = nc;
        }
        json_field *f = &out->fields[out->n];
        memset(f, 0, sizeof *f);
        skip_ws(&ps);
        if ((r = parse_string(&ps, f->key, sizeof f->key)) < 0)
            goto bad;
        skip_ws(&ps);
        if (*ps.p != ':') {
            r = fail(&ps, "expected ':'");
            goto bad;
        }
        ps.p++;
        if ((r = parse_value(&ps, f)) < 0)
            goto bad;
        out->n++;
        skip_ws(&ps);
        if (*ps.p == ',') {
            ps.p++;
            continue;
        }
        if (*ps.p == '}') {
            ps.p++;
            break;
        }
        r = fail(&ps, "expected ',' or '}'");
        goto bad;
    }
tail:
    skip_ws(&ps);
    if (*ps.p) {
        r = fail(&ps, "trailing text");
        goto bad;
    }
    return 0;
bad:
    json_flat_free(out);
    return r;
}

void json_flat_free(json_flat *o)
{
    free(o->fields);
    o->fields = NULL;
    o->n = 0;
}

const json_field *json_flat_get(const json_flat *o, const char *key)
{
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->fields[i].key, key))
            return &o->fields[i];
    return NULL;
}
