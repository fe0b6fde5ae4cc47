/* File operations: create, open, read, write, flush, release, fsync,
 * fallocate, lseek, copy_file_range. The data path lives in content_*.c;
 * this file adapts FUSE requests to it. */
#include "daemon/fs.h"
#include "daemon/mountinfo.h"
#include "node/inode.h"
#include "node/kind.h"
#include "node/push.h"
#include "node/ptimes.h"
#include "content/content.h"
#include "content/newfile_policy.h"
#include "fuse/ops.h"
#include "fuse/killpriv.h"
#include "common/lockorder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct sqz_handle *handle_of(struct fuse_file_info *fi)
{
    return (struct sqz_handle *)(uintptr_t)fi->fh;
}

/* With the kernel writeback cache the kernel may read pages of a
 * write-only file and computes append offsets itself. */
static int adjust_flags(struct sqz_fs *fs, int flags)
{
    if (fs->opts.writeback) {
        if ((flags & O_ACCMODE) == O_WRONLY)
            flags = (flags & ~O_ACCMODE) | O_RDWR;
        flags &= ~O_APPEND;
    }
    return flags;
}

/* Once per mount, at the first open (the FUSE INIT reply has been
 * processed by then): set the kernel read-ahead window (readahead=). */
static void tune_readahead(struct sqz_fs *fs)
{
    if (atomic_load_explicit(&fs->readahead.done, memory_order_acquire))
        return;
    /* Concurrent first opens wait here until the window is set: a file
     * opened before it would keep the old window for its whole life. */
    SQZ_MUTEX_LOCK(&fs->readahead.mu, SQZ_RANK_READAHEAD);
    if (!atomic_load_explicit(&fs->readahead.done, memory_order_relaxed)) {
        if (fs->opts.readahead_bytes != 0 && fs->mnt_real) {
            int rc = sqz_set_mount_readahead(fs->mnt_real,
                                             fs->opts.readahead_bytes);
            if (rc < 0)
                sqz_logf(SQZ_LOG_INFO, "readahead=%zuK not applied (kernel default kept): %s",
                         fs->opts.readahead_bytes / 1024, strerror(-rc));
        }
        atomic_store_explicit(&fs->readahead.done, 1, memory_order_release);
    }
    SQZ_MUTEX_UNLOCK(&fs->readahead.mu);
}

static void open_do(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    tune_readahead(fs);
    if (in->type != S_IFREG) {
        fuse_reply_err(req, in->type == S_IFDIR ? EISDIR : EINVAL);
        return;
    }
    struct sqz_handle *h = malloc(sizeof(*h));
    if (!h) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (fi->flags & O_TRUNC)
        sqz_killpriv_req(fs, req, ino, 1);
    int kc = 0;
    int atime = (fi->flags & O_ACCMODE) != O_WRONLY && !(fi->flags & O_NOATIME);
    int rc = sqz_content_open_atime(fs, in, adjust_flags(fs, fi->flags), h,
                                    &kc, &atime);
    if (rc) {
        free(h);
        fuse_reply_err(req, -rc);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)h;
    /* A packed file opened for reading: its whole content goes into the
     * kernel now, and the open keeps it (no READ, nor the GETATTR that a
     * READ's atime update costs, per small file read). Not when the
     * kernel's pages are kept anyway (unchanged since they were read). */
    if (!kc && (fi->flags & (O_ACCMODE | O_TRUNC)) == O_RDONLY &&
        sqz_push_packed(fs, ino, in))
        kc = 1;
    fi->keep_cache = kc ? 1 : 0;
    /* A read-only handle has nothing to flush at close (the writers' own
     * closes commit their data): no FLUSH round trip that close(2) would
     * wait for (FOPEN_NOFLUSH, Linux 5.10+). The kernel ignores it while
     * it keeps a writeback cache (the default); it helps nowriteback. */
    fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY ? 1 : 0;
    /* An empty file on a read-only mount may become a container (the
     * writer's first data, lazy creation) while this handle still shows it
     * empty: its reads must not put that empty view (zero-filled pages, a
     * short read's size 0) into the page cache every later open of the
     * file shares. */
    fi->direct_io = h->direct ? 1 : 0;
    /* Read-only mount (another mount may be the writer): the kernel's
     * cached size may be an old one (attr timeout), and a read stops
     * there, so a file the writer grew would read short until the timeout.
     * Drop the cached attributes before every open returns (offset -1:
     * attributes only, no page locks, safe from a handler), so the first
     * read past the old end or fstat asks again (one GETATTR per open). */
    if ((fs->opts.ro || atime) && fs->se)
        fuse_lowlevel_notify_inval_inode(fs->se, ino, -1, 0);
    if (fuse_reply_open(req, fi) != 0) { /* interrupted: undo */
        sqz_content_release(fs, h);
        free(h);
    }
}

struct open_args {
    fuse_req_t req;
    fuse_ino_t ino;
    struct fuse_file_info fi; /* the reply's, a copy */
};

static void open_deferred(void *arg)
{
    struct open_args *a = arg;
    open_do(a->req, a->ino, &a->fi);
}

/* Over io_uring an open that may change the content (writable, O_TRUNC)
 * or fence pushes (a read-only mount's new view) waits for no push on its
 * ring thread: it blocks pushes at once, or is handed to the defer thread
 * when one is in flight (push.c, defer.c). */
static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    int changer = (fi->flags & (O_ACCMODE | O_TRUNC)) != O_RDONLY ||
                  fs->opts.ro;
    if (!changer || in->type != S_IFREG || sqz_push_preblock(fs, in) == 0) {
        open_do(req, ino, fi);
        sqz_push_preblock_end(in);
        return;
    }
    struct open_args a = {.req = req, .ino = ino, .fi = *fi};
    int rc = sqz_defer(fs, open_deferred, &a, sizeof(a));
    if (rc)
        fuse_reply_err(req, -rc);
}

/* Remove name from p again (a creation that failed). */
static void unlink_in(struct sqz_inode *p, const char *name)
{
    int pfd = sqz_ifd_get(p);
    if (pfd >= 0) {
        unlinkat(pfd, name, 0);
        sqz_ifd_put(p);
    }
}

struct create_args {
    fuse_req_t req;
    struct fuse_entry_param e; /* of the file found, looked up */
    struct fuse_file_info fi;
    struct sqz_handle *h;
    int flags;
};

/* A CREATE that found the file made meanwhile by another creator: open
 * it, and reply (or forget the lookup). */
static void create_open(void *arg)
{
    struct create_args *a = arg;
    struct sqz_fs *fs = sqz_fs_of(a->req);
    struct sqz_inode *in = sqz_inode_of(fs, a->e.ino);
    int kc = 0;
    if ((a->fi.flags & O_TRUNC) && (a->fi.flags & O_ACCMODE) != O_RDONLY)
        sqz_killpriv_create_trunc(fs, a->req, in);
    int rc = sqz_content_open(fs, in, a->flags & ~O_CREAT, a->h, &kc);
    if (rc) {
        free(a->h);
        sqz_inode_forget(fs, in, 1);
        fuse_reply_err(a->req, -rc);
        return;
    }
    sqz_getattr(fs, in, &a->e.attr); /* as the open left it (O_TRUNC, set-ID bits) */
    a->fi.fh = (uint64_t)(uintptr_t)a->h;
    a->fi.keep_cache = kc ? 1 : 0;
    if (fuse_reply_create(a->req, &a->e, &a->fi) != 0) {
        sqz_content_release(fs, a->h);
        free(a->h);
        sqz_inode_forget(fs, in, 1);
    }
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
                      mode_t mode, struct fuse_file_info *fi)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *p = sqz_inode_of(fs, parent);
    tune_readahead(fs);
    int bad = sqz_name_errno(name, EPERM);
    if (bad == 0 && fs->opts.ro)
        bad = EROFS;
    if (bad) {
        fuse_reply_err(req, bad);
        return;
    }
    int flags = adjust_flags(fs, fi->flags);
    sqz_ptimes_user(fs, p);
    /* The policy first: a file that cannot get one is not created. */
    sqz_resolved pol;
    int rc = sqz_resolve_new(fs, p, name, &pol);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    struct sqz_handle *h = malloc(sizeof(*h));
    if (!h) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    struct fuse_entry_param e;
    /* (O_NOATIME: the daemon's reads through it never move the atime) */
    int fd = sqz_ifd_get(p);
    if (fd >= 0) {
        int pfd = fd;
        fd = sqz_openat_fd(pfd, name, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW |
                                          O_CLOEXEC | O_NOATIME, mode & 07777);
        sqz_ifd_put(p);
    }
    if (fd < 0) {
        rc = fd;
        if (rc == -EEXIST && !(flags & O_EXCL)) {
            /* Raced with another creator: open the existing file, with
             * the access the caller has on it (the kernel saw no file and
             * checked nothing) */
            rc = sqz_do_lookup(fs, p, name, &e);
            if (rc == 0) {
                struct sqz_inode *in = sqz_inode_of(fs, e.ino);
                int acc = fi->flags & O_ACCMODE; /* the caller's */
                int mask = (acc != O_WRONLY ? R_OK : 0) |
                           (acc != O_RDONLY || (fi->flags & O_TRUNC) ? W_OK : 0);
                rc = in->type != S_IFREG ? -EISDIR : sqz_req_may(req, &e.attr, mask);
                if (rc == 0) { /* an open of a file: as op_open over io_uring */
                    struct create_args a = {req, e, *fi, h, flags};
                    if (sqz_push_preblock(fs, in) == 0) {
                        create_open(&a);
                        sqz_push_preblock_end(in);
                        return;
                    }
                    rc = sqz_defer(fs, create_open, &a, sizeof(a));
                    if (rc == 0)
                        return;
                }
                sqz_inode_forget(fs, in, 1);
            }
        }
        free(h);
        fuse_reply_err(req, -rc);
        return;
    }
    /* A file this call created: empty, no xattr (no pack pointer to
     * probe), its policy resolved above; the entry shows its backing stat
     * as it is. */
    struct sqz_inode *in = NULL;
    struct stat st;
    rc = sqz_chown_new(fs, req, p, name, NULL);
    if (rc == 0)
        rc = sqz_inode_lookup(fs, p, name, &st, &in);
    struct stat made;
    if (rc == 0 && (!S_ISREG(st.st_mode) || st.st_size != 0)) {
        sqz_inode_forget(fs, in, 1); /* replaced meanwhile (not through us) */
        in = NULL;
        rc = -EAGAIN;
    } else if (rc == 0 && fstat(fd, &made) == 0 && made.st_dev == st.st_dev &&
               made.st_ino == st.st_ino) {
        sqz_ptimes_new_file(fs, in); /* (no kept ctime to read) */
    }
    if (rc) {
        close(fd);
        unlink_in(p, name);
        free(h);
        fuse_reply_err(req, -rc);
        return;
    }
    rc = sqz_content_create(fs, in, &pol, fd, &st, flags, h);
    if (rc) {
        char label[PATH_MAX];
        sqz_inode_label(fs, in, label, sizeof(label));
        sqz_logf(SQZ_LOG_ERR, "%s: cannot create container: %s", label, strerror(-rc));
        unlink_in(p, name);
        sqz_inode_forget(fs, in, 1);
        free(h);
        fuse_reply_err(req, -rc);
        return;
    }
    memset(&e, 0, sizeof(e));
    /* the new file's block size (as getattr shows it, node/kind.c) */
    if (pol.spec.log2bs >= 12 && pol.spec.log2bs <= 20)
        st.st_blksize = (blksize_t)1 << pol.spec.log2bs;
    sqz_entry_fill(fs, in, &st, &e);
    sqz_ptimes_kernel_seen(fs, in, &e.attr);
    fi->fh = (uint64_t)(uintptr_t)h;
    fi->keep_cache = 0;
    fi->direct_io = 0;
    if (fuse_reply_create(req, &e, fi) != 0) {
        sqz_content_release(fs, h);
        free(h);
        sqz_inode_forget(fs, in, 1);
    }
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    if (off < 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    struct sqz_handle *h = handle_of(fi);
    sqz_read_spill sp;
    int push = 0;
    uint64_t gen = 0;
    /* A container's blocks go into the reply as they are decompressed
     * (an iovec of cached blocks: no copy here); other content, and the
     * fallbacks of sqz_content_read_vec, through a buffer. */
    sqz_read_vec v;
    void *buf = NULL;
    ssize_t r = sqz_content_read_vec(fs, h, size, (uint64_t)off, &v, &sp,
                                     &push, &gen);
    if (r == -ENOTSUP) {
        buf = malloc(size ? size : 1);
        if (!buf) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
        r = sqz_content_read(fs, h, buf, size, (uint64_t)off, &sp, &push,
                             &gen);
        v.n = 0;
    }
    struct sqz_inode *in = h->inode;
    /* The handle may be released as soon as the reply is out: an open
     * reference keeps the inode for the push. */
    if (push)
        sqz_inode_open_ref(fs, in);
    if (r == -EIO)
        atomic_fetch_add_explicit(&fs->read_errors, 1, memory_order_relaxed);
    if (r < 0)
        fuse_reply_err(req, (int)-r);
    else if (buf || r == 0)
        fuse_reply_buf(req, buf, (size_t)r);
    else
        fuse_reply_iov(req, v.iov, (int)v.n);
    if (buf)
        free(buf);
    else if (r > 0)
        sqz_read_vec_release(&v);
    if (push && fs->opts.io_uring) {
        /* The reply leaves with the ring's batch: the pusher thread stores
         * the blocks (pushq.c), taking over sp and the open reference. */
        sqz_pushq_add(fs, ino, in, gen, &sp);
    } else if (push) {
        /* After the reply: the kernel has unlocked the pages of this
         * request, which the push would otherwise wait for (push.c). */
        sqz_push_store(fs, ino, in, gen, &sp);
        sqz_read_spill_release(&sp);
        sqz_inode_open_unref(fs, in);
    }
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
                     size_t size, off_t off, struct fuse_file_info *fi)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    if (off < 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    sqz_killpriv_req(fs, req, ino, 1);
    ssize_t r = sqz_content_write(fs, handle_of(fi), buf, size, (uint64_t)off,
                                  fi->writepage);
    /* a direct write passes the kernel's page cache: a buffered read that
     * raced it may have cached the bytes from before (xfstests generic/451),
     * so no later open keeps the cache */
    if (r > 0 && (fi->flags & O_DIRECT))
        atomic_store(&handle_of(fi)->inode->keep_cache.direct_written, 1);
    if (r < 0)
        fuse_reply_err(req, (int)-r);
    else
        fuse_reply_write(req, (size_t)r);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    int rc = sqz_content_flush(sqz_fs_of(req), handle_of(fi));
    fuse_reply_err(req, -rc);
}

static void op_release(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    (void)ino;
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_handle *h = handle_of(fi);
    int rc = sqz_content_release(fs, h);
    if (rc < 0)
        sqz_logf(SQZ_LOG_ERR, "commit at close failed: %s", strerror(-rc));
    free(h);
    fuse_reply_err(req, -rc);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
                     struct fuse_file_info *fi)
{
    (void)ino;
    int rc = sqz_content_fsync(sqz_fs_of(req), handle_of(fi), datasync);
    fuse_reply_err(req, -rc);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off,
                         off_t len, struct fuse_file_info *fi)
{
    if (off < 0 || len <= 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    /* the modes that succeed (content_io.c, as killpriv.c's inspect):
     * allocate, ZERO_RANGE, with or without KEEP_SIZE, and
     * PUNCH_HOLE|KEEP_SIZE */
    int m = mode & ~FALLOC_FL_KEEP_SIZE;
    if (m == 0 || m == FALLOC_FL_ZERO_RANGE ||
        (m == FALLOC_FL_PUNCH_HOLE && (mode & FALLOC_FL_KEEP_SIZE)))
        sqz_killpriv_req(sqz_fs_of(req), req, ino, 1);
    int rc = sqz_content_fallocate(sqz_fs_of(req), handle_of(fi), mode,
                                   (uint64_t)off, (uint64_t)len);
    fuse_reply_err(req, -rc);
}

struct lseek_args {
    fuse_req_t req;
    fuse_ino_t ino;
    off_t off;
    int whence;
    struct fuse_file_info fi;
};

static void lseek_do(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
                     struct fuse_file_info *fi, int inval)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_handle *h = handle_of(fi);
    if (inval)
        fuse_lowlevel_notify_inval_inode(fs->se, ino, off & ~(off_t)4095, 0);
    uint64_t at = 0;
    int rc = sqz_content_lseek(fs, h, (uint64_t)off, whence, &at);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_lseek(req, (off_t)at);
}

static void lseek_deferred(void *arg)
{
    struct lseek_args *a = arg;
    lseek_do(a->req, a->ino, a->off, a->whence, &a->fi, 1);
}

static void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
                     struct fuse_file_info *fi)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    if (off < 0) {
        fuse_reply_err(req, ENXIO);
        return;
    }
    /* The kernel asks without writing back its dirty pages first (the
     * writeback cache): an invalidation of the pages from off on writes
     * them back (WRITEs handled by other threads, no lock held here)
     * before the answer is looked up. Only while a handle may write:
     * dirty pages need one. Over io_uring not on a ring thread: those
     * WRITEs may be queued on its own ring (a deadlock seen in
     * test_posix's test_lseek_data_hole_end): the defer thread does it. */
    int inval = fs->opts.writeback && fs->se &&
                sqz_content_has_writers(handle_of(fi)->inode);
    if (inval && fs->opts.io_uring) {
        struct lseek_args a = {req, ino, off, whence, *fi};
        int rc = sqz_defer(fs, lseek_deferred, &a, sizeof(a));
        if (rc)
            fuse_reply_err(req, -rc);
        return;
    }
    lseek_do(req, ino, off, whence, fi, inval);
}

static void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in,
                               off_t off_in, struct fuse_file_info *fi_in,
                               fuse_ino_t ino_out, off_t off_out,
                               struct fuse_file_info *fi_out, size_t len,
                               int flags)
{
    (void)ino_in;
    if (flags != 0 || off_in < 0 || off_out < 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    /* the destination's set-ID bits, as for a write (libfuse's own
     * KILLPRIV_V2; the custom I/O does it in killpriv.c's inspect) */
    sqz_killpriv_req(sqz_fs_of(req), req, ino_out, 1);
    /* one WRITE reply's count is 32 bits */
    if (len > (1u << 30))
        len = 1u << 30;
    ssize_t r = sqz_content_copy_range(sqz_fs_of(req), handle_of(fi_in),
                                       (uint64_t)off_in, handle_of(fi_out),
                                       (uint64_t)off_out, len);
    if (r < 0)
        fuse_reply_err(req, (int)-r);
    else
        fuse_reply_write(req, (size_t)r);
}

void sqz_ops_file(struct fuse_lowlevel_ops *ops)
{
    ops->open = op_open;
    ops->create = op_create;
    ops->read = op_read;
    ops->write = op_write;
    ops->flush = op_flush;
    ops->release = op_release;
    ops->fsync = op_fsync;
    ops->fallocate = op_fallocate;
    ops->lseek = op_lseek;
    ops->copy_file_range = op_copy_file_range;
}
