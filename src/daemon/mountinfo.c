/* The mount table (/proc/self/mountinfo): a FUSE mount's line and
 * device, its flags, setting them, and the kernel read-ahead window of the
 * mount (see mountinfo.h). */
#include "daemon/mountinfo.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "common/errbuf.h"

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

/* ---- mount flags ---- */

#ifndef MS_LAZYTIME
#define MS_LAZYTIME (1 << 25)
#endif

static const struct sqz_kflag sqz_kflags_tab[] = {
    {"ro", MS_RDONLY, 0},
    {"rw", 0, MS_RDONLY},
    {"nosuid", MS_NOSUID, 0},
    {"suid", 0, MS_NOSUID},
    {"nodev", MS_NODEV, 0},
    {"dev", 0, MS_NODEV},
    {"noexec", MS_NOEXEC, 0},
    {"exec", 0, MS_NOEXEC},
    {"sync", MS_SYNCHRONOUS, 0},
    {"async", 0, MS_SYNCHRONOUS},
    {"dirsync", MS_DIRSYNC, 0},
    {"noatime", MS_NOATIME, MS_RELATIME | MS_STRICTATIME},
    {"atime", 0, MS_NOATIME},
    {"relatime", MS_RELATIME, MS_NOATIME | MS_STRICTATIME},
    {"norelatime", 0, MS_RELATIME},
    {"strictatime", MS_STRICTATIME, MS_NOATIME | MS_RELATIME},
    {"nostrictatime", 0, MS_STRICTATIME},
    {"nodiratime", MS_NODIRATIME, 0},
    {"diratime", 0, MS_NODIRATIME},
    {"lazytime", MS_LAZYTIME, 0},
    {"nolazytime", 0, MS_LAZYTIME},
    {"silent", MS_SILENT, 0},
    {"loud", 0, MS_SILENT},
};

const struct sqz_kflag *sqz_mount_kflag(const char *name)
{
    for (size_t i = 0; i < sizeof(sqz_kflags_tab) / sizeof(sqz_kflags_tab[0]); i++)
        if (strcmp(sqz_kflags_tab[i].name, name) == 0)
            return &sqz_kflags_tab[i];
    return NULL;
}

/* The mount's current flags from its mountinfo line: per-mount options
 * (field 6) and the super block's (after the file system's source). */
unsigned long sqz_mountinfo_flags(const char *line, size_t len)
{
    char *copy = strndup(line, len);
    if (!copy)
        return 0;
    unsigned long f = 0;
    char *save = NULL, *sep = strstr(copy, " - ");
    int i = 0;
    char *mopts = NULL, *sopts = NULL;
    if (sep) {
        *sep = '\0';
        for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save))
            if (i++ == 5)
                mopts = t;
        i = 0;
        for (char *t = strtok_r(sep + 3, " ", &save); t; t = strtok_r(NULL, " ", &save))
            if (i++ == 2)
                sopts = t;
    }
    char *lists[2] = {mopts, sopts};
    for (int l = 0; l < 2; l++) {
        if (!lists[l])
            continue;
        for (char *t = strtok_r(lists[l], ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            const struct sqz_kflag *k = sqz_mount_kflag(t);
            if (k)
                f |= k->set;
        }
    }
    free(copy);
    if (!(f & (MS_NOATIME | MS_RELATIME)))
        f |= MS_STRICTATIME;
    return f;
}

int sqz_mount_set_flags(const char *mnt, const char *opts, char *err,
                        size_t errlen)
{
    char *info = NULL;
    const char *line;
    size_t len;
    if (sqz_slurp("/proc/self/mountinfo", &info) != 0 ||
        sqz_mountinfo_fuse_line(info, mnt, &line, &len) != 0) {
        sqz_errf(err, errlen, "%s is not mounted", mnt);
        free(info);
        return -ENOENT;
    }
    unsigned long f = sqz_mountinfo_flags(line, len);
    free(info);
    char *copy = strdup(opts), *save = NULL;
    if (!copy)
        return -ENOMEM;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const struct sqz_kflag *k = sqz_mount_kflag(t);
        if (k)
            f = (f & ~k->clear) | k->set;
    }
    free(copy);
    /* the mount's own flags (MS_BIND): the file system is not reconfigured,
     * so no request reaches this daemon, whose loop is not running yet */
    f &= MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME |
         MS_RELATIME | MS_STRICTATIME | MS_RDONLY;
    if (mount(NULL, mnt, NULL, MS_REMOUNT | MS_BIND | f, NULL) != 0) {
        int e = errno;
        sqz_errf(err, errlen, "cannot set %s on %s: %s", opts, mnt, strerror(e));
        return -e;
    }
    return 0;
}

unsigned long sqz_mount_flags_of(const char *mnt)
{
    char *info = NULL;
    const char *line;
    size_t len;
    unsigned long f = 0;
    if (sqz_slurp("/proc/self/mountinfo", &info) == 0 &&
        sqz_mountinfo_fuse_line(info, mnt, &line, &len) == 0)
        f = sqz_mountinfo_flags(line, len) | MS_MGC_VAL; /* (found) */
    free(info);
    return f;
}
