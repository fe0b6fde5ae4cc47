/* Resolution of a path to its effective policy: xattr on the file, then on
 * the nearest directory up to the root, then the rule file, then the mount
 * default. Walks the backing tree below root_fd with O_NOFOLLOW opens, so
 * a symlink never leads outside the root (a symlinked component simply
 * ends the walk, as a missing one does). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "squeezefs/policy.h"

#define XATTR_VALUE_MAX 512 /* longer values cannot be valid policies */

/* Read and parse SQZ_POLICY_XATTR of fd (SPEC [after AGE SPEC2]). fd may be an O_PATH descriptor
 * (fgetxattr then fails with EBADF and the value is read through
 * /proc/self/fd). Returns 1 and sets *out if a valid spec is present, 0 if
 * there is none or it does not parse, -errno on I/O errors. */
static int read_policy(int fd, sqz_policy *out)
{
    char buf[XATTR_VALUE_MAX + 1];
    ssize_t n = fgetxattr(fd, SQZ_POLICY_XATTR, buf, XATTR_VALUE_MAX);
    if (n < 0 && errno == EBADF) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        n = getxattr(proc, SQZ_POLICY_XATTR, buf, XATTR_VALUE_MAX);
    }
    if (n < 0) {
        switch (errno) {
        case ENODATA:    /* no policy here */
        case ENOTSUP:    /* file system or file type without user xattrs */
        case ERANGE:     /* too long to be a spec: unparsable */
        case ENOENT:     /* /proc not mounted (O_PATH fallback only) */
        case EACCES:
        case EPERM:
            return 0;
        default:
            return -errno;
        }
    }
    if (n > 0 && buf[n - 1] == 0)
        n--; /* tolerate a stored terminating NUL */
    buf[n] = 0;
    if (memchr(buf, 0, (size_t)n))
        return 0;
    return sqz_policy_parse(buf, out, NULL, 0) == 0 ? 1 : 0;
}

static int missing(int e)
{
    /* the component does not exist, is not a directory, or is a symlink */
    return e == ENOENT || e == ENOTDIR || e == ELOOP;
}

static int open_dir(int parent, const char *name)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                      O_CLOEXEC);
    if (fd < 0 && errno == EACCES)
        fd = openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW |
                                      O_CLOEXEC);
    return fd;
}

/* Opens the last component if it is a regular file or a directory.
 * Returns fd (setting *is_dir), -1 with errno set. Other file types give
 * -1 with errno ENOENT (they carry no policy). */
static int open_last(int parent, const char *name, int *is_dir)
{
    struct stat st;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -1;
    if (S_ISDIR(st.st_mode)) {
        *is_dir = 1;
        return open_dir(parent, name);
    }
    if (!S_ISREG(st.st_mode)) {
        errno = ENOENT;
        return -1;
    }
    *is_dir = 0;
    int fd = openat(parent, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
                                      O_NOCTTY | O_CLOEXEC);
    if (fd < 0 && errno == EACCES)
        fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    /* it may have been replaced between fstatat and openat */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = ENOENT;
        return -1;
    }
    return fd;
}

static void walk_take(sqz_policy_found *w, const sqz_policy *s, sqz_policy_source src,
                      const char *path, size_t pathlen)
{
    w->found = 1;
    w->pol = *s;
    w->source = src;
    if (s->spec.log2bs)
        w->xattr_bs = s->spec.log2bs;
    if (pathlen == 0)
        snprintf(w->where, sizeof w->where, "/");
    else
        snprintf(w->where, sizeof w->where, "%.*s",
                 pathlen > INT_MAX ? INT_MAX : (int)pathlen, path);
}

/* Walk relpath below root_fd collecting xattr policies. */
static int walk_path(int root_fd, const char *rel, sqz_policy_found *w)
{
    sqz_policy s;
    int r = read_policy(root_fd, &s);
    if (r < 0)
        return r;
    if (r)
        walk_take(w, &s, SQZ_SRC_DIRECTORY, rel, 0);

    int cur = root_fd;
    const char *p = rel;
    int rc = 0;
    for (;;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = p + strcspn(p, "/");
        const char *q = e;
        while (*q == '/')
            q++;
        int last = *q == 0;
        size_t len = (size_t)(e - p);
        char name[NAME_MAX + 1];
        if (len > NAME_MAX) {
            rc = -ENAMETOOLONG;
            break;
        }
        memcpy(name, p, len);
        name[len] = 0;
        if (strcmp(name, ".") == 0) {
            p = e;
            continue;
        }
        if (strcmp(name, "..") == 0) {
            rc = -EINVAL;
            break;
        }
        int is_dir = 1;
        int fd = last ? open_last(cur, name, &is_dir) : open_dir(cur, name);
        if (fd < 0) {
            if (!missing(errno))
                rc = -errno;
            break; /* nothing deeper exists: resolve from what we have */
        }
        r = read_policy(fd, &s);
        if (r < 0) {
            close(fd);
            rc = r;
            break;
        }
        if (r)
            walk_take(w, &s, is_dir ? SQZ_SRC_DIRECTORY : SQZ_SRC_FILE, rel,
                      (size_t)(e - rel));
        if (cur != root_fd)
            close(cur);
        cur = fd;
        p = e;
    }
    if (cur != root_fd)
        close(cur);
    return rc;
}

int sqz_policy_walk_dir(int root_fd, const char *reldir, sqz_policy_found *out)
{
    if (!reldir || !out)
        return -EINVAL;
    while (*reldir == '/')
        reldir++;
    memset(out, 0, sizeof *out);
    int rc = walk_path(root_fd, reldir, out);
    /* a regular file at the end holds no directory policy: its own xattr
     * is the file's, not its children's (there are none) */
    if (rc == 0 && out->found && out->source == SQZ_SRC_FILE)
        rc = -ENOTDIR;
    return rc < 0 ? rc : 0;
}

int sqz_policy_resolve_found(const sqz_policy_found *w, const char *relpath,
                             const sqz_rules *rules, const char *rules_name,
                             const sqz_spec *deflt, sqz_resolved *out)
{
    if (!w || !relpath || !deflt || !out || deflt->log2bs < 12 ||
        deflt->log2bs > 20)
        return -EINVAL;
    while (*relpath == '/')
        relpath++;

    sqz_policy rule;
    int line = sqz_rules_match_policy(rules, relpath, &rule);
    int lower_bs = line && rule.spec.log2bs ? rule.spec.log2bs : deflt->log2bs;

    memset(out, 0, sizeof *out);
    out->after_s = -1;
    const sqz_policy *won = NULL;
    if (w->found) {
        won = &w->pol;
        out->spec = w->pol.spec;
        out->spec.log2bs = w->xattr_bs ? w->xattr_bs : lower_bs;
        out->source = w->source;
        memcpy(out->where, w->where, sizeof out->where);
    } else if (line) {
        won = &rule;
        out->spec = rule.spec;
        out->spec.log2bs = lower_bs;
        out->source = SQZ_SRC_RULE;
        snprintf(out->where, sizeof out->where, "%s:%d",
                 rules_name ? rules_name : "rules", line);
    } else {
        out->spec = *deflt;
        out->source = SQZ_SRC_DEFAULT;
        snprintf(out->where, sizeof out->where, "default");
    }
    if (won && won->after_s >= 0) {
        out->after_s = won->after_s;
        out->aged = won->aged;
        if (!out->aged.log2bs)
            out->aged.log2bs = out->spec.log2bs;
    }
    return 0;
}

int sqz_policy_resolve(int root_fd, const char *relpath,
                       const sqz_rules *rules, const char *rules_name,
                       const sqz_spec *deflt, sqz_resolved *out)
{
    if (!relpath || !deflt || !out || deflt->log2bs < 12 || deflt->log2bs > 20)
        return -EINVAL;
    while (*relpath == '/')
        relpath++;

    sqz_policy_found w = {0};
    int rc = walk_path(root_fd, relpath, &w);
    if (rc < 0)
        return rc;
    return sqz_policy_resolve_found(&w, relpath, rules, rules_name, deflt, out);
}
