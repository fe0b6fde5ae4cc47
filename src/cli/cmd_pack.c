/* pack SRC DST: plain files/trees -> containers;
 * unpack SRC DST: containers -> plain files/trees.
 * A packed file of SRC (a BACKING tree) is read as its content: unpack
 * writes it as a plain file, pack as a container (SRC is never changed).
 * Pack files (.sqz-tmp.pack.*) are storage, not files: never copied. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cli.h"
#include "common/fullio.h"

typedef struct pack_ctx {
    bool unpack;
    const char *dst_root;
    sqz_spec spec;
    unsigned min_saving;
    int threads;
    cli_progress pg;
    int failures;
} pack_ctx;

static int pack_file(pack_ctx *x, const tree_at *at, const char *src, const char *dst,
                     const struct stat *st)
{
    cli_src in;
    int r = cli_src_openat(at, src, &in);
    if (r < 0) {
        cli_err("%s: %s", src, cli_src_why(&in, r));
        return r;
    }
    sqz_params p;
    if ((r = cli_params_for(&x->spec, SQZ_LOG2BS_DEFAULT, x->min_saving, &in, &p)) < 0) {
        cli_err("%s: choosing parameters: %s", src, strerror(-r));
        cli_src_close(&in);
        return r;
    }
    sqz_ctr *c;
    if ((r = sqz_ctr_create_path(dst, &p, 0600, &c)) < 0) {
        cli_err("%s: cannot create container: %s", dst, strerror(-r));
        cli_src_close(&in);
        return r;
    }
    r = cli_ctr_write(c, &in, x->threads, &x->pg, at, st);
    if (r == 0)
        r = cli_set_times(dst, st); /* closing may have written a commit */
    cli_src_close(&in);
    if (r < 0)
        cli_err("%s -> %s: %s", src, dst, strerror(-r));
    return r;
}

/* Copy a plain file, keeping runs of zeros as holes. */
static int copy_plain(cli_src *in, int fd, cli_progress *pg)
{
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf)
        return -ENOMEM;
    int r = 0;
    static const unsigned char zero[4096];
    for (uint64_t off = 0; off < in->len && r == 0;) {
        ssize_t n = cli_src_pread(in, buf, CHUNK, off);
        if (n <= 0) {
            r = n < 0 ? (int)n : -EIO;
            break;
        }
        for (ssize_t i = 0; i < n && r == 0; i += 4096) {
            size_t k = (size_t)(n - i) < 4096 ? (size_t)(n - i) : 4096;
            if (!memcmp(buf + i, zero, k))
                continue;
            r = sqz_pwrite_full(fd, buf + i, k, off + (uint64_t)i);
        }
        off += (uint64_t)n;
        progress_add(pg, (uint64_t)n);
    }
    if (r == 0 && ftruncate(fd, (off_t)in->len) < 0)
        r = -errno;
    free(buf);
    return r;
}

static int unpack_file(pack_ctx *x, const tree_at *at, const char *src, const char *dst,
                       const struct stat *st)
{
    cli_src in;
    int r = cli_src_openat(at, src, &in);
    if (r < 0) {
        cli_err("%s: %s", src, cli_src_why(&in, r));
        return r;
    }
    int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        r = -errno;
        cli_err("%s: %s", dst, strerror(-r));
        cli_src_close(&in);
        return r;
    }
    if (in.ctr)
        r = cli_ctr_dump(in.ctr, fd, true, &x->pg);
    else
        r = copy_plain(&in, fd, &x->pg);
    if (r == 0)
        r = cli_copy_meta_at(at, st, fd, NULL);
    if (close(fd) < 0 && r == 0)
        r = -errno;
    cli_src_close(&in);
    if (r < 0)
        cli_err("%s -> %s: %s", src, dst, strerror(-r));
    return r;
}

static int make_other(const tree_at *at, const char *dst, const struct stat *st)
{
    if (S_ISLNK(st->st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlinkat(at->dirfd, at->name, target, sizeof target - 1);
        if (n < 0)
            return -errno;
        target[n] = '\0';
        if (symlink(target, dst) < 0)
            return -errno;
    } else if (S_ISFIFO(st->st_mode)) {
        if (mkfifo(dst, 0600) < 0)
            return -errno;
    } else if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) || S_ISSOCK(st->st_mode)) {
        if (mknod(dst, st->st_mode, st->st_rdev) < 0)
            return -errno;
    } else {
        return -ENOTSUP;
    }
    return cli_copy_meta_at(at, st, -1, dst);
}

static int visit_pre(void *user, const char *path, const char *rel,
                     const struct stat *st, const tree_at *at)
{
    pack_ctx *x = user;
    if (S_ISREG(st->st_mode) && rel[0] && cli_is_pack_name(path))
        return 0; /* its packed files are written with their content */
    char *dst = path_join(x->dst_root, rel);
    if (!dst)
        return -ENOMEM;
    int r = 0;
    if (S_ISDIR(st->st_mode)) {
        if (mkdir(dst, 0700) < 0 && !(errno == EEXIST && !rel[0]))
            r = -errno;
        if (r < 0)
            cli_err("%s: %s", dst, strerror(-r));
        free(dst);
        return r; /* a directory that cannot be made stops the walk */
    }
    if (S_ISREG(st->st_mode))
        r = x->unpack ? unpack_file(x, at, path, dst, st) : pack_file(x, at, path, dst, st);
    else if ((r = make_other(at, dst, st)) < 0)
        cli_err("%s: %s", path, strerror(-r));
    if (r < 0)
        x->failures++;
    free(dst);
    return 0;
}

static int visit_post(void *user, const char *path, const char *rel,
                      const struct stat *st, const tree_at *at)
{
    (void)path;
    pack_ctx *x = user;
    char *dst = path_join(x->dst_root, rel);
    if (!dst)
        return -ENOMEM;
    int r = cli_copy_meta_at(at, st, -1, dst);
    if (r < 0) {
        cli_err("%s: %s", dst, strerror(-r));
        x->failures++;
    }
    free(dst);
    return 0;
}

static int count_pre(void *user, const char *path, const char *rel,
                     const struct stat *st, const tree_at *at)
{
    pack_ctx *x = user;
    if (!S_ISREG(st->st_mode) || (rel[0] && cli_is_pack_name(path)))
        return 0;
    uint64_t n = (uint64_t)st->st_size;
    if (x->unpack || n == 0) { /* containers and packed files */
        cli_src s;
        if (cli_src_openat(at, path, &s) == 0) {
            n = s.len;
            cli_src_close(&s);
        }
    }
    x->pg.total += n;
    return 0;
}

static int usage(bool unpack)
{
    if (unpack)
        fprintf(stderr, "usage: squeezefs unpack SRC DST\n");
    else
        fprintf(stderr, "usage: squeezefs pack SRC DST [--policy SPEC] [--min-saving PCT]\n");
    return CLI_USAGE;
}

static int run(int argc, char **argv, bool unpack)
{
    pack_ctx x = {.unpack = unpack, .min_saving = SQZ_MIN_SAVING_DEFAULT,
                  .threads = cli_default_threads()};
    const char *spec_text = "zstd:1/128K";
    const char *pos[2];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (!unpack && !strcmp(argv[i], "--policy") && i + 1 < argc) {
            spec_text = argv[++i];
        } else if (!unpack && !strcmp(argv[i], "--min-saving") && i + 1 < argc) {
            char *end;
            double pct = strtod(argv[++i], &end);
            if (*end || end == argv[i] || pct < 0 || pct > 100) {
                cli_err("--min-saving wants a percentage 0..100, not '%s'", argv[i]);
                return CLI_USAGE;
            }
            x.min_saving = (unsigned)(pct * 10 + 0.5);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_err("unknown option '%s'", argv[i]);
            return usage(unpack);
        } else if (npos < 2) {
            pos[npos++] = argv[i];
        } else {
            return usage(unpack);
        }
    }
    if (npos != 2)
        return usage(unpack);
    if (!unpack && cli_spec_parse(spec_text, &x.spec) < 0)
        return CLI_USAGE;

    const char *src = pos[0];
    struct stat st, dst_st;
    if (lstat(src, &st) < 0) {
        cli_err("%s: %s", src, strerror(errno));
        return CLI_FAIL;
    }
    char *dst = NULL;
    if (!S_ISDIR(st.st_mode) && stat(pos[1], &dst_st) == 0 && S_ISDIR(dst_st.st_mode)) {
        const char *base = strrchr(src, '/');
        dst = path_join(pos[1], base ? base + 1 : src);
    } else {
        dst = strdup(pos[1]);
    }
    if (!dst) {
        cli_err("out of memory");
        return CLI_FAIL;
    }
    x.dst_root = dst;
    progress_init(&x.pg, unpack ? "unpack" : "pack", 0);
    if (x.pg.enabled)
        tree_walk(src, count_pre, NULL, &x);
    int r;
    if (S_ISDIR(st.st_mode)) {
        r = tree_walk(src, visit_pre, visit_post, &x);
    } else {
        /* a single entry: the walk's root is the file itself */
        const tree_at at = {.dirfd = AT_FDCWD, .name = src};
        r = visit_pre(&x, src, "", &st, &at);
    }
    progress_finish(&x.pg);
    free(dst);
    if (r < 0) {
        cli_err("%s: %s", src, strerror(-r));
        return CLI_FAIL;
    }
    return x.failures ? CLI_FAIL : CLI_OK;
}

int cmd_pack(int argc, char **argv) { return run(argc, argv, false); }
int cmd_unpack(int argc, char **argv) { return run(argc, argv, true); }
