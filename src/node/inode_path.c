/* Where an inode's backing file is: its path below BACKING (for labels and
 * policy resolving) and its directory (for packing's packs and the
 * temporaries of a replace), found through the name its O_PATH descriptor
 * was opened by, checked to still name it.
 *
 * A hard-linked file can lose that name (unlinked, or renamed over) and
 * live on under another: the inode's identity keeps the last name a lookup
 * found it by (ifd.h), and its descriptor is opened again by that name when
 * its own no longer names it. Without it such a file was never packed (its
 * directory could not be found).
 *
 * A regular file opened again by handle after its dentry was reclaimed
 * has a disconnected descriptor (its /proc path reads "/"): it is opened
 * by the name its hint keeps (ifd.h), below that directory's descriptor,
 * and that descriptor takes the cached one's place if it is the same
 * file. Without it such a file was skipped (not packed, no policy) until
 * the kernel looked its name up again. */
#include "node/inode.h"
#include "common/lockorder.h"
#include "common/fdpath.h"
#include "common/beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

int sqz_fd_relpath(struct sqz_fs *fs, int fd, char *buf, size_t n)
{
    char abs[PATH_MAX + 16];
    int rc = sqz_fd_path(fd, abs, sizeof(abs));
    if (rc)
        return rc;
    const char *rel = sqz_path_below(abs, fs->backing_real, fs->backing_len);
    if (!rel)
        return -ENOENT; /* not below BACKING (moved away meanwhile) */
    if (strlen(rel) >= n)
        return -ENAMETOOLONG;
    strcpy(buf, rel);
    return 0;
}

/* An O_PATH descriptor of what the last name the daemon saw in by
 * (sqz_ifd_hint_dir) names now, opened below that name's directory and not
 * followed if a symlink; -errno if none. The caller checks it is in. */
static int open_last_name(struct sqz_inode *in)
{
    char name[NAME_MAX + 1];
    int dfd = sqz_ifd_hint_dir(in, name, sizeof(name));
    if (dfd < 0)
        return dfd;
    int fd = sqz_openat_fd(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0);
    int e = fd < 0 ? -errno : 0;
    close(dfd);
    return fd < 0 ? e : fd;
}

/* fd, in's (pinned), is not below BACKING: if it is a disconnected
 * descriptor of a file whose hint still names it, a connected one takes
 * its place (the same number). 0 or -ENOENT. */
static int reconnect(struct sqz_inode *in, int fd)
{
    int rc = -ENOENT;
    int nfd = open_last_name(in);
    if (nfd >= 0) {
        if (sqz_ifd_reconnect(in, fd, nfd) == 0)
            rc = 0;
        close(nfd);
    }
    return rc;
}

/* sqz_fd_relpath of in's descriptor fd (pinned; in NULL: another one). */
static int in_relpath(struct sqz_fs *fs, struct sqz_inode *in, int fd,
                      char *buf, size_t n)
{
    int rc = sqz_fd_relpath(fs, fd, buf, n);
    if (rc == -ENOENT && in && in->type == S_IFREG && reconnect(in, fd) == 0)
        rc = sqz_fd_relpath(fs, fd, buf, n);
    return rc;
}

int sqz_inode_relpath(struct sqz_fs *fs, struct sqz_inode *in, char *buf,
                      size_t n)
{
    if (in->is_root) {
        buf[0] = '\0';
        return 0;
    }
    int fd = sqz_ifd_get(in);
    if (fd < 0)
        return fd;
    int rc = in_relpath(fs, in, fd, buf, n);
    sqz_ifd_put(in);
    return rc;
}

/* One try of sqz_inode_dirfd: the directory the current path of fd (in's,
 * or in NULL: another name's) names (opened beneath BACKING, no symlink in
 * any component), if its entry name there is still the inode ist
 * describes. */
static int dirfd_once(struct sqz_fs *fs, struct sqz_inode *in, int fd,
                      const struct stat *ist, char *base, size_t bn)
{
    char rel[PATH_MAX];
    int rc = in_relpath(fs, in, fd, rel, sizeof(rel));
    if (rc)
        return rc;
    char *slash = strrchr(rel, '/');
    const char *name = slash ? slash + 1 : rel;
    if (slash)
        *slash = '\0';
    if (base && strlen(name) >= bn)
        return -ENAMETOOLONG;
    int dfd = sqz_open_beneath(fs->root_dirfd, slash ? rel : "",
                               O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0)
        return dfd == -ELOOP || dfd == -ENOTDIR || dfd == -ENOENT ||
                       dfd == -EXDEV
                   ? -EBUSY /* the path changed meanwhile */
                   : dfd;
    struct stat cur;
    if (fstatat(dfd, name, &cur, AT_SYMLINK_NOFOLLOW) != 0 ||
        cur.st_dev != ist->st_dev || cur.st_ino != ist->st_ino) {
        close(dfd);
        return -EBUSY;
    }
    if (base)
        strcpy(base, name);
    return dfd;
}

/* in's own name no longer names it: through the name the kernel looked
 * it up by last (its identity's hint or name, ifd.h: a hard link's other
 * name, or its name after a rename behind the mount), if that names the
 * same file (same device and inode); in's descriptor ifd (pinned) then
 * becomes that name's (the same number, the same file: nothing else
 * changes). No descriptor is kept per name: the bound of max_fds= holds. */
static int dirfd_alt(struct sqz_fs *fs, struct sqz_inode *in, int ifd,
                     const struct stat *ist, char *base, size_t bn)
{
    int alt = open_last_name(in);
    if (alt < 0)
        return -EBUSY;
    struct stat ast;
    int dfd = -EBUSY;
    if (fstat(alt, &ast) == 0 && ast.st_dev == ist->st_dev &&
        ast.st_ino == ist->st_ino)
        dfd = dirfd_once(fs, NULL, alt, ist, base, bn);
    if (dfd >= 0) {
        SQZ_MUTEX_LOCK(&fs->itable.lock, SQZ_RANK_ITABLE);
        if (in->ino == ist->st_ino)
            (void)dup3(alt, ifd, O_CLOEXEC);
        SQZ_MUTEX_UNLOCK(&fs->itable.lock);
    }
    close(alt);
    return dfd;
}

int sqz_inode_dirfd(struct sqz_fs *fs, struct sqz_inode *in, char *base,
                    size_t bn)
{
    if (in->is_root)
        return -ENOENT; /* BACKING itself: no directory of it below BACKING */
    struct stat ist;
    int fd = sqz_ifd_get(in);
    if (fd < 0)
        return fd;
    int dfd = fstat(fd, &ist) != 0 ? -errno : -EBUSY;
    for (int i = 0; i < 3 && dfd == -EBUSY; i++) /* renamed meanwhile */
        dfd = dirfd_once(fs, in, fd, &ist, base, bn);
    if (dfd == -EBUSY && ist.st_nlink > 0)
        dfd = dirfd_alt(fs, in, fd, &ist, base, bn);
    sqz_ifd_put(in);
    return dfd;
}
