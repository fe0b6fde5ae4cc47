/* The path a descriptor's file has now (through /proc/self/fd), and the
 * part of a path below a directory. Header-only so every layer can use
 * them without a dependency. */
#ifndef SQZ_COMMON_FDPATH_H
#define SQZ_COMMON_FDPATH_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The absolute path of fd's file into buf (n bytes), without the
 * " (deleted)" the kernel appends to a removed file's. 0, -errno of the
 * readlink or -ENAMETOOLONG. */
static inline int sqz_fd_path(int fd, char *buf, size_t n)
{
    char pp[48];
    snprintf(pp, sizeof pp, "/proc/self/fd/%d", fd);
    ssize_t r = readlink(pp, buf, n - 1);
    if (r < 0)
        return -errno;
    if ((size_t)r >= n - 1)
        return -ENAMETOOLONG;
    buf[r] = '\0';
    static const char del[] = " (deleted)";
    size_t dl = sizeof(del) - 1;
    if ((size_t)r > dl && strcmp(buf + r - dl, del) == 0)
        buf[r - dl] = '\0';
    return 0;
}

/* The part of the absolute path abs below the directory root (rl bytes,
 * no trailing slash; "/" holds every path): "" for root itself, NULL if
 * abs is not below root. */
static inline const char *sqz_path_below(const char *abs, const char *root,
                                         size_t rl)
{
    if (rl == 1 && root[0] == '/')
        return abs + 1;
    if (strncmp(abs, root, rl) == 0 && abs[rl] == '/')
        return abs + rl + 1;
    if (strcmp(abs, root) == 0)
        return "";
    return NULL;
}

#endif
