/* sqz_open_beneath (beneath.h). */
#include "common/beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The walk for kernels before 5.6: every directory on the way opened
 * O_PATH | O_NOFOLLOW | O_DIRECTORY from the one before, the last
 * component with O_NOFOLLOW. "." components are skipped, ".." refused.
 * (A symlink on the way gives -ENOTDIR here, -ELOOP from openat2.) */
int sqz_open_beneath_walk(int dirfd, const char *rel, int flags, mode_t mode)
{
    char buf[PATH_MAX];
    if (rel[0] == '/')
        return -EXDEV;
    if (strlen(rel) >= sizeof(buf))
        return -ENAMETOOLONG;
    strcpy(buf, rel);
    int cur = -1; /* owned; -1: still dirfd */
    char *save = NULL, *name = strtok_r(buf, "/", &save);
    const char *last = ".";
    while (name) {
        char *next = strtok_r(NULL, "/", &save);
        if (strcmp(name, "..") == 0) {
            if (cur >= 0)
                close(cur);
            return -EXDEV;
        }
        if (!next) {
            last = name;
            break;
        }
        if (strcmp(name, ".") != 0) {
            int fd = openat(cur >= 0 ? cur : dirfd, name,
                            O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            int e = errno;
            if (cur >= 0)
                close(cur);
            if (fd < 0)
                return -e;
            cur = fd;
        }
        name = next;
    }
    int fd = openat(cur >= 0 ? cur : dirfd, last, flags | O_NOFOLLOW | O_CLOEXEC,
                    mode);
    int e = errno;
    if (cur >= 0)
        close(cur);
    return fd < 0 ? -e : fd;
}

int sqz_open_beneath(int dirfd, const char *rel, int flags, mode_t mode)
{
    if (rel[0] == '/')
        return -EXDEV;
    if (!rel[0])
        rel = ".";
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .mode = (flags & (O_CREAT | O_TMPFILE)) ? (uint64_t)mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
    };
    long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
    if (fd >= 0)
        return (int)fd;
    if (errno != ENOSYS)
        return -errno;
    return sqz_open_beneath_walk(dirfd, rel, flags, mode);
}
