/* recompress [--policy SPEC] PATH...: rewrite files with new parameters.
 * On a mount the daemon does it (ioctl SQZ_IOC_RECOMPRESS, which leaves
 * the file's ctime alone; xattr user.squeezefs.recompress); off a
 * mount a new container is written to a temp file next to the original,
 * synced and renamed over it, so a crash leaves either the old or new. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cli.h"

typedef struct recomp_ctx {
    const char *spec_text; /* NULL: the file's policy or current params */
    sqz_spec spec;
    int threads;
    int root_fd;           /* "/" for policy resolution off a mount */
    uint64_t before, after;
    unsigned long files, failures;
    cli_progress pg;
} recomp_ctx;

/* The parameters for path: --policy, else its own/ancestors' policy xattr,
 * else what it has now (else the default). */
static int choose_params(recomp_ctx *x, const char *path, cli_src *src,
                         sqz_params *p)
{
    const sqz_params *cur = src->ctr      ? sqz_ctr_params(src->ctr)
                            : src->packed ? &src->ptr.params
                                          : NULL;
    int bs = cur ? cur->log2bs : SQZ_LOG2BS_DEFAULT;
    unsigned ms = cur ? cur->min_saving : SQZ_MIN_SAVING_DEFAULT;
    if (x->spec_text)
        return cli_params_for(&x->spec, bs, ms, src, p);
    sqz_spec deflt;
    if (cli_spec_parse("zstd:1/128K", &deflt) < 0)
        return -EINVAL;
    deflt.log2bs = bs;
    char abs[PATH_MAX];
    if (!realpath(path, abs))
        return -errno;
    sqz_resolved res;
    int r = sqz_policy_resolve(x->root_fd, abs + 1, NULL, NULL, &deflt, &res);
    if (r < 0)
        return r;
    if (res.source == SQZ_SRC_DEFAULT && cur) {
        *p = *cur; /* no policy anywhere: keep its current parameters */
        p->auto_mode = 0;
        return 0;
    }
    return cli_params_for(&res.spec, bs, ms, src, p);
}

/* Rewrite the entry at (path for messages and the policy): the
 * temporary is made next to it in at's directory, everything after by
 * descriptor or by a name in that directory, never following a symlink. */
static int rewrite(recomp_ctx *x, const tree_at *at, const char *path,
                   const struct stat *st)
{
    cli_src src;
    int r = cli_src_openat(at, path, &src);
    if (r < 0)
        return r;
    char before[64] = "plain";
    if (src.ctr)
        cli_params_spec(sqz_ctr_params(src.ctr), before, sizeof before);
    else if (src.packed) /* rewritten as a container; its entry is left to
                            the daemon's reclaiming of packs */
        cli_params_spec(&src.ptr.params, before, sizeof before);
    sqz_params p;
    if ((r = choose_params(x, path, &src, &p)) < 0) {
        cli_src_close(&src);
        return r;
    }
    /* at's directory (the walk's root: the directory of the path given) */
    const char *base = strrchr(at->name, '/');
    int dfd = at->dirfd;
    if (at->dirfd == AT_FDCWD) {
        char dir[PATH_MAX];
        size_t dl = base ? (size_t)(base - at->name) : 0;
        if (dl >= sizeof dir) {
            cli_src_close(&src);
            return -ENAMETOOLONG;
        }
        memcpy(dir, at->name, dl);
        dir[dl] = '\0';
        dfd = open(base ? (dl ? dir : "/") : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) {
            cli_src_close(&src);
            return -errno;
        }
    }
    base = base ? base + 1 : at->name;
    char tmp[NAME_MAX + 1];
    int fd = -1;
    for (int i = 0; i < 100 && fd < 0; i++) {
        uint64_t rnd = 0;
        if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
            rnd = (uint64_t)getpid() * 2654435761u + (uint64_t)i;
        if ((size_t)snprintf(tmp, sizeof tmp, ".sqz-tmp.%s.%06llx", base,
                             (unsigned long long)(rnd & 0xffffff)) >= sizeof tmp) {
            errno = ENAMETOOLONG;
            break;
        }
        fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        r = -errno;
        cli_src_close(&src);
        if (dfd != at->dirfd)
            close(dfd);
        return r;
    }
    sqz_ctr *c;
    r = sqz_ctr_create_fd(fd, &p, tmp, &c); /* owns fd from here */
    if (r == 0)
        r = cli_ctr_write(c, &src, x->threads, &x->pg, at, st);
    cli_src_close(&src);
    /* the times last (closing may write), then make them durable */
    struct timespec ts[2] = {st->st_atim, st->st_mtim};
    if (r == 0 && utimensat(dfd, tmp, ts, AT_SYMLINK_NOFOLLOW) < 0)
        r = -errno;
    if (r == 0) {
        int sfd = openat(dfd, tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0 || fsync(sfd) < 0)
            r = -errno;
        if (sfd >= 0)
            close(sfd);
    }
    struct stat nst;
    if (r == 0 && fstatat(dfd, tmp, &nst, AT_SYMLINK_NOFOLLOW) < 0)
        r = -errno;
    if (r == 0 && renameat(dfd, tmp, dfd, base) < 0)
        r = -errno;
    if (r < 0)
        unlinkat(dfd, tmp, 0);
    else if (fsync(dfd) < 0)
        r = -errno;
    if (dfd != at->dirfd)
        close(dfd);
    if (r < 0)
        return r;
    char after[64];
    cli_params_spec(&p, after, sizeof after);
    x->before += (uint64_t)st->st_size;
    x->after += (uint64_t)nst.st_size;
    printf("%s: %llu -> %llu bytes (%s -> %s)\n", path, (unsigned long long)st->st_size,
           (unsigned long long)nst.st_size, before, after);
    return r;
}

static int on_mount(recomp_ctx *x, const tree_at *at, const char *path,
                    const struct stat *st)
{
    const char *val = x->spec_text ? x->spec_text : "";
    char canon[64];
    if (x->spec_text && sqz_spec_format(&x->spec, canon, sizeof canon) >= 0)
        val = canon;
    /* the entry the walk examined: the ioctl on it (a setxattr would move
     * its ctime), else (a daemon before it) its xattr through its own
     * magic link */
    int fd = openat(at->dirfd, at->name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char pp[48];
    snprintf(pp, sizeof pp, "/proc/self/fd/%d", fd);
    int r = -ENOTTY;
    char arg[SQZ_IOC_SPEC_MAX] = "";
    int rfl = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    int rfd = strlen(val) < sizeof arg ? openat(at->dirfd, at->name, rfl | O_NOATIME) : -1;
    if (rfd < 0 && errno == EPERM) /* O_NOATIME: not the owner */
        rfd = openat(at->dirfd, at->name, rfl);
    if (rfd >= 0) {
        memcpy(arg, val, strlen(val));
        r = ioctl(rfd, SQZ_IOC_RECOMPRESS, arg) < 0 ? -errno : 0;
        close(rfd);
    }
    if (r == -ENOTTY || r == -EINVAL)
        r = setxattr(pp, SQZ_XATTR_RECOMPRESS, val, strlen(val), 0) < 0 ? -errno : 0;
    struct stat nst;
    uint64_t after = r == 0 && fstat(fd, &nst) == 0 ? (uint64_t)nst.st_blocks * 512 : 0;
    close(fd);
    if (r < 0)
        return r;
    x->before += (uint64_t)st->st_blocks * 512;
    x->after += after;
    printf("%s: recompressed by the daemon (%llu -> %llu bytes allocated)\n", path,
           (unsigned long long)st->st_blocks * 512, (unsigned long long)after);
    return 0;
}

static int visit(void *user, const char *path, const char *rel, const struct stat *st,
                 const tree_at *at)
{
    (void)rel;
    recomp_ctx *x = user;
    if (!S_ISREG(st->st_mode))
        return 0;
    const char *b = strrchr(path, '/');
    if (!strncmp(b ? b + 1 : path, ".sqz-tmp.", 9))
        return 0; /* leftovers of an interrupted run */
    x->files++;
    int r = cli_on_mount(path) ? on_mount(x, at, path, st) : rewrite(x, at, path, st);
    if (r < 0) {
        cli_err("%s: %s", path, strerror(-r));
        x->failures++;
    }
    fflush(stdout);
    return 0;
}

static int count(void *user, const char *path, const char *rel, const struct stat *st,
                 const tree_at *at)
{
    (void)path;
    (void)at;
    (void)rel;
    recomp_ctx *x = user;
    if (S_ISREG(st->st_mode))
        x->pg.total += (uint64_t)st->st_size;
    return 0;
}

int cmd_recompress(int argc, char **argv)
{
    recomp_ctx x = {.threads = cli_default_threads(), .root_fd = -1};
    int first = 1;
    while (first < argc && argv[first][0] == '-') {
        if (!strcmp(argv[first], "--policy") && first + 1 < argc) {
            x.spec_text = argv[first + 1];
            first += 2;
        } else {
            cli_err("unknown option '%s'", argv[first]);
            first = argc + 1;
        }
    }
    if (first >= argc) {
        fprintf(stderr, "usage: squeezefs recompress [--policy SPEC] PATH...\n");
        return CLI_USAGE;
    }
    if (x.spec_text && cli_spec_parse(x.spec_text, &x.spec) < 0)
        return CLI_USAGE;
    x.root_fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (x.root_fd < 0) {
        cli_err("/: %s", strerror(errno));
        return CLI_FAIL;
    }
    progress_init(&x.pg, "recompress", 0);
    if (x.pg.enabled)
        for (int i = first; i < argc; i++)
            tree_walk(argv[i], count, NULL, &x);
    for (int i = first; i < argc; i++) {
        int r = tree_walk(argv[i], visit, NULL, &x);
        if (r < 0) {
            cli_err("%s: %s", argv[i], strerror(-r));
            x.failures++;
        }
    }
    progress_finish(&x.pg);
    close(x.root_fd);
    printf("total: %lu file%s, %llu -> %llu bytes", x.files, x.files == 1 ? "" : "s",
           (unsigned long long)x.before, (unsigned long long)x.after);
    if (x.before)
        printf(" (%.1f%%)", 100.0 * (double)x.after / (double)x.before);
    printf("\n");
    return x.failures ? CLI_FAIL : CLI_OK;
}
