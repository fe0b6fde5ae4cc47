/* Packed files (include/squeezefs/pack.h, docs/FORMAT.md "Packed files")
 * as the offline tools see them in a BACKING directory: the content of a
 * packed file, and the check of a pack file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cli.h"

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

int cli_is_pack_name(const char *path)
{
    uint64_t id;
    return sqz_pack_name_parse(base_name(path), &id);
}

/* "damaged packed file: " + the library's reason without its "packed: ". */
static void damaged(char *err, size_t errlen, const char *why)
{
    if (!err || !errlen)
        return;
    if (!strncmp(why, "packed: ", 8))
        why += 8;
    snprintf(err, errlen, "damaged packed file: %s", why[0] ? why : "unreadable");
}

/* The directory holding the entry at / path: at's directory, or the
 * directory of path's real path (as the user gave it). An fd or -errno;
 * *own says whether to close it. */
static int dir_of(const tree_at *at, const char *path, bool *own)
{
    *own = false;
    if (at && at->dirfd != AT_FDCWD)
        return at->dirfd;
    char abs[PATH_MAX];
    if (!realpath(path, abs))
        return -errno;
    char *slash = strrchr(abs, '/');
    if (slash == abs)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    int dfd = open(abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    *own = true;
    return dfd;
}

int cli_packed_load(int fd, const tree_at *at, const char *path, sqz_pack_ptr *p,
                    void **buf, char *err, size_t errlen)
{
    *buf = NULL;
    char why[200] = "";
    int r = sqz_pack_ptr_fget(fd, p, why, sizeof why);
    if (r == 0 || (r < 0 && r != -EBADMSG))
        return r;
    if (r == 1) {
        bool own;
        int dfd = dir_of(at, path, &own);
        if (dfd < 0)
            return dfd;
        r = sqz_pack_read_alloc(dfd, p, buf, why, sizeof why);
        if (own)
            close(dfd);
        if (r == 0)
            return 1;
        if (r != -EIO)
            return r; /* the directory cannot be opened, no memory */
    }
    damaged(err, errlen, why);
    return r;
}

bool cli_unpack_torn(int fd, int pr)
{
    if (pr == SQZ_PROBE_TORN)
        return true;
    if (pr != 1 || fgetxattr(fd, SQZ_PACK_XATTR, NULL, 0) < 0)
        return false;
    int d = dup(fd);
    if (d < 0)
        return false;
    sqz_ctr *c;
    if (sqz_ctr_open_fd(d, SQZ_OPEN_RDONLY, SQZ_LABEL_FROM_FD, &c) < 0)
        return false; /* d closed by the library */
    bool empty = !sqz_ctr_committed(c);
    sqz_ctr_close(c);
    return empty;
}

/* 1 if a packed file of directory dfd (a 0-byte file with a pointer)
 * points into the pack id at or after offset from, 0 if none, or -errno. */
static int pointed_into(int dfd, uint64_t id, uint64_t from)
{
    DIR *d = cli_opendir_at(dfd);
    if (!d)
        return -errno;
    int found = 0;
    struct dirent *e;
    while (!found && (errno = 0, e = readdir(d)) != NULL) {
        if (e->d_type != DT_REG && e->d_type != DT_UNKNOWN)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode) || st.st_size != 0)
            continue;
        sqz_pack_ptr p;
        int r = sqz_pack_ptr_getat(dirfd(d), e->d_name, &p, NULL, 0);
        if (r == 1 && p.pack_id == id && p.off >= from)
            found = 1;
    }
    int e2 = errno;
    closedir(d);
    return found ? 1 : e2 ? -e2 : 0;
}

int cli_pack_check(int fd, const tree_at *at, const char *path, long *entries,
                   uint64_t *end, uint64_t *tail, char *err, size_t errlen)
{
    uint64_t named = 0, id = 0;
    *entries = 0;
    *end = *tail = 0;
    sqz_pack_name_parse(base_name(path), &named);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    long n = sqz_pack_check(fd, &id, end, err, errlen);
    if (n >= 0 && id != named) {
        snprintf(err, errlen, "pack: its header names another pack (%016llx)",
                 (unsigned long long)id);
        return -EBADMSG;
    }
    if (n >= 0) {
        *entries = n;
        return 0;
    }
    if (n != -EBADMSG)
        return (int)n;
    /* Entries are appended and synced before any pointer to them exists:
     * unreadable bytes that no pointer names are what a crash during an
     * append leaves (or damage that cannot be told from it). */
    bool own;
    int dfd = dir_of(at, path, &own);
    if (dfd < 0)
        return dfd;
    int r = pointed_into(dfd, named, *end);
    if (own)
        close(dfd);
    if (r < 0)
        return r;
    if (r == 1)
        return -EBADMSG;
    *tail = (uint64_t)st.st_size > *end ? (uint64_t)st.st_size - *end : 0;
    return 1;
}
