/* squeezefs du: the report, as a table (per algorithm or --by-dir) or as
 * one JSON object (field names stable: squeezefs(8), du). */
#include <math.h>
#include <stdio.h>

#include "du.h"

static void human(uint64_t b, char *buf, size_t n)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (b < 1024) {
        snprintf(buf, n, "%llu B", (unsigned long long)b);
        return;
    }
    double v = (double)b / 1024;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, n, "%.1f %s", v, units[u]);
}

static double ratio(uint64_t num, uint64_t den)
{
    return den ? (double)num / (double)den : NAN;
}

static void ratio_text(uint64_t logical, uint64_t stored, char *buf, size_t n)
{
    if (stored)
        snprintf(buf, n, "%.2fx", (double)logical / (double)stored);
    else
        snprintf(buf, n, "-");
}

static void text_row(const char *name, const du_fig *f, bool blocks)
{
    char l[32], s[32], d[32], r[32];
    human(f->logical, l, sizeof l);
    human(f->stored, s, sizeof s);
    human(f->disk, d, sizeof d);
    ratio_text(f->logical, f->stored, r, sizeof r);
    printf("%-8s %8llu %11s %11s %11s %8s", name, (unsigned long long)f->files, l, s,
           d, r);
    if (blocks)
        printf(" %10llu %10llu %10llu\n", (unsigned long long)f->blocks,
               (unsigned long long)f->raw_blocks, (unsigned long long)f->hole_blocks);
    else
        printf(" %10s %10s %10s\n", "-", "-", "-");
}

static void dir_row(const char *name, const char *suffix, const du_fig *f)
{
    char l[32], s[32], d[32], r[32];
    human(f->logical, l, sizeof l);
    human(f->stored, s, sizeof s);
    human(f->disk, d, sizeof d);
    ratio_text(f->logical, f->stored, r, sizeof r);
    printf("%8llu %11s %11s %11s %8s  %s%s\n", (unsigned long long)f->files, l, s, d, r,
           name, suffix);
}

static void footer(const du_ctx *x)
{
    printf("directories: %llu  symlinks: %llu  other: %llu  damaged: %llu  "
           "unreadable: %llu",
           (unsigned long long)x->dirs, (unsigned long long)x->symlinks,
           (unsigned long long)x->other, (unsigned long long)x->damaged,
           (unsigned long long)x->unreadable);
    if (x->packs.count)
        printf("  packs: %llu", (unsigned long long)x->packs.count);
    printf("\n");
}

/* The packs' row: only their disk space (no files, no logical bytes). */
static void packs_row(const du_packs *p)
{
    char d[32];
    human(p->disk, d, sizeof d);
    printf("%-8s %8s %11s %11s %11s %8s %10s %10s %10s\n", "packs", "-", "-", "-",
           d, "-", "-", "-", "-");
}

static void json_fig_fields(json_w *w, const du_fig *f)
{
    json_kv_u64(w, "files", f->files);
    json_kv_u64(w, "logical_bytes", f->logical);
    json_kv_u64(w, "stored_bytes", f->stored);
    json_kv_u64(w, "disk_bytes", f->disk);
    json_key(w, "ratio"); json_double(w, ratio(f->logical, f->stored));
    json_key(w, "disk_ratio"); json_double(w, ratio(f->logical, f->disk));
    json_kv_u64(w, "blocks", f->blocks);
    json_kv_u64(w, "raw_blocks", f->raw_blocks);
    json_kv_u64(w, "hole_blocks", f->hole_blocks);
}

static void json_fig(json_w *w, const char *key, const du_fig *f)
{
    json_key(w, key);
    json_begin_obj(w);
    json_fig_fields(w, f);
    json_end_obj(w);
}

void du_print_json(const du_ctx *x, int npaths, char **paths,
                   const du_fig *containers, const du_fig *total)
{
    json_w w;
    json_init(&w, stdout, true);
    json_begin_obj(&w);
    json_key(&w, "paths");
    json_begin_arr(&w);
    for (int i = 0; i < npaths; i++)
        json_str(&w, paths[i]);
    json_end_arr(&w);
    json_key(&w, "algorithms");
    json_begin_obj(&w);
    for (size_t i = 0; i < x->nalgs; i++)
        json_fig(&w, x->algs[i].name, &x->algs[i].f);
    json_end_obj(&w);
    json_fig(&w, "containers", containers);
    json_fig(&w, "plain", &x->plain);
    json_fig(&w, "total", total);
    json_fig(&w, "packed", &x->packed);
    json_key(&w, "packs");
    json_begin_obj(&w);
    json_kv_u64(&w, "count", x->packs.count);
    json_kv_u64(&w, "bytes", x->packs.bytes);
    json_kv_u64(&w, "disk_bytes", x->packs.disk);
    json_end_obj(&w);
    json_kv_u64(&w, "directories", x->dirs);
    json_kv_u64(&w, "symlinks", x->symlinks);
    json_kv_u64(&w, "other", x->other);
    json_kv_u64(&w, "damaged", x->damaged);
    json_kv_u64(&w, "unreadable", x->unreadable);
    json_key(&w, "problems");
    json_begin_arr(&w);
    for (size_t i = 0; i < x->nproblems; i++) {
        json_begin_obj(&w);
        json_kv_str(&w, "path", x->problems[i].path);
        json_kv_str(&w, "error", x->problems[i].what);
        json_end_obj(&w);
    }
    json_end_arr(&w);
    if (x->by_dir) {
        json_key(&w, "by_dir");
        json_begin_arr(&w);
        for (size_t i = 0; i < x->ndirs; i++) {
            const du_dir *d = &x->dirv[i];
            json_begin_obj(&w);
            json_kv_str(&w, "path", d->path);
            json_key(&w, "top_level"); json_bool(&w, d->top);
            json_fig_fields(&w, &d->f);
            json_kv_u64(&w, "damaged", d->damaged);
            json_kv_u64(&w, "unreadable", d->unreadable);
            json_end_obj(&w);
        }
        json_end_arr(&w);
    }
    json_end_obj(&w);
}

void du_print_text(const du_ctx *x, const du_fig *total)
{
    if (x->by_dir) {
        printf("%8s %11s %11s %11s %8s  %s\n", "FILES", "LOGICAL", "STORED", "DISK",
               "RATIO", "DIRECTORY");
        for (size_t i = 0; i < x->ndirs; i++) {
            const du_dir *d = &x->dirv[i];
            /* a PATH's own files: only when it has some */
            if (d->top && d->f.files == 0 && d->f.disk == 0 && d->damaged == 0 &&
                d->unreadable == 0)
                continue;
            dir_row(d->path, d->top && !d->is_file ? " (top level)" : "", &d->f);
        }
        dir_row("TOTAL", "", total);
    } else {
        printf("%-8s %8s %11s %11s %11s %8s %10s %10s %10s\n", "TYPE", "FILES",
               "LOGICAL", "STORED", "DISK", "RATIO", "BLOCKS", "RAW", "HOLES");
        for (size_t i = 0; i < x->nalgs; i++)
            text_row(x->algs[i].name, &x->algs[i].f, true);
        if (x->plain.files)
            text_row("plain", &x->plain, false);
        if (x->packs.count)
            packs_row(&x->packs);
        text_row("TOTAL", total, true);
    }
    footer(x);
}
