/* Directory handles: opendir, readdir, readdirplus, releasedir, fsyncdir.
 * Hidden names (SQZ_TMP_PREFIX) are never listed; a temporary a crash left
 * is removed when met (leftover.c). */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/kind.h"
#include "store/leftover.h"
#include "fuse/ops.h"
#include "node/ident.h"
#include "common/lockorder.h"

/* One open directory handle. */
struct sqz_dirhandle {
    pthread_mutex_t lock; /* protects dp/entry/offset */
    DIR *dp;
    struct dirent *entry; /* entry read but not yet returned */
    off_t offset;
};

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct sqz_dirhandle *dirhandle_of(struct fuse_file_info *fi)
{
    return (struct sqz_dirhandle *)(uintptr_t)fi->fh;
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    struct sqz_dirhandle *d = calloc(1, sizeof(*d));
    if (!d) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int fd = sqz_ifd_get(in);
    if (fd >= 0) {
        int ifd = fd;
        fd = sqz_openat_fd(ifd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
        sqz_ifd_put(in);
    }
    if (fd < 0) {
        free(d);
        fuse_reply_err(req, -fd);
        return;
    }
    d->dp = fdopendir(fd);
    if (!d->dp) {
        int e = errno;
        close(fd);
        free(d);
        fuse_reply_err(req, e);
        return;
    }
    sqz_mutex_init(&d->lock);
    fi->fh = (uint64_t)(uintptr_t)d;
    fi->cache_readdir = 0;
    if (fuse_reply_open(req, fi) != 0) {
        closedir(d->dp);
        pthread_mutex_destroy(&d->lock);
        free(d);
    }
}

/* One entry into buf (at most room bytes): its size, or more than room if
 * it does not fit (then nothing was taken). READDIRPLUS entries carry
 * their attributes: each is looked up as by LOOKUP and holds one kernel
 * reference, as a LOOKUP reply does; "." and "..", entries gone meanwhile,
 * and all entries while the inodes take half the descriptor limit (each
 * holds one until the kernel forgets it) go without (ino 0: the kernel
 * links nothing and looks the name up when it needs it). */
static size_t add_entry(fuse_req_t req, struct sqz_fs *fs, struct sqz_inode *dir,
                        int plus, char *buf, size_t room, const struct dirent *de,
                        off_t next)
{
    if (!plus) {
        struct stat st;
        memset(&st, 0, sizeof(st));
        st.st_ino = sqz_ident_shown(fs, dir->dev, de->d_ino);
        st.st_mode = (mode_t)de->d_type << 12;
        return fuse_add_direntry(req, buf, room, de->d_name, &st, next);
    }
    /* the size depends on the name alone: checked before the lookup takes
     * a reference the kernel would never get */
    size_t need = fuse_add_direntry_plus(req, NULL, 0, de->d_name, NULL, 0);
    if (need > room)
        return need;
    struct fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    int bare = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
               sqz_inode_count(fs) >= fs->plus_max_inodes;
    if (bare || sqz_do_lookup(fs, dir, de->d_name, &e) != 0) {
        memset(&e, 0, sizeof(e));
        e.attr.st_ino = sqz_ident_shown(fs, dir->dev, de->d_ino);
        e.attr.st_mode = (mode_t)de->d_type << 12;
    }
    return fuse_add_direntry_plus(req, buf, room, de->d_name, &e, next);
}

/* READDIR and READDIRPLUS (plus: a walk of a tree, find | xargs cat, tar c,
 * ls -l, then needs no LOOKUP per file; for a container the lookup's
 * opened container is kept for the open that follows, inode.c). */
static void reply_dir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                      struct fuse_file_info *fi, int plus)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *dir = sqz_inode_of(fs, ino);
    struct sqz_dirhandle *d = dirhandle_of(fi);
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    SQZ_MUTEX_LOCK(&d->lock, SQZ_RANK_DIRHANDLE);
    if (offset != d->offset) {
        seekdir(d->dp, offset);
        d->entry = NULL;
        d->offset = offset;
    }
    size_t pos = 0;
    int err = 0;
    for (;;) {
        if (!d->entry) {
            errno = 0;
            d->entry = readdir(d->dp);
            if (!d->entry) {
                err = errno;
                break;
            }
        }
        struct dirent *de = d->entry;
        off_t next = de->d_off;
        if (!sqz_name_hidden(de->d_name)) {
            size_t need = add_entry(req, fs, dir, plus, buf + pos, size - pos,
                                    de, next);
            if (need > size - pos)
                break; /* keep d->entry for the next call */
            pos += need;
        } else {
            sqz_leftover_meet(fs, dir, dirfd(d->dp), de->d_name);
        }
        d->entry = NULL;
        d->offset = next;
    }
    SQZ_MUTEX_UNLOCK(&d->lock);
    if (err && pos == 0)
        fuse_reply_err(req, err);
    else
        fuse_reply_buf(req, buf, pos);
    free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                       off_t offset, struct fuse_file_info *fi)
{
    reply_dir(req, ino, size, offset, fi, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
                           off_t offset, struct fuse_file_info *fi)
{
    reply_dir(req, ino, size, offset, fi, 1);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino,
                          struct fuse_file_info *fi)
{
    (void)ino;
    struct sqz_dirhandle *d = dirhandle_of(fi);
    closedir(d->dp);
    pthread_mutex_destroy(&d->lock);
    free(d);
    fuse_reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                        struct fuse_file_info *fi)
{
    (void)ino;
    struct sqz_dirhandle *d = dirhandle_of(fi);
    int fd = dirfd(d->dp);
    int rc = datasync ? fdatasync(fd) : fsync(fd);
    fuse_reply_err(req, rc ? errno : 0);
}

void sqz_ops_dir(struct fuse_lowlevel_ops *ops)
{
    ops->opendir = op_opendir;
    ops->readdir = op_readdir;
    ops->readdirplus = op_readdirplus;
    ops->releasedir = op_releasedir;
    ops->fsyncdir = op_fsyncdir;
}
