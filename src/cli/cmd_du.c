/* du [--json] [--by-dir] PATH...: what a tree of containers holds and what
 * it costs, per algorithm (as compsize does for btrfs).
 *
 * Every regular file is looked at once: a container's figures come from
 * the daemon on a mount and from the file itself off a mount, the same way
 * as `squeezefs stat` (ctr_stat.c); whether a file is on a mount is decided
 * once per device (st_dev). Hard-linked files are counted once. Files that
 * are not containers are "plain"; directories, symlinks and other entries
 * are counted apart. A damaged container or an entry that cannot be read is
 * named on stderr, counted, left out of the byte figures, and makes the
 * exit status 1. Recompress temporaries (.sqz-tmp.*) in a backing
 * directory are skipped, as the mount hides them. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

#define PROGRESS_DELAY 1.0     /* seconds before a progress line appears */

typedef struct du_fig {
    uint64_t files;
    uint64_t logical; /* uncompressed length (st_size through a mount) */
    uint64_t stored;  /* stored bytes of the live blocks (plain: st_size) */
    uint64_t disk;    /* allocated by the backing file: st_blocks * 512 */
    uint64_t blocks, raw_blocks, hole_blocks;
} du_fig;

typedef struct du_alg {
    char name[32];
    du_fig f;
} du_alg;

typedef struct du_dir { /* --by-dir: a subdirectory of a PATH, or its top */
    char *path;
    bool top;           /* files directly in PATH (or PATH is a file) */
    bool is_file;       /* top, and PATH is a file */
    du_fig f;
    uint64_t damaged, unreadable;
} du_dir;

typedef struct du_problem {
    char *path;
    char *what;
} du_problem;

typedef struct dev_mode {
    dev_t dev;
    bool on_mount;
} dev_mode;

typedef struct ino_set { /* open addressing on (dev, ino) */
    struct { dev_t dev; ino_t ino; bool used; } *v;
    size_t cap, n;
} ino_set;

typedef struct du_ctx {
    bool json, by_dir;
    du_alg *algs;
    size_t nalgs, cap_algs;
    du_fig plain;
    uint64_t dirs, symlinks, other, damaged, unreadable;
    du_problem *problems;
    size_t nproblems, cap_problems;
    du_dir *dirv;
    size_t ndirs, cap_dirs;
    size_t top, sub;      /* --by-dir buckets of the current PATH */
    bool have_sub;
    dev_mode *modes;
    size_t nmodes;
    ino_set links;
    cli_progress pg;
    char why[512];        /* the container library's last message */
    bool oom;
} du_ctx;

static void fig_add(du_fig *a, const du_fig *b)
{
    a->files += b->files;
    a->logical += b->logical;
    a->stored += b->stored;
    a->disk += b->disk;
    a->blocks += b->blocks;
    a->raw_blocks += b->raw_blocks;
    a->hole_blocks += b->hole_blocks;
}

static void *grow(void *v, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return v;
    size_t nc = *cap ? *cap * 2 : 16;
    void *nv = realloc(v, nc * elem);
    if (nv)
        *cap = nc;
    return nv;
}

/* ---- hard links: each (dev, ino) with st_nlink > 1 counted once ---- */

static size_t ino_hash(dev_t dev, ino_t ino, size_t cap)
{
    uint64_t h = (uint64_t)ino * 0x9E3779B97F4A7C15ull ^ (uint64_t)dev * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

/* 1 if newly added, 0 if seen before, -ENOMEM. */
static int ino_add(ino_set *s, dev_t dev, ino_t ino)
{
    if ((s->n + 1) * 2 > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        ino_set ns = {.cap = nc, .n = 0};
        ns.v = calloc(nc, sizeof *ns.v);
        if (!ns.v)
            return -ENOMEM;
        for (size_t i = 0; i < s->cap; i++)
            if (s->v[i].used) {
                size_t j = ino_hash(s->v[i].dev, s->v[i].ino, nc);
                while (ns.v[j].used)
                    j = (j + 1) & (nc - 1);
                ns.v[j] = s->v[i];
                ns.n++;
            }
        free(s->v);
        *s = ns;
    }
    size_t j = ino_hash(dev, ino, s->cap);
    while (s->v[j].used) {
        if (s->v[j].dev == dev && s->v[j].ino == ino)
            return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->v[j].used = true;
    s->v[j].dev = dev;
    s->v[j].ino = ino;
    s->n++;
    return 1;
}

/* ---- what is counted where ---- */

static du_alg *alg_slot(du_ctx *x, const char *name)
{
    for (size_t i = 0; i < x->nalgs; i++)
        if (!strcmp(x->algs[i].name, name))
            return &x->algs[i];
    du_alg *v = grow(x->algs, &x->cap_algs, x->nalgs, sizeof *v);
    if (!v)
        return NULL;
    x->algs = v;
    du_alg *a = &x->algs[x->nalgs++];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%.31s", name);
    return a;
}

static int add_dir(du_ctx *x, const char *path, bool top, size_t *idx)
{
    du_dir *v = grow(x->dirv, &x->cap_dirs, x->ndirs, sizeof *v);
    if (!v)
        return -ENOMEM;
    x->dirv = v;
    du_dir *d = &x->dirv[x->ndirs];
    memset(d, 0, sizeof *d);
    if (!(d->path = strdup(path)))
        return -ENOMEM;
    d->top = top;
    *idx = x->ndirs++;
    return 0;
}

/* The --by-dir bucket of the entry at path (relpath rel) of the current
 * PATH: the subdirectory being walked for entries below one (and for the
 * subdirectory itself), else the PATH's top level. */
static du_dir *bucket(du_ctx *x, const char *path, const char *rel)
{
    if (!x->by_dir)
        return NULL;
    if (x->have_sub && (strchr(rel, '/') || (rel[0] && !strcmp(x->dirv[x->sub].path, path))))
        return &x->dirv[x->sub];
    return &x->dirv[x->top];
}

static void problem(du_ctx *x, const char *path, const char *rel, bool damaged,
                    const char *what)
{
    if (damaged) {
        if (x->why[0])
            cli_err("%s: damaged container (%s)", path, x->why);
        else
            cli_err("%s: damaged container", path);
        x->damaged++;
    } else {
        cli_err("%s: %s", path, what);
        x->unreadable++;
    }
    du_dir *d = bucket(x, path, rel);
    if (d) {
        if (damaged)
            d->damaged++;
        else
            d->unreadable++;
    }
    du_problem *v = grow(x->problems, &x->cap_problems, x->nproblems, sizeof *v);
    if (!v) {
        x->oom = true;
        return;
    }
    x->problems = v;
    char *p = strdup(path);
    char *w = strdup(damaged ? (x->why[0] ? x->why : "damaged container") : what);
    if (!p || !w) {
        free(p);
        free(w);
        x->oom = true;
        return;
    }
    x->problems[x->nproblems++] = (du_problem){.path = p, .what = w};
}

/* The library's messages name the file first ("PATH: why"): keep the why
 * for the line that names the damaged file. */
static void log_sink(void *user, int level, const char *msg)
{
    du_ctx *x = user;
    if (level > SQZ_LOG_WARN || x->why[0])
        return;
    const char *sep = strstr(msg, ": ");
    snprintf(x->why, sizeof x->why, "%s", sep ? sep + 2 : msg);
}

static int on_mount_dev(du_ctx *x, const char *path, dev_t dev, bool *on)
{
    for (size_t i = 0; i < x->nmodes; i++)
        if (x->modes[i].dev == dev) {
            *on = x->modes[i].on_mount;
            return 0;
        }
    dev_mode *v = realloc(x->modes, (x->nmodes + 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    x->modes = v;
    *on = cli_on_mount(path) == 1;
    x->modes[x->nmodes++] = (dev_mode){.dev = dev, .on_mount = *on};
    return 0;
}

static int count_file(du_ctx *x, const char *path, const char *rel,
                      const struct stat *st)
{
    if (cli_is_own_hidden(path) && rel[0])
        return 0;
    if (st->st_nlink > 1) {
        int r = ino_add(&x->links, st->st_dev, st->st_ino);
        if (r <= 0)
            return r; /* seen: counted already */
    }
    bool on;
    int r = on_mount_dev(x, path, st->st_dev, &on);
    if (r < 0)
        return r;
    cli_ctr_figures cf;
    x->why[0] = '\0';
    r = cli_ctr_figures_get(path, on, &cf);
    du_fig f = {.files = 1};
    if (r == 0) {
        f.logical = cf.uncompressed;
        f.stored = cf.stored;
        f.disk = cf.backing_alloc;
        f.blocks = cf.blocks;
        f.raw_blocks = cf.raw_blocks;
        f.hole_blocks = cf.hole_blocks;
        du_alg *a = alg_slot(x, cf.algorithm);
        if (!a)
            return -ENOMEM;
        fig_add(&a->f, &f);
    } else if (r == -EMEDIUMTYPE) {
        f.logical = f.stored = (uint64_t)st->st_size;
        f.disk = (uint64_t)st->st_blocks * 512;
        fig_add(&x->plain, &f);
    } else if (r == -EBADMSG || r == -EIO) {
        problem(x, path, rel, true, NULL);
        return 0;
    } else if (r == -ENOMEM) {
        return r;
    } else {
        problem(x, path, rel, false, r == -EPROTO ? "unexpected answer from the daemon"
                                                  : strerror(-r));
        return 0;
    }
    du_dir *d = bucket(x, path, rel);
    if (d) {
        fig_add(&d->f, &f);
        d->is_file |= !rel[0];
    }
    progress_item(&x->pg, f.logical);
    return 0;
}

static int visit(void *user, const char *path, const char *rel, const struct stat *st)
{
    du_ctx *x = user;
    if (S_ISDIR(st->st_mode)) {
        x->dirs++;
        if (x->by_dir && rel[0] && !strchr(rel, '/')) {
            if (add_dir(x, path, false, &x->sub) < 0)
                return -ENOMEM;
            x->have_sub = true;
        }
        return 0;
    }
    if (S_ISLNK(st->st_mode)) {
        x->symlinks++;
        return 0;
    }
    if (!S_ISREG(st->st_mode)) {
        x->other++;
        return 0;
    }
    return count_file(x, path, rel, st);
}

static int walk_error(void *user, const char *path, const char *rel, int err)
{
    problem(user, path, rel, false, strerror(-err));
    return 0;
}

/* ---- output ---- */

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
           "unreadable: %llu\n",
           (unsigned long long)x->dirs, (unsigned long long)x->symlinks,
           (unsigned long long)x->other, (unsigned long long)x->damaged,
           (unsigned long long)x->unreadable);
}

static int cmp_alg(const void *a, const void *b)
{
    return strcmp(((const du_alg *)a)->name, ((const du_alg *)b)->name);
}

static void json_fig_fields(json_w *w, const du_fig *f)
{
    json_key(w, "files"); json_u64(w, f->files);
    json_key(w, "logical_bytes"); json_u64(w, f->logical);
    json_key(w, "stored_bytes"); json_u64(w, f->stored);
    json_key(w, "disk_bytes"); json_u64(w, f->disk);
    json_key(w, "ratio"); json_double(w, ratio(f->logical, f->stored));
    json_key(w, "disk_ratio"); json_double(w, ratio(f->logical, f->disk));
    json_key(w, "blocks"); json_u64(w, f->blocks);
    json_key(w, "raw_blocks"); json_u64(w, f->raw_blocks);
    json_key(w, "hole_blocks"); json_u64(w, f->hole_blocks);
}

static void json_fig(json_w *w, const char *key, const du_fig *f)
{
    json_key(w, key);
    json_begin_obj(w);
    json_fig_fields(w, f);
    json_end_obj(w);
}

static void print_json(const du_ctx *x, int npaths, char **paths,
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
    json_key(&w, "directories"); json_u64(&w, x->dirs);
    json_key(&w, "symlinks"); json_u64(&w, x->symlinks);
    json_key(&w, "other"); json_u64(&w, x->other);
    json_key(&w, "damaged"); json_u64(&w, x->damaged);
    json_key(&w, "unreadable"); json_u64(&w, x->unreadable);
    json_key(&w, "problems");
    json_begin_arr(&w);
    for (size_t i = 0; i < x->nproblems; i++) {
        json_begin_obj(&w);
        json_key(&w, "path"); json_str(&w, x->problems[i].path);
        json_key(&w, "error"); json_str(&w, x->problems[i].what);
        json_end_obj(&w);
    }
    json_end_arr(&w);
    if (x->by_dir) {
        json_key(&w, "by_dir");
        json_begin_arr(&w);
        for (size_t i = 0; i < x->ndirs; i++) {
            const du_dir *d = &x->dirv[i];
            json_begin_obj(&w);
            json_key(&w, "path"); json_str(&w, d->path);
            json_key(&w, "top_level"); json_bool(&w, d->top);
            json_fig_fields(&w, &d->f);
            json_key(&w, "damaged"); json_u64(&w, d->damaged);
            json_key(&w, "unreadable"); json_u64(&w, d->unreadable);
            json_end_obj(&w);
        }
        json_end_arr(&w);
    }
    json_end_obj(&w);
}

static void print_text(const du_ctx *x, const du_fig *total)
{
    if (x->by_dir) {
        printf("%8s %11s %11s %11s %8s  %s\n", "FILES", "LOGICAL", "STORED", "DISK",
               "RATIO", "DIRECTORY");
        for (size_t i = 0; i < x->ndirs; i++) {
            const du_dir *d = &x->dirv[i];
            /* a PATH's own files: only when it has some */
            if (d->top && d->f.files == 0 && d->damaged == 0 && d->unreadable == 0)
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
        text_row("TOTAL", total, true);
    }
    footer(x);
}

static int usage(void)
{
    fprintf(stderr, "usage: squeezefs du [--json] [--by-dir] PATH...\n"
                    "(squeezefs help du for more)\n");
    return CLI_USAGE;
}

int cmd_du(int argc, char **argv)
{
    du_ctx x = {0};
    char **paths = calloc((size_t)argc, sizeof *paths);
    int npaths = 0;
    bool only_paths = false;
    if (!paths) {
        cli_err("out of memory");
        return CLI_FAIL;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_paths && !strcmp(a, "--json")) {
            x.json = true;
        } else if (!only_paths && !strcmp(a, "--by-dir")) {
            x.by_dir = true;
        } else if (!only_paths && !strcmp(a, "--")) {
            only_paths = true;
        } else if (!only_paths && a[0] == '-' && a[1]) {
            cli_err("unknown option '%s'", a);
            free(paths);
            return usage();
        } else {
            paths[npaths++] = argv[i];
        }
    }
    if (npaths == 0) {
        free(paths);
        return usage();
    }
    sqz_set_log(log_sink, &x);
    progress_init_walk(&x.pg, "du", PROGRESS_DELAY);
    int r = 0;
    for (int i = 0; i < npaths && r == 0; i++) {
        x.have_sub = false;
        if (x.by_dir)
            r = add_dir(&x, paths[i], true, &x.top);
        if (r == 0)
            r = tree_walk_err(paths[i], visit, NULL, walk_error, &x);
    }
    progress_finish(&x.pg);
    sqz_set_log(NULL, NULL);
    int rc = CLI_OK;
    if (r < 0 || x.oom) {
        cli_err("du: %s", strerror(r < 0 ? -r : ENOMEM));
        rc = CLI_FAIL;
    } else {
        if (x.nalgs)
            qsort(x.algs, x.nalgs, sizeof *x.algs, cmp_alg);
        du_fig containers = {0}, total;
        for (size_t i = 0; i < x.nalgs; i++)
            fig_add(&containers, &x.algs[i].f);
        total = containers;
        fig_add(&total, &x.plain);
        if (x.json)
            print_json(&x, npaths, paths, &containers, &total);
        else
            print_text(&x, &total);
        fflush(stdout);
        if (x.damaged || x.unreadable)
            rc = CLI_FAIL;
    }
    for (size_t i = 0; i < x.nproblems; i++) {
        free(x.problems[i].path);
        free(x.problems[i].what);
    }
    for (size_t i = 0; i < x.ndirs; i++)
        free(x.dirv[i].path);
    free(x.problems);
    free(x.dirv);
    free(x.algs);
    free(x.modes);
    free(x.links.v);
    free(paths);
    return rc;
}
