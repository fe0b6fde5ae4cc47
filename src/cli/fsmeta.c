/* Copying file metadata: mode, owner (as root), times, user.* xattrs (not
 * the pointer of a packed file). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cli.h"
#include "squeezefs/shown.h"

/* Copy user.* xattrs; failures (ENOTSUP, EPERM, ...) are ignored. follow:
 * from is a descriptor's magic link (/proc/self/fd/N), else a path whose
 * last component is not followed. */
static void copy_xattrs(const char *from, bool follow, int to_fd, const char *to_path)
{
    ssize_t n = follow ? listxattr(from, NULL, 0) : llistxattr(from, NULL, 0);
    if (n <= 0)
        return;
    char *names = malloc((size_t)n);
    if (!names)
        return;
    n = follow ? listxattr(from, names, (size_t)n) : llistxattr(from, names, (size_t)n);
    for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(names + off) + 1) {
        const char *name = names + off;
        /* a pack pointer means something only next to its pack: the
         * copy is written with the content itself */
        if (strncmp(name, "user.", 5) || !strcmp(name, SQZ_PACK_XATTR) ||
            !strcmp(name, SQZ_SHOWN_XATTR))
            continue;
        ssize_t vl = follow ? getxattr(from, name, NULL, 0) : lgetxattr(from, name, NULL, 0);
        char *val = vl >= 0 ? malloc((size_t)vl + 1) : NULL;
        if (!val)
            continue;
        vl = follow ? getxattr(from, name, val, (size_t)vl)
                    : lgetxattr(from, name, val, (size_t)vl);
        if (vl >= 0) {
            if (to_fd >= 0)
                fsetxattr(to_fd, name, val, (size_t)vl, 0);
            else
                lsetxattr(to_path, name, val, (size_t)vl, 0);
        }
        free(val);
    }
    free(names);
}

static int copy_meta(const char *from, bool follow, const struct stat *st, int to_fd,
                     const char *to_path)
{
    bool link = S_ISLNK(st->st_mode);
    if (from)
        copy_xattrs(from, follow, to_fd, to_path);
    if (geteuid() == 0) {
        int r = to_fd >= 0 ? fchown(to_fd, st->st_uid, st->st_gid)
                           : lchown(to_path, st->st_uid, st->st_gid);
        if (r < 0)
            return -errno;
    }
    if (!link) {
        int r = to_fd >= 0 ? fchmod(to_fd, st->st_mode & 07777)
                           : chmod(to_path, st->st_mode & 07777);
        if (r < 0)
            return -errno;
    }
    struct timespec ts[2] = {st->st_atim, st->st_mtim};
    int r = to_fd >= 0 ? futimens(to_fd, ts)
                       : utimensat(AT_FDCWD, to_path, ts, AT_SYMLINK_NOFOLLOW);
    return r < 0 ? -errno : 0;
}

int cli_copy_meta(const char *from_path, const struct stat *st, int to_fd,
                  const char *to_path)
{
    return copy_meta(from_path, false, st, to_fd, to_path);
}

int cli_copy_meta_at(const tree_at *from, const struct stat *st, int to_fd,
                     const char *to_path)
{
    /* the entry itself (O_PATH | O_NOFOLLOW: a symlink too), its xattrs
     * through its own magic link */
    int fd = openat(from->dirfd, from->name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    char pp[48];
    snprintf(pp, sizeof pp, "/proc/self/fd/%d", fd);
    int r = copy_meta(fd >= 0 ? pp : NULL, true, st, to_fd, to_path);
    if (fd >= 0)
        close(fd);
    return r;
}

int cli_set_times(const char *path, const struct stat *st)
{
    struct timespec ts[2] = {st->st_atim, st->st_mtim};
    return utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}
