/* Regular files, open handles: open (a packed file is unpacked for a
 * writer), create, release (the sqz_file closed or queued for the durable
 * mark, content_sf.c), and the kernel's keep_cache key. Locks:
 * docs/LOCKING.md (io, then meta). */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/kind.h"
#include "node/push.h"
#include "node/ptimes.h"
#include "pack/packing.h"
#include "content/content.h"
#include "content/content_int.h"
#include "content/durable.h"
#include "common/lockorder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The backing version the kernel's cached pages show: for a read-only view
 * the version it was loaded at (file_key), not the backing file's current
 * one, which another mount (the writer) may have changed since; recording
 * that would let the next open keep pages of the old view. */
static int view_key(const struct sqz_inode *in, struct sqz_bkey *k)
{
    if (!in->file || in->file_rw)
        return 0;
    *k = in->file_key;
    return 1;
}

static int record_kc(struct sqz_inode *in, const struct sqz_bkey *vk,
                     struct stat *st)
{
    struct sqz_bkey k;
    if (vk) {
        k = *vk;
    } else {
        if (sqz_backing_stat(in, st) != 0)
            return 0;
        sqz_bkey_of(st, &k);
    }
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    in->keep_cache.key = k;
    in->keep_cache.valid = 1;
    SQZ_MUTEX_UNLOCK(&in->meta);
    return !vk; /* *st taken */
}

static int open_once(struct sqz_fs *fs, struct sqz_inode *in, int flags,
                     struct sqz_handle *h, int *keep_cache, int *atime);

int sqz_content_open(struct sqz_fs *fs, struct sqz_inode *in, int flags,
                     struct sqz_handle *h, int *keep_cache)
{
    int no = 0;
    return sqz_content_open_atime(fs, in, flags, h, keep_cache, &no);
}

int sqz_content_open_atime(struct sqz_fs *fs, struct sqz_inode *in, int flags,
                           struct sqz_handle *h, int *keep_cache, int *atime)
{
    int rc = open_once(fs, in, flags, h, keep_cache, atime);
    /* A read-only mount beside a writer: the writer packs a small file in
     * place (its container truncated to 0 bytes once the pointer is set),
     * so an open that probed the container just before can find it gone:
     * probed again, it is the packed file. (A shared BACKING's writer
     * packs by exchanging a new file in: pack_job.c.) */
    for (int i = 0; rc == -EIO && fs->opts.ro && fs->pack_in_place && i < 5; i++) {
        struct stat st;
        if (sqz_backing_stat(in, &st) != 0 || st.st_size != 0)
            break;
        sqz_content_invalidate(in);
        if (i > 0) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        rc = open_once(fs, in, flags, h, keep_cache, atime);
    }
    return rc;
}

/* io exclusive, a writable open: what O_TRUNC changes, and an empty plain
 * file made a container to be, before the handle is attached. *kind,
 * *len and *bst follow; *changed is set when the content changed. 0 or
 * -errno; *close_unused is set when the sqz_file opened for a truncate
 * that failed must be closed again if no handle uses it. */
static int prepare_writable(struct sqz_fs *fs, struct sqz_inode *in,
                            int flags, struct stat *bst, enum sqz_kind *kind,
                            uint64_t *len, int *changed, int *close_unused)
{
    int rc = 0;
    /* A packed file is unpacked by its first write (content_io.c): a
     * writable open alone (PostgreSQL opens every file O_RDWR) costs
     * nothing. O_TRUNC empties it now: the pointer goes, unless others
     * hold it open (then it is unpacked and truncated like a container). */
    if (*kind == SQZ_K_PACKED && (flags & O_TRUNC)) {
        if (!sqz_content_handles_open(in)) {
            int fd = sqz_inode_reopen(in, O_WRONLY);
            rc = fd < 0 ? fd : sqz_content_empty_pointer(in, fd);
            if (fd >= 0)
                close(fd);
            if (rc == 0)
                sqz_content_note_unpacked(fs, in);
        } else {
            rc = sqz_content_unpack_locked(fs, in);
        }
        if (rc == 0)
            rc = sqz_backing_stat(in, bst);
        if (rc == 0)
            rc = sqz_content_kind_locked(fs, in, bst, kind, len);
        if (rc)
            return rc;
        *changed = 1;
    }

    if (flags & O_TRUNC) {
        if (*kind == SQZ_K_CONTAINER) {
            if (*len > 0) {
                rc = sqz_content_ensure_sf(fs, in, 1);
                if (rc == 0)
                    rc = sqz_file_truncate(in->file, 0);
                if (rc) {
                    *close_unused = 1;
                    return rc;
                }
                *changed = 1;
            }
        } else if ((*kind == SQZ_K_PLAIN || *kind == SQZ_K_DAMAGED) &&
                   in->plain_users == 0 && in->file_users == 0) {
            if (bst->st_size > 0) {
                int fd = sqz_inode_reopen(in, O_WRONLY | O_TRUNC);
                if (fd < 0)
                    return fd;
                /* a pointer left on a damaged unpacking must not bring
                 * the packed content back */
                rc = sqz_content_empty_pointer(in, fd);
                close(fd);
                if (rc)
                    return rc;
                *changed = 1;
            }
            *kind = SQZ_K_PLAIN;
            bst->st_size = 0;
        }
    }
    if (*kind == SQZ_K_PLAIN && bst->st_size == 0 && in->plain_users == 0 &&
        in->file_users == 0) {
        rc = sqz_content_convert_empty(fs, in);
        if (rc)
            return rc;
        *kind = in->kind;
        *changed = 1;
    }
    return 0;
}

/* io exclusive: attach h to in's content of kind (the plain fd, the shared
 * sqz_file, the packed content). *changed, *view_changed: a read-only
 * view was replaced. 0 or -errno (nothing attached). */
static int attach(struct sqz_fs *fs, struct sqz_inode *in,
                  struct sqz_handle *h, int flags, int writable,
                  enum sqz_kind kind, const struct stat *bst, int *changed,
                  int *view_changed)
{
    int rc = 0;
    switch (kind) {
    case SQZ_K_DAMAGED: {
        char label[PATH_MAX];
        sqz_inode_label(fs, in, label, sizeof(label));
        sqz_logf(SQZ_LOG_ERR, "%s: damaged container header, refusing to open", label);
        return -EIO;
    }
    case SQZ_K_PLAIN: {
        int pf = flags & (O_ACCMODE | O_APPEND | O_SYNC | O_DSYNC | O_NOATIME);
        if ((flags & O_TRUNC) && writable)
            pf |= O_TRUNC;
        int fd = sqz_inode_reopen(in, pf);
        if (fd < 0)
            return fd;
        h->plain_fd = fd;
        h->plain_was_empty = bst->st_size == 0;
        h->direct = fs->opts.ro && h->plain_was_empty;
        in->plain_users++;
        return 0;
    }
    case SQZ_K_CONTAINER:
        rc = sqz_content_refresh_view_locked(fs, in, bst, view_changed);
        *changed |= *view_changed;
        if (rc == 0)
            rc = sqz_content_ensure_sf(fs, in, writable);
        if (rc)
            return rc;
        in->file_users++;
        return 0;
    case SQZ_K_PENDING:
        h->direct = fs->opts.ro; /* a creation in flight (kind.c) */
        in->file_users++;
        return 0;
    case SQZ_K_PACKED:
        rc = sqz_content_packed_load_locked(fs, in);
        if (rc)
            return rc;
        in->file_users++;
        return 0;
    default:
        return -EIO;
    }
}

static int open_once(struct sqz_fs *fs, struct sqz_inode *in, int flags,
                     struct sqz_handle *h, int *keep_cache, int *atime)
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
    /* A writable handle is a content changer from here to its release: no
     * block is pushed into the kernel meanwhile (push.c). Before io: the
     * pushes in flight may wait for READs that need io. */
    if (writable)
        sqz_push_block(in);
    int view_changed = 0, changed = 0, close_unused = 0;

    SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
    struct stat bst;
    rc = sqz_backing_stat(in, &bst);
    if (rc)
        goto out;
    struct sqz_bkey before;
    sqz_bkey_of(&bst, &before);
    enum sqz_kind kind;
    uint64_t len;
    rc = sqz_content_kind_locked(fs, in, &bst, &kind, &len);
    if (rc == 0 && writable)
        rc = prepare_writable(fs, in, flags, &bst, &kind, &len, &changed,
                              &close_unused);
    if (rc == 0)
        rc = attach(fs, in, h, flags, writable, kind, &bst, &changed,
                    &view_changed);
    if (rc)
        goto out;
    in->kind = kind;
    h->append = (flags & O_APPEND) != 0;
    h->writable = writable;
    if (writable) {
        in->writers++;
        sqz_inode_changed(in);
        sqz_ptimes_user(fs, in);
    }

    /* keep_cache when nothing changed since the previous open/release, on
     * a file never written with direct I/O through this mount: a buffered
     * read racing such a write can leave pages from before it in the
     * kernel's cache after the kernel's own invalidation, and a reader may
     * hold them open across any later open (xfstests generic/451) */
    if (atomic_load(&in->keep_cache.direct_written))
        changed = 1;
    if (!changed) {
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        *keep_cache = in->keep_cache.valid && sqz_bkey_eq(&in->keep_cache.key, &before);
        SQZ_MUTEX_UNLOCK(&in->meta);
    }
    struct sqz_bkey vk;
    struct stat kst;
    int have_kst = record_kc(in, view_key(in, &vk) ? &vk : NULL, &kst);
    /* the atime an open for reading moves (ptimes_atime.c): under this
     * hold of io, from the stat just taken */
    if (*atime)
        *atime = sqz_ptimes_atime_open_locked(fs, in, have_kst ? &kst : NULL);
    SQZ_RWUNLOCK(&in->io);
    sqz_inode_open_ref(fs, in);
    sqz_ifd_hold(in, 1);
    /* A new view of a file another mount wrote: pushes of the old view
     * still in flight end before this open returns (push.c). */
    if (view_changed)
        sqz_push_fence(in);
    return 0;

out:
    if (close_unused && !sqz_content_handles_open(in) && in->file) {
        sqz_file_close(in->file);
        in->file = NULL;
    }
    SQZ_RWUNLOCK(&in->io);
    if (writable)
        sqz_push_unblock(in);
    return rc;
}

int sqz_content_create(struct sqz_fs *fs, struct sqz_inode *in,
                       const sqz_resolved *r, int create_fd,
                       const struct stat *st, int flags, struct sqz_handle *h)
{
    memset(h, 0, sizeof(*h));
    h->inode = in;
    h->plain_fd = -1;
    int writable = (flags & O_ACCMODE) != O_RDONLY;
    if (writable)
        sqz_push_block(in); /* as in sqz_content_open */
    SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
    int rc = sqz_content_pending_locked(fs, in, r);
    if (rc == 0 && create_fd >= 0 && in->create_fd < 0 && in->file_users == 0) {
        in->create_fd = create_fd;
        create_fd = -1;
    }
    if (rc == 0) {
        in->file_users++;
        h->append = (flags & O_APPEND) != 0;
        h->writable = writable;
        if (h->writable) {
            in->writers++;
            sqz_inode_changed(in);
            atomic_store(&h->draft, sqz_pack_drafts(fs));
        }
        struct sqz_bkey k;
        struct stat kst;
        if (st)
            sqz_bkey_of(st, &k);
        record_kc(in, st ? &k : NULL, &kst);
    }
    SQZ_RWUNLOCK(&in->io);
    if (create_fd >= 0)
        close(create_fd);
    if (rc == 0) {
        sqz_inode_open_ref(fs, in);
        sqz_ifd_hold(in, 1);
    } else if (writable) {
        sqz_push_unblock(in);
    }
    return rc;
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
    SQZ_ASSERT_EXCL(&in->io);
    if (sqz_file_flush(in->file) != 0)
        return; /* the close reports the error */
    uint64_t live, dead;
    sqz_ctr_space(sqz_file_ctr(in->file), &live, &dead);
    if (dead < RECLAIM_MIN_DEAD || dead < live)
        return;
    int rc = sqz_ctr_checkpoint(sqz_file_ctr(in->file));
    if (rc) {
        char label[PATH_MAX];
        sqz_inode_label(fs, in, label, sizeof(label));
        sqz_logf(SQZ_LOG_WARN, "%s: reclaiming dead space failed: %s", label, strerror(-rc));
    }
}

int sqz_content_release(struct sqz_fs *fs, struct sqz_handle *h)
{
    struct sqz_inode *in = h->inode;
    int rc = 0;
    /* A read-only mount's plain handle (another mount may write the file
     * in place, or make an empty one a container) may have read a version
     * newer than the one recorded at its open, a direct one none at all:
     * the key stays the one recorded at the last open, so the next open
     * keeps the kernel's pages only if nothing changed since. */
    int keep_kc_key = h->direct || (h->plain_fd >= 0 && fs->opts.ro);
    if (h->plain_fd < 0)
        sqz_durable_wait_room(fs);
    SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
    struct sqz_bkey vk;
    int have_vk = view_key(in, &vk); /* before the view may be closed */
    if (h->writable && in->writers > 0)
        in->writers--;
    if (h->plain_fd >= 0) {
        if (close(h->plain_fd) != 0)
            rc = -errno;
        h->plain_fd = -1;
        if (in->plain_users > 0)
            in->plain_users--;
    } else {
        if (in->file_users > 0)
            in->file_users--;
        if (in->file_users == 0 && in->file) {
            if (in->file_rw)
                reclaim_if_wasteful(fs, in);
            uint64_t len = sqz_file_length(in->file);
            rc = sqz_content_close_sf(fs, in);
            sqz_content_restore_times(fs, in);
            struct stat bst;
            int have_bst = rc == 0 && sqz_backing_stat(in, &bst) == 0;
            /* a lazily created container that never committed (its data
             * truncated away first) left a 0-byte backing file: that is an
             * empty plain file, not a container */
            if (have_bst && bst.st_size > 0)
                sqz_content_probe_store(in, &bst, SQZ_K_CONTAINER, len);
            else
                sqz_content_invalidate(in);
            if (have_bst && !have_vk) { /* io held: still the version */
                sqz_bkey_of(&bst, &vk);
                have_vk = 1;
            }
        }
    }
    /* a SETATTR's ctime kept for the last writer's close (ptimes.c) */
    if (h->writable && in->writers == 0 && sqz_ptimes_restore_owed(in))
        sqz_content_restore_times(fs, in);
    if (in->file_users == 0 && in->create_fd >= 0) {
        close(in->create_fd); /* the container never came */
        in->create_fd = -1;
    }
    if (!sqz_content_handles_open(in)) {
        sqz_content_packed_free_locked(in);
        in->kind = SQZ_K_UNKNOWN;
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        in->wtime_set = 0;
        SQZ_MUTEX_UNLOCK(&in->meta);
    }
    struct stat kst;
    if (!keep_kc_key)
        record_kc(in, have_vk ? &vk : NULL, &kst);
    SQZ_RWUNLOCK(&in->io);
    if (h->writable)
        sqz_push_unblock(in); /* its changes are all in the daemon now */
    sqz_ifd_hold(in, -1);
    sqz_inode_open_unref(fs, in);
    return rc;
}
