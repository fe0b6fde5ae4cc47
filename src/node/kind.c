/* Regular files, kind probing: which kind of backing file an inode is
 * (container / pre-existing plain file / packed / damaged / pending
 * auto), cached per backing version, and the attributes shown through the mount
 * (logical size of containers): getattr and lookup. Locks: docs/LOCKING.md
 * (io, then meta). */
#include "node/kind.h"
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/ptimes.h"
#include "node/ident.h"
#include "common/lockorder.h"
#include "squeezefs/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void sqz_content_probe_store(struct sqz_inode *in, const struct stat *bst,
                        enum sqz_kind kind, uint64_t len)
{
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    sqz_bkey_of(bst, &in->probe.key);
    in->probe.kind = kind;
    in->probe.len = len;
    in->probe.valid = 1;
    SQZ_MUTEX_UNLOCK(&in->meta);
}

/* ---- packed files (docs/FORMAT.md "Packed files") ---- */

int sqz_pack_ptr_of(struct sqz_inode *in, sqz_pack_ptr *p, char *err,
                    size_t errlen)
{
    char pp[64];
    int fd = sqz_ifd_get(in);
    if (fd < 0)
        return fd;
    sqz_proc_path(fd, pp, sizeof(pp));
    int rc = sqz_pack_ptr_get_follow(pp, p, err, errlen);
    sqz_ifd_put(in);
    return rc;
}

int sqz_content_probe_empty(struct sqz_fs *fs, struct sqz_inode *in,
                            enum sqz_kind *kind, uint64_t *len)
{
    sqz_pack_ptr p;
    char err[160] = "";
    *kind = SQZ_K_PLAIN;
    *len = 0;
    int r = sqz_pack_ptr_of(in, &p, err, sizeof(err));
    if (r == 1) {
        *kind = SQZ_K_PACKED;
        *len = p.length;
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        in->probe.stored = p.stored_len;
        in->probe.log2bs = p.params.log2bs;
        SQZ_MUTEX_UNLOCK(&in->meta);
    } else if (r == -EBADMSG) {
        char label[PATH_MAX];
        sqz_inode_label(fs, in, label, sizeof(label));
        sqz_logf(SQZ_LOG_ERR, "%s: %s", label, err);
        *kind = SQZ_K_DAMAGED;
    } else if (r < 0) {
        return r;
    }
    return 0;
}

/* A lazy creation torn by a crash before it was synced (docs/FORMAT.md
 * "Creation"): an empty file, whose bytes are never shown; or, if the file
 * has a pack pointer, the unpacking of a packed file torn (docs/FORMAT.md
 * "Unpacking"): the packed content. A writable mount makes it a 0-byte
 * file again and stats it anew into *bst (figures from before the reset
 * would show its old size, and the kernel would fill the missing bytes
 * with zeros); a read-only one shows the packed content, or an empty file
 * that cannot be written (PENDING). */
static int torn_creation(struct sqz_fs *fs, struct sqz_inode *in,
                         struct stat *bst, enum sqz_kind *kind, uint64_t *len)
{
    char label[PATH_MAX];
    sqz_inode_label(fs, in, label, sizeof(label));
    *len = 0;
    if (fs->opts.ro) {
        int r = sqz_content_probe_empty(fs, in, kind, len);
        if (r || *kind != SQZ_K_PLAIN)
            return r;
        memset(&in->pending, 0, sizeof(in->pending));
        *kind = SQZ_K_PENDING;
        return 0;
    }
    int fd = sqz_inode_reopen(in, O_WRONLY | O_TRUNC);
    if (fd < 0)
        return fd;
    close(fd);
    struct stat again;
    if (sqz_backing_stat(in, &again) == 0 && S_ISREG(again.st_mode)) {
        *bst = again;
    } else {
        bst->st_size = 0;
        bst->st_blocks = 0;
    }
    /* the unpacking of a packed file torn: the packed content again */
    int r = sqz_content_probe_empty(fs, in, kind, len);
    if (r == 0)
        sqz_logf(SQZ_LOG_WARN, "%s: %s torn by a crash before it was synced: "
                 "reset to %s", label,
                 *kind == SQZ_K_PACKED ? "unpacking" : "creation",
                 *kind == SQZ_K_PACKED ? "the packed file" : "an empty file");
    return r;
}

/* A container that holds nothing yet (c, opened read-only: no commit) on
 * a file with a valid pack pointer: an unpacking torn by a crash after its
 * header reached the file (the pointer goes only after the container is
 * synced with the content). One truncated to 0 has a commit: a stale
 * pointer on it counts for nothing. 1 or 0. */
static int torn_unpacking(struct sqz_inode *in, sqz_ctr *c)
{
    sqz_pack_ptr p;
    return !sqz_ctr_committed(c) && sqz_pack_ptr_of(in, &p, NULL, 0) == 1;
}

/* Kind and logical length of a regular file that has no open handle
 * (cached per backing version). Caller holds io (shared or exclusive). */
/* The pointer the kept ctime's record was just read from for the stat of
 * this request (ptimes.c), if the file is still at that version (now:
 * stat under io): 1, PACKED (used once). A pointer replaced meanwhile by
 * reclaiming names the same length, stored size and block size. */
static int seen_pointer(struct sqz_inode *in, const struct stat *now,
                        enum sqz_kind *kind, uint64_t *len)
{
    struct sqz_bkey k;
    sqz_bkey_of(now, &k);
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    int seen = in->times.ptr_seen && sqz_bkey_eq(&k, &in->times.ptr_key);
    in->times.ptr_seen = 0;
    if (seen) {
        *kind = SQZ_K_PACKED;
        *len = in->times.ptr_len;
        in->probe.stored = in->times.ptr_stored;
        in->probe.log2bs = in->times.ptr_log2bs;
    }
    SQZ_MUTEX_UNLOCK(&in->meta);
    return seen;
}

static int probe(struct sqz_fs *fs, struct sqz_inode *in,
                 struct stat *bst, enum sqz_kind *kind, uint64_t *len)
{
    SQZ_ASSERT_HELD(&in->io);
    struct sqz_bkey k;
    sqz_bkey_of(bst, &k);
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    if (bst->st_size != 0 && in->probe.valid &&
        sqz_bkey_eq(&k, &in->probe.key)) {
        *kind = in->probe.kind;
        *len = in->probe.len;
        SQZ_MUTEX_UNLOCK(&in->meta);
        return 0;
    }
    SQZ_MUTEX_UNLOCK(&in->meta);
    /* getattr and lookup stat the backing file before they take io: the
     * file may have changed since (packed in place: a container then, 0
     * bytes with a pointer now; its durable mark). Its size now decides
     * what it is, and is what the caller shows (a container's size taken
     * for a plain file's made the kernel read zeros past the content). */
    struct stat now;
    int src = sqz_backing_stat(in, &now);
    if (src)
        return src;
    if (now.st_size != bst->st_size) {
        bst->st_size = now.st_size;
        bst->st_blocks = now.st_blocks;
    }
    if (bst->st_size == 0) /* an empty file or a packed one (its pointer
                              is read every time: cheap, and no cache can
                              be stale; but once for the record and the
                              probe of one stat) */
        return seen_pointer(in, &now, kind, len)
                   ? 0 : sqz_content_probe_empty(fs, in, kind, len);

    int fd = sqz_inode_reopen(in, O_RDONLY);
    if (fd < 0)
        return fd;
    int p = sqz_ctr_probe_fd(fd);
    if (p == 0) {
        close(fd);
        *kind = SQZ_K_PLAIN;
        *len = (uint64_t)bst->st_size;
    } else if (p == SQZ_PROBE_TORN) {
        close(fd);
        return torn_creation(fs, in, bst, kind, len);
    } else if (p == 1 || p == -EBADMSG) {
        sqz_ctr *c = NULL;
        /* a container that cannot be opened still shows the length its
         * newest durable mark recorded (reads give EIO): damage never
         * makes a file look shorter */
        uint64_t marked = 0;
        int have_marked = 0;
        /* the version the container is read at (for the stash) */
        struct sqz_bkey ok;
        struct stat ost;
        if (fstat(fd, &ost) == 0)
            sqz_bkey_of(&ost, &ok);
        else
            memset(&ok, 0, sizeof(ok));
        int rc = p == 1 ? sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY,
                                          SQZ_LABEL_FROM_FD, &c)
                        : -EBADMSG;
        if (rc == -EBADMSG) { /* read only for damage: the common open
                               * needs no extra reads */
            if (p == 1)
                fd = sqz_inode_reopen(in, O_RDONLY);
            if (fd >= 0) {
                have_marked = sqz_ctr_marked_length_fd(fd, &marked) == 0;
                close(fd);
            }
        }
        if (rc == 0 && torn_unpacking(in, c)) {
            sqz_ctr_close(c);
            return torn_creation(fs, in, bst, kind, len);
        }
        if (rc == 0) {
            *kind = SQZ_K_CONTAINER;
            *len = sqz_ctr_length(c);
            SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
            in->probe.log2bs = sqz_ctr_params(c)->log2bs;
            SQZ_MUTEX_UNLOCK(&in->meta);
            sqz_inode_stash_put(in, c, &ok);
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
    sqz_content_probe_store(in, bst, *kind, *len);
    return 0;
}

void sqz_content_invalidate(struct sqz_inode *in)
{
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    in->probe.valid = 0;
    SQZ_MUTEX_UNLOCK(&in->meta);
}

int sqz_content_handles_open(const struct sqz_inode *in)
{
    return in->file_users > 0 || in->plain_users > 0;
}

/* Current kind (caller holds io). */
/* A read-only view of a container that changed since it was opened
 * (another mount wrote it): its length is not the file's any more; the
 * next open replaces the view (content_sf.c). */
static int stale_ro_view(const struct sqz_inode *in, const struct stat *bst)
{
    if (in->kind != SQZ_K_CONTAINER || !in->file || in->file_rw)
        return 0;
    struct sqz_bkey now;
    sqz_bkey_of(bst, &now);
    return !sqz_bkey_eq(&now, &in->file_key);
}

int sqz_content_kind_locked(struct sqz_fs *fs, struct sqz_inode *in,
                            struct stat *bst, enum sqz_kind *kind,
                            uint64_t *len)
{
    SQZ_ASSERT_HELD(&in->io);
    /* A read-only mount that holds an empty file open (plain, or PENDING:
     * a creation in flight) may see the writer (another mount) turn it
     * into a container: probe again. So does one whose container view was
     * closed while a plain handle stays open (the kind is still CONTAINER,
     * the length only a view knows). */
    int ro_reprobe = fs->opts.ro && (in->kind == SQZ_K_PLAIN ||
                                     in->kind == SQZ_K_PENDING);
    int no_view = in->kind == SQZ_K_CONTAINER && !in->file;
    if (sqz_content_handles_open(in) && in->kind != SQZ_K_UNKNOWN &&
        !ro_reprobe && !no_view && !stale_ro_view(in, bst)) {
        *kind = in->kind;
        if (in->kind == SQZ_K_CONTAINER && in->file)
            *len = sqz_file_length(in->file);
        else if (in->kind == SQZ_K_PACKED)
            *len = in->pack.buf_len;
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
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    if (sqz_content_kind_locked(fs, in, st, &kind, &len) != 0) {
        SQZ_RWUNLOCK(&in->io);
        return; /* show the backing figures */
    }
    int open_sf = kind == SQZ_K_CONTAINER && in->file;
    size_t bs = 0;
    if (open_sf) {
        dirty = sqz_file_dirty(in->file);
        bs = sqz_ctr_block_size(sqz_file_ctr(in->file));
    } else if (kind == SQZ_K_PENDING && in->pending.log2bs >= 12 &&
               in->pending.log2bs <= 20) {
        bs = (size_t)1 << in->pending.log2bs;
    }
    SQZ_RWUNLOCK(&in->io);

    if (kind == SQZ_K_PLAIN)
        return;
    st->st_size = (off_t)len;
    if (kind == SQZ_K_PACKED) {
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        st->st_blocks = (blkcnt_t)((in->probe.stored + 511u) / 512u);
        SQZ_MUTEX_UNLOCK(&in->meta);
    }
    if (len > 0 && st->st_blocks == 0)
        st->st_blocks = 8;
    /* st_blksize: the file's block size, the unit of its holes (lseek
     * SEEK_DATA/SEEK_HOLE) and of the writes that cost no read */
    if (!bs && (kind == SQZ_K_CONTAINER || kind == SQZ_K_PACKED)) {
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        if (in->probe.log2bs >= 12 && in->probe.log2bs <= 20)
            bs = (size_t)1 << in->probe.log2bs;
        SQZ_MUTEX_UNLOCK(&in->meta);
    }
    if (bs)
        st->st_blksize = (blksize_t)bs;
    if (open_sf) {
        SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
        if (in->utimes_kept) {
            /* times set after the last write: the backing file has them
             * again after the commit of that write's data (content_io.c) */
            st->st_atim = in->utimes[0];
            st->st_mtim = in->utimes[1];
        } else if (dirty && in->wtime_set &&
                   (in->wtime.tv_sec > st->st_mtim.tv_sec ||
                    (in->wtime.tv_sec == st->st_mtim.tv_sec &&
                     in->wtime.tv_nsec > st->st_mtim.tv_nsec))) {
            st->st_mtim = in->wtime;
            st->st_ctim = in->wtime;
        }
        SQZ_MUTEX_UNLOCK(&in->meta);
    }
}

/* ---- attributes shown through the mount ---- */

int sqz_getattr(struct sqz_fs *fs, struct sqz_inode *in, struct stat *st)
{
    int rc;
    if (in->type == S_IFDIR) {
        rc = sqz_ptimes_stat_dir(fs, in, st);
        if (rc == 0)
            sqz_ident_stat(fs, in, st);
        return rc;
    }
    rc = sqz_backing_stat(in, st);
    if (rc)
        return rc;
    sqz_ptimes_apply(fs, in, st); /* (on the backing figures) */
    if (S_ISREG(st->st_mode))
        sqz_content_fix_stat(fs, in, st);
    sqz_ident_stat(fs, in, st); /* the number it keeps (ident.c) */
    return 0;
}

void sqz_entry_fill(struct sqz_fs *fs, struct sqz_inode *in,
                    const struct stat *st, struct fuse_entry_param *e)
{
    e->ino = sqz_nodeid(fs, in);
    e->attr = *st;
    sqz_ident_stat(fs, in, &e->attr);
    e->attr_timeout = fs->timeout;
    e->entry_timeout = fs->timeout;
}

int sqz_do_lookup(struct sqz_fs *fs, struct sqz_inode *parent,
                  const char *name, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof(*e));
    struct sqz_inode *in;
    struct stat st;
    int rc = sqz_inode_lookup(fs, parent, name, &st, &in);
    if (rc)
        return rc;
    if (S_ISDIR(st.st_mode)) {
        if ((rc = sqz_ptimes_stat_dir(fs, in, &st)) != 0) {
            sqz_inode_forget(fs, in, 1);
            return rc;
        }
    } else {
        sqz_ptimes_apply(fs, in, &st); /* (on the backing figures) */
    }
    if (S_ISREG(st.st_mode))
        sqz_content_fix_stat(fs, in, &st);
    sqz_entry_fill(fs, in, &st, e);
    sqz_ptimes_kernel_seen(fs, in, &st);
    return 0;
}
