/* Per-inode content of regular files: which kind of backing file it is
 * (container / pre-existing plain file / damaged / pending auto), the
 * shared sqz_file of a container, handles, and the data operations.
 * Locking: see fs.h (io rwlock, then meta mutex). */
#include "fuse/fs.h"
#include "common/fullio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int sqz_resolve(struct sqz_fs *fs, const char *relpath, sqz_resolved *out)
{
    return sqz_policy_resolve(fs->root_dirfd, relpath, fs->rules,
                              fs->rules_name, &fs->opts.spec, out);
}

void sqz_params_from_spec(struct sqz_fs *fs, const sqz_spec *s, sqz_params *p)
{
    memset(p, 0, sizeof(*p));
    p->alg = s->alg;
    p->level = s->level;
    p->log2bs = s->log2bs ? s->log2bs : fs->opts.spec.log2bs;
    p->min_saving = fs->opts.min_saving;
    p->auto_mode = (uint8_t)s->auto_mode;
}

int sqz_content_reopen(struct sqz_inode *in, int flags)
{
    char pp[64];
    sqz_proc_path(in->fd, pp, sizeof(pp));
    int fd = open(pp, flags | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* Label for log lines: the path inside the mount. */
void sqz_content_label(struct sqz_fs *fs, struct sqz_inode *in, char *buf,
                       size_t n)
{
    if (sqz_inode_relpath(fs, in, buf, n) != 0 || !buf[0])
        snprintf(buf, n, "(inode %llu)", (unsigned long long)in->ino);
}

static void probe_store(struct sqz_inode *in, const struct stat *bst,
                        enum sqz_kind kind, uint64_t len)
{
    pthread_mutex_lock(&in->meta);
    sqz_bkey_of(bst, &in->probe_key);
    in->probe_kind = kind;
    in->probe_len = len;
    in->probe_valid = 1;
    pthread_mutex_unlock(&in->meta);
}

/* Kind and logical length of a regular file that has no open handle
 * (cached per backing version). Caller holds io (shared or exclusive). */
static int probe(struct sqz_fs *fs, struct sqz_inode *in,
                 const struct stat *bst, enum sqz_kind *kind, uint64_t *len)
{
    struct sqz_bkey k;
    sqz_bkey_of(bst, &k);
    pthread_mutex_lock(&in->meta);
    if (in->probe_valid && sqz_bkey_eq(&k, &in->probe_key)) {
        *kind = in->probe_kind;
        *len = in->probe_len;
        pthread_mutex_unlock(&in->meta);
        return 0;
    }
    pthread_mutex_unlock(&in->meta);

    if (bst->st_size == 0) {
        *kind = SQZ_K_PLAIN;
        *len = 0;
        probe_store(in, bst, *kind, *len);
        return 0;
    }
    int fd = sqz_content_reopen(in, O_RDONLY);
    if (fd < 0)
        return fd;
    int p = sqz_ctr_probe_fd(fd);
    if (p == 0) {
        close(fd);
        *kind = SQZ_K_PLAIN;
        *len = (uint64_t)bst->st_size;
    } else if (p == 1 || p == -EBADMSG) {
        char label[PATH_MAX];
        sqz_content_label(fs, in, label, sizeof(label));
        sqz_ctr *c = NULL;
        /* a container that cannot be opened still shows the length its
         * newest durable mark recorded (reads give EIO): damage never
         * makes a file look shorter */
        uint64_t marked = 0;
        int have_marked = sqz_ctr_marked_length_fd(fd, &marked) == 0;
        int rc = p == 1 ? sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, label, &c)
                        : (close(fd), -EBADMSG);
        if (rc == 0) {
            *kind = SQZ_K_CONTAINER;
            *len = sqz_ctr_length(c);
            sqz_ctr_close(c);
        } else if (rc == -EBADMSG) {
            *kind = SQZ_K_DAMAGED;
            *len = have_marked ? marked : (uint64_t)bst->st_size;
        } else {
            return rc;
        }
    } else {
        close(fd);
        return p;
    }
    probe_store(in, bst, *kind, *len);
    return 0;
}

void sqz_content_invalidate(struct sqz_inode *in)
{
    pthread_mutex_lock(&in->meta);
    in->probe_valid = 0;
    pthread_mutex_unlock(&in->meta);
}

int sqz_content_handles_open(const struct sqz_inode *in)
{
    return in->sf_users > 0 || in->plain_users > 0;
}

/* Current kind (caller holds io). */
int sqz_content_kind_locked(struct sqz_fs *fs, struct sqz_inode *in,
                            const struct stat *bst, enum sqz_kind *kind,
                            uint64_t *len)
{
    if (sqz_content_handles_open(in) && in->kind != SQZ_K_UNKNOWN) {
        *kind = in->kind;
        if (in->kind == SQZ_K_CONTAINER && in->sf)
            *len = sqz_file_length(in->sf);
        else if (in->kind == SQZ_K_PENDING)
            *len = 0;
        else
            *len = (uint64_t)bst->st_size;
        return 0;
    }
    return probe(fs, in, bst, kind, len);
}

void sqz_content_fix_stat(struct sqz_fs *fs, struct sqz_inode *in,
                          struct stat *st)
{
    enum sqz_kind kind;
    uint64_t len = (uint64_t)st->st_size;
    int dirty = 0;
    pthread_rwlock_rdlock(&in->io);
    if (sqz_content_kind_locked(fs, in, st, &kind, &len) != 0) {
        pthread_rwlock_unlock(&in->io);
        return; /* show the backing figures */
    }
    if (kind == SQZ_K_CONTAINER && in->sf)
        dirty = sqz_file_dirty(in->sf);
    pthread_rwlock_unlock(&in->io);

    if (kind == SQZ_K_PLAIN)
        return;
    st->st_size = (off_t)len;
    if (len > 0 && st->st_blocks == 0)
        st->st_blocks = 8;
    if (dirty) {
        pthread_mutex_lock(&in->meta);
        if (in->wtime_set &&
            (in->wtime.tv_sec > st->st_mtim.tv_sec ||
             (in->wtime.tv_sec == st->st_mtim.tv_sec &&
              in->wtime.tv_nsec > st->st_mtim.tv_nsec))) {
            st->st_mtim = in->wtime;
            st->st_ctim = in->wtime;
        }
        pthread_mutex_unlock(&in->meta);
    }
}

/* Open the shared sqz_file of a container (caller holds io exclusive).
 * Read-only users get a read-only container, so reading never modifies
 * BACKING (no tail repair); the first writer reopens it read-write (safe:
 * a read-only sf has no dirty data, and io exclusive keeps readers out). */
static int ensure_sf(struct sqz_fs *fs, struct sqz_inode *in, int want_write)
{
    if (in->sf && (in->sf_rw || !want_write))
        return 0;
    if (want_write && fs->opts.ro)
        return -EROFS;
    /* closed and still waiting for its durable mark: the queued container
     * is the one writer of this file (read-write; no reopen) */
    sqz_ctr *queued = sqz_durable_take_locked(in);
    if (queued) {
        sqz_file *nsf = NULL;
        int rc = sqz_file_new(fs->engine, queued, &nsf);
        if (rc)
            return rc;
        if (in->sf)
            sqz_file_close(in->sf); /* a read-only view: nothing dirty */
        in->sf = nsf;
        in->sf_rw = 1;
        return 0;
    }
    char label[PATH_MAX];
    sqz_content_label(fs, in, label, sizeof(label));
    int mode = want_write ? SQZ_OPEN_RDWR : SQZ_OPEN_RDONLY;
    int fd = sqz_content_reopen(in, want_write ? O_RDWR : O_RDONLY);
    if (fd < 0)
        return fd;
    sqz_ctr *c = NULL;
    int rc = sqz_ctr_open_fd(fd, mode, label, &c);
    if (rc == -EBADMSG) {
        sqz_logf(0, "%s: damaged container header: %s", label, strerror(-rc));
        sqz_content_invalidate(in);
        return -EIO;
    }
    if (rc)
        return rc;
    sqz_file *nsf = NULL;
    rc = sqz_file_new(fs->engine, c, &nsf);
    if (rc)
        return rc;
    if (in->sf) {
        int rc2 = sqz_file_close(in->sf);
        if (rc2)
            sqz_logf(1, "%s: closing the read-only view: %s", label,
                     strerror(-rc2));
    }
    in->sf = nsf;
    in->sf_rw = want_write;
    return 0;
}

/* Write a fresh container into the (empty) backing file and open it as the
 * inode's sf. Caller holds io exclusive. */
static int make_container(struct sqz_fs *fs, struct sqz_inode *in,
                          const sqz_params *p)
{
    char label[PATH_MAX];
    sqz_content_label(fs, in, label, sizeof(label));
    char err[256] = "";
    if (sqz_params_check(p, err, sizeof(err)) != 0) {
        sqz_logf(0, "%s: invalid compression parameters: %s", label, err);
        return -EINVAL;
    }
    int fd = sqz_content_reopen(in, O_RDWR);
    if (fd < 0)
        return fd;
    sqz_ctr *c = NULL;
    int rc = sqz_ctr_create_fd(fd, p, label, &c);
    if (rc)
        return rc;
    rc = sqz_file_new(fs->engine, c, &in->sf);
    if (rc) {
        in->sf = NULL;
        return rc;
    }
    in->sf_rw = 1;
    in->kind = SQZ_K_CONTAINER;
    sqz_content_invalidate(in);
    return 0;
}

/* Decide the policy of an empty file and turn it into a container, or into
 * PENDING for auto specs. Caller holds io exclusive. */
static int convert_empty(struct sqz_fs *fs, struct sqz_inode *in,
                         const char *relpath_or_null)
{
    char rel[PATH_MAX];
    if (relpath_or_null) {
        snprintf(rel, sizeof(rel), "%s", relpath_or_null);
    } else {
        int rc = sqz_inode_relpath(fs, in, rel, sizeof(rel));
        if (rc)
            return rc;
    }
    sqz_resolved r;
    int rc = sqz_resolve(fs, rel, &r);
    if (rc)
        return rc;
    sqz_params p;
    sqz_params_from_spec(fs, &r.spec, &p);
    if (r.spec.auto_mode != SQZ_AUTO_NONE) {
        in->pending = p;
        in->kind = SQZ_K_PENDING;
        return 0;
    }
    return make_container(fs, in, &p);
}

/* Below this much data a trial compression says little (a first log line
 * would decide the file's algorithm forever): take zstd's default. */
#define AUTO_MIN_SAMPLE 4096

/* PENDING -> CONTAINER: pick the algorithm from the first data written.
 * Caller holds io exclusive. */
int sqz_content_materialize_locked(struct sqz_fs *fs, struct sqz_inode *in,
                                   const void *sample, size_t n)
{
    sqz_params p = in->pending;
    size_t cap = (size_t)4 << p.log2bs;
    if (n > cap)
        n = cap;
    if (sample && n >= AUTO_MIN_SAMPLE) {
        int rc = sqz_auto_choose(p.auto_mode, sample, n, p.log2bs, &p.alg,
                                 &p.level);
        if (rc)
            return rc;
    } else {
        p.alg = SQZ_ALG_ZSTD;
        p.level = sqz_level_default(SQZ_ALG_ZSTD);
    }
    return make_container(fs, in, &p);
}

static void record_kc(struct sqz_inode *in)
{
    struct stat st;
    if (sqz_backing_stat(in, &st) != 0)
        return;
    pthread_mutex_lock(&in->meta);
    sqz_bkey_of(&st, &in->kc_key);
    in->kc_valid = 1;
    pthread_mutex_unlock(&in->meta);
}

int sqz_content_open(struct sqz_fs *fs, struct sqz_inode *in, int flags,
                     struct sqz_handle *h, int *keep_cache)
{
    int acc = flags & O_ACCMODE;
    int writable = acc != O_RDONLY;
    int rc = 0;
    memset(h, 0, sizeof(*h));
    h->inode = in;
    h->plain_fd = -1;
    *keep_cache = 0;
    if (writable && fs->opts.ro)
        return -EROFS;

    pthread_rwlock_wrlock(&in->io);
    struct stat bst;
    rc = sqz_backing_stat(in, &bst);
    if (rc)
        goto out;
    struct sqz_bkey before;
    sqz_bkey_of(&bst, &before);
    enum sqz_kind kind;
    uint64_t len;
    rc = sqz_content_kind_locked(fs, in, &bst, &kind, &len);
    if (rc)
        goto out;
    int changed = 0;

    if ((flags & O_TRUNC) && writable) {
        if (kind == SQZ_K_CONTAINER) {
            if (len > 0) {
                rc = ensure_sf(fs, in, 1);
                if (rc == 0)
                    rc = sqz_file_truncate(in->sf, 0);
                if (rc)
                    goto out_close_unused;
                changed = 1;
            }
        } else if ((kind == SQZ_K_PLAIN || kind == SQZ_K_DAMAGED) &&
                   in->plain_users == 0 && in->sf_users == 0) {
            if (bst.st_size > 0) {
                int fd = sqz_content_reopen(in, O_WRONLY | O_TRUNC);
                if (fd < 0) {
                    rc = fd;
                    goto out;
                }
                close(fd);
                changed = 1;
            }
            kind = SQZ_K_PLAIN;
            bst.st_size = 0;
        }
    }
    if (kind == SQZ_K_PLAIN && writable && bst.st_size == 0 &&
        in->plain_users == 0 && in->sf_users == 0) {
        rc = convert_empty(fs, in, NULL);
        if (rc)
            goto out;
        kind = in->kind;
        changed = 1;
    }

    switch (kind) {
    case SQZ_K_DAMAGED: {
        char label[PATH_MAX];
        sqz_content_label(fs, in, label, sizeof(label));
        sqz_logf(0, "%s: damaged container header, refusing to open", label);
        rc = -EIO;
        goto out;
    }
    case SQZ_K_PLAIN: {
        int pf = flags & (O_ACCMODE | O_APPEND | O_SYNC | O_DSYNC | O_NOATIME);
        if ((flags & O_TRUNC) && writable)
            pf |= O_TRUNC;
        int fd = sqz_content_reopen(in, pf);
        if (fd < 0 && (pf & O_NOATIME)) /* EPERM for non-owners */
            fd = sqz_content_reopen(in, pf & ~O_NOATIME);
        if (fd < 0) {
            rc = fd;
            goto out;
        }
        h->plain_fd = fd;
        in->plain_users++;
        break;
    }
    case SQZ_K_CONTAINER:
        rc = ensure_sf(fs, in, writable);
        if (rc)
            goto out;
        in->sf_users++;
        break;
    case SQZ_K_PENDING:
        in->sf_users++;
        break;
    default:
        rc = -EIO;
        goto out;
    }
    in->kind = kind;
    h->append = (flags & O_APPEND) != 0;
    h->writable = writable;

    /* keep_cache when nothing changed since the previous open/release. */
    if (!changed) {
        pthread_mutex_lock(&in->meta);
        *keep_cache = in->kc_valid && sqz_bkey_eq(&in->kc_key, &before);
        pthread_mutex_unlock(&in->meta);
    }
    record_kc(in);
    pthread_rwlock_unlock(&in->io);
    sqz_inode_open_ref(fs, in);
    return 0;

out_close_unused:
    if (!sqz_content_handles_open(in) && in->sf) {
        sqz_file_close(in->sf);
        in->sf = NULL;
    }
out:
    pthread_rwlock_unlock(&in->io);
    return rc;
}

int sqz_content_create(struct sqz_fs *fs, struct sqz_inode *in,
                       const char *relpath, int flags, struct sqz_handle *h)
{
    memset(h, 0, sizeof(*h));
    h->inode = in;
    h->plain_fd = -1;
    pthread_rwlock_wrlock(&in->io);
    int rc = convert_empty(fs, in, relpath);
    if (rc == 0) {
        in->sf_users++;
        h->append = (flags & O_APPEND) != 0;
        h->writable = (flags & O_ACCMODE) != O_RDONLY;
        record_kc(in);
    }
    pthread_rwlock_unlock(&in->io);
    if (rc == 0)
        sqz_inode_open_ref(fs, in);
    return rc;
}

void sqz_content_keep_times(struct sqz_inode *in)
{
    struct stat bst;
    if (sqz_backing_stat(in, &bst) != 0)
        return;
    pthread_mutex_lock(&in->meta);
    in->utimes[0] = bst.st_atim;
    in->utimes[1] = bst.st_mtim;
    in->utimes_kept = 1;
    pthread_mutex_unlock(&in->meta);
}

/* After the container wrote bookkeeping (not user data) to the backing
 * file, put back the times the user set. */
static void restore_kept_times(struct sqz_inode *in)
{
    /* meta is held across the check and the utimensat: a writer clears
     * utimes_kept (note_write_begin) before its data can reach the backing
     * file, so the user's old times are never put back on new data */
    pthread_mutex_lock(&in->meta);
    if (in->utimes_kept) {
        struct timespec tv[2] = {in->utimes[0], in->utimes[1]};
        char pp[64];
        sqz_proc_path(in->fd, pp, sizeof(pp));
        if (utimensat(AT_FDCWD, pp, tv, 0) != 0)
            sqz_logf(1, "squeezefs: restoring file times failed: %s",
                     strerror(errno));
    }
    pthread_mutex_unlock(&in->meta);
}

/* Dead space (replaced blocks) is only reclaimed at a checkpoint, which the
 * container writes on fsync. A file that is appended to and closed many
 * times without fsync (a log) would grow without bound, so the last close
 * checkpoints when the dead bytes outweigh the live ones (amortised: two
 * fdatasyncs per that much rewritten data). Caller holds io exclusive and
 * is the last user of sf. */
#define RECLAIM_MIN_DEAD (4u << 20)
static void reclaim_if_wasteful(struct sqz_fs *fs, struct sqz_inode *in)
{
    if (sqz_file_flush(in->sf) != 0)
        return; /* the close reports the error */
    struct sqz_ctr_stat st;
    if (sqz_file_stat(in->sf, &st) != 0)
        return;
    if (st.dead_bytes < RECLAIM_MIN_DEAD || st.dead_bytes < st.compressed_bytes)
        return;
    int rc = sqz_ctr_checkpoint(sqz_file_ctr(in->sf));
    if (rc) {
        char label[PATH_MAX];
        sqz_content_label(fs, in, label, sizeof(label));
        sqz_logf(1, "%s: reclaiming dead space failed: %s", label, strerror(-rc));
    }
}

/* Close the inode's sf after its last handle. A container written in this
 * mount and not yet marked durable is queued for a batched durable mark
 * (durable.c) instead of being closed: close never fsyncs. io exclusive. */
static int close_sf(struct sqz_fs *fs, struct sqz_inode *in)
{
    sqz_file *sf = in->sf;
    in->sf = NULL;
    if (!in->sf_rw || !fs->durable)
        return sqz_file_close(sf);
    sqz_ctr *kept = NULL;
    int rc = sqz_file_close_keep(sf, &kept);
    if (!kept)
        return rc;
    if (sqz_ctr_unmarked(kept) && sqz_durable_defer_locked(fs, in, kept) == 0)
        return 0;
    return sqz_ctr_close(kept);
}

int sqz_content_release(struct sqz_fs *fs, struct sqz_handle *h)
{
    struct sqz_inode *in = h->inode;
    int rc = 0;
    if (h->plain_fd < 0)
        sqz_durable_wait_room(fs);
    pthread_rwlock_wrlock(&in->io);
    if (h->plain_fd >= 0) {
        if (close(h->plain_fd) != 0)
            rc = -errno;
        h->plain_fd = -1;
        if (in->plain_users > 0)
            in->plain_users--;
    } else {
        if (in->sf_users > 0)
            in->sf_users--;
        if (in->sf_users == 0 && in->sf) {
            if (in->sf_rw)
                reclaim_if_wasteful(fs, in);
            uint64_t len = sqz_file_length(in->sf);
            rc = close_sf(fs, in);
            restore_kept_times(in);
            struct stat bst;
            if (rc == 0 && sqz_backing_stat(in, &bst) == 0)
                probe_store(in, &bst, SQZ_K_CONTAINER, len);
            else
                sqz_content_invalidate(in);
        }
    }
    if (!sqz_content_handles_open(in)) {
        in->kind = SQZ_K_UNKNOWN;
        pthread_mutex_lock(&in->meta);
        in->wtime_set = 0;
        pthread_mutex_unlock(&in->meta);
    }
    record_kc(in);
    pthread_rwlock_unlock(&in->io);
    sqz_inode_open_unref(fs, in);
    return rc;
}

ssize_t sqz_content_read(struct sqz_fs *fs, struct sqz_handle *h, void *buf,
                         size_t n, uint64_t off)
{
    (void)fs;
    struct sqz_inode *in = h->inode;
    if (h->plain_fd >= 0)
        return sqz_pread_full(h->plain_fd, buf, n, off);
    ssize_t r;
    pthread_rwlock_rdlock(&in->io);
    if (in->kind == SQZ_K_CONTAINER && in->sf)
        r = sqz_file_read(in->sf, buf, n, off);
    else if (in->kind == SQZ_K_PENDING)
        r = 0;
    else
        r = -EIO;
    pthread_rwlock_unlock(&in->io);
    return r;
}

/* Before data is written: the times the user set no longer hold (see
 * restore_kept_times). */
static void note_write_begin(struct sqz_inode *in)
{
    pthread_mutex_lock(&in->meta);
    in->utimes_kept = 0;
    pthread_mutex_unlock(&in->meta);
}

static void note_write(struct sqz_inode *in)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pthread_mutex_lock(&in->meta);
    in->wtime = now;
    in->wtime_set = 1;
    in->utimes_kept = 0;
    pthread_mutex_unlock(&in->meta);
}


/* Lock io shared with the inode out of PENDING (materialised with sample).
 * Returns 0 with io held shared, or -errno with io not held. */
static int rdlock_materialized(struct sqz_fs *fs, struct sqz_inode *in,
                               const void *sample, size_t n)
{
    for (;;) {
        pthread_rwlock_rdlock(&in->io);
        if (in->kind != SQZ_K_PENDING)
            return 0;
        pthread_rwlock_unlock(&in->io);
        pthread_rwlock_wrlock(&in->io);
        int rc = in->kind == SQZ_K_PENDING ? sqz_content_materialize_locked(fs, in, sample, n) : 0;
        pthread_rwlock_unlock(&in->io);
        if (rc)
            return rc;
    }
}

ssize_t sqz_content_write(struct sqz_fs *fs, struct sqz_handle *h,
                          const void *buf, size_t n, uint64_t off,
                          int writepage)
{
    struct sqz_inode *in = h->inode;
    if (!h->writable)
        return -EBADF;
    if (h->plain_fd >= 0) {
        int r = sqz_pwrite_full(h->plain_fd, buf, n, off);
        return r < 0 ? r : (ssize_t)n;
    }
    int rc = rdlock_materialized(fs, in, buf, n);
    if (rc)
        return rc;
    ssize_t r;
    note_write_begin(in);
    if (!in->sf) {
        r = -EIO;
    } else if (h->append && !writepage) {
        uint64_t at = 0;
        r = sqz_file_append(in->sf, buf, n, &at);
    } else {
        r = sqz_file_write(in->sf, buf, n, off);
    }
    if (r > 0)
        note_write(in);
    pthread_rwlock_unlock(&in->io);
    return r;
}

int sqz_content_flush(struct sqz_fs *fs, struct sqz_handle *h)
{
    (void)fs;
    struct sqz_inode *in = h->inode;
    if (h->plain_fd >= 0)
        return 0;
    int rc = 0;
    pthread_rwlock_rdlock(&in->io);
    if (in->kind == SQZ_K_CONTAINER && in->sf)
        rc = sqz_file_flush(in->sf);
    pthread_rwlock_unlock(&in->io);
    return rc;
}

int sqz_content_fsync(struct sqz_fs *fs, struct sqz_handle *h, int datasync)
{
    (void)fs;
    struct sqz_inode *in = h->inode;
    if (h->plain_fd >= 0) {
        int r = datasync ? fdatasync(h->plain_fd) : fsync(h->plain_fd);
        return r ? -errno : 0;
    }
    int rc = 0;
    pthread_rwlock_rdlock(&in->io);
    if (in->kind == SQZ_K_CONTAINER && in->sf) {
        rc = sqz_file_fsync(in->sf, datasync);
        restore_kept_times(in);
    }
    pthread_rwlock_unlock(&in->io);
    return rc;
}

int sqz_content_fallocate(struct sqz_fs *fs, struct sqz_handle *h, int mode,
                          uint64_t off, uint64_t len)
{
    struct sqz_inode *in = h->inode;
    if (mode & ~FALLOC_FL_KEEP_SIZE)
        return -EOPNOTSUPP;
    if (!h->writable)
        return -EBADF;
    if (h->plain_fd >= 0)
        return fallocate(h->plain_fd, mode, (off_t)off, (off_t)len) ? -errno : 0;
    if (mode & FALLOC_FL_KEEP_SIZE)
        return 0;
    if (off + len < off || off + len > SQZ_MAX_LENGTH)
        return -EFBIG;
    /* Exclusive: the length check and the extension must not interleave
     * with writes that extend the file. */
    int rc = 0;
    pthread_rwlock_wrlock(&in->io);
    if (in->kind == SQZ_K_PENDING)
        rc = sqz_content_materialize_locked(fs, in, NULL, 0);
    if (rc == 0 && !in->sf)
        rc = -EIO;
    if (rc == 0 && sqz_file_length(in->sf) < off + len) {
        note_write_begin(in);
        rc = sqz_file_truncate(in->sf, off + len);
        if (rc == 0)
            note_write(in);
    }
    pthread_rwlock_unlock(&in->io);
    return rc;
}

int sqz_content_truncate(struct sqz_fs *fs, struct sqz_inode *in,
                         uint64_t size)
{
    if (fs->opts.ro)
        return -EROFS;
    if (size > SQZ_MAX_LENGTH)
        return -EFBIG;
    int rc = 0;
    pthread_rwlock_wrlock(&in->io);
    pthread_mutex_lock(&in->meta);
    in->utimes_kept = 0; /* a size change is a data change */
    pthread_mutex_unlock(&in->meta);
    struct stat bst;
    rc = sqz_backing_stat(in, &bst);
    enum sqz_kind kind = SQZ_K_UNKNOWN;
    uint64_t len = 0;
    if (rc == 0)
        rc = sqz_content_kind_locked(fs, in, &bst, &kind, &len);
    if (rc)
        goto out;
    switch (kind) {
    case SQZ_K_PENDING:
        if (size > 0)
            rc = sqz_content_materialize_locked(fs, in, NULL, 0);
        if (rc == 0 && size > 0)
            rc = sqz_file_truncate(in->sf, size);
        break;
    case SQZ_K_CONTAINER: {
        int temp = in->sf == NULL;
        rc = ensure_sf(fs, in, 1);
        if (rc)
            break;
        rc = sqz_file_truncate(in->sf, size);
        if (temp) {
            int rc2 = close_sf(fs, in);
            if (rc == 0)
                rc = rc2;
        }
        sqz_content_invalidate(in);
        break;
    }
    case SQZ_K_PLAIN:
    case SQZ_K_DAMAGED: {
        if (kind == SQZ_K_DAMAGED && size != 0) {
            rc = -EIO;
            break;
        }
        int fd = sqz_content_reopen(in, O_WRONLY);
        if (fd < 0) {
            rc = fd;
            break;
        }
        if (ftruncate(fd, (off_t)size) != 0)
            rc = -errno;
        close(fd);
        sqz_content_invalidate(in);
        /* An emptied plain file nobody holds open becomes a container. */
        if (rc == 0 && size == 0 && !sqz_content_handles_open(in)) {
            rc = convert_empty(fs, in, NULL);
            if (in->sf) {
                int rc2 = sqz_file_close(in->sf);
                in->sf = NULL;
                if (rc == 0)
                    rc = rc2;
            }
            in->kind = SQZ_K_UNKNOWN;
            sqz_content_invalidate(in);
        }
        break;
    }
    default:
        rc = -EIO;
    }
out:
    pthread_rwlock_unlock(&in->io);
    return rc;
}

int sqz_content_commit(struct sqz_fs *fs, struct sqz_inode *in)
{
    (void)fs;
    int rc = 0;
    pthread_rwlock_rdlock(&in->io);
    if (in->sf)
        rc = sqz_file_flush(in->sf);
    pthread_rwlock_unlock(&in->io);
    return rc;
}

int sqz_content_ctr_stat(struct sqz_fs *fs, struct sqz_inode *in,
                         struct sqz_ctr_stat *st)
{
    if (in->type != S_IFREG)
        return -ENODATA;
    int rc;
    pthread_rwlock_rdlock(&in->io);
    if (in->sf && in->kind == SQZ_K_CONTAINER) {
        rc = sqz_file_flush(in->sf);
        if (rc == 0)
            rc = sqz_file_stat(in->sf, st);
        pthread_rwlock_unlock(&in->io);
        return rc;
    }
    struct stat bst;
    enum sqz_kind kind;
    uint64_t len;
    rc = sqz_backing_stat(in, &bst);
    if (rc == 0)
        rc = sqz_content_kind_locked(fs, in, &bst, &kind, &len);
    if (rc == 0 && kind != SQZ_K_CONTAINER)
        rc = kind == SQZ_K_DAMAGED ? -EIO : -ENODATA;
    if (rc == 0) {
        char label[PATH_MAX];
        sqz_content_label(fs, in, label, sizeof(label));
        int fd = sqz_content_reopen(in, O_RDONLY);
        sqz_ctr *c = NULL;
        rc = fd < 0 ? fd : sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, label, &c);
        if (rc == 0) {
            rc = sqz_ctr_stat(c, st);
            sqz_ctr_close(c);
        } else if (rc == -EBADMSG) {
            rc = -EIO;
        }
    }
    pthread_rwlock_unlock(&in->io);
    return rc;
}

struct sync_list {
    struct sqz_inode **v;
    size_t n, cap;
    int oom;
};

static void collect_open(struct sqz_fs *fs, struct sqz_inode *in, void *user)
{
    (void)fs;
    struct sync_list *l = user;
    if (!in->sf)
        return;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        struct sqz_inode **nv = realloc(l->v, nc * sizeof(*nv));
        if (!nv) {
            l->oom = 1;
            return;
        }
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = in;
}

/* Only called from destroy, when no request is in flight any more, so the
 * inodes collected cannot be freed meanwhile. */
int sqz_content_sync_all(struct sqz_fs *fs)
{
    int first = sqz_engine_flush_all(fs->engine);
    struct sync_list l = {0};
    sqz_itable_foreach(fs, collect_open, &l);
    for (size_t i = 0; i < l.n; i++) {
        struct sqz_inode *in = l.v[i];
        pthread_rwlock_rdlock(&in->io);
        /* the second sync makes the durable mark of the first durable: a
         * clean unmount is a durable state */
        int rc = in->sf ? sqz_file_fsync(in->sf, 0) : 0;
        if (rc == 0 && in->sf)
            rc = sqz_file_fsync(in->sf, 1);
        pthread_rwlock_unlock(&in->io);
        if (rc < 0) {
            char label[PATH_MAX];
            sqz_content_label(fs, in, label, sizeof(label));
            sqz_logf(0, "%s: sync at unmount failed: %s", label, strerror(-rc));
            if (first == 0)
                first = rc;
        }
    }
    free(l.v);
    if (l.oom && first == 0)
        first = -ENOMEM;
    /* closed files waiting for their mark */
    int rc = sqz_durable_finish(fs);
    if (rc < 0 && first == 0)
        first = rc;
    return first;
}
