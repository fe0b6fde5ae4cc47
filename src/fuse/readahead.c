/* Kernel read-ahead window of the mount (see readahead.h). */
#include "fuse/readahead.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Decode mountinfo's octal escapes (\040 space, \011, \012, \134) of the
 * field [s, e) into out; returns 0 or -ENAMETOOLONG. */
static int unescape_field(const char *s, const char *e, char *out, size_t outlen)
{
    size_t n = 0;
    while (s < e) {
        char c = *s++;
        if (c == '\\' && e - s >= 3 && s[0] >= '0' && s[0] <= '3' &&
            s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7') {
            c = (char)((s[0] - '0') * 64 + (s[1] - '0') * 8 + (s[2] - '0'));
            s += 3;
        }
        if (n + 1 >= outlen)
            return -ENAMETOOLONG;
        out[n++] = c;
    }
    out[n] = '\0';
    return 0;
}

/* The [start, end) of the i-th (0-based) space-separated field of a line. */
static int field(const char *line, const char *eol, int i, const char **fs,
                 const char **fe)
{
    const char *p = line;
    for (int k = 0;; k++) {
        while (p < eol && *p == ' ')
            p++;
        if (p >= eol)
            return -1;
        const char *q = p;
        while (q < eol && *q != ' ')
            q++;
        if (k == i) {
            *fs = p;
            *fe = q;
            return 0;
        }
        p = q;
    }
}

int sqz_mountinfo_fuse_line(const char *mountinfo, const char *mnt,
                            const char **line_out, size_t *len_out)
{
    int found = -ENOENT;
    char path[4096];
    const char *line = mountinfo;
    while (*line) {
        const char *eol = strchr(line, '\n');
        if (!eol)
            eol = line + strlen(line);
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE ... */
        const char *ms, *me;
        const char *sep = NULL;
        for (const char *p = line; p + 2 < eol; p++)
            if (p[0] == ' ' && p[1] == '-' && p[2] == ' ') {
                sep = p;
                break;
            }
        if (sep && field(line, sep, 4, &ms, &me) == 0 &&
            unescape_field(ms, me, path, sizeof(path)) == 0 &&
            strcmp(path, mnt) == 0 && eol - (sep + 3) >= 4 &&
            strncmp(sep + 3, "fuse", 4) == 0) {
            *line_out = line;
            *len_out = (size_t)(eol - line);
            found = 0; /* keep going: a later line is a newer mount */
        }
        line = *eol ? eol + 1 : eol;
    }
    return found;
}

int sqz_mountinfo_fuse_dev(const char *mountinfo, const char *mnt, char *out,
                           size_t outlen)
{
    const char *line, *ds, *de;
    size_t len;
    int rc = sqz_mountinfo_fuse_line(mountinfo, mnt, &line, &len);
    if (rc < 0)
        return rc;
    if (field(line, line + len, 2, &ds, &de) != 0)
        return -ENOENT;
    size_t n = (size_t)(de - ds);
    if (n + 1 > outlen)
        return -ENAMETOOLONG;
    memcpy(out, ds, n);
    out[n] = '\0';
    return 0;
}

int sqz_mountinfo_has_dev(const char *mountinfo, const char *dev)
{
    size_t n = strlen(dev);
    const char *line = mountinfo;
    while (*line) {
        const char *eol = strchr(line, '\n');
        if (!eol)
            eol = line + strlen(line);
        const char *ds, *de;
        if (field(line, eol, 2, &ds, &de) == 0 && (size_t)(de - ds) == n &&
            memcmp(ds, dev, n) == 0)
            return 1;
        line = *eol ? eol + 1 : eol;
    }
    return 0;
}

int sqz_slurp(const char *path, char **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t cap = 16384, len = 0;
    char *buf = malloc(cap);
    int rc = 0;
    while (buf) {
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            break;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (!buf || (rc == 0 && len + 1 >= cap)) {
        free(buf);
        return -ENOMEM;
    }
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

int sqz_set_mount_readahead(const char *mnt, size_t bytes)
{
    char *info = NULL;
    int rc = sqz_slurp("/proc/self/mountinfo", &info);
    if (rc < 0)
        return rc;
    char dev[64];
    rc = sqz_mountinfo_fuse_dev(info, mnt, dev, sizeof(dev));
    free(info);
    if (rc < 0)
        return rc;
    char path[128], val[32];
    snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
    int n = snprintf(val, sizeof(val), "%zu\n", bytes / 1024);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t w = write(fd, val, (size_t)n);
    rc = w == n ? 0 : w < 0 ? -errno : -EIO;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    return rc;
}
