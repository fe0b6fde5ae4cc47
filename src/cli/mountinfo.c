/* Talking to a running squeezefs daemon: its virtual xattrs. */
#include <errno.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <sys/xattr.h>

#include "cli.h"

#define FUSE_SUPER_MAGIC 0x65735546

int cli_get_xattr(const char *path, const char *name, char **out)
{
    *out = NULL;
    for (int tries = 0; tries < 4; tries++) {
        ssize_t n = lgetxattr(path, name, NULL, 0);
        if (n < 0)
            return -errno;
        char *buf = malloc((size_t)n + 1);
        if (!buf)
            return -ENOMEM;
        ssize_t m = lgetxattr(path, name, buf, (size_t)n);
        if (m < 0) {
            int e = errno;
            free(buf);
            if (e == ERANGE)
                continue; /* grew in between */
            return -e;
        }
        buf[m] = '\0';
        *out = buf;
        return 0;
    }
    return -ERANGE;
}

int cli_on_mount(const char *path)
{
    struct statfs sf;
    if (statfs(path, &sf) < 0 || sf.f_type != FUSE_SUPER_MAGIC)
        return 0;
    /* Every path on a squeezefs mount answers the effective policy. */
    ssize_t n = lgetxattr(path, SQZ_XATTR_EFFECTIVE, NULL, 0);
    return n >= 0 || errno == ERANGE;
}
