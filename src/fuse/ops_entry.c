/* Namespace and attribute operations: lookup, forget, getattr (setattr:
 * ops_setattr.c),
 * mkdir, rmdir, unlink, rename, link, symlink, readlink, mknod, statfs
 * (access: ops_access.c). Every path operation is *at() relative to an inode's O_PATH fd
 * with a single, checked name component; symlinks in BACKING are never
 * followed. */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/push.h"
#include "node/kind.h"
#include "node/ptimes.h"
#include "store/leftover.h"
#include "pack/packing.h"
#include "content/content.h"
#include "content/newfile_policy.h"
#include "fuse/ops.h"
#include "fuse/killpriv.h"
#include "common/lockorder.h"
#include "squeezefs/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* 0 if name is acceptable for a new entry, else the errno. */
static int check_new_name(struct sqz_fs *fs, const char *name)
{
    int e = sqz_name_errno(name, EPERM);
    if (e == 0 && fs->opts.ro)
        e = EROFS;
    return e;
}

static void reply_new_entry(fuse_req_t req, struct sqz_fs *fs,
                            struct sqz_inode *p, const char *name)
{
    struct fuse_entry_param e;
    int rc = sqz_do_lookup(fs, p, name, &e);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    if (S_ISDIR(e.attr.st_mode)) /* made by op_mkdir */
        sqz_policy_seed_dir(fs, p, sqz_inode_of(fs, e.ino));
    if (fuse_reply_entry(req, &e) != 0)
        sqz_inode_forget(fs, sqz_inode_of(fs, e.ino), 1);
}

/* Start creating `name` in directory `parent`: checks the name and the
 * read-only flag and stats the parent (its set-gid bit and group decide
 * the new node's group). Returns the parent with its descriptor pinned
 * (*pfd; finish_new_entry or the caller puts it), or NULL after replying
 * with the error. */
static struct sqz_inode *begin_new_entry(fuse_req_t req, struct sqz_fs *fs,
                                         fuse_ino_t parent, const char *name,
                                         struct stat *pst, int *pfd)
{
    struct sqz_inode *p = sqz_inode_of(fs, parent);
    int e = check_new_name(fs, name);
    int rc = e ? -e : sqz_backing_stat(p, pst);
    if (rc == 0) {
        *pfd = sqz_ifd_get(p);
        rc = *pfd < 0 ? *pfd : 0;
    }
    if (rc) {
        fuse_reply_err(req, -rc);
        return NULL;
    }
    sqz_ptimes_user(fs, p);
    return p;
}

/* Finish creating `name` in p; rc is the result of making it (0 or
 * -errno). Gives the node to the caller (root daemon) and replies with its
 * entry; if that fails the node is removed again (unlinkat with
 * unlink_flags) and the error is the reply. */
static void finish_new_entry(fuse_req_t req, struct sqz_fs *fs,
                             struct sqz_inode *p, int pfd, const char *name,
                             const struct stat *pst, int rc, int unlink_flags)
{
    if (rc == 0) {
        rc = sqz_chown_new(fs, req, p, name, pst);
        if (rc)
            unlinkat(pfd, name, unlink_flags);
    }
    if (rc)
        fuse_reply_err(req, -rc);
    else
        reply_new_entry(req, fs, p, name);
    sqz_ifd_put(p);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct fuse_entry_param e;
    int rc = sqz_do_lookup(fs, sqz_inode_of(fs, parent), name, &e);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    if (fuse_reply_entry(req, &e) != 0)
        sqz_inode_forget(fs, sqz_inode_of(fs, e.ino), 1);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    sqz_inode_forget(fs, sqz_inode_of(fs, ino), nlookup);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count,
                            struct fuse_forget_data *forgets)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    for (size_t i = 0; i < count; i++)
        sqz_inode_forget(fs, sqz_inode_of(fs, forgets[i].ino),
                         forgets[i].nlookup);
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    (void)fi;
    struct sqz_fs *fs = sqz_fs_of(req);
    struct stat st;
    int rc = sqz_getattr(fs, sqz_inode_of(fs, ino), &st);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, fs->timeout);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
                     mode_t mode)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct stat pst;
    int pfd;
    struct sqz_inode *p = begin_new_entry(req, fs, parent, name, &pst, &pfd);
    if (!p)
        return;
    int rc = mkdirat(pfd, name, mode & 07777) != 0 ? -errno : 0;
    finish_new_entry(req, fs, p, pfd, name, &pst, rc, AT_REMOVEDIR);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
                     mode_t mode, dev_t rdev)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct stat pst;
    int pfd;
    struct sqz_inode *p = begin_new_entry(req, fs, parent, name, &pst, &pfd);
    if (!p)
        return;
    int rc = 0;
    mode_t type = mode & S_IFMT;
    if (type == S_IFREG) {
        /* A regular file made by mknod is an empty container. */
        sqz_resolved pol;
        rc = sqz_resolve_new(fs, p, name, &pol);
        int fd = -1;
        if (rc == 0) {
            fd = sqz_openat_fd(pfd, name, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW |
                                              O_CLOEXEC | O_NOATIME, mode & 07777);
            if (fd < 0)
                rc = fd;
            else
                close(fd);
        }
        if (rc) {
            sqz_ifd_put(p);
            fuse_reply_err(req, -rc);
            return;
        }
        struct fuse_entry_param ent;
        rc = sqz_chown_new(fs, req, p, name, &pst);
        if (rc == 0)
            rc = sqz_do_lookup(fs, p, name, &ent);
        if (rc) {
            unlinkat(pfd, name, 0);
            sqz_ifd_put(p);
            fuse_reply_err(req, -rc);
            return;
        }
        struct sqz_inode *in = sqz_inode_of(fs, ent.ino);
        struct sqz_handle h;
        rc = sqz_content_create(fs, in, &pol, -1, NULL, O_WRONLY, &h);
        if (rc == 0)
            rc = sqz_content_release(fs, &h);
        if (rc)
            unlinkat(pfd, name, 0);
        sqz_ifd_put(p);
        if (rc) {
            sqz_inode_forget(fs, in, 1);
            fuse_reply_err(req, -rc);
            return;
        }
        sqz_getattr(fs, in, &ent.attr);
        if (fuse_reply_entry(req, &ent) != 0)
            sqz_inode_forget(fs, in, 1);
        return;
    }
    if ((type == S_IFCHR || type == S_IFBLK) && fuse_req_ctx(req)->uid != 0)
        rc = -EPERM;
    else if (type != S_IFIFO && type != S_IFSOCK && type != S_IFCHR &&
             type != S_IFBLK)
        rc = -EINVAL;
    if (rc) {
        sqz_ifd_put(p);
        fuse_reply_err(req, -rc);
        return;
    }
    rc = mknodat(pfd, name, mode, rdev) != 0 ? -errno : 0;
    finish_new_entry(req, fs, p, pfd, name, &pst, rc, 0);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
                       const char *name)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct stat pst;
    int pfd;
    struct sqz_inode *p = begin_new_entry(req, fs, parent, name, &pst, &pfd);
    if (!p)
        return;
    int rc = symlinkat(link, pfd, name) != 0 ? -errno : 0;
    finish_new_entry(req, fs, p, pfd, name, &pst, rc, 0);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
                    const char *newname)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    struct sqz_inode *p = sqz_inode_of(fs, newparent);
    int e = check_new_name(fs, newname);
    if (e) {
        fuse_reply_err(req, e);
        return;
    }
    /* A second name: a packed file becomes a container first, and the
     * packer (which takes io) cannot pack it between that and the link */
    int file = in->type == S_IFREG && !fs->opts.ro;
    sqz_ptimes_user4(fs, in, p, NULL, NULL);
    if (file) {
        SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
        e = -sqz_content_unpack_if_packed_locked(fs, in);
    }
    sqz_pack_gc_rename_begin(fs, p);
    int ifd = e ? -1 : sqz_ifd_get(in), pfd = ifd < 0 ? ifd : sqz_ifd_get(p);
    if (e == 0 && (ifd < 0 || pfd < 0))
        e = ifd < 0 ? -ifd : -pfd;
    if (e == 0 && linkat(ifd, "", pfd, newname, AT_EMPTY_PATH) != 0) {
        /* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc works otherwise
         * (not for symlinks, which it would follow). */
        e = errno;
        if ((e == EPERM || e == ENOENT) && in->type != S_IFLNK) {
            char pp[64];
            sqz_proc_path(ifd, pp, sizeof(pp));
            e = linkat(AT_FDCWD, pp, pfd, newname, AT_SYMLINK_FOLLOW) != 0 ? errno : 0;
        }
    }
    if (pfd >= 0)
        sqz_ifd_put(p);
    if (ifd >= 0)
        sqz_ifd_put(in);
    sqz_pack_gc_rename_end(fs, p);
    if (file)
        SQZ_RWUNLOCK(&in->io);
    if (e) {
        fuse_reply_err(req, e);
        return;
    }
    reply_new_entry(req, fs, p, newname);
}

/* fstatat of name in dir (no symlink followed). 0 or -errno. */
static int stat_at(struct sqz_inode *dir, const char *name, struct stat *st)
{
    int fd = sqz_ifd_get(dir);
    if (fd < 0)
        return fd;
    int rc = fstatat(fd, name, st, AT_SYMLINK_NOFOLLOW) != 0 ? -errno : 0;
    sqz_ifd_put(dir);
    return rc;
}

/* The regular file name in dir, looked up (one lookup reference: forget
 * it), or NULL. */
static struct sqz_inode *file_of(struct sqz_fs *fs, struct sqz_inode *dir,
                                 const char *name)
{
    struct stat st;
    struct sqz_inode *in;
    if (fs->opts.ro || stat_at(dir, name, &st) != 0 ||
        !S_ISREG(st.st_mode) || sqz_inode_lookup(fs, dir, name, &st, &in) != 0)
        return NULL;
    if (in->type != S_IFREG) {
        sqz_inode_forget(fs, in, 1);
        return NULL;
    }
    return in;
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *p = sqz_inode_of(fs, parent);
    int e = sqz_name_errno(name, ENOENT);
    int pfd = e ? -1 : sqz_ifd_get(p);
    if (pfd < 0 && e == 0)
        e = -pfd;
    struct stat st;
    /* a 0-byte file may be packed: its entry is dead once the last name
     * goes (pack_gc.c) */
    int have = e == 0 && fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    int maybe_packed = have && S_ISREG(st.st_mode) && st.st_size == 0 &&
        st.st_nlink == 1;
    sqz_ptimes_user(fs, p);
    if (e == 0 && unlinkat(pfd, name, 0) != 0)
        e = errno;
    if (e == 0 && maybe_packed)
        sqz_pack_gc_note(fs, pfd);
    if (pfd >= 0)
        sqz_ifd_put(p);
    fuse_reply_err(req, e);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *p = sqz_inode_of(fs, parent);
    int e = sqz_name_errno(name, ENOENT);
    int pfd = e ? -1 : sqz_ifd_get(p);
    if (pfd < 0 && e == 0)
        e = -pfd;
    sqz_ptimes_user(fs, p);
    if (e == 0 && unlinkat(pfd, name, AT_REMOVEDIR) != 0) {
        e = errno;
        if ((e == ENOTEMPTY || e == EEXIST) && sqz_hidden_clear(fs, p, name) == 0)
            e = unlinkat(pfd, name, AT_REMOVEDIR) != 0 ? errno : 0;
    }
    if (pfd >= 0)
        sqz_ifd_put(p);
    fuse_reply_err(req, e);
}

/* After a rename: did it move a directory (now at newname; exchanging,
 * the other one is at name)? A failed check counts as yes. */
static int is_dir_at(struct sqz_inode *dir, const char *name)
{
    struct stat st;
    return stat_at(dir, name, &st) != 0 || S_ISDIR(st.st_mode);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                      fuse_ino_t newparent, const char *newname,
                      unsigned int flags)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *p = sqz_inode_of(fs, parent);
    struct sqz_inode *np = sqz_inode_of(fs, newparent);
    int e = sqz_name_ok(newname) ? sqz_name_errno(name, ENOENT) : EINVAL;
    if (e == 0)
        e = sqz_name_errno(newname, EPERM);
    if (e) {
        fuse_reply_err(req, e);
        return;
    }
    if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    /* A packed file leaving its directory (its pack stays behind) becomes
     * a container first; its io is held across the rename, so the packer
     * cannot pack it in between (pack_job.c checks the directory too) */
    struct sqz_inode *a = NULL, *b = NULL;
    int rc = 0;
    if (p != np) {
        a = file_of(fs, p, name);
        b = (flags & RENAME_EXCHANGE) ? file_of(fs, np, newname) : NULL;
        if (b && b == a) {
            sqz_inode_forget(fs, b, 1);
            b = NULL;
        }
        if (a && b && b < a) { /* two io locks: in address order */
            struct sqz_inode *t = a;
            a = b;
            b = t;
        }
        if (a)
            SQZ_WRLOCK(&a->io, SQZ_RANK_IO);
        if (b)
            SQZ_WRLOCK_NESTED(&b->io, SQZ_RANK_IO);
        if (a)
            rc = sqz_content_unpack_if_packed_locked(fs, a);
        if (rc == 0 && b)
            rc = sqz_content_unpack_if_packed_locked(fs, b);
    }
    struct stat st;
    int over_empty = !(flags & RENAME_EXCHANGE) && stat_at(np, newname, &st) == 0 &&
        S_ISREG(st.st_mode) && st.st_size == 0 && st.st_nlink == 1;
    int pfd = rc ? -1 : sqz_ifd_get(p), npfd = pfd < 0 ? -1 : sqz_ifd_get(np);
    if (rc == 0 && (pfd < 0 || npfd < 0))
        rc = pfd < 0 ? pfd : npfd;
    if (rc == 0) {
        sqz_ptimes_user4(fs, p, np, a, b);
        sqz_pack_gc_rename_begin(fs, p);
        if (np != p)
            sqz_pack_gc_rename_begin(fs, np);
        rc = renameat2(pfd, name, npfd, newname, flags) != 0 ? -errno : 0;
        if (rc == 0) { /* the names the inodes keep (ifd.c) */
            sqz_inode_renamed(fs, np, newname);
            if (flags & RENAME_EXCHANGE)
                sqz_inode_renamed(fs, p, name);
        }
        if (rc == 0 && (is_dir_at(np, newname) ||
                        ((flags & RENAME_EXCHANGE) && is_dir_at(p, name))))
            sqz_policy_changed(fs); /* a directory's chain changed */
        sqz_pack_gc_rename_end(fs, p);
        if (np != p)
            sqz_pack_gc_rename_end(fs, np);
    }
    if (b) {
        SQZ_RWUNLOCK(&b->io);
        sqz_inode_forget(fs, b, 1);
    }
    if (a) {
        SQZ_RWUNLOCK(&a->io);
        sqz_inode_forget(fs, a, 1);
    }
    if (rc == 0 && over_empty) /* it replaced a file that may have been packed */
        sqz_pack_gc_note(fs, npfd);
    if (npfd >= 0)
        sqz_ifd_put(np);
    if (pfd >= 0)
        sqz_ifd_put(p);
    fuse_reply_err(req, -rc);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    char buf[PATH_MAX + 1];
    int fd = sqz_ifd_get(in);
    if (fd < 0) {
        fuse_reply_err(req, -fd);
        return;
    }
    ssize_t r = readlinkat(fd, "", buf, sizeof(buf));
    int e = errno;
    sqz_ifd_put(in);
    if (r < 0) {
        fuse_reply_err(req, e);
        return;
    }
    if ((size_t)r >= sizeof(buf)) {
        fuse_reply_err(req, ENAMETOOLONG);
        return;
    }
    buf[r] = '\0';
    fuse_reply_readlink(req, buf);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct sqz_fs *fs = sqz_fs_of(req);
    struct statvfs sv;
    if (fstatvfs(fs->root_dirfd, &sv) != 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_statfs(req, &sv);
}

void sqz_ops_entry(struct fuse_lowlevel_ops *ops)
{
    ops->lookup = op_lookup;
    ops->forget = op_forget;
    ops->forget_multi = op_forget_multi;
    ops->getattr = op_getattr;
    sqz_ops_setattr(ops); /* ops_setattr.c */
    ops->mkdir = op_mkdir;
    ops->mknod = op_mknod;
    ops->symlink = op_symlink;
    ops->link = op_link;
    ops->unlink = op_unlink;
    ops->rmdir = op_rmdir;
    ops->rename = op_rename;
    ops->readlink = op_readlink;
    ops->statfs = op_statfs;
    sqz_ops_access(ops);
}
