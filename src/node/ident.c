/* Inode numbers kept across recompress and tiering on a local BACKING
 * (docs/FORMAT.md "Kept inode numbers").
 *
 * Replacing a file exchanges a new backing file (inode Y) with the old one
 * (inode B) (replace.c). The old inode is not freed: it stays, emptied, as
 * BACKING/.sqz-tmp.ids/S.Y, and the file shows S: B the first time, else
 * the number it showed before (then the keeper S.B becomes S.Y and B is
 * freed). The keeper holds number S, so no file can get it; the map Y -> S
 * is the directory's listing, loaded at mount. A keeper is valid only if
 * it is inode S with one link (a BACKING copied elsewhere has other
 * numbers: its keepers are dropped, its files show their own).
 *
 * The temporary is made in that directory and renamed to its intent
 * "n.S.B.Y" before the exchange: after a crash, an intent that holds inode
 * B was exchanged (the next read-write mount finishes it: the keeper
 * S.Y), one that holds Y was not (removed, as other temporaries there).
 * Locks: mu guards the map (rank SQZ_RANK_IDENT, no I/O under it). */
#include "node/ident.h"
#include "node/inode.h"
#include "common/lockorder.h"
#include "squeezefs/pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/xattr.h>
#include <unistd.h>

struct node {
    ino_t y, s;
    struct node *next;
};

struct sqz_ident {
    pthread_mutex_t mu;
    dev_t dev;         /* const: BACKING's root file system */
    int rw;            /* const: a read-write mount */
    atomic_int dirfd;  /* the directory, -1 none (made once, under mu) */
    atomic_size_t n;   /* entries of the map */
    struct node **b;   /* mu */
    size_t nb;
    /* a read-only mount: the directory as last read (the writer's replaces
     * since are read again, at most once a second) */
    _Atomic int64_t checked_ns;
    struct stat seen;  /* (the thread that won checked_ns) */
};

static size_t slot(const struct sqz_ident *d, ino_t y)
{
    uint64_t h = (uint64_t)y * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) % d->nb;
}

static struct node **find(struct sqz_ident *d, ino_t y)
{
    struct node **p = &d->b[slot(d, y)];
    while (*p && (*p)->y != y)
        p = &(*p)->next;
    return p;
}

static void map_grow(struct sqz_ident *d)
{
    size_t nb = d->nb * 4;
    struct node **b = calloc(nb, sizeof(*b));
    if (!b)
        return; /* longer chains */
    struct node **old = d->b;
    size_t onb = d->nb;
    d->b = b;
    d->nb = nb;
    for (size_t i = 0; i < onb; i++)
        for (struct node *e = old[i], *nx; e; e = nx) {
            nx = e->next;
            size_t k = slot(d, e->y);
            e->next = b[k];
            b[k] = e;
        }
    free(old);
}

/* Caller holds mu. */
static void map_put(struct sqz_ident *d, ino_t y, ino_t s)
{
    struct node **p = find(d, y);
    if (*p) {
        (*p)->s = s;
        return;
    }
    struct node *e = malloc(sizeof(*e));
    if (!e)
        return; /* the file shows its backing number */
    e->y = y;
    e->s = s;
    e->next = NULL;
    *p = e;
    if (atomic_fetch_add(&d->n, 1) + 1 > d->nb)
        map_grow(d);
}

/* Caller holds mu. 1 and *s if y is there (removed when del). */
static int map_get(struct sqz_ident *d, ino_t y, ino_t *s, int del)
{
    struct node **p = find(d, y);
    if (!*p)
        return 0;
    *s = (*p)->s;
    if (del) {
        struct node *e = *p;
        *p = e->next;
        free(e);
        atomic_fetch_sub(&d->n, 1);
    }
    return 1;
}

static int parse(const char *name, int intent, uintmax_t v[3])
{
    int k = 0;
    const char *p = name;
    if (intent) {
        if (strncmp(p, "n.", 2) != 0)
            return 0;
        p += 2;
    }
    for (int want = intent ? 3 : 2; k < want; k++) {
        if (*p < '0' || *p > '9')
            return 0;
        char *end;
        errno = 0;
        v[k] = strtoumax(p, &end, 10);
        if (errno || (*end != (k + 1 < want ? '.' : '\0')))
            return 0;
        p = end + (k + 1 < want);
    }
    return 1;
}

/* Empty the keeper `name` (its bytes were the replaced content). */
static void empty(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        if (st.st_size > 0 && ftruncate(fd, 0) != 0)
            sqz_logf(SQZ_LOG_WARN, "%s/%s: cannot empty it: %s", SQZ_IDENT_DIR, name,
                     strerror(errno));
        fremovexattr(fd, SQZ_PACK_XATTR); /* (none: a replaced file is no
                                              packed one; never read) */
    }
    close(fd);
}

/* The intent `name` (n.S.B.Y) holds the replaced inode B: it becomes the
 * keeper S.Y (the first replace, S == B), or the keeper S.B becomes S.Y
 * and B is freed. The map is the caller's. */
static void finish(int dfd, const char *name, const uintmax_t v[3])
{
    char keep[64];
    snprintf(keep, sizeof(keep), "%ju.%ju", v[0], v[2]);
    if (v[0] == v[1]) {
        if (renameat(dfd, name, dfd, keep) != 0)
            sqz_logf(SQZ_LOG_WARN, "%s/%s: cannot keep it: %s", SQZ_IDENT_DIR, name,
                     strerror(errno));
        else
            empty(dfd, keep);
    } else {
        char old[64];
        snprintf(old, sizeof(old), "%ju.%ju", v[0], v[1]);
        if (renameat(dfd, old, dfd, keep) != 0 && errno != ENOENT)
            sqz_logf(SQZ_LOG_WARN, "%s/%s: cannot rename it: %s", SQZ_IDENT_DIR, old,
                     strerror(errno));
        unlinkat(dfd, name, 0);
    }
    if (fsync(dfd) != 0)
        sqz_logf(SQZ_LOG_WARN, "%s: fsync: %s", SQZ_IDENT_DIR, strerror(errno));
}

/* One pass over the directory: intents and temporaries (pass 0, a
 * read-write mount finishes or removes them; a read-only one maps an
 * exchanged intent as the next mount will), then keepers (pass 1). */
static void scan(struct sqz_ident *d, int dfd, int pass)
{
    int fd = dup(dfd);
    DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dp) {
        if (fd >= 0)
            close(fd);
        return;
    }
    rewinddir(dp); /* (the offset is shared with dfd and the last pass) */
    struct dirent *de;
    while ((de = readdir(dp))) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, ".."))
            continue;
        uintmax_t v[3];
        struct stat st;
        int there = fstatat(dfd, nm, &st, AT_SYMLINK_NOFOLLOW) == 0;
        if (pass == 0) {
            if (parse(nm, 1, v)) {
                int done = there && (uintmax_t)st.st_ino == v[1];
                if (done && d->rw)
                    finish(dfd, nm, v);
                else if (d->rw && there && (uintmax_t)st.st_ino == v[2])
                    unlinkat(dfd, nm, 0); /* not exchanged: the temporary */
                else if (done)
                    map_put(d, (ino_t)v[2], (ino_t)v[0]);
                else if (d->rw && there) /* another file (it took the
                    original's name just as the exchange came, and a crash
                    came before it was given back): never removed */
                    sqz_logf(SQZ_LOG_WARN, "%s/%s: holds neither the replaced file "
                             "nor its replacement: left as it is", SQZ_IDENT_DIR, nm);
            } else if (d->rw && !strncmp(nm, SQZ_TMP_PREFIX, sizeof(SQZ_TMP_PREFIX) - 1)) {
                unlinkat(dfd, nm, 0); /* a temporary a crash left */
            }
            continue;
        }
        if (!parse(nm, 0, v))
            continue;
        ino_t s;
        int valid = there && S_ISREG(st.st_mode) && (uintmax_t)st.st_ino == v[0] &&
                    st.st_nlink == 1 && !map_get(d, (ino_t)v[1], &s, 0);
        if (!valid) {
            if (d->rw)
                unlinkat(dfd, nm, 0);
            continue;
        }
        if (d->rw && st.st_size > 0)
            empty(dfd, nm); /* a crash before it was emptied */
        map_put(d, (ino_t)v[1], (ino_t)v[0]);
    }
    closedir(dp);
}

static int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void free_nodes(struct node **b, size_t nb)
{
    for (size_t i = 0; i < nb; i++)
        for (struct node *e = b[i], *nx; e; e = nx) {
            nx = e->next;
            free(e);
        }
    free(b);
}

/* A read-only mount: a writer mount's replaces since the map was read
 * (the directory changed): read it again, into a new map swapped in. At
 * most once a second, by one thread. */
static void ro_refresh(struct sqz_fs *fs, struct sqz_ident *d)
{
    int64_t now = mono_ns(), last = atomic_load(&d->checked_ns);
    if (now - last < 1000000000LL ||
        !atomic_compare_exchange_strong(&d->checked_ns, &last, now))
        return;
    struct stat st;
    if (fstatat(fs->root_dirfd, SQZ_IDENT_DIR, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISDIR(st.st_mode) ||
        (st.st_ino == d->seen.st_ino && st.st_mtim.tv_sec == d->seen.st_mtim.tv_sec &&
         st.st_mtim.tv_nsec == d->seen.st_mtim.tv_nsec &&
         st.st_ctim.tv_sec == d->seen.st_ctim.tv_sec &&
         st.st_ctim.tv_nsec == d->seen.st_ctim.tv_nsec))
        return;
    int dfd = atomic_load(&d->dirfd);
    if (dfd < 0) {
        dfd = openat(fs->root_dirfd, SQZ_IDENT_DIR,
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
            return;
        atomic_store(&d->dirfd, dfd);
    }
    d->seen = st;
    struct sqz_ident t = {.rw = 0, .nb = 64};
    t.b = calloc(t.nb, sizeof(*t.b));
    if (!t.b)
        return;
    scan(&t, dfd, 0); /* (t is this thread's: no lock) */
    scan(&t, dfd, 1);
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_IDENT);
    struct node **ob = d->b;
    size_t onb = d->nb;
    d->b = t.b;
    d->nb = t.nb;
    atomic_store(&d->n, atomic_load(&t.n));
    SQZ_MUTEX_UNLOCK(&d->mu);
    free_nodes(ob, onb);
}

void sqz_ident_init(struct sqz_fs *fs)
{
    struct stat rst;
    if (!fs->pack_in_place || fstat(fs->root_dirfd, &rst) != 0)
        return; /* a shared BACKING: replacing gives a new number */
    struct sqz_ident *d = calloc(1, sizeof(*d));
    if (!d)
        return;
    d->nb = 64;
    d->b = calloc(d->nb, sizeof(*d->b));
    if (!d->b) {
        free(d);
        return;
    }
    sqz_mutex_init(&d->mu);
    d->dev = rst.st_dev;
    d->rw = !fs->opts.ro;
    int dfd = openat(fs->root_dirfd, SQZ_IDENT_DIR,
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    atomic_store(&d->dirfd, dfd);
    atomic_store(&d->checked_ns, mono_ns());
    if (dfd >= 0)
        fstat(dfd, &d->seen);
    if (dfd >= 0) {
        SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_IDENT); /* (no thread yet) */
        scan(d, dfd, 0);
        scan(d, dfd, 1);
        SQZ_MUTEX_UNLOCK(&d->mu);
        if (d->rw)
            fsync(dfd);
    }
    fs->ident = d;
}

void sqz_ident_free(struct sqz_fs *fs)
{
    struct sqz_ident *d = fs->ident;
    if (!d)
        return;
    fs->ident = NULL;
    free_nodes(d->b, d->nb);
    int dfd = atomic_load(&d->dirfd);
    if (dfd >= 0)
        close(dfd);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

int sqz_ident_any(struct sqz_fs *fs)
{
    return fs->ident && atomic_load(&fs->ident->n) > 0;
}

ino_t sqz_ident_shown(struct sqz_fs *fs, dev_t dev, ino_t ino)
{
    struct sqz_ident *d = fs->ident;
    if (d && !d->rw)
        ro_refresh(fs, d);
    if (!d || dev != d->dev || atomic_load(&d->n) == 0)
        return ino;
    ino_t s = ino;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_IDENT);
    map_get(d, ino, &s, 0);
    SQZ_MUTEX_UNLOCK(&d->mu);
    return s;
}

void sqz_ident_stat(struct sqz_fs *fs, struct sqz_inode *in, struct stat *st)
{
    struct sqz_ident *d = fs->ident;
    if (!d)
        return;
    st->st_ino = sqz_ident_shown(fs, st->st_dev, st->st_ino);
    /* the hidden directory is no subdirectory of the mount's root (a file
     * system whose directories count 1 link, btrfs, counts none) */
    if (in->is_root && S_ISDIR(st->st_mode) && st->st_nlink > 2 &&
        atomic_load(&d->dirfd) >= 0)
        st->st_nlink--;
}

int sqz_ident_dirfd(struct sqz_fs *fs, dev_t dev, int make)
{
    struct sqz_ident *d = fs->ident;
    if (!d || !d->rw || dev != d->dev)
        return -EXDEV;
    int dfd = atomic_load(&d->dirfd);
    if (dfd >= 0 || !make)
        return dfd >= 0 ? dfd : -ENOENT;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_IDENT); /* one maker; the I/O is two
                                               calls, once per BACKING */
    dfd = atomic_load(&d->dirfd);
    int rc = 0;
    if (dfd < 0) {
        if (mkdirat(fs->root_dirfd, SQZ_IDENT_DIR, 0700) != 0 && errno != EEXIST)
            rc = -errno;
        if (rc == 0)
            dfd = openat(fs->root_dirfd, SQZ_IDENT_DIR,
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (rc == 0 && dfd < 0)
            rc = -errno;
        if (rc == 0) {
            fsync(fs->root_dirfd);
            atomic_store(&d->dirfd, dfd);
        }
    }
    SQZ_MUTEX_UNLOCK(&d->mu);
    return rc ? rc : dfd;
}

int sqz_ident_intent(struct sqz_fs *fs, int tfd, const char *tmp, ino_t b,
                     char *out, size_t n)
{
    struct sqz_ident *d = fs->ident;
    struct stat st;
    if (fstat(tfd, &st) != 0)
        return -errno;
    ino_t s = sqz_ident_shown(fs, d->dev, b);
    int len = snprintf(out, n, "n.%ju.%ju.%ju", (uintmax_t)s, (uintmax_t)b,
                       (uintmax_t)st.st_ino);
    if (len < 0 || (size_t)len >= n)
        return -ENAMETOOLONG;
    int dfd = atomic_load(&d->dirfd);
    return renameat(dfd, tmp, dfd, out) == 0 ? 0 : -errno;
}

void sqz_ident_exchanged(struct sqz_fs *fs, const char *name)
{
    struct sqz_ident *d = fs->ident;
    uintmax_t v[3];
    if (!parse(name, 1, v))
        return;
    ino_t s;
    /* the map first: B may be freed below, and a new file given its
     * number must not show S */
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_IDENT);
    map_get(d, (ino_t)v[1], &s, 1);
    map_put(d, (ino_t)v[2], (ino_t)v[0]);
    SQZ_MUTEX_UNLOCK(&d->mu);
    finish(atomic_load(&d->dirfd), name, v);
}

void sqz_ident_gone(struct sqz_fs *fs, dev_t dev, ino_t ino)
{
    struct sqz_ident *d = fs->ident;
    if (!d || !d->rw || dev != d->dev || atomic_load(&d->n) == 0)
        return;
    ino_t s;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_IDENT);
    int had = map_get(d, ino, &s, 1);
    SQZ_MUTEX_UNLOCK(&d->mu);
    if (!had)
        return;
    char keep[64];
    snprintf(keep, sizeof(keep), "%ju.%ju", (uintmax_t)s, (uintmax_t)ino);
    /* (not synced: a keeper a crash leaves only holds a number) */
    unlinkat(atomic_load(&d->dirfd), keep, 0);
}
