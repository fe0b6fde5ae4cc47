/* Walking a directory tree in name order without following symlinks:
 * each directory is opened O_NOFOLLOW below the one before and its entries
 * are examined relative to it, so a directory swapped for a symlink during
 * the walk never leads it (or a callback using tree_at) elsewhere. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

char *path_join(const char *a, const char *b)
{
    if (!a[0])
        return strdup(b);
    if (!b[0])
        return strdup(a);
    size_t la = strlen(a), lb = strlen(b);
    bool slash = a[la - 1] == '/';
    char *p = malloc(la + lb + 2);
    if (!p)
        return NULL;
    memcpy(p, a, la);
    if (!slash)
        p[la++] = '/';
    memcpy(p + la, b, lb + 1);
    return p;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

DIR *cli_opendir_at(int dfd)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* its own offset */
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d && fd >= 0) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return d;
}

/* The names in directory dfd (without . and ..), sorted; *out malloc'd. */
static int list_dir(int dfd, char ***out, size_t *count)
{
    DIR *d = cli_opendir_at(dfd);
    if (!d)
        return -errno;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int r = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 32;
            char **nn = realloc(names, nc * sizeof *nn);
            if (!nn) {
                r = -ENOMEM;
                break;
            }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = strdup(e->d_name))) {
            r = -ENOMEM;
            break;
        }
        n++;
    }
    if (r == 0 && errno)
        r = -errno;
    closedir(d);
    if (r < 0) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return r;
    }
    if (n)
        qsort(names, n, sizeof *names, cmp_names);
    *out = names;
    *count = n;
    return 0;
}

typedef struct walk_fns {
    tree_fn pre, post;
    tree_err_fn on_err;
    void *user;
} walk_fns;

/* An error at path: the caller's on_err decides (0 = go on), else it stops
 * the walk. */
static int failed(const walk_fns *w, const char *path, const char *rel, int err)
{
    return w->on_err ? w->on_err(w->user, path, rel, err) : err;
}

/* The directory name of dirfd, which must still be the one st describes:
 * an fd or -errno (-ESTALE: replaced since it was examined). */
static int open_dir(int dirfd, const char *name, const struct stat *st)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat now;
    if (fstat(fd, &now) < 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
        close(fd);
        return -ESTALE;
    }
    return fd;
}

bool cli_walk_ids;

static int walk(int dirfd, const char *name, const char *path, const char *rel,
                const walk_fns *w)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return failed(w, path, rel, -errno);
    const tree_at at = {.dirfd = dirfd, .name = name};
    int r = w->pre(w->user, path, rel, &st, &at);
    if (r || !S_ISDIR(st.st_mode))
        return r;
    if (!cli_walk_ids && !strcmp(rel, CLI_IDS_DIR))
        return 0; /* the daemon's kept inodes: no files of the tree */
    char **names = NULL;
    size_t n = 0;
    int dfd = open_dir(dirfd, name, &st);
    if ((r = dfd < 0 ? dfd : list_dir(dfd, &names, &n)) < 0) {
        if (r == -ENOMEM || (r = failed(w, path, rel, r)) != 0) {
            if (dfd >= 0)
                close(dfd);
            return r;
        }
        n = 0; /* go on without its children */
    }
    for (size_t i = 0; i < n && r == 0; i++) {
        char *cp = path_join(path, names[i]);
        char *cr = path_join(rel, names[i]);
        r = (cp && cr) ? walk(dfd, names[i], cp, cr, w) : -ENOMEM;
        free(cp);
        free(cr);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (dfd >= 0)
        close(dfd);
    if (r == 0 && w->post)
        r = w->post(w->user, path, rel, &st, &at);
    return r;
}

int tree_walk(const char *root, tree_fn pre, tree_fn post, void *user)
{
    walk_fns w = {.pre = pre, .post = post, .user = user};
    return walk(AT_FDCWD, root, root, "", &w);
}

int tree_walk_err(const char *root, tree_fn pre, tree_fn post, tree_err_fn on_err,
                  void *user)
{
    walk_fns w = {.pre = pre, .post = post, .on_err = on_err, .user = user};
    return walk(AT_FDCWD, root, root, "", &w);
}
