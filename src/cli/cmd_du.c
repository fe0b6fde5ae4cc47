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
 * directory are skipped, as the mount hides them. A packed file counts
 * under its algorithm (logical: its length, stored: its stored bytes,
 * disk: its 0-byte backing file's); the packs (.sqz-tmp.pack.*) count as
 * no file, but their space is added to DISK (TOTAL and --by-dir lines) so
 * that the totals are the space BACKING takes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "du.h"

#define PROGRESS_DELAY 1.0     /* seconds before a progress line appears */

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
        if (!strncmp(x->why, "damaged ", 8))
            cli_err("%s: %s", path, x->why);
        else if (x->why[0])
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

/* A pack file: no user file, but its space is in the DISK totals. */
static void count_pack(du_ctx *x, const char *path, const char *rel,
                       const struct stat *st)
{
    uint64_t disk = (uint64_t)st->st_blocks * 512;
    x->packs.count++;
    x->packs.bytes += (uint64_t)st->st_size;
    x->packs.disk += disk;
    du_dir *d = bucket(x, path, rel);
    if (d)
        d->f.disk += disk;
}

static int count_file(du_ctx *x, const tree_at *at, const char *path, const char *rel,
                      const struct stat *st)
{
    if (cli_is_pack_name(path)) {
        count_pack(x, path, rel, st);
        return 0;
    }
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
    r = cli_ctr_figures_get(at, path, on, &cf);
    if (r < 0 && cf.why[0])
        snprintf(x->why, sizeof x->why, "%s", cf.why);
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
        if (cf.packed)
            fig_add(&x->packed, &f);
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

static int visit(void *user, const char *path, const char *rel, const struct stat *st,
                 const tree_at *at)
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
    return count_file(x, at, path, rel, st);
}

static int walk_error(void *user, const char *path, const char *rel, int err)
{
    problem(user, path, rel, false, strerror(-err));
    return 0;
}

static int cmp_alg(const void *a, const void *b)
{
    return strcmp(((const du_alg *)a)->name, ((const du_alg *)b)->name);
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
        total.disk += x.packs.disk;
        if (x.json)
            du_print_json(&x, npaths, paths, &containers, &total);
        else
            du_print_text(&x, &total);
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
