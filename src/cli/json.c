/* A tiny streaming JSON writer: objects, arrays, strings, numbers. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "cli.h"

void json_init(json_w *w, FILE *out, bool pretty)
{
    w->out = out;
    w->depth = 0;
    w->need_comma[0] = false;
    w->pretty = pretty;
    w->after_key = false;
}

static void indent(json_w *w)
{
    if (!w->pretty)
        return;
    fputc('\n', w->out);
    for (int i = 0; i < w->depth; i++)
        fputs("  ", w->out);
}

/* Before a value that is not the value part of a key/value pair. */
static void before_item(json_w *w)
{
    if (w->depth > 0) {
        if (w->need_comma[w->depth])
            fputc(',', w->out);
        indent(w);
        w->need_comma[w->depth] = true;
    }
}

static void value_prefix(json_w *w)
{
    if (w->after_key)
        w->after_key = false;
    else
        before_item(w);
}

static void open_container(json_w *w, char c)
{
    value_prefix(w);
    fputc(c, w->out);
    if (w->depth < 31)
        w->depth++;
    w->need_comma[w->depth] = false;
}

static void close_container(json_w *w, char c)
{
    bool had = w->need_comma[w->depth];
    if (w->depth > 0)
        w->depth--;
    if (had)
        indent(w);
    fputc(c, w->out);
    if (w->depth == 0)
        fputc('\n', w->out);
}

void json_begin_obj(json_w *w) { open_container(w, '{'); }
void json_end_obj(json_w *w) { close_container(w, '}'); }
void json_begin_arr(json_w *w) { open_container(w, '['); }
void json_end_arr(json_w *w) { close_container(w, ']'); }

void json_write_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\t': fputs("\\t", out); break;
        case '\r': fputs("\\r", out); break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

void json_key(json_w *w, const char *key)
{
    before_item(w);
    json_write_string(w->out, key);
    fputs(w->pretty ? ": " : ":", w->out);
    w->after_key = true;
}

void json_str(json_w *w, const char *s)
{
    value_prefix(w);
    json_write_string(w->out, s);
}

void json_u64(json_w *w, uint64_t v)
{
    value_prefix(w);
    fprintf(w->out, "%" PRIu64, v);
}

void json_i64(json_w *w, int64_t v)
{
    value_prefix(w);
    fprintf(w->out, "%" PRId64, v);
}

void json_double(json_w *w, double v)
{
    value_prefix(w);
    if (isfinite(v))
        fprintf(w->out, "%.6g", v);
    else
        fputs("null", w->out);
}

void json_bool(json_w *w, bool v)
{
    value_prefix(w);
    fputs(v ? "true" : "false", w->out);
}

void json_kv_u64(json_w *w, const char *key, uint64_t v)
{
    json_key(w, key);
    json_u64(w, v);
}

void json_kv_str(json_w *w, const char *key, const char *s)
{
    json_key(w, key);
    json_str(w, s);
}
