/* The ctime shown through the mount when the daemon's own work moved a
 * backing object's ctime (docs/FORMAT.md "Shown times").
 *
 * Durable marks and packing write to a closed file, and put its atime and
 * mtime back; nothing can put a ctime back. So after such work the ctime
 * the object showed before is kept in user.squeezefs.shown with a bound
 * `until`: it counts while the backing ctime is at most `until`, which is
 * set just past the daemon's own last step. Any later change moves the
 * backing ctime past it, and a change through the mount that comes while
 * a kept ctime could still count removes the record first
 * (sqz_ptimes_user): the inode's times.gen is bumped before that change, and
 * the background side checks times.gen after writing the record, so one of the
 * two always sees the other. Locks: the record's cache is under meta. */
#include "node/ptimes.h"
#include "daemon/fs.h"
#include "node/inode.h"
#include "common/lockorder.h"
#include "squeezefs/pack.h"
#include "squeezefs/shown.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

/* A kept ctime counts until this long after the clock was read before
 * writing it (its own step stamps the backing ctime inside that time). */
#define SHOWN_BOUND_NS 200000000LL
/* Timestamps come from a coarse clock that may lag the clock read here. */
#define SHOWN_MARGIN_NS 50000000LL

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int ts_eq(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static int kept_kind(const struct stat *st)
{
    return S_ISREG(st->st_mode) || S_ISDIR(st->st_mode);
}

/* A packed file's record is in its pointer (version 2): a second xattr
 * would not fit in an ext4 inode beside it (a 4 KiB block per file). */
static void shown_of_ptr(const sqz_pack_ptr *p, sqz_shown *s)
{
    s->ctime.tv_sec = (time_t)(p->shown_ns / 1000000000LL);
    s->ctime.tv_nsec = (long)(p->shown_ns % 1000000000LL);
    s->until.tv_sec = (time_t)p->shown_until;
    s->until.tv_nsec = 0;
}

/* The pointer of a 0-byte regular file behind fd (or in's own when fd <
 * 0): 1 (*p filled), 0 none, <0 error. */
static int ptr_of(int fd, struct sqz_inode *in, sqz_pack_ptr *p)
{
    if (fd >= 0)
        return sqz_pack_ptr_fget(fd, p, NULL, 0);
    char pp[64];
    int ifd = sqz_ifd_get(in);
    if (ifd < 0)
        return ifd;
    sqz_proc_path(ifd, pp, sizeof(pp));
    int r = sqz_pack_ptr_get_follow(pp, p, NULL, 0);
    sqz_ifd_put(in);
    return r;
}

/* The record of in (bst its backing stat) as read now: 1 (s filled), 0
 * none, -1 none usable (damaged, or not read). */
static int read_record(struct sqz_inode *in, const struct stat *bst,
                       sqz_shown *s)
{
    sqz_pack_ptr p;
    if (S_ISREG(bst->st_mode) && bst->st_size == 0 && ptr_of(-1, in, &p) == 1) {
        /* what the probe after it needs (lookup, getattr): if the file is
         * still at this version then, it reads the pointer no second time */
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        sqz_bkey_of(bst, &in->times.ptr_key);
        in->times.ptr_len = p.length;
        in->times.ptr_stored = p.stored_len;
        in->times.ptr_log2bs = p.params.log2bs;
        in->times.ptr_seen = 1;
        SQZ_MUTEX_UNLOCK(&in->meta);
        if (!p.has_shown)
            return 0;
        shown_of_ptr(&p, s);
        return 1;
    }
    char pp[64];
    uint8_t b[SQZ_SHOWN_SIZE + 1];
    int ifd = sqz_ifd_get(in);
    if (ifd < 0)
        return -1;
    sqz_proc_path(ifd, pp, sizeof(pp));
    ssize_t n = getxattr(pp, SQZ_SHOWN_XATTR, b, sizeof(b));
    int err = n < 0 ? errno : 0;
    sqz_ifd_put(in);
    if (n < 0)
        return err == ENODATA ? 0 : -1;
    return n > 0 && sqz_shown_decode(b, (size_t)n, s) == 0 ? 1 : -1;
}

void sqz_ptimes_apply(struct sqz_fs *fs, struct sqz_inode *in,
                      struct stat *st)
{
    if (!kept_kind(st))
        return;
    sqz_shown s;
    int has;
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    int cached = in->times.valid && ts_eq(&in->times.key, &st->st_ctim);
    if (cached) {
        has = in->times.has;
        s.ctime = in->times.ctime;
        s.until = in->times.until;
    }
    int none = in->times.none;
    uint64_t wgen = in->times.wgen;
    SQZ_MUTEX_UNLOCK(&in->meta);
    if (!cached) {
        /* a regular file of a read-write mount on which none was read has
         * none until this daemon, the only writer of records, writes one
         * (record_write); a read-only mount's writer may write one */
        int r = none ? 0 : read_record(in, st, &s);
        has = r == 1;
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        if (r == 0 && !none && S_ISREG(st->st_mode) && !fs->opts.ro &&
            in->times.wgen == wgen)
            in->times.none = 1;
        in->times.valid = 1;
        in->times.key = st->st_ctim;
        in->times.has = has;
        if (has) {
            in->times.ctime = s.ctime;
            in->times.until = s.until;
        }
        SQZ_MUTEX_UNLOCK(&in->meta);
    }
    if (has && sqz_shown_counts(&s, &st->st_ctim))
        st->st_ctim = s.ctime;
}

struct timespec sqz_ptimes_shown(struct sqz_fs *fs, struct sqz_inode *in,
                                 const struct stat *bst)
{
    struct stat st = *bst;
    sqz_ptimes_apply(fs, in, &st);
    return st.st_ctim;
}

uint64_t sqz_ptimes_begin(struct sqz_inode *in)
{
    return atomic_load(&in->times.gen);
}

static void forget_cache(struct sqz_inode *in)
{
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    in->times.valid = 0;
    SQZ_MUTEX_UNLOCK(&in->meta);
}

/* The file behind fd (or in's own) is packed: its pointer in *p. */
static int packed_now(int fd, struct sqz_inode *in, sqz_pack_ptr *p)
{
    struct stat st;
    int r = fd >= 0 ? fstat(fd, &st) : sqz_backing_stat(in, &st);
    return r == 0 && S_ISREG(st.st_mode) && st.st_size == 0 &&
           ptr_of(fd, in, p) == 1;
}

/* setxattr (flags >= 0) or removexattr (-1) on in's backing object. */
static int path_setx(struct sqz_inode *in, const char *name, const void *v,
                     size_t n, int flags)
{
    char pp[64];
    int ifd = sqz_ifd_get(in);
    if (ifd < 0)
        return ifd;
    sqz_proc_path(ifd, pp, sizeof(pp));
    int r = flags < 0 ? removexattr(pp, name) : setxattr(pp, name, v, n, flags);
    r = r == 0 ? 0 : -errno;
    sqz_ifd_put(in);
    return r;
}

static int ptr_store(int fd, struct sqz_inode *in, const sqz_pack_ptr *p)
{
    uint8_t b[SQZ_PACK_PTR_MAX];
    size_t n = sqz_pack_ptr_encode(p, b);
    if (fd >= 0)
        return fsetxattr(fd, SQZ_PACK_XATTR, b, n, XATTR_REPLACE) == 0 ? 0 : -errno;
    return path_setx(in, SQZ_PACK_XATTR, b, n, XATTR_REPLACE);
}

/* known: the object's stat taken since its last change of size (io held
 * across), or NULL: stat it now; *stored (if not NULL): the record as a
 * read finds it, when written. A file with bytes has no pointer that
 * counts (a container's is replaced by its next packing). */
static int record_set(int fd, struct sqz_inode *in, const sqz_shown *s,
                      const void *v, size_t n, const struct stat *known,
                      sqz_shown *stored)
{
    sqz_pack_ptr p;
    int packed = known ? S_ISREG(known->st_mode) && known->st_size == 0 &&
                             ptr_of(fd, in, &p) == 1
                       : (fd >= 0 || in) && packed_now(fd, in, &p);
    if (packed) {
        p.has_shown = 1;
        p.shown_ns = (int64_t)s->ctime.tv_sec * 1000000000LL + s->ctime.tv_nsec;
        p.shown_until = (uint32_t)s->until.tv_sec + (s->until.tv_nsec ? 1 : 0);
        int r = ptr_store(fd, in, &p);
        if (r == 0 && stored) /* (as read back: whole seconds) */
            shown_of_ptr(&p, stored);
        return r;
    }
    if (fd >= 0)
        return fsetxattr(fd, SQZ_SHOWN_XATTR, v, n, 0) == 0 ? 0 : -errno;
    return path_setx(in, SQZ_SHOWN_XATTR, v, n, 0);
}

static void record_remove(int fd, struct sqz_inode *in)
{
    sqz_pack_ptr p;
    if ((fd >= 0 || in) && packed_now(fd, in, &p) && p.has_shown) {
        p.has_shown = 0;
        ptr_store(fd, in, &p);
    }
    if (fd >= 0) {
        fremovexattr(fd, SQZ_SHOWN_XATTR);
        return;
    }
    path_setx(in, SQZ_SHOWN_XATTR, NULL, 0, -1);
}

/* Write the record keeping `shown` (on fd, or in's own when fd < 0):
 * 0 or -errno; *until_ns its bound. */
static int record_write(int fd, struct sqz_inode *in,
                        const struct timespec *shown, int64_t *until_ns,
                        const struct stat *known, sqz_shown *stored)
{
    int64_t until = now_ns() + SHOWN_BOUND_NS;
    sqz_shown s = {
        .ctime = *shown,
        .until = {.tv_sec = (time_t)(until / 1000000000LL),
                  .tv_nsec = (long)(until % 1000000000LL)},
    };
    uint8_t b[SQZ_SHOWN_SIZE];
    sqz_shown_encode(&s, b);
    if (in)
        atomic_store(&in->times.until_ns, until);
    *until_ns = until;
    if (stored)
        *stored = s;
    if (in) { /* (before it: a read that found none meanwhile sets no none) */
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        in->times.wgen++;
        in->times.none = 0;
        SQZ_MUTEX_UNLOCK(&in->meta);
    }
    return record_set(fd, in, &s, b, sizeof(b), known, stored);
}

static void keep_failed(struct sqz_fs *fs, struct sqz_inode *in, int rc)
{
    if (rc == 0 || rc == -ENOTSUP || rc == -EOPNOTSUPP)
        return;
    char label[PATH_MAX] = "a directory";
    if (in)
        sqz_inode_label(fs, in, label, sizeof(label));
    sqz_logf(SQZ_LOG_WARN, "%s: cannot keep the ctime it shows: %s (its "
             "backing ctime shows)", label, strerror(-rc));
}

int sqz_ptimes_keep_st(struct sqz_fs *fs, struct sqz_inode *in, int fd,
                       const struct timespec *shown, uint64_t gen,
                       const struct stat *known, struct stat *after)
{
    /* a shared BACKING (GlusterFS, NFS) keeps no record: read-only mounts
     * on other clients, which cache attributes, tell versions apart by
     * them, and the churn of a record after each mark let one of them read
     * bytes of two versions (test_gluster, 2 runs in 8) */
    if (!fs->pack_in_place)
        return -1;
    int64_t until;
    sqz_shown rec;
    int rc = record_write(fd, in, shown, &until, known, &rec);
    int filled = 0;
    if (rc == 0 && atomic_load(&in->times.gen) != gen) {
        record_remove(fd, in); /* a user's change came meanwhile: it shows */
    } else if (rc == 0 && after &&
               (fd >= 0 ? fstat(fd, after) : sqz_backing_stat(in, after)) == 0) {
        /* the record just written is the cache at the ctime it left (the
         * next stat reads no xattr); a user's change since (gen bumped
         * before it, the cache forgotten after it) leaves none */
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        filled = atomic_load(&in->times.gen) == gen;
        if (filled) {
            in->times.valid = 1;
            in->times.key = after->st_ctim;
            in->times.has = 1;
            in->times.ctime = rec.ctime;
            in->times.until = rec.until;
        }
        SQZ_MUTEX_UNLOCK(&in->meta);
    }
    if (!filled)
        forget_cache(in);
    keep_failed(fs, in, rc);
    return filled ? 0 : -1;
}

void sqz_ptimes_keep(struct sqz_fs *fs, struct sqz_inode *in, int fd,
                     const struct timespec *shown, uint64_t gen)
{
    sqz_ptimes_keep_st(fs, in, fd, shown, gen, NULL, NULL);
}

/* try: its io only tried (the caller holds a file's io), a while; if it
 * stays taken, nothing is put back (ok 0). */
static void dir_begin(struct sqz_fs *fs, int dfd, struct sqz_ptimes_dir *t,
                      int try)
{
    memset(t, 0, sizeof(*t));
    if (fstat(dfd, &t->before) != 0)
        return;
    t->ok = 1;
    /* its io, exclusive: stat through the mount (sqz_ptimes_stat_dir)
     * sees it before the change or after its times are put back */
    t->in = fs ? sqz_inode_find_ref(fs, t->before.st_dev, t->before.st_ino)
               : NULL;
    if (t->in && try) {
        int got = 0;
        for (int i = 0; i < 200 && !got; i++) {
            got = SQZ_TRYWRLOCK(&t->in->io, SQZ_RANK_IO) == 0;
            if (!got)
                usleep(500);
        }
        if (!got) {
            sqz_inode_open_unref(fs, t->in);
            t->in = NULL;
            t->ok = 0;
            return;
        }
    } else if (t->in) {
        SQZ_WRLOCK(&t->in->io, SQZ_RANK_IO);
    }
    if (t->in && fstat(dfd, &t->before) != 0)
        t->ok = 0;
    t->gen = t->in ? sqz_ptimes_begin(t->in) : 0;
    t->shown = t->before.st_ctim;
    uint8_t b[SQZ_SHOWN_SIZE + 1];
    sqz_shown s;
    ssize_t n = fgetxattr(dfd, SQZ_SHOWN_XATTR, b, sizeof(b));
    if (n > 0 && sqz_shown_decode(b, (size_t)n, &s) == 0 &&
        sqz_shown_counts(&s, &t->before.st_ctim))
        t->shown = s.ctime;
}

void sqz_ptimes_dir_begin(struct sqz_fs *fs, int dfd, struct sqz_ptimes_dir *t)
{
    dir_begin(fs, dfd, t, 0);
}

void sqz_ptimes_dir_try_begin(struct sqz_fs *fs, int dfd,
                              struct sqz_ptimes_dir *t)
{
    dir_begin(fs, dfd, t, 1);
}

static int user_came(const struct sqz_ptimes_dir *t)
{
    return t->in && atomic_load(&t->in->times.gen) != t->gen;
}

void sqz_ptimes_dir_end(struct sqz_fs *fs, int dfd, struct sqz_ptimes_dir *t)
{
    struct stat now;
    if (!t->ok || fstat(dfd, &now) != 0 ||
        ts_eq(&now.st_ctim, &t->before.st_ctim) || user_came(t))
        goto out; /* nothing done, or a user's change shows */
    struct timespec tv[2] = {{.tv_nsec = UTIME_OMIT}, t->before.st_mtim};
    if (futimens(dfd, tv) != 0)
        goto out;
    if (user_came(t)) { /* its mtime may have been put back: now again */
        tv[1].tv_nsec = UTIME_NOW;
        futimens(dfd, tv);
        goto out;
    }
    if (fs && !fs->pack_in_place)
        goto out; /* (as sqz_ptimes_keep) */
    int64_t until;
    int rc = record_write(dfd, t->in, &t->shown, &until, NULL, NULL);
    if (rc == 0 && user_came(t))
        record_remove(dfd, t->in);
    if (t->in)
        forget_cache(t->in);
    keep_failed(fs, t->in, rc);
out:
    if (t->in) {
        SQZ_RWUNLOCK(&t->in->io);
        sqz_inode_open_unref(fs, t->in);
    }
    t->in = NULL;
    t->ok = 0;
}

void sqz_ptimes_user(struct sqz_fs *fs, struct sqz_inode *in)
{
    atomic_fetch_add(&in->times.gen, 1);
    int64_t until = atomic_load(&in->times.until_ns);
    int64_t start = atomic_load(&fs->times.shown_start_ns);
    if (until < start)
        until = start;
    if (until == 0 || now_ns() > until + SHOWN_MARGIN_NS)
        return; /* a kept ctime no longer counts once the change is made */
    if (in->type != S_IFREG && in->type != S_IFDIR)
        return;
    record_remove(-1, in);
    atomic_store(&in->times.until_ns, 0);
    forget_cache(in);
}

void sqz_ptimes_new_file(struct sqz_fs *fs, struct sqz_inode *in)
{
    if (fs->opts.ro || in->type != S_IFREG)
        return;
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    in->times.none = 1;
    SQZ_MUTEX_UNLOCK(&in->meta);
}

void sqz_ptimes_user4(struct sqz_fs *fs, struct sqz_inode *a,
                      struct sqz_inode *b, struct sqz_inode *c,
                      struct sqz_inode *d)
{
    struct sqz_inode *v[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        if (v[i])
            sqz_ptimes_user(fs, v[i]);
}

void sqz_ptimes_mount(struct sqz_fs *fs)
{
    atomic_store(&fs->times.shown_start_ns, now_ns() + SHOWN_BOUND_NS);
}

void sqz_ptimes_kernel_seen(struct sqz_fs *fs, struct sqz_inode *in,
                            const struct stat *attr)
{
    if (!fs->opts.writeback || !S_ISREG(attr->st_mode))
        return;
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    if (!in->times.kernel_set) {
        in->times.kmtime = attr->st_mtim;
        in->times.kctime = attr->st_ctim;
        in->times.kernel_set = 1;
    }
    SQZ_MUTEX_UNLOCK(&in->meta);
}

static void restore_at(struct sqz_fs *fs, struct sqz_inode *in, int may_defer);

void sqz_ptimes_kernel_set(struct sqz_fs *fs, struct sqz_inode *in,
                           int to_set, const struct stat *attr)
{
    if (!fs->opts.writeback || in->type != S_IFREG ||
        !(to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW |
                    FUSE_SET_ATTR_CTIME)))
        return;
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    if (in->times.kernel_set) {
        if (to_set & FUSE_SET_ATTR_MTIME)
            in->times.kmtime = attr->st_mtim;
        if (to_set & FUSE_SET_ATTR_CTIME)
            in->times.kctime = attr->st_ctim;
        if (to_set & FUSE_SET_ATTR_MTIME_NOW)
            in->times.kernel_set = 0; /* the kernel's own clock: not known here */
    }
    SQZ_MUTEX_UNLOCK(&in->meta);
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    restore_at(fs, in, 1);
    SQZ_RWUNLOCK(&in->io);
}

/* Does the backing file get the kernel's mtime and ctime (meta held)?
 * Only on a local BACKING: read-only mounts of a shared one (GlusterFS,
 * NFS) tell a file's versions apart by its size and times as their
 * clients cache them, and a rewrite of the same size whose mtime was put
 * back could look unchanged there. */
static int kernel_times(struct sqz_fs *fs, struct sqz_inode *in)
{
    return fs->opts.writeback && in->times.kernel_set && fs->pack_in_place;
}

/* may_defer: a SETATTR's (kernel_set): while the file is open for
 * writing, the ctime is kept after the commit of the FLUSH that comes at
 * its close (the kernel sends such SETATTRs just before it: the record
 * would be written twice), or at the last writable handle's release. */
static void restore_at(struct sqz_fs *fs, struct sqz_inode *in, int may_defer)
{
    SQZ_ASSERT_HELD(&in->io);
    struct stat bst;
    /* meta is held across the stat, the check and the utimensat: a writer
     * clears utimes_kept (content_io.c) before its data can reach the
     * backing file, so the user's old times are never put back on new
     * data; and two restores (a SETATTR's and a release's) cannot
     * interleave, so neither compares with a stat the other made stale
     * and leaves the older times on the file */
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    if (sqz_backing_stat(in, &bst) != 0) {
        SQZ_MUTEX_UNLOCK(&in->meta);
        return;
    }
    if (!may_defer)
        in->times.kc_owed = 0;
    struct timespec tv[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_nsec = UTIME_OMIT}};
    if (in->utimes_kept) {
        tv[0] = in->utimes[0];
        tv[1] = in->utimes[1];
    } else if (kernel_times(fs, in)) {
        tv[1] = in->times.kmtime;
    }
    int keep = kernel_times(fs, in);
    struct timespec kc = in->times.kctime;
    int moved = (tv[0].tv_nsec != UTIME_OMIT && !ts_eq(&tv[0], &bst.st_atim)) ||
                (tv[1].tv_nsec != UTIME_OMIT && !ts_eq(&tv[1], &bst.st_mtim));
    int rc = 0;
    if (moved) {
        char pp[64];
        int ifd = sqz_ifd_get(in);
        if (ifd >= 0) {
            sqz_proc_path(ifd, pp, sizeof(pp));
            rc = utimensat(AT_FDCWD, pp, tv, 0) != 0 ? -errno : 0;
            sqz_ifd_put(in);
        } else {
            rc = ifd;
        }
        if (rc)
            sqz_logf(SQZ_LOG_WARN, "squeezefs: restoring file times failed: %s",
                     strerror(-rc));
    }
    SQZ_MUTEX_UNLOCK(&in->meta);
    if (!keep || (moved && rc))
        return;
    if (may_defer && in->writers > 0) { /* (writers: io) */
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        in->times.kc_owed = 1;
        SQZ_MUTEX_UNLOCK(&in->meta);
        return;
    }
    /* the ctime: kept unless the backing file has the kernel's already, or
     * a record of it (the cache of the last stat, keyed by this ctime);
     * the times just put back moved it (bst keeps its size: io held) */
    if (!moved && ts_eq(&bst.st_ctim, &kc))
        return;
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    int have = !moved && in->times.valid && in->times.has &&
               ts_eq(&in->times.key, &bst.st_ctim) &&
               ts_eq(&in->times.ctime, &kc);
    SQZ_MUTEX_UNLOCK(&in->meta);
    struct stat after;
    if (!have)
        sqz_ptimes_keep_st(fs, in, -1, &kc, sqz_ptimes_begin(in), &bst, &after);
}

void sqz_ptimes_restore(struct sqz_fs *fs, struct sqz_inode *in)
{
    restore_at(fs, in, 0);
}

int sqz_ptimes_restore_owed(struct sqz_inode *in)
{
    SQZ_ASSERT_HELD(&in->io);
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    int owed = in->times.kc_owed;
    SQZ_MUTEX_UNLOCK(&in->meta);
    return owed;
}

int sqz_ptimes_stat_dir(struct sqz_fs *fs, struct sqz_inode *in,
                        struct stat *st)
{
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    int rc = sqz_backing_stat(in, st);
    if (rc == 0)
        sqz_ptimes_apply(fs, in, st);
    SQZ_RWUNLOCK(&in->io);
    return rc;
}
