/* Inode table: kernel node ids <-> backing objects.
 *
 * Every inode the kernel knows holds an O_PATH|O_NOFOLLOW fd of its backing
 * object (so the backing inode cannot be freed and its number reused while
 * the kernel may still refer to it). The table is keyed by the backing
 * (st_dev, st_ino); the kernel-visible node id is the address of our
 * sqz_inode (FUSE_ROOT_ID for the root), so it stays stable when
 * recompress and packing replace the backing file (sqz_inode_swap).
 * Protected by sqz_fs.itable_lock (docs/LOCKING.md). */
#include "node/inode.h"
#include "daemon/fs.h"
#include "node/push.h"
#include "node/ident.h"
#include "common/lockorder.h"
#include "common/fdpath.h"
#include "common/beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t bucket_of(const struct sqz_fs *fs, dev_t dev, ino_t ino)
{
    uint64_t h = (uint64_t)ino * 0x9E3779B97F4A7C15ull ^ (uint64_t)dev;
    h ^= h >> 29;
    return (size_t)(h % fs->nbuckets);
}

static struct sqz_inode *inode_new(int fd, const struct stat *st)
{
    struct sqz_inode *in = calloc(1, sizeof(*in));
    if (!in)
        return NULL;
    if (pthread_rwlock_init(&in->io, NULL) != 0) {
        free(in);
        return NULL;
    }
    if (sqz_mutex_init(&in->meta) != 0) {
        pthread_rwlock_destroy(&in->io);
        free(in);
        return NULL;
    }
    if (sqz_push_init(in) != 0) {
        pthread_mutex_destroy(&in->meta);
        pthread_rwlock_destroy(&in->io);
        free(in);
        return NULL;
    }
    in->fd = fd;
    in->dev = st->st_dev;
    in->ino = st->st_ino;
    in->type = st->st_mode & S_IFMT;
    in->kind = SQZ_K_UNKNOWN;
    in->create_fd = -1;
    in->alt_fd = -1;
    return in;
}

/* What identifies a backing file's content version (for caches). */
void sqz_bkey_of(const struct stat *st, struct sqz_bkey *k)
{
    memset(k, 0, sizeof(*k));
    k->ino = st->st_ino;
    k->size = st->st_size;
    k->mtime = st->st_mtim;
    k->ctime = st->st_ctim;
}

int sqz_bkey_eq(const struct sqz_bkey *a, const struct sqz_bkey *b)
{
    return a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec &&
           a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* The stash: a lookup probes a container (opens it, reads its head and
 * index) for its length, and the open that usually follows would do all of
 * it again. The probe keeps the read-only container it opened, keyed by
 * the backing version it was read at; a read-only open at that same
 * version takes it (sqz_content_ensure_sf). It lives with the inode (inode.c), whose
 * teardown closes it. At most STASH_MAX are kept
 * per process (each holds a descriptor and an index): past that a probe
 * closes its container as before. */
#define STASH_MAX 64
static atomic_int g_stashed;
static atomic_uint_fast64_t g_stash_hits;

void sqz_inode_stash_put(struct sqz_inode *in, sqz_ctr *c,
                           const struct sqz_bkey *key)
{
    sqz_ctr *old = NULL;
    if (key->ino == 0) {
        sqz_ctr_close(c);
        return;
    }
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    if (in->stash) {
        old = in->stash; /* replaced: count unchanged */
    } else if (atomic_fetch_add(&g_stashed, 1) >= STASH_MAX) {
        atomic_fetch_sub(&g_stashed, 1);
        SQZ_MUTEX_UNLOCK(&in->meta);
        sqz_ctr_close(c);
        return;
    }
    in->stash = c;
    in->stash_key = *key;
    SQZ_MUTEX_UNLOCK(&in->meta);
    if (old)
        sqz_ctr_close(old);
}

/* Take the stash out of the inode (caller owns it), with its key. */
static sqz_ctr *stash_grab(struct sqz_inode *in, struct sqz_bkey *key)
{
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    sqz_ctr *c = in->stash;
    if (c) {
        *key = in->stash_key;
        in->stash = NULL;
        atomic_fetch_sub(&g_stashed, 1);
    }
    SQZ_MUTEX_UNLOCK(&in->meta);
    return c;
}

sqz_ctr *sqz_inode_stash_take(struct sqz_inode *in, struct sqz_bkey *key)
{
    sqz_ctr *c = stash_grab(in, key);
    if (!c)
        return NULL; /* the common case past the limit: no fstat */
    struct stat st;
    struct sqz_bkey now;
    if (fstat(in->fd, &st) == 0) {
        sqz_bkey_of(&st, &now);
        if (sqz_bkey_eq(&now, key)) {
            atomic_fetch_add(&g_stash_hits, 1);
            return c;
        }
    }
    sqz_ctr_close(c); /* the file changed since: read it anew */
    return NULL;
}

uint64_t sqz_inode_stash_hits(void)
{
    return (uint64_t)atomic_load(&g_stash_hits);
}

void sqz_inode_stash_drop(struct sqz_inode *in)
{
    struct sqz_bkey key;
    sqz_ctr *c = stash_grab(in, &key);
    if (c)
        sqz_ctr_close(c);
}

static void inode_destroy(struct sqz_inode *in)
{
    sqz_inode_stash_drop(in);
    free(in->dirpol); /* newfile_policy.c: plain memory */
    if (in->create_fd >= 0)
        close(in->create_fd);
    if (in->fd >= 0)
        close(in->fd);
    if (in->alt_fd >= 0)
        close(in->alt_fd);
    pthread_rwlock_destroy(&in->io);
    pthread_mutex_destroy(&in->meta);
    sqz_push_destroy(in);
    free(in);
}

/* Freed by the table: the number a removed file kept is free (ident.c). */
static void inode_gone(struct sqz_fs *fs, struct sqz_inode *in)
{
    struct stat st;
    if (in->type == S_IFREG && sqz_ident_any(fs) && fstat(in->fd, &st) == 0 &&
        st.st_nlink == 0)
        sqz_ident_gone(fs, in->dev, in->ino);
    inode_destroy(in);
}

/* Caller holds itable_lock. */
static void table_insert(struct sqz_fs *fs, struct sqz_inode *in)
{
    size_t b = bucket_of(fs, in->dev, in->ino);
    in->next = fs->buckets[b];
    fs->buckets[b] = in;
    fs->count++;
}

static void table_remove(struct sqz_fs *fs, struct sqz_inode *in)
{
    struct sqz_inode **pp = &fs->buckets[bucket_of(fs, in->dev, in->ino)];
    while (*pp && *pp != in)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = in->next;
        fs->count--;
    }
    in->next = NULL;
}

static struct sqz_inode *table_find(struct sqz_fs *fs, dev_t dev, ino_t ino)
{
    for (struct sqz_inode *in = fs->buckets[bucket_of(fs, dev, ino)]; in;
         in = in->next)
        if (in->dev == dev && in->ino == ino)
            return in;
    /* a backing file being exchanged in for an inode (sqz_inode_swap_begin) */
    for (struct sqz_swap_pend *p = fs->swap_pend; p; p = p->next)
        if (p->dev == dev && p->ino == ino)
            return p->in;
    return NULL;
}

void sqz_inode_swap_begin(struct sqz_fs *fs, struct sqz_inode *in,
                          struct sqz_swap_pend *p, dev_t dev, ino_t ino)
{
    SQZ_ASSERT_EXCL(&in->io);
    p->in = in;
    p->dev = dev;
    p->ino = ino;
    SQZ_MUTEX_LOCK(&fs->itable_lock, SQZ_RANK_ITABLE);
    p->next = fs->swap_pend;
    fs->swap_pend = p;
    SQZ_MUTEX_UNLOCK(&fs->itable_lock);
}

void sqz_inode_swap_end(struct sqz_fs *fs, struct sqz_swap_pend *p)
{
    SQZ_MUTEX_LOCK(&fs->itable_lock, SQZ_RANK_ITABLE);
    struct sqz_swap_pend **pp = &fs->swap_pend;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (*pp)
        *pp = p->next;
    SQZ_MUTEX_UNLOCK(&fs->itable_lock);
}

/* Grow when the chains get long (best effort: on ENOMEM keep the table). */
static void table_maybe_grow(struct sqz_fs *fs)
{
    SQZ_ASSERT_EXCL(&fs->itable_lock);
    if (fs->count < fs->nbuckets * 2)
        return;
    size_t nb = fs->nbuckets * 4;
    struct sqz_inode **nbk = calloc(nb, sizeof(*nbk));
    if (!nbk)
        return;
    struct sqz_inode **old = fs->buckets;
    size_t on = fs->nbuckets;
    fs->buckets = nbk;
    fs->nbuckets = nb;
    fs->count = 0;
    for (size_t i = 0; i < on; i++) {
        struct sqz_inode *in = old[i];
        while (in) {
            struct sqz_inode *next = in->next;
            table_insert(fs, in);
            in = next;
        }
    }
    free(old);
}

int sqz_itable_init(struct sqz_fs *fs)
{
    if (sqz_mutex_init(&fs->itable_lock) != 0)
        return -ENOMEM;
    fs->nbuckets = 4096;
    fs->buckets = calloc(fs->nbuckets, sizeof(*fs->buckets));
    if (!fs->buckets)
        return -ENOMEM;
    /* the directory root_dirfd is, not the path opened again */
    int fd = openat(fs->root_dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    struct sqz_inode *root = inode_new(fd, &st);
    if (!root) {
        close(fd);
        return -ENOMEM;
    }
    root->is_root = 1;
    root->nlookup = 1;
    fs->root = root;
    table_insert(fs, root);
    return 0;
}

int sqz_itable_free(struct sqz_fs *fs)
{
    int first = 0;
    if (!fs->buckets)
        return 0;
    for (size_t i = 0; i < fs->nbuckets; i++) {
        struct sqz_inode *in = fs->buckets[i];
        while (in) {
            struct sqz_inode *next = in->next;
            if (in->sf) {
                int rc = sqz_file_close(in->sf);
                in->sf = NULL;
                if (rc < 0 && first == 0)
                    first = rc;
            }
            if (in->dctr) { /* sqz_durable_free processed the queue */
                int rc = sqz_ctr_close(in->dctr);
                in->dctr = NULL;
                if (rc < 0 && first == 0)
                    first = rc;
            }
            inode_destroy(in);
            in = next;
        }
    }
    free(fs->buckets);
    fs->buckets = NULL;
    fs->root = NULL;
    pthread_mutex_destroy(&fs->itable_lock);
    return first;
}

struct sqz_inode *sqz_inode_of(struct sqz_fs *fs, fuse_ino_t ino)
{
    if (ino == FUSE_ROOT_ID)
        return fs->root;
    return (struct sqz_inode *)(uintptr_t)ino;
}

fuse_ino_t sqz_nodeid(struct sqz_fs *fs, struct sqz_inode *in)
{
    if (in == fs->root)
        return FUSE_ROOT_ID;
    return (fuse_ino_t)(uintptr_t)in;
}

int sqz_name_hidden(const char *name)
{
    return strncmp(name, SQZ_TMP_PREFIX, sizeof(SQZ_TMP_PREFIX) - 1) == 0;
}

int sqz_name_errno(const char *name, int hidden_errno)
{
    if (!sqz_name_ok(name))
        return EINVAL;
    return sqz_name_hidden(name) ? hidden_errno : 0;
}

int sqz_name_ok(const char *name)
{
    if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    if (strchr(name, '/'))
        return 0;
    return 1;
}

int sqz_inode_reopen(struct sqz_inode *in, int flags)
{
    char pp[64];
    sqz_proc_path(in->fd, pp, sizeof(pp));
    /* the daemon's reads never move the atime: it shows the atime of the
     * user's opens (ptimes.c) */
    int fd = open(pp, flags | O_NOATIME | O_CLOEXEC);
    if (fd < 0 && errno == EPERM) /* not the owner, nor root */
        fd = open(pp, (flags & ~O_NOATIME) | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* Label for log lines: the path inside the mount. */
void sqz_inode_label(struct sqz_fs *fs, struct sqz_inode *in, char *buf,
                     size_t n)
{
    if (sqz_inode_relpath(fs, in, buf, n) != 0 || !buf[0])
        snprintf(buf, n, "(inode %llu)", (unsigned long long)in->ino);
}

int sqz_chown_new(struct sqz_fs *fs, fuse_req_t req, struct sqz_inode *parent,
                  const char *name, const struct stat *parent_st)
{
    if (fs->uid != 0)
        return 0;
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    /* created by the daemon, the object already has its euid and (in a
     * setgid directory) the directory's group, else its egid: a caller
     * with those ids needs no chown (one syscall less per file of a cp) */
    if (ctx->uid == fs->uid && ctx->gid == fs->gid)
        return 0;
    struct stat pst;
    if (!parent_st) {
        int rc = sqz_backing_stat(parent, &pst);
        if (rc)
            return rc;
        parent_st = &pst;
    }
    int sgid = (parent_st->st_mode & S_ISGID) != 0;
    gid_t gid = sgid ? parent_st->st_gid : ctx->gid;
    if (ctx->uid == fs->uid && sgid)
        return 0;
    if (fchownat(parent->fd, name, ctx->uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    return 0;
}

int sqz_backing_stat(struct sqz_inode *in, struct stat *st)
{
    if (fstatat(in->fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    return 0;
}

int sqz_inode_lookup(struct sqz_fs *fs, struct sqz_inode *parent,
                     const char *name, struct stat *st,
                     struct sqz_inode **out)
{
    return sqz_inode_lookup_at(fs, parent->fd, name, st, out);
}

size_t sqz_inode_count(struct sqz_fs *fs)
{
    SQZ_MUTEX_LOCK(&fs->itable_lock, SQZ_RANK_ITABLE);
    size_t n = fs->count;
    SQZ_MUTEX_UNLOCK(&fs->itable_lock);
    return n;
}

int sqz_inode_lookup_at(struct sqz_fs *fs, int dirfd, const char *name,
                        struct stat *st, struct sqz_inode **out)
{
    *out = NULL;
    if (!sqz_name_ok(name))
        return -EINVAL;
    if (sqz_name_hidden(name))
        return -ENOENT;
    int fd, tries = 0;
    struct sqz_inode *in;
again:
    fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    SQZ_MUTEX_LOCK(&fs->itable_lock, SQZ_RANK_ITABLE);
    in = table_find(fs, st->st_dev, st->st_ino);
    if (!in && tries < 8 && !S_ISDIR(st->st_mode)) {
        /* the file opened may have been renamed over meanwhile, and its
         * inode swapped to the new file (recompress, packing): a file
         * without links is never given a new inode, the name is asked
         * again; also where a replace keeps the old inode (ident.c),
         * if the name holds another file now */
        struct stat now, cur;
        if (fstatat(fd, "", &now, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 &&
            (now.st_nlink == 0 ||
             (sqz_ident_any(fs) &&
              (fstatat(dirfd, name, &cur, AT_SYMLINK_NOFOLLOW) != 0 ||
               cur.st_ino != now.st_ino || cur.st_dev != now.st_dev)))) {
            SQZ_MUTEX_UNLOCK(&fs->itable_lock);
            close(fd);
            tries++;
            goto again;
        }
    }
    if (in) {
        in->nlookup++;
        if (st->st_nlink > 1 && S_ISREG(st->st_mode)) {
            int old = in->alt_fd; /* another name (inode_path.c) */
            in->alt_fd = fd;
            fd = old;
        }
        SQZ_MUTEX_UNLOCK(&fs->itable_lock);
        if (fd >= 0)
            close(fd);
    } else {
        in = inode_new(fd, st);
        if (!in) {
            SQZ_MUTEX_UNLOCK(&fs->itable_lock);
            close(fd);
            return -ENOMEM;
        }
        in->nlookup = 1;
        table_maybe_grow(fs);
        table_insert(fs, in);
        SQZ_MUTEX_UNLOCK(&fs->itable_lock);
    }
    *out = in;
    return 0;
}

/* Caller holds itable_lock; frees the inode when nothing refers to it. */
static void maybe_free_locked(struct sqz_fs *fs, struct sqz_inode *in,
                              struct sqz_inode **to_free)
{
    SQZ_ASSERT_EXCL(&fs->itable_lock);
    *to_free = NULL;
    if (in->is_root || in->nlookup > 0 || in->nopen > 0)
        return;
    table_remove(fs, in);
    *to_free = in;
}

void sqz_inode_forget(struct sqz_fs *fs, struct sqz_inode *in, uint64_t n)
{
    struct sqz_inode *dead = NULL;
    SQZ_MUTEX_LOCK(&fs->itable_lock, SQZ_RANK_ITABLE);
    in->nlookup = n > in->nlookup ? 0 : in->nlookup - n;
    if (in->nlookup == 0) { /* the kernel forgot it (ptimes.c) */
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        in->ktimes_set = 0;
        SQZ_MUTEX_UNLOCK(&in->meta);
    }
    maybe_free_locked(fs, in, &dead);
    SQZ_MUTEX_UNLOCK(&fs->itable_lock);
    if (dead) /* no handle is open (nopen == 0), so no sf exists */
        inode_gone(fs, dead);
}

void sqz_inode_open_ref(struct sqz_fs *fs, struct sqz_inode *in)
{
    SQZ_MUTEX_LOCK(&fs->itable_lock, SQZ_RANK_ITABLE);
    in->nopen++;
    SQZ_MUTEX_UNLOCK(&fs->itable_lock);
}

struct sqz_inode *sqz_inode_find_ref(struct sqz_fs *fs, dev_t dev, ino_t ino)
{
    SQZ_MUTEX_LOCK(&fs->itable_lock, SQZ_RANK_ITABLE);
    struct sqz_inode *in = table_find(fs, dev, ino);
    if (in)
        in->nopen++;
    SQZ_MUTEX_UNLOCK(&fs->itable_lock);
    return in;
}

void sqz_inode_open_unref(struct sqz_fs *fs, struct sqz_inode *in)
{
    struct sqz_inode *dead = NULL;
    SQZ_MUTEX_LOCK(&fs->itable_lock, SQZ_RANK_ITABLE);
    if (in->nopen > 0)
        in->nopen--;
    maybe_free_locked(fs, in, &dead);
    SQZ_MUTEX_UNLOCK(&fs->itable_lock);
    if (dead)
        inode_gone(fs, dead);
}

int sqz_inode_swap(struct sqz_fs *fs, struct sqz_inode *in, int npfd,
                   dev_t dev, ino_t ino)
{
    SQZ_ASSERT_EXCL(&in->io);
    sqz_inode_stash_drop(in); /* of the replaced backing file */
    /* The old backing file (renamed over, so unlinked) is freed when its
     * last descriptor, in->fd, goes: its inode number may then be given to
     * a new file at once. The key changes in the same critical section,
     * so a lookup of that new file never finds this inode. */
    SQZ_MUTEX_LOCK(&fs->itable_lock, SQZ_RANK_ITABLE);
    if (dup3(npfd, in->fd, O_CLOEXEC) < 0) {
        int e = -errno;
        SQZ_MUTEX_UNLOCK(&fs->itable_lock);
        return e;
    }
    table_remove(fs, in);
    in->dev = dev;
    in->ino = ino;
    table_insert(fs, in);
    if (in->alt_fd >= 0) /* a name of the replaced file */
        close(in->alt_fd);
    in->alt_fd = -1;
    SQZ_MUTEX_UNLOCK(&fs->itable_lock);
    return 0;
}

int sqz_itable_foreach(struct sqz_fs *fs,
                       void (*fn)(struct sqz_fs *, struct sqz_inode *, void *),
                       void *user)
{
    /* Collect the inodes, each kept alive by an open reference, under the
     * table lock; call fn after releasing it (fn may take io, which ranks
     * before itable_lock: docs/LOCKING.md). */
    SQZ_MUTEX_LOCK(&fs->itable_lock, SQZ_RANK_ITABLE);
    size_t n = fs->count;
    struct sqz_inode **v = malloc((n ? n : 1) * sizeof(*v));
    if (!v) {
        SQZ_MUTEX_UNLOCK(&fs->itable_lock);
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < fs->nbuckets; i++)
        for (struct sqz_inode *in = fs->buckets[i]; in && k < n; in = in->next) {
            in->nopen++;
            v[k++] = in;
        }
    SQZ_MUTEX_UNLOCK(&fs->itable_lock);
    for (size_t i = 0; i < k; i++)
        fn(fs, v[i], user);
    for (size_t i = 0; i < k; i++)
        sqz_inode_open_unref(fs, v[i]);
    free(v);
    return 0;
}

void sqz_proc_path(int fd, char *buf, size_t n)
{
    snprintf(buf, n, "/proc/self/fd/%d", fd);
}
