/* setattr: mode, owner, size (truncate) and times of a node. Over
 * io_uring a truncate waits for no push on its ring thread: it blocks
 * pushes at once, or goes to the defer thread (node/push.c, defer.c). */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/push.h"
#include "node/kind.h"
#include "node/ptimes.h"
#include "content/content.h"
#include "fuse/ops.h"
#include "fuse/killpriv.h"
#include "common/lockorder.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static void setattr_do(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
                       int to_set, struct fuse_file_info *fi)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    struct sqz_handle *h = fi ? (struct sqz_handle *)(uintptr_t)fi->fh : NULL;
    char pp[64];
    int ifd = sqz_ifd_get(in);
    if (ifd < 0) {
        fuse_reply_err(req, -ifd);
        return;
    }
    sqz_proc_path(ifd, pp, sizeof(pp));
    int rc = 0;
    sqz_ptimes_user(fs, in);
    if (to_set & FUSE_SET_ATTR_KILL_SUID) /* FATTR_KILL_SUIDGID (V2) */
        sqz_killpriv_req(fs, req, ino, 0);

    if (fs->opts.ro && (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID |
                                  FUSE_SET_ATTR_GID | FUSE_SET_ATTR_SIZE |
                                  FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                                  FUSE_SET_ATTR_ATIME_NOW |
                                  FUSE_SET_ATTR_MTIME_NOW))) {
        sqz_ifd_put(in);
        fuse_reply_err(req, EROFS);
        return;
    }
    /* a regular file's mode, owner and times change under its io, shared:
     * a replace (recompress, tiering) copies them to the new file and
     * exchanges it in under io exclusive, with none changing in between */
    int meta_locked = in->type == S_IFREG &&
                      (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID |
                                 FUSE_SET_ATTR_GID));
    if (meta_locked)
        SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    if (to_set & FUSE_SET_ATTR_MODE) {
        if (in->type == S_IFLNK)
            rc = -EOPNOTSUPP;
        else if (h && h->plain_fd >= 0)
            rc = fchmod(h->plain_fd, attr->st_mode & 07777) ? -errno : 0;
        else
            rc = fchmodat(AT_FDCWD, pp, attr->st_mode & 07777, 0) ? -errno : 0;
        if (rc)
            goto out;
    }
    if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
        uid_t uid = (to_set & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
        gid_t gid = (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;
        if (fchownat(ifd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
            rc = -errno;
        if (rc)
            goto out;
    }
    if (meta_locked)
        SQZ_RWUNLOCK(&in->io);
    meta_locked = 0;
    if (to_set & FUSE_SET_ATTR_SIZE) {
        if (in->type != S_IFREG)
            rc = in->type == S_IFDIR ? -EISDIR : -EINVAL;
        else if (attr->st_size < 0)
            rc = -EINVAL;
        else
            rc = sqz_content_truncate(fs, in, (uint64_t)attr->st_size);
        if (rc)
            goto out;
    }
    if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                  FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW)) {
        struct timespec tv[2];
        tv[0].tv_sec = 0;
        tv[1].tv_sec = 0;
        tv[0].tv_nsec = UTIME_OMIT;
        tv[1].tv_nsec = UTIME_OMIT;
        if (to_set & FUSE_SET_ATTR_ATIME_NOW)
            tv[0].tv_nsec = UTIME_NOW;
        else if (to_set & FUSE_SET_ATTR_ATIME)
            tv[0] = attr->st_atim;
        if (to_set & FUSE_SET_ATTR_MTIME_NOW)
            tv[1].tv_nsec = UTIME_NOW;
        else if (to_set & FUSE_SET_ATTR_MTIME)
            tv[1] = attr->st_mtim;
        if (in->type == S_IFREG) {
            SQZ_RDLOCK(&in->io, SQZ_RANK_IO); /* (as the mode above) */
            meta_locked = 1;
            /* Pending data is not committed here: the times are kept
             * (sqz_content_keep_times below) and put back on the backing
             * file after the commit that writes the data (FLUSH, fsync,
             * the last close), and shown until then (fix_stat). The
             * kernel's writeback cache sends such a SETATTR before the
             * FLUSH of every file whose write came a clock tick after its
             * creation: committing here took the small file's draft away
             * and cost a full compression on the path of its close. */
            SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
            in->wtime_set = 0;
            SQZ_MUTEX_UNLOCK(&in->meta);
        }
        if (in->type == S_IFLNK) {
            /* on the symlink's own O_PATH fd; a kernel whose utimensat
             * refuses AT_EMPTY_PATH (EINVAL) gets its magic link, which
             * resolves to the symlink itself, not its target */
            rc = utimensat(ifd, "", tv, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
            if (rc != 0 && errno == EINVAL)
                rc = utimensat(AT_FDCWD, pp, tv, 0);
            rc = rc ? -errno : 0;
        } else if (h && h->plain_fd >= 0) {
            rc = futimens(h->plain_fd, tv) ? -errno : 0;
        } else {
            rc = utimensat(AT_FDCWD, pp, tv, 0) ? -errno : 0;
        }
        if (rc)
            goto out;
        if (in->type == S_IFREG)
            sqz_content_keep_times(in);
    }
out:
    if (meta_locked)
        SQZ_RWUNLOCK(&in->io);
    sqz_ifd_put(in);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    sqz_ptimes_kernel_set(fs, in, to_set, attr);
    struct stat st;
    rc = sqz_getattr(fs, in, &st);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, fs->timeout);
}

struct setattr_args {
    fuse_req_t req;
    fuse_ino_t ino;
    struct stat attr;
    int to_set, has_fi;
    struct fuse_file_info fi;
};

static void setattr_deferred(void *arg)
{
    struct setattr_args *a = arg;
    setattr_do(a->req, a->ino, &a->attr, a->to_set, a->has_fi ? &a->fi : NULL);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
                       int to_set, struct fuse_file_info *fi)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    if (!(to_set & FUSE_SET_ATTR_SIZE) || in->type != S_IFREG ||
        sqz_push_preblock(fs, in) == 0) {
        setattr_do(req, ino, attr, to_set, fi);
        sqz_push_preblock_end(in);
        return;
    }
    struct setattr_args a = {.req = req, .ino = ino, .attr = *attr,
                             .to_set = to_set, .has_fi = fi != NULL};
    if (fi)
        a.fi = *fi;
    int rc = sqz_defer(fs, setattr_deferred, &a, sizeof(a));
    if (rc)
        fuse_reply_err(req, -rc);
}

void sqz_ops_setattr(struct fuse_lowlevel_ops *ops)
{
    ops->setattr = op_setattr;
}
