/* Inode table: kernel node ids <-> backing objects.
 *
 * Every inode the kernel knows can open its backing object again (ifd.c:
 * a file handle, or its parent and name), and a bounded cache holds the
 * O_PATH|O_NOFOLLOW descriptors of the hot ones. A backing inode number
 * may be given to a new file once the old one is gone and no descriptor
 * holds it: a lookup that finds an inode without a descriptor compares
 * the file handles (generation included) before it takes it. The table
 * is keyed by the backing (st_dev, st_ino); the kernel-visible node id is the address of our
 * sqz_inode (FUSE_ROOT_ID for the root), so it stays stable when
 * recompress and packing replace the backing file (sqz_inode_swap).
 * Protected by sqz_fs.itable.lock (docs/LOCKING.md). */
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
    return (size_t)(h % fs->itable.nbuckets);
}

static struct sqz_inode *inode_new(const struct stat *st)
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
    in->fdc.fd = -1;
    in->dev = st->st_dev;
    in->ino = st->st_ino;
    in->type = st->st_mode & S_IFMT;
    in->kind = SQZ_K_UNKNOWN;
    in->create_fd = -1;
    return in;
}

/* Frees in; returns the parent whose child reference it held (name
 * mode, ifd.c), for the caller to drop. */
static struct sqz_inode *inode_destroy(struct sqz_inode *in)
{
    sqz_inode_stash_drop(in);
    free(in->dirpol); /* newfile_policy.c: plain memory */
    if (in->create_fd >= 0)
        close(in->create_fd);
    struct sqz_inode *parent = sqz_ifd_detach(in);
    pthread_rwlock_destroy(&in->io);
    pthread_mutex_destroy(&in->meta);
    sqz_push_destroy(in);
    free(in);
    return parent;
}

static void maybe_free_locked(struct sqz_fs *fs, struct sqz_inode *in,
                              struct sqz_inode **to_free);
static int lookup_in(struct sqz_fs *fs, int dirfd, struct sqz_inode *parent,
                     const char *name, struct stat *st, struct sqz_inode **out);

/* Free dead and then each parent it was the last reference of. */
static void destroy_chain(struct sqz_fs *fs, struct sqz_inode *dead)
{
    while (dead) {
        struct sqz_inode *p = inode_destroy(dead);
        dead = NULL;
        if (p) {
            SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
            if (p->nchild > 0)
                p->nchild--;
            maybe_free_locked(fs, p, &dead);
            SQZ_MUTEX_UNLOCK(&fs->itable.lock);
        }
    }
}

/* Freed by the table: the number a removed file kept is free (ident.c):
 * its backing file has no link left, or (by handle) is gone. */
static void inode_gone(struct sqz_fs *fs, struct sqz_inode *in)
{
    struct stat st;
    if (in->type == S_IFREG && sqz_ident_any(fs)) {
        int fd = sqz_ifd_get(in);
        int gone = fd >= 0 ? fstat(fd, &st) == 0 && st.st_nlink == 0
                           : fd == -ESTALE && sqz_ifd_handles();
        if (fd >= 0)
            sqz_ifd_put(in);
        if (gone)
            sqz_ident_gone(fs, in->dev, in->ino);
    }
    destroy_chain(fs, in);
}

/* Caller holds itable.lock. */
static void table_insert(struct sqz_fs *fs, struct sqz_inode *in)
{
    size_t b = bucket_of(fs, in->dev, in->ino);
    in->next = fs->itable.buckets[b];
    fs->itable.buckets[b] = in;
    fs->itable.count++;
}

static void table_remove(struct sqz_fs *fs, struct sqz_inode *in)
{
    struct sqz_inode **pp = &fs->itable.buckets[bucket_of(fs, in->dev, in->ino)];
    while (*pp && *pp != in)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = in->next;
        fs->itable.count--;
    }
    in->next = NULL;
}

static struct sqz_inode *table_find(struct sqz_fs *fs, dev_t dev, ino_t ino)
{
    for (struct sqz_inode *in = fs->itable.buckets[bucket_of(fs, dev, ino)]; in;
         in = in->next)
        if (in->dev == dev && in->ino == ino)
            return in;
    /* a backing file being exchanged in for an inode (sqz_inode_swap_begin) */
    for (struct sqz_swap_pend *p = fs->itable.swap_pend; p; p = p->next)
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
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
    p->next = fs->itable.swap_pend;
    fs->itable.swap_pend = p;
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
}

void sqz_inode_swap_end(struct sqz_fs *fs, struct sqz_swap_pend *p)
{
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
    struct sqz_swap_pend **pp = &fs->itable.swap_pend;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (*pp)
        *pp = p->next;
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
}

/* Grow when the chains get long (best effort: on ENOMEM keep the table). */
static void table_maybe_grow(struct sqz_fs *fs)
{
    SQZ_ASSERT_EXCL(&fs->itable.lock);
    if (fs->itable.count < fs->itable.nbuckets * 2)
        return;
    size_t nb = fs->itable.nbuckets * 4;
    struct sqz_inode **nbk = calloc(nb, sizeof(*nbk));
    if (!nbk)
        return;
    struct sqz_inode **old = fs->itable.buckets;
    size_t on = fs->itable.nbuckets;
    fs->itable.buckets = nbk;
    fs->itable.nbuckets = nb;
    fs->itable.count = 0;
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
    if (sqz_mutex_init(&fs->itable.lock) != 0)
        return -ENOMEM;
    fs->itable.nbuckets = 4096;
    fs->itable.buckets = calloc(fs->itable.nbuckets, sizeof(*fs->itable.buckets));
    if (!fs->itable.buckets)
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
    fs->opts.max_fds = sqz_ifd_budget(fs->opts.max_fds);
    int rc = sqz_ifd_init(fs->root_dirfd, st.st_dev, fs->opts.max_fds);
    struct sqz_inode *root = rc ? NULL : inode_new(&st);
    if (!root) {
        close(fd);
        return rc ? rc : -ENOMEM;
    }
    sqz_ifd_attach(root, fd, NULL, 1);
    root->is_root = 1;
    root->nlookup = 1;
    fs->itable.root = root;
    table_insert(fs, root);
    return 0;
}

int sqz_itable_free(struct sqz_fs *fs)
{
    int first = 0;
    if (!fs->itable.buckets)
        return 0;
    for (size_t i = 0; i < fs->itable.nbuckets; i++) {
        struct sqz_inode *in = fs->itable.buckets[i];
        while (in) {
            struct sqz_inode *next = in->next;
            if (in->file) {
                int rc = sqz_file_close(in->file);
                in->file = NULL;
                if (rc < 0 && first == 0)
                    first = rc;
            }
            if (in->durable.ctr) { /* sqz_durable_free processed the queue */
                int rc = sqz_ctr_close(in->durable.ctr);
                in->durable.ctr = NULL;
                if (rc < 0 && first == 0)
                    first = rc;
            }
            inode_destroy(in); /* every inode goes: no child counts */
            in = next;
        }
    }
    free(fs->itable.buckets);
    fs->itable.buckets = NULL;
    fs->itable.root = NULL;
    pthread_mutex_destroy(&fs->itable.lock);
    return first;
}

struct sqz_inode *sqz_inode_of(struct sqz_fs *fs, fuse_ino_t ino)
{
    if (ino == FUSE_ROOT_ID)
        return fs->itable.root;
    return (struct sqz_inode *)(uintptr_t)ino;
}

fuse_ino_t sqz_nodeid(struct sqz_fs *fs, struct sqz_inode *in)
{
    if (in == fs->itable.root)
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
    int pfd = sqz_ifd_get(in);
    if (pfd < 0)
        return pfd;
    sqz_proc_path(pfd, pp, sizeof(pp));
    /* the daemon's reads never move the atime: it shows the atime of the
     * user's opens (ptimes.c) */
    int fd = sqz_openat_fd(AT_FDCWD, pp, flags | O_NOATIME | O_CLOEXEC, 0);
    if (fd == -EPERM) /* not the owner, nor root */
        fd = sqz_openat_fd(AT_FDCWD, pp, (flags & ~O_NOATIME) | O_CLOEXEC, 0);
    sqz_ifd_put(in);
    return fd;
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
    int pfd = sqz_ifd_get(parent);
    if (pfd < 0)
        return pfd;
    int rc = fchownat(pfd, name, ctx->uid, gid, AT_SYMLINK_NOFOLLOW) != 0 ? -errno : 0;
    sqz_ifd_put(parent);
    return rc;
}

int sqz_backing_stat(struct sqz_inode *in, struct stat *st)
{
    int fd = sqz_ifd_get(in);
    if (fd < 0)
        return fd;
    int rc = fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0 ? -errno : 0;
    sqz_ifd_put(in);
    return rc;
}

int sqz_inode_lookup(struct sqz_fs *fs, struct sqz_inode *parent,
                     const char *name, struct stat *st,
                     struct sqz_inode **out)
{
    int pfd = sqz_ifd_get(parent);
    if (pfd < 0)
        return pfd;
    int rc = lookup_in(fs, pfd, parent, name, st, out);
    sqz_ifd_put(parent);
    return rc;
}

size_t sqz_inode_count(struct sqz_fs *fs)
{
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
    size_t n = fs->itable.count;
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
    return n;
}

int sqz_inode_lookup_at(struct sqz_fs *fs, int dirfd, const char *name,
                        struct stat *st, struct sqz_inode **out)
{
    return lookup_in(fs, dirfd, NULL, name, st, out);
}

/* The lookup of name below dirfd, the descriptor of parent (or of a
 * directory the table does not know: parent NULL). */
static int lookup_in(struct sqz_fs *fs, int dirfd, struct sqz_inode *parent,
                     const char *name, struct stat *st, struct sqz_inode **out)
{
    *out = NULL;
    if (!sqz_name_ok(name))
        return -EINVAL;
    if (sqz_name_hidden(name))
        return -ENOENT;
    int fd, tries = 0;
    struct sqz_inode *in, *oldp = NULL, *dead = NULL;
    struct sqz_ifd_id *id;
again:
    fd = sqz_openat_fd(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0)
        return fd;
    if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    id = sqz_ifd_id_of(fd, st, parent, name); /* NULL: keeps its fd */
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
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
            SQZ_MUTEX_UNLOCK(&fs->itable.lock);
            close(fd);
            sqz_ifd_id_free(id);
            tries++;
            goto again;
        }
    }
    if (in && (in->dev != st->st_dev || in->ino != st->st_ino)) {
        /* the new backing file of a swap in progress: the inode's
         * descriptor and handle become its at the swap */
        sqz_ifd_id_free(id);
        id = NULL;
        close(fd);
        fd = -1;
    }
    struct sqz_inode *idp = sqz_ifd_id_parent(id);
    if (idp)
        idp->nchild++; /* the name id's reference, moved or dropped below */
    if (in && fd >= 0 && !sqz_ifd_found(in, fd, id, &oldp)) {
        /* the inode number was given to another file since: the old
         * inode stays the kernel's until it forgets it, out of the table */
        table_remove(fs, in);
        in = NULL;
    }
    if (in) {
        in->nlookup++;
    } else {
        in = inode_new(st);
        if (!in) {
            if (idp)
                idp->nchild--;
            SQZ_MUTEX_UNLOCK(&fs->itable.lock);
            close(fd);
            sqz_ifd_id_free(id);
            return -ENOMEM;
        }
        sqz_ifd_attach(in, fd, id, 0);
        in->nlookup = 1;
        table_maybe_grow(fs);
        table_insert(fs, in);
    }
    if (oldp && oldp->nchild > 0) {
        oldp->nchild--;
        maybe_free_locked(fs, oldp, &dead);
    }
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
    destroy_chain(fs, dead);
    sqz_ifd_trim();
    *out = in;
    return 0;
}

void sqz_inode_renamed(struct sqz_fs *fs, struct sqz_inode *np,
                       const char *newname)
{
    struct stat st; /* handle mode: a regular file's hint (ifd.c) */
    int pfd = sqz_ifd_get(np);
    if (pfd < 0)
        return;
    int rc = fstatat(pfd, newname, &st, AT_SYMLINK_NOFOLLOW);
    sqz_ifd_put(np);
    if (rc != 0)
        return;
    struct sqz_inode *dead = NULL;
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
    struct sqz_inode *in = table_find(fs, st.st_dev, st.st_ino);
    int moved = 0;
    struct sqz_inode *old = in ? sqz_ifd_renamed(in, np, newname, &moved) : NULL;
    if (moved) {
        np->nchild++;
        if (old && old->nchild > 0) {
            old->nchild--;
            maybe_free_locked(fs, old, &dead);
        }
    }
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
    destroy_chain(fs, dead);
}

/* Caller holds itable.lock; frees the inode when nothing refers to it. */
static void maybe_free_locked(struct sqz_fs *fs, struct sqz_inode *in,
                              struct sqz_inode **to_free)
{
    SQZ_ASSERT_EXCL(&fs->itable.lock);
    *to_free = NULL;
    if (in->is_root || in->nlookup > 0 || in->nopen > 0 || in->nchild > 0)
        return;
    table_remove(fs, in);
    *to_free = in;
}

void sqz_inode_forget(struct sqz_fs *fs, struct sqz_inode *in, uint64_t n)
{
    struct sqz_inode *dead = NULL;
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
    in->nlookup = n > in->nlookup ? 0 : in->nlookup - n;
    if (in->nlookup == 0) { /* the kernel forgot it (ptimes.c) */
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        in->times.kernel_set = 0;
        SQZ_MUTEX_UNLOCK(&in->meta);
    }
    maybe_free_locked(fs, in, &dead);
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
    /* No handle is open (nopen == 0), so no sf exists. */
    if (dead)
        inode_gone(fs, dead);
}

void sqz_inode_open_ref(struct sqz_fs *fs, struct sqz_inode *in)
{
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
    in->nopen++;
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
}

struct sqz_inode *sqz_inode_find_ref(struct sqz_fs *fs, dev_t dev, ino_t ino)
{
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
    struct sqz_inode *in = table_find(fs, dev, ino);
    if (in)
        in->nopen++;
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
    return in;
}

void sqz_inode_open_unref(struct sqz_fs *fs, struct sqz_inode *in)
{
    struct sqz_inode *dead = NULL;
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
    if (in->nopen > 0)
        in->nopen--;
    maybe_free_locked(fs, in, &dead);
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
    if (dead)
        inode_gone(fs, dead);
}

int sqz_inode_swap(struct sqz_fs *fs, struct sqz_inode *in, int npfd,
                   dev_t dev, ino_t ino)
{
    SQZ_ASSERT_EXCL(&in->io);
    sqz_inode_stash_drop(in); /* of the replaced backing file */
    /* The old backing file (renamed over, so unlinked) is freed when its
     * last descriptor, the cached one, goes: its inode number may then be
     * given to a new file at once. The key changes in the same critical
     * section, so a lookup of that new file never finds this inode. */
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
    int rc = sqz_ifd_replace(in, npfd);
    if (rc) {
        SQZ_MUTEX_UNLOCK(&fs->itable.lock);
        return rc;
    }
    table_remove(fs, in);
    in->dev = dev;
    in->ino = ino;
    table_insert(fs, in);
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
    return 0;
}

int sqz_itable_foreach(struct sqz_fs *fs,
                       void (*fn)(struct sqz_fs *, struct sqz_inode *, void *),
                       void *user)
{
    /* Collect the inodes, each kept alive by an open reference, under the
     * table lock; call fn after releasing it (fn may take io, which ranks
     * before itable.lock: docs/LOCKING.md). */
    SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
    size_t n = fs->itable.count;
    struct sqz_inode **v = malloc((n ? n : 1) * sizeof(*v));
    if (!v) {
        SQZ_MUTEX_UNLOCK(&fs->itable.lock);
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < fs->itable.nbuckets; i++)
        for (struct sqz_inode *in = fs->itable.buckets[i]; in && k < n; in = in->next) {
            in->nopen++;
            v[k++] = in;
        }
    SQZ_MUTEX_UNLOCK(&fs->itable.lock);
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
