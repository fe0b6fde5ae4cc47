/* Regular files, data I/O through a handle or an inode: read, write
 * (materialising PENDING), flush, fsync, fallocate, truncate, commit,
 * container figures, and the sync of every open file at unmount.
 * Locks: docs/LOCKING.md (io, then meta). */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/kind.h"
#include "node/push.h"
#include "content/content.h"
#include "content/content_int.h"
#include "content/durable.h"
#include "common/lockorder.h"
#include "common/fullio.h"
#include "squeezefs/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Drafts (docs/FORMAT.md): the close of a handle that created a file
 * stores it uncompressed, more or less, when packing will compress it
 * soon. Not below 4 KiB: compressing such a file takes a few
 * microseconds, and only compressed does its container fit one block of
 * the backing file system. */
#define DRAFT_MIN 4096

/* Whether the last WRITE of a write-back, ending at `end`, should start
 * compressing the file's dirty blocks on the pool (sqz_file_hint_flush)
 * for the FLUSH or FSYNC that follows. Not for a draft (it is not
 * compressed), and not below DRAFT_MIN: compressing a few KiB on the
 * FLUSH's own core takes less than handing them to a pool thread and
 * waiting for it there (perl's tree: 717 of 1,195 files). */
static int hint_worth(const struct sqz_handle *h, uint64_t end)
{
    if (end < DRAFT_MIN)
        return 0;
    return !(atomic_load(&h->draft) && end <= SQZ_PACK_MAX_LENGTH);
}

ssize_t sqz_content_read(struct sqz_fs *fs, struct sqz_handle *h, void *buf,
                         size_t n, uint64_t off, sqz_read_spill *sp,
                         int *push, uint64_t *gen)
{
    struct sqz_inode *in = h->inode;
    if (sp)
        sp->n = 0;
    if (push)
        *push = 0;
    if (h->plain_fd >= 0) {
        /* A file that was empty when this handle opened it can have been
         * turned into a container since by the writer of another mount
         * (shared BACKING: a file created through a mount is a 0-byte
         * backing file until its first data, lazy creation). Its backing
         * bytes are then the container (or the start of one, in flight:
         * SQZ_PROBE_TORN), not the file's content: this handle keeps
         * showing the file as it was at open (empty); the next open sees
         * the container. The probe comes after the read: probed before,
         * the file could still be empty at the probe and a container at
         * the read (the container's header is its first bytes, so bytes
         * the read got from it are seen by a later probe). */
        ssize_t got = sqz_pread_full(h->plain_fd, buf, n, off);
        if (got > 0 && h->plain_was_empty) {
            int p = sqz_ctr_probe_fd(h->plain_fd);
            if (p == 1 || p == SQZ_PROBE_TORN || p == -EBADMSG)
                return 0;
            if (p < 0)
                return p;
        }
        return got;
    }
    ssize_t r;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    if (in->kind == SQZ_K_CONTAINER && in->file) {
        /* The sample is taken under io with the read (push.c). */
        if (sp && push && sqz_push_sample(fs, in, gen)) {
            r = sqz_file_read_spill(in->file, buf, n, off, sp);
            *push = r >= 0 && sp->n > 0;
        } else {
            r = sqz_file_read(in->file, buf, n, off);
        }
        /* packed in place meanwhile (a local BACKING's writer)? */
        if (r == -EIO && !in->file_rw && fs->pack_in_place)
            r = sqz_content_read_packed_since(fs, in, sqz_file_length(in->file),
                                              buf, n, off);
    } else if (in->kind == SQZ_K_PACKED && in->pack.buf) {
        r = 0;
        if (off < in->pack.buf_len) {
            r = (ssize_t)(in->pack.buf_len - off < n ? in->pack.buf_len - off : n);
            memcpy(buf, (const char *)in->pack.buf + off, (size_t)r);
            atomic_fetch_add(&fs->packed_bytes_read, (uint64_t)r);
        }
    } else if (in->kind == SQZ_K_PENDING)
        r = 0;
    else if (in->kind == SQZ_K_PLAIN && fs->opts.ro)
        r = 0; /* opened on a creation in flight that a writer mount, after
                * a crash, reset to an empty file (kind.c) */
    else
        r = -EIO;
    SQZ_RWUNLOCK(&in->io);
    return r;
}

ssize_t sqz_content_read_vec(struct sqz_fs *fs, struct sqz_handle *h,
                             size_t n, uint64_t off, sqz_read_vec *v,
                             sqz_read_spill *sp, int *push, uint64_t *gen)
{
    struct sqz_inode *in = h->inode;
    if (sp)
        sp->n = 0;
    if (push)
        *push = 0;
    if (h->plain_fd >= 0)
        return -ENOTSUP;
    ssize_t r = -ENOTSUP;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    if (in->kind == SQZ_K_CONTAINER && in->file) {
        /* The sample is taken under io with the read (push.c). */
        if (sp && push && sqz_push_sample(fs, in, gen)) {
            r = sqz_file_read_vec(in->file, n, off, v, sp);
            *push = r >= 0 && sp->n > 0;
        } else {
            r = sqz_file_read_vec(in->file, n, off, v, NULL);
        }
        if (r == -EIO && !in->file_rw && fs->pack_in_place)
            r = -ENOTSUP; /* packed in place meanwhile? sqz_content_read */
    }
    SQZ_RWUNLOCK(&in->io);
    return r;
}

/* Before data is written: the times the user set no longer hold (see
 * restore_kept_times). */
static void note_write_begin(struct sqz_inode *in)
{
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    in->utimes_kept = 0;
    SQZ_MUTEX_UNLOCK(&in->meta);
}

static void note_write(struct sqz_inode *in)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    in->wtime = now;
    in->wtime_set = 1;
    in->utimes_kept = 0;
    SQZ_MUTEX_UNLOCK(&in->meta);
}

/* io exclusive: a file about to be written is a container: PENDING is
 * materialised (with sample), a packed file unpacked. */
static int make_writable_locked(struct sqz_fs *fs, struct sqz_inode *in,
                                const void *sample, size_t n)
{
    if (in->kind == SQZ_K_PENDING)
        return sqz_content_materialize_locked(fs, in, sample, n);
    if (in->kind == SQZ_K_PACKED)
        return sqz_content_unpack_locked(fs, in);
    return 0;
}

/* Lock io shared with the inode out of PENDING and PACKED. Returns 0 with
 * io held shared, or -errno with io not held. */
static int rdlock_materialized(struct sqz_fs *fs, struct sqz_inode *in,
                               const void *sample, size_t n)
{
    for (;;) {
        SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
        if (in->kind != SQZ_K_PENDING && in->kind != SQZ_K_PACKED)
            return 0;
        SQZ_RWUNLOCK(&in->io);
        SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
        int rc = make_writable_locked(fs, in, sample, n);
        SQZ_RWUNLOCK(&in->io);
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
    sqz_inode_changed(in);
    if (h->plain_fd >= 0) {
        int r = sqz_pwrite_full(h->plain_fd, buf, n, off);
        return r < 0 ? r : (ssize_t)n;
    }
    int rc = rdlock_materialized(fs, in, buf, n);
    if (rc)
        return rc;
    ssize_t r;
    note_write_begin(in);
    if (!in->file) {
        r = -EIO;
    } else if (h->append && !writepage) {
        uint64_t at = 0;
        r = sqz_file_append(in->file, buf, n, &at);
    } else {
        r = sqz_file_write(in->file, buf, n, off);
        /* The kernel writing back its cached pages: a WRITE shorter than
         * the largest it sends, reaching the end of the file, is the last
         * of them (a `cp` before its close, a journal before its fsync):
         * the FLUSH or FSYNC that follows finds the blocks compressing on
         * another core. A stream's middle WRITEs are full-sized. */
        if (writepage && r == (ssize_t)n && n < SQZ_MAX_IO &&
            hint_worth(h, off + n))
            sqz_file_hint_flush(in->file, off + n);
    }
    if (r > 0)
        note_write(in);
    SQZ_RWUNLOCK(&in->io);
    return r;
}

int sqz_content_flush(struct sqz_fs *fs, struct sqz_handle *h)
{
    (void)fs;
    struct sqz_inode *in = h->inode;
    /* a reader has nothing of its own to commit (the kernel sends FLUSH
     * for it too when it keeps a writeback cache: FOPEN_NOFLUSH is ignored
     * then) */
    if (h->plain_fd >= 0 || !h->writable)
        return 0;
    int rc = 0;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    if (in->kind == SQZ_K_CONTAINER && in->file) {
        if (!atomic_load(&h->draft)) {
            rc = sqz_file_flush(in->file);
        } else if ((rc = sqz_file_flush_draft(in->file, DRAFT_MIN,
                                              SQZ_PACK_MAX_LENGTH)) > 0) {
            atomic_store(&in->pack.drafted, 1);
            rc = 0;
        }
        /* times set after the last write (a SETATTR before this FLUSH)
         * hold over the commit that wrote the data */
        sqz_content_restore_times(fs, in);
    }
    SQZ_RWUNLOCK(&in->io);
    return rc;
}

int sqz_content_fsync(struct sqz_fs *fs, struct sqz_handle *h, int datasync)
{
    (void)fs;
    struct sqz_inode *in = h->inode;
    /* a file made durable on purpose (a database's) keeps its compression:
     * no drafts from this handle's closes */
    atomic_store(&h->draft, 0);
    if (h->plain_fd >= 0) {
        int r = datasync ? fdatasync(h->plain_fd) : fsync(h->plain_fd);
        return r ? -errno : 0;
    }
    int rc = 0;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    if (in->kind == SQZ_K_CONTAINER && in->file) {
        rc = sqz_file_fsync(in->file, datasync);
        sqz_content_restore_times(fs, in);
    }
    /* a removed pack pointer (the file was emptied): durable now, or an
     * old packed content could come back after a crash */
    if (rc == 0 && atomic_exchange(&in->pack.ptr_dropped, 0)) {
        int fd = sqz_inode_reopen(in, O_RDONLY);
        rc = fd < 0 ? fd : fsync(fd) != 0 ? -errno : 0;
        if (fd >= 0)
            close(fd);
        if (rc)
            atomic_store(&in->pack.ptr_dropped, 1);
    }
    SQZ_RWUNLOCK(&in->io);
    return rc;
}

/* Bytes the daemon can still write on the backing file system (root: the
 * reserved blocks too); UINT64_MAX if unknown. */
static uint64_t backing_room(struct sqz_fs *fs)
{
    struct statvfs sv;
    if (fstatvfs(fs->root_dirfd, &sv) != 0)
        return UINT64_MAX;
    return (uint64_t)(fs->uid == 0 ? sv.f_bfree : sv.f_bavail) * sv.f_frsize;
}

int sqz_content_fallocate(struct sqz_fs *fs, struct sqz_handle *h, int mode,
                          uint64_t off, uint64_t len)
{
    struct sqz_inode *in = h->inode;
    int zero = mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE);
    if ((mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE |
                  FALLOC_FL_ZERO_RANGE)) ||
        zero == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) ||
        ((mode & FALLOC_FL_PUNCH_HOLE) && !(mode & FALLOC_FL_KEEP_SIZE)))
        return -EOPNOTSUPP;
    if (!h->writable)
        return -EBADF;
    sqz_inode_changed(in);
    if (h->plain_fd >= 0)
        return fallocate(h->plain_fd, mode, (off_t)off, (off_t)len) ? -errno : 0;
    if (off + len < off || off + len > SQZ_MAX_LENGTH)
        return -EFBIG;
    /* PUNCH_HOLE, ZERO_RANGE (content_sparse.c): whole blocks become
     * holes, partial ones are rewritten with zeros; a packed file is
     * unpacked first, as for a write. Nothing to promise about space:
     * zeros take none. */
    if (zero) {
        SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
        int rc = make_writable_locked(fs, in, NULL, 0);
        if (rc == 0) {
            note_write_begin(in);
            rc = sqz_content_zero_locked(in, mode, off, len);
            if (rc == 0)
                note_write(in);
        }
        SQZ_RWUNLOCK(&in->io);
        return rc;
    }
    /* What it promises (squeezefs(8), NOTES): the bytes it adds past the
     * end of the file (KEEP_SIZE: the whole range) would fit on the
     * backing file system even uncompressed, or ENOSPC; nothing is
     * reserved (what a range takes is known only once it is written and
     * compressed). */
    if (mode & FALLOC_FL_KEEP_SIZE)
        return backing_room(fs) < len ? -ENOSPC : 0;
    /* Exclusive: the length check and the extension must not interleave
     * with writes that extend the file. */
    int rc = 0;
    SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
    rc = make_writable_locked(fs, in, NULL, 0);
    if (rc == 0 && !in->file)
        rc = -EIO;
    uint64_t cur = rc == 0 ? sqz_file_length(in->file) : 0;
    if (rc == 0 && cur < off + len && off + len - cur > backing_room(fs))
        rc = -ENOSPC;
    if (rc == 0 && cur < off + len) {
        note_write_begin(in);
        rc = sqz_file_truncate(in->file, off + len);
        if (rc == 0)
            note_write(in);
    }
    SQZ_RWUNLOCK(&in->io);
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
    /* A content change without a writable handle (truncate(2)): no block
     * is pushed into the kernel from now until it is done (push.c). */
    sqz_push_block(in);
    sqz_inode_changed(in);
    SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    in->utimes_kept = 0; /* a size change is a data change */
    SQZ_MUTEX_UNLOCK(&in->meta);
    struct stat bst;
    rc = sqz_backing_stat(in, &bst);
    enum sqz_kind kind = SQZ_K_UNKNOWN;
    uint64_t len = 0;
    if (rc == 0)
        rc = sqz_content_kind_locked(fs, in, &bst, &kind, &len);
    if (rc == 0 && kind == SQZ_K_PACKED) {
        if (size == 0 && !sqz_content_handles_open(in)) {
            int fd = sqz_inode_reopen(in, O_WRONLY);
            rc = fd < 0 ? fd : sqz_content_empty_pointer(in, fd);
            if (fd >= 0)
                close(fd);
            kind = SQZ_K_PLAIN; /* emptied below like any empty file */
            if (rc == 0)
                sqz_content_note_unpacked(fs, in);
        } else {
            rc = sqz_content_unpack_locked(fs, in);
        }
        if (rc == 0 && kind == SQZ_K_PACKED &&
            (rc = sqz_backing_stat(in, &bst)) == 0)
            rc = sqz_content_kind_locked(fs, in, &bst, &kind, &len);
    }
    if (rc)
        goto out;
    switch (kind) {
    case SQZ_K_PENDING:
        if (size > 0)
            rc = sqz_content_materialize_locked(fs, in, NULL, 0);
        if (rc == 0 && size > 0)
            rc = sqz_file_truncate(in->file, size);
        break;
    case SQZ_K_CONTAINER: {
        int temp = in->file == NULL;
        rc = sqz_content_ensure_sf(fs, in, 1);
        if (rc)
            break;
        rc = sqz_file_truncate(in->file, size);
        if (temp) {
            int rc2 = sqz_content_close_sf(fs, in);
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
        int fd = sqz_inode_reopen(in, O_WRONLY);
        if (fd < 0) {
            rc = fd;
            break;
        }
        if (ftruncate(fd, (off_t)size) != 0)
            rc = -errno;
        if (rc == 0 && size == 0)
            rc = sqz_content_empty_pointer(in, fd);
        close(fd);
        sqz_content_invalidate(in);
        /* An emptied plain file nobody holds open becomes a container. */
        if (rc == 0 && size == 0 && !sqz_content_handles_open(in)) {
            rc = sqz_content_convert_empty(fs, in);
            if (in->file) {
                int rc2 = sqz_file_close(in->file);
                in->file = NULL;
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
    SQZ_RWUNLOCK(&in->io);
    sqz_push_unblock(in);
    return rc;
}

int sqz_content_ctr_stat(struct sqz_fs *fs, struct sqz_inode *in,
                         struct sqz_ctr_stat *st)
{
    if (in->type != S_IFREG)
        return -ENODATA;
    int rc;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    if (in->file && in->kind == SQZ_K_CONTAINER) {
        rc = sqz_file_flush(in->file);
        if (rc == 0)
            rc = sqz_file_stat(in->file, st);
        SQZ_RWUNLOCK(&in->io);
        return rc;
    }
    struct stat bst;
    enum sqz_kind kind;
    uint64_t len;
    rc = sqz_backing_stat(in, &bst);
    if (rc == 0)
        rc = sqz_content_kind_locked(fs, in, &bst, &kind, &len);
    if (rc == 0 && kind == SQZ_K_PACKED) {
        rc = sqz_content_packed_stat(in, &bst, st);
        SQZ_RWUNLOCK(&in->io);
        return rc;
    }
    if (rc == 0 && kind != SQZ_K_CONTAINER)
        rc = kind == SQZ_K_DAMAGED ? -EIO : -ENODATA;
    if (rc == 0) {
        int fd = sqz_inode_reopen(in, O_RDONLY);
        sqz_ctr *c = NULL;
        rc = fd < 0 ? fd : sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY,
                                           SQZ_LABEL_FROM_FD, &c);
        if (rc == 0) {
            rc = sqz_ctr_stat(c, st);
            sqz_ctr_close(c);
        } else if (rc == -EBADMSG) {
            rc = -EIO;
        }
    }
    SQZ_RWUNLOCK(&in->io);
    return rc;
}

struct sync_ctx {
    int first;
};

/* Commit and fsync the inode's open sf, if any (foreach: no lock held). */
static void sync_one(struct sqz_fs *fs, struct sqz_inode *in, void *user)
{
    struct sync_ctx *x = user;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    /* the second sync makes the durable mark of the first durable: a
     * clean unmount is a durable state */
    int rc = in->file ? sqz_file_fsync(in->file, 0) : 0;
    if (rc == 0 && in->file)
        rc = sqz_file_fsync(in->file, 1);
    SQZ_RWUNLOCK(&in->io);
    if (rc < 0) {
        char label[PATH_MAX];
        sqz_inode_label(fs, in, label, sizeof(label));
        sqz_logf(SQZ_LOG_ERR, "%s: sync at unmount failed: %s", label,
                 strerror(-rc));
        if (x->first == 0)
            x->first = rc;
    }
}

/* Called from destroy, when no request is in flight any more. */
int sqz_content_sync_all(struct sqz_fs *fs)
{
    int first = sqz_engine_flush_all(fs->engine);
    struct sync_ctx x = {0};
    int rc = sqz_itable_foreach(fs, sync_one, &x);
    if (first == 0)
        first = x.first;
    if (rc < 0 && first == 0)
        first = rc;
    /* closed files waiting for their mark */
    rc = sqz_durable_finish(fs);
    if (rc < 0 && first == 0)
        first = rc;
    return first;
}
